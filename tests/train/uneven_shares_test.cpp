// Uneven shares of a global batch (what an elastic job has after it shrinks: 15 over 2 workers is 7 + 8): fit weights
// each worker's mean gradient by its share, so two workers train the same model as one worker on the whole batch (to
// float rounding), whether the reduction overlaps backward or follows it and with or without micro-batches; without
// the weights the mean of the two means would be another update.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/strategy/multi_worker_mirrored_strategy.hpp>
#include <mwstrat/train.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace uneven_shares_test {

using namespace mwstrat;

// `workers` replicas share global batches of 15 (as one worker's input, then resharded: the constructor keeps to
// multiples); 2 epochs of 4 steps of a small MLP. Rank 0's weights.
std::vector<float> train(int workers, reduction_overlap overlap, std::size_t max_micro_batch) {
  const auto images = test::learnable_blobs(90);
  std::vector<float> weights;
  std::mutex m;
  spawn_ranks(workers, [&](local_collective& c) {
    gradient_sync_options sync;
    sync.overlap = overlap;
    sync.update = update_placement::replicated;
    sync.bucket_bytes = 256;
    mirrored_strategy<local_collective&> strategy(c, sync);
    nn::sequential model({nn::input{{8}}, nn::dense{16, nn::activation::relu}, nn::dense{4}}, {.seed = 5});
    nn::sgd sgd(0.2);
    data::distribution_options d;
    d.global_batch = 15;
    d.seed = 9;
    d.policy = data::data_shard{};
    distributed_input input(data::distributed_batches(images, d));
    input.reshard(workers, c.rank());
    EXPECT_EQ(input.global_count_at(0, 0), 15u);
    fit_options o;
    o.epochs = 2;
    o.steps_per_epoch = 4;
    o.catch_preemption_signals = false;
    o.max_micro_batch = max_micro_batch;
    (void)fit(strategy, model, sgd, input, o);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      weights.assign(model.parameters().begin(), model.parameters().end());
    }
  });
  return weights;
}

// The largest difference relative to the largest weight.
double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float largest = 0;
  for (const float v : a) largest = std::max(largest, std::abs(v));
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])) / largest);
  }
  return worst;
}

TEST(uneven_shares, two_workers_with_seven_and_eight_examples_train_what_one_worker_trains_on_fifteen) {
  const auto one = train(1, reduction_overlap::never, 0);
  for (const auto overlap : {reduction_overlap::never, reduction_overlap::always}) {
    EXPECT_LT(worst_difference(one, train(2, overlap, 0)), 1e-5) << "overlap " << static_cast<int>(overlap);
  }
  EXPECT_LT(worst_difference(one, train(2, reduction_overlap::always, 3)), 1e-5) << "micro-batches of 3";
  // Four workers: 3, 4, 4, 4.
  EXPECT_LT(worst_difference(one, train(4, reduction_overlap::never, 0)), 1e-5);
}

// An elastic job refuses, before it trains, data it could not reshard when it shrinks: file sharding (each worker
// reads its own files, so the global batches depend on the worker count).
TEST(uneven_shares, an_elastic_fit_refuses_data_it_cannot_reshard_before_training) {
  auto strategy = make_multi_worker_mirrored_strategy(cluster_config::local());  // a world of one, shrinkable
  static_assert(shrinkable_strategy<decltype(strategy)>);
  nn::sequential model({nn::input{{8}}, nn::dense{4}}, {.seed = 5});
  nn::sgd sgd(0.1);
  data::distribution_options d;
  d.global_batch = 8;
  d.policy = data::file_shard{};
  distributed_input by_files(data::distributed_batches(test::learnable_blobs(32, 3, {16, 16}), d));
  fit_options o;
  o.catch_preemption_signals = false;
  o.recovery.min_workers = 1;
  o.recovery.from_launcher = false;
  try {
    (void)fit(strategy, model, sgd, by_files, o);
    ADD_FAILURE() << "an elastic job trained on file-sharded data";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("min_workers: this training data cannot be resharded"), std::string::npos)
        << e.what();
  }
}

// What the input sees of a strategy: three workers, this one worker 1, joined a running job or one of its first.
struct three_workers {
  bool joined = false;
  [[nodiscard]] int num_replicas_in_sync() const { return 3; }
  [[nodiscard]] int replica_id() const { return 1; }
  [[nodiscard]] bool joined_collective() const { return joined; }
};

// A job starts on a multiple of its workers; a worker that joined a running elastic job takes its uneven share of
// the job's global batch (8 over 3: 2, 3, 3), as the members do once they reshard for it.
TEST(uneven_shares, a_joiner_takes_its_uneven_share_where_a_starting_job_is_refused) {
  const auto images = test::learnable_blobs(64);
  try {
    distributed_input starting(images, 8, three_workers{}, 9, data::data_shard{});
    ADD_FAILURE() << "a job started on a global batch its workers cannot split evenly";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("global batch 8 is not a positive multiple of the 3 workers"),
              std::string::npos)
        << e.what();
  }
  distributed_input joiner(images, 8, three_workers{.joined = true}, 9, data::data_shard{});
  EXPECT_EQ(joiner.batch_at(0, 0).size, 3u);
  EXPECT_EQ(joiner.global_count_at(0, 0), 8u);
  // The same examples as worker 1 of three that resharded from one worker's input (the members' way).
  data::distribution_options d;
  d.global_batch = 8;
  d.seed = 9;
  d.policy = data::data_shard{};
  distributed_input member(data::distributed_batches(images, d));
  member.reshard(3, 1);
  std::vector<std::size_t> a(3), b(3);
  ASSERT_EQ(joiner.indices_at(0, 1, a), 3u);
  ASSERT_EQ(member.indices_at(0, 1, b), 3u);
  EXPECT_EQ(a, b);
}

}  // namespace uneven_shares_test
