// Gradient accumulation (fit_options::max_micro_batch): a worker's part of a step trained as micro-batches gives
// the step of one big batch — weights, loss, accuracy and metrics — whether the reduction overlaps the last
// micro-batch's backward or follows it, for even and uneven splits; the split arithmetic; and the refusal of a
// batch type that cannot be split.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace micro_batch_test {

using namespace mwstrat;

TEST(micro_split, splits_into_the_fewest_parts_of_sizes_within_one) {
  const detail::micro_split uneven(43, 16);
  ASSERT_EQ(uneven.parts, 3u);
  EXPECT_EQ(uneven.size(0), 15u);
  EXPECT_EQ(uneven.size(1), 14u);
  EXPECT_EQ(uneven.size(2), 14u);
  EXPECT_EQ(uneven.first(1), 15u);
  EXPECT_EQ(uneven.first(2), 29u);
  const detail::micro_split even(32, 8);
  ASSERT_EQ(even.parts, 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(even.first(i), 8 * i);
  const detail::micro_split whole(10, 16);
  EXPECT_EQ(whole.parts, 1u);
  EXPECT_EQ(whole.size(0), 10u);
  EXPECT_EQ(detail::micro_split(10, 0).parts, 1u);
}

TEST(micro_split, an_image_batch_splits_into_views_of_its_examples) {
  std::vector<float> x(6 * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  std::vector<std::int64_t> y{0, 1, 2, 3, 4, 5};
  const data::image_batch b{x, y, 6};
  static_assert(splittable_batch<data::image_batch>);
  const data::image_batch m = mwstrat_micro_batch(b, 2, 3);
  EXPECT_EQ(m.size, 3u);
  EXPECT_EQ(m.inputs.data(), x.data() + 6);
  EXPECT_EQ(m.inputs.size(), 9u);
  EXPECT_EQ(m.labels.data(), y.data() + 2);
  EXPECT_EQ(m.labels.size(), 3u);
}

struct run_result {
  std::vector<float> weights;
  history hist;
};

// 2 replicas, a global batch of `global` (so `global / 2` per worker), 3 epochs of a small MLP; rank 0's weights
// and history.
run_result train(std::size_t global, std::size_t max_micro_batch, reduction_overlap overlap) {
  const auto images = test::learnable_blobs(240);
  run_result out;
  std::mutex m;
  spawn_ranks(2, [&](local_collective& c) {
    gradient_sync_options sync;
    sync.overlap = overlap;
    sync.update = update_placement::replicated;
    sync.bucket_bytes = 256;  // several buckets: some leave during the last micro-batch's backward
    mirrored_strategy<local_collective&> strategy(c, sync);
    nn::sequential model({nn::input{{8}}, nn::dense{16, nn::activation::relu}, nn::dense{4}}, {.seed = 5});
    nn::sgd sgd(0.1);
    distributed_input train(images, global, strategy, 9);
    metrics ms(sparse_categorical_accuracy{}, sparse_top_k_accuracy{2});
    fit_options o;
    o.epochs = 3;
    o.catch_preemption_signals = false;
    o.max_micro_batch = max_micro_batch;
    const history h = fit(strategy, model, sgd, train, o, ms);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      out.weights.assign(model.parameters().begin(), model.parameters().end());
      out.hist = h;
    }
  });
  return out;
}

void expect_same_training(const run_result& whole, const run_result& micro) {
  ASSERT_EQ(whole.weights.size(), micro.weights.size());
  float largest = 0;
  for (const float v : whole.weights) largest = std::max(largest, std::abs(v));
  for (std::size_t i = 0; i < whole.weights.size(); ++i) {
    EXPECT_NEAR(whole.weights[i], micro.weights[i], 1e-5f * largest) << "element " << i;
  }
  EXPECT_NE(whole.weights, std::vector<float>(whole.weights.size(), 0.0f));
  ASSERT_EQ(whole.hist.epochs.size(), micro.hist.epochs.size());
  for (std::size_t e = 0; e < whole.hist.epochs.size(); ++e) {
    const auto& a = whole.hist.epochs[e];
    const auto& b = micro.hist.epochs[e];
    EXPECT_NEAR(a.loss, b.loss, 1e-5 * a.loss) << "epoch " << e;
    EXPECT_DOUBLE_EQ(a.accuracy, b.accuracy) << "epoch " << e;
    for (const char* name : {"sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy"}) {
      ASSERT_TRUE(logged_value(a, name).has_value()) << name;
      ASSERT_TRUE(logged_value(b, name).has_value()) << name;
      EXPECT_DOUBLE_EQ(*logged_value(a, name), *logged_value(b, name)) << name << ", epoch " << e;
    }
  }
}

TEST(micro_batches, micro_batches_of_a_part_train_what_the_whole_part_trains) {
  // 32 per worker as 4 micro-batches of 8, the reduction after backward and overlapping the last one.
  for (const auto overlap : {reduction_overlap::never, reduction_overlap::always}) {
    expect_same_training(train(64, 0, overlap), train(64, 8, overlap));
  }
}

TEST(micro_batches, an_uneven_split_weights_each_micro_batch_by_its_examples) {
  // 30 per worker under a limit of 8: 8, 8, 7, 7.
  expect_same_training(train(60, 0, reduction_overlap::always), train(60, 8, reduction_overlap::always));
}

TEST(micro_batches, a_limit_at_or_above_the_part_changes_nothing) {
  const run_result whole = train(64, 0, reduction_overlap::always);
  const run_result same = train(64, 32, reduction_overlap::always);
  EXPECT_EQ(whole.weights, same.weights) << "one micro-batch is the whole part: the very same bits";
}

// A batch type without mwstrat_micro_batch: a limit is refused before any step, saying what is missing.
struct sealed_batch {
  data::image_batch images;
};
struct sealed_source {
  std::vector<float> x = std::vector<float>(8 * 8, 0.5f);
  std::vector<std::int64_t> y = std::vector<std::int64_t>(8, 1);
  [[nodiscard]] std::size_t steps_per_epoch() const { return 1; }
  sealed_batch batch_at(std::size_t, std::size_t) const { return {{x, y, 8}}; }
};
struct sealed_model {
  test::softmax_regression inner{8, 4, 1};
  std::span<float> parameters() { return inner.parameters(); }
  std::span<float> gradients() { return inner.gradients(); }
  [[nodiscard]] std::string fingerprint() const { return inner.fingerprint(); }
  template <class OnReady>
  batch_stats train_batch(const sealed_batch& b, OnReady&& r) {
    return inner.train_batch(b.images, std::forward<OnReady>(r));
  }
  batch_stats evaluate_batch(const sealed_batch& b) { return inner.evaluate_batch(b.images); }
};

TEST(micro_batches, a_batch_type_that_cannot_be_split_is_refused_naming_the_hook) {
  static_assert(!splittable_batch<sealed_batch>);
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    sealed_model model;
    sealed_source data;
    test::plain_sgd sgd;
    fit_options o;
    o.catch_preemption_signals = false;
    o.max_micro_batch = 4;
    try {
      fit(strategy, model, sgd, data, o);
      FAIL() << "accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("max_micro_batch: the training data's batch type cannot be split"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("mwstrat_micro_batch(batch, first, count)"), std::string::npos) << e.what();
    }
    o.max_micro_batch = 0;
    EXPECT_NO_THROW(fit(strategy, model, sgd, data, o)) << "without a limit the same data trains";
  });
}

// A batch that can be split but does not say its size: refused at the first step, not trained whole.
struct sizeless_batch {
  data::image_batch images;
};
sizeless_batch mwstrat_micro_batch(const sizeless_batch& b, std::size_t first, std::size_t count) {
  return {mwstrat_micro_batch(b.images, first, count)};
}
struct sizeless_source {
  sealed_source inner;
  [[nodiscard]] std::size_t steps_per_epoch() const { return 1; }
  sizeless_batch batch_at(std::size_t e, std::size_t s) const { return {inner.batch_at(e, s).images}; }
};
struct sizeless_model {
  sealed_model inner;
  std::span<float> parameters() { return inner.parameters(); }
  std::span<float> gradients() { return inner.gradients(); }
  [[nodiscard]] std::string fingerprint() const { return inner.fingerprint(); }
  template <class OnReady>
  batch_stats train_batch(const sizeless_batch& b, OnReady&& r) {
    return inner.inner.train_batch(b.images, std::forward<OnReady>(r));
  }
  batch_stats evaluate_batch(const sizeless_batch& b) { return inner.inner.evaluate_batch(b.images); }
};

TEST(micro_batches, a_batch_that_does_not_say_its_size_is_refused) {
  static_assert(splittable_batch<sizeless_batch>);
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    sizeless_model model;
    sizeless_source data;
    test::plain_sgd sgd;
    fit_options o;
    o.catch_preemption_signals = false;
    o.max_micro_batch = 4;
    try {
      fit(strategy, model, sgd, data, o);
      FAIL() << "accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("max_micro_batch: the training batch does not say how many examples"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace micro_batch_test
