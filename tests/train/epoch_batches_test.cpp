// data/epoch_batches.hpp: a dataset<T> pipeline feeding fit, as tf.data feeds Keras — sharded per worker, a pure
// function of (epoch, step), so that N workers train like one with the global batch and a resume is exact.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/data/dataset.hpp>
#include <mwstrat/data/epoch_batches.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace epoch_batches_test {

using namespace mwstrat;
using test::momentum_sgd;
using test::softmax_regression;

constexpr std::size_t features = 5, classes = 3, examples = 96;

struct example {
  std::vector<float> x;
  std::int64_t y = 0;
};

// The user's batch type, made by the pipeline's map: it owns its values.
struct owned_batch {
  std::vector<float> x;
  std::vector<std::int64_t> y;
};

// A model that trains on the user's batch type (the generic concept has one form: the batch's).
struct owned_batch_model : softmax_regression {
  using softmax_regression::softmax_regression;
  template <class OnReady>
  batch_stats train_batch(const owned_batch& b, OnReady&& on_ready) {
    return softmax_regression::train_batch(data::image_batch{b.x, b.y, b.y.size()}, on_ready);
  }
  batch_stats evaluate_batch(const owned_batch& b) {
    return softmax_regression::evaluate_batch(data::image_batch{b.x, b.y, b.y.size()});
  }
};

static_assert(batch_source<data::epoch_batches<owned_batch>>);
static_assert(trainable_model<owned_batch_model, owned_batch>);

std::vector<example> blobs() {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<example> out(examples);
  for (std::size_t i = 0; i < examples; ++i) {
    out[i].y = static_cast<std::int64_t>(i % classes);
    for (std::size_t f = 0; f < features; ++f) out[i].x.push_back(noise(rng) + (f % classes == i % classes ? 2.0f : 0.0f));
  }
  return out;
}

data::epoch_batches<owned_batch> pipeline(const std::vector<example>& set, std::size_t global_batch, int workers,
                                          int worker) {
  const std::size_t per_worker = global_batch / static_cast<std::size_t>(workers);
  return data::epoch_batches<owned_batch>(
      [&set, per_worker, workers, worker](std::uint64_t epoch) {
        return data::from_vector(set)
            .shuffle(1000 + epoch)
            .shard(static_cast<std::size_t>(workers), static_cast<std::size_t>(worker))
            .batch(per_worker, true)
            .map([](const std::vector<example>& group) {
              owned_batch b;
              for (const auto& e : group) {
                b.x.insert(b.x.end(), e.x.begin(), e.x.end());
                b.y.push_back(e.y);
              }
              return b;
            });
      },
      set.size() / global_batch);
}

struct die_at {
  std::uint64_t global_step;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.global_step() == global_step) throw std::runtime_error("injected failure");
  }
};

struct outcome {
  std::vector<float> params;
  std::optional<std::uint64_t> resumed_at;
  bool failed = false;
};

outcome train(int workers, std::size_t global_batch, const std::optional<std::filesystem::path>& backup_dir = {},
              std::uint64_t die = ~std::uint64_t{0}, std::uint32_t init_seed = 1) {
  const std::vector<example> set = blobs();
  outcome out;
  std::mutex m;
  try {
    spawn_ranks(workers, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      owned_batch_model model(features, classes, init_seed);
      momentum_sgd sgd(model.parameters().size());
      auto data = pipeline(set, global_batch, c.size(), c.rank());
      fit_options fo;
      fo.epochs = 3;
      die_at dies{die};
      std::ostringstream silent;
      if (backup_dir) {
        backup_options bo{*backup_dir, save_frequency::every(3)};
        bo.log = &silent;
        backup_and_restore backup(bo);
        fit(strategy, model, sgd, data, fo, backup, dies);
        if (c.rank() == 0) out.resumed_at = backup.resumed_at();
      } else {
        fit(strategy, model, sgd, data, fo, dies);
      }
      if (c.rank() == 0) {
        const std::lock_guard lock(m);
        out.params.assign(model.parameters().begin(), model.parameters().end());
      }
    });
  } catch (const std::exception&) {
    out.failed = true;
  }
  return out;
}

TEST(epoch_batches, a_dataset_pipeline_feeds_fit_and_two_workers_train_like_one_with_the_global_batch) {
  const outcome one = train(1, 12);
  const outcome two = train(2, 12);
  ASSERT_FALSE(one.failed);
  ASSERT_FALSE(two.failed);
  ASSERT_EQ(one.params.size(), two.params.size());
  for (std::size_t i = 0; i < one.params.size(); ++i)
    EXPECT_NEAR(two.params[i], one.params[i], 1e-5 * std::max(1.0f, std::abs(one.params[i])));
  EXPECT_EQ(train(2, 12).params, two.params) << "deterministic";
}

TEST(epoch_batches, a_resumed_run_sees_the_same_batches_and_ends_bitwise_identical) {
  const outcome reference = train(2, 12);
  test::temp_dir dir("mwstrat-epoch-batches");
  const auto backup = dir.path() / "backup";
  ASSERT_TRUE(train(2, 12, backup, 13).failed);
  const outcome resumed = train(2, 12, backup, ~std::uint64_t{0}, 77);
  ASSERT_FALSE(resumed.failed);
  EXPECT_EQ(resumed.resumed_at, 12u);
  EXPECT_EQ(resumed.params, reference.params);
}

TEST(epoch_batches, reads_in_order_jumps_back_and_refuses_a_short_epoch) {
  std::vector<int> seen;
  data::epoch_batches<int> source(
      [&](std::uint64_t epoch) {
        return data::range(4).map([epoch, &seen](std::size_t i) {
          seen.push_back(static_cast<int>(i));
          return static_cast<int>(epoch * 10 + i);
        });
      },
      4);
  EXPECT_EQ(source.batch_at(0, 0), 0);
  EXPECT_EQ(source.batch_at(0, 1), 1);
  EXPECT_EQ(source.batch_at(0, 3), 3);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));  // in order: each element made once
  EXPECT_EQ(source.batch_at(0, 1), 1);              // back: the pass starts again
  EXPECT_EQ(source.batch_at(2, 2), 22);
  EXPECT_THROW((void)source.batch_at(1, 4), data_error);
}

}  // namespace epoch_batches_test
