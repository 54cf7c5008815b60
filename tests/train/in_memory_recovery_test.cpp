// In-memory recovery's pieces (train/in_memory_recovery.hpp) on in-process ranks: the step-boundary snapshot
// puts back exactly what it took, and the exchange gives every rank the latest snapshot, from the lowest rank that
// holds it, including a rank that holds none (a replacement). The whole protocol with real processes, a rebuilt
// ring and a launcher is tests/examples/recovery_example_test.cpp.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/in_memory_recovery.hpp>
#include <mwstrat/train/train_context.hpp>

#include <support/softmax_regression.hpp>
#include <support/tiny_training.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace in_memory_recovery_test {

using namespace mwstrat;

using test::tiny_adam;
using test::tiny_model;

template <class Strategy>
using context = train_context<Strategy, tiny_model, tiny_adam>;

// Fills a rank's training state with values derived from `seed`, at `epoch` and `step`.
template <class Ctx>
void fill(Ctx& ctx, float seed, int epoch, std::size_t step) {
  for (std::size_t i = 0; i < ctx.model.params.size(); ++i) ctx.model.params[i] = seed + static_cast<float>(i);
  ctx.model.state = {seed * 2, seed * 3};
  ctx.model.rng = static_cast<std::uint64_t>(static_cast<std::int64_t>(seed)) * 7;  // seeds may be negative
  for (std::size_t i = 0; i < ctx.optimizer.slots.size(); ++i) ctx.optimizer.slots[i] = -seed - static_cast<float>(i);
  ctx.optimizer.steps = static_cast<std::int64_t>(seed) * 11;
  ctx.optimizer.rate = seed / 1000;
  ctx.epoch = epoch;
  ctx.step = step;
  ctx.epoch_sums = {seed, seed + 1, seed + 2};
  ctx.epoch_metric_sums[0] = seed * 5;
}

TEST(in_memory_recovery, a_snapshot_puts_back_exactly_the_state_it_took) {
  spawn_ranks(1, [](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    tiny_model model;
    tiny_adam optimizer;
    std::array<double, 1> metric{};
    context<decltype(strategy)> ctx(strategy, model, optimizer);
    ctx.steps_per_epoch = 10;
    ctx.epoch_metric_sums = metric;
    fill(ctx, 3.5f, 2, 4);
    detail::training_snapshot snap;
    snap.take(ctx, false, 2);
    EXPECT_EQ(snap.at(), 2u * 24u);  // 2 × global step 24, not the top of an epoch
    EXPECT_EQ(snap.history_size(), 2u);
    const tiny_model model_before = model;
    const tiny_adam optimizer_before = optimizer;
    fill(ctx, 9.0f, 5, 1);  // training went on
    snap.restore(ctx);
    EXPECT_EQ(model.params, model_before.params);
    EXPECT_EQ(model.state, model_before.state);
    EXPECT_EQ(model.rng, model_before.rng);
    EXPECT_EQ(optimizer.slots, optimizer_before.slots);
    EXPECT_EQ(optimizer.steps, optimizer_before.steps);
    EXPECT_EQ(optimizer.rate, optimizer_before.rate);
    EXPECT_EQ(ctx.epoch, 2);
    EXPECT_EQ(ctx.step, 4u);
    EXPECT_EQ(ctx.epoch_sums.loss_sum, 3.5);
    EXPECT_EQ(ctx.epoch_sums.count, 5.5);
    EXPECT_EQ(metric[0], 3.5 * 5);
  });
}

TEST(in_memory_recovery, every_rank_takes_the_latest_snapshot_from_the_lowest_rank_holding_it) {
  // Rank 0 is one boundary behind (after step 3 of epoch 1), ranks 1 and 3 hold the latest (after step 4), rank 2
  // is a replacement with nothing: all four end with rank 1's state.
  std::mutex m;
  std::vector<std::vector<float>> params(4);
  std::vector<std::int64_t> iterations(4);
  std::vector<std::size_t> steps(4);
  spawn_ranks(4, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    tiny_model model;
    tiny_adam optimizer;
    std::array<double, 1> metric{};
    context<decltype(strategy)> ctx(strategy, model, optimizer);
    ctx.steps_per_epoch = 10;
    ctx.epoch_metric_sums = metric;
    const int r = c.rank();
    detail::training_snapshot snap;
    const bool have = r != 2;
    if (have) {
      fill(ctx, 10.0f * static_cast<float>(r + 1), 1, r == 0 ? 3 : 4);
      snap.take(ctx, false, 1);
      fill(ctx, -1.0f, 1, 5);  // live state past the boundary (half-updated): never sent
    }
    detail::exchange_state(strategy, ctx, snap, have);
    const std::lock_guard lock(m);
    params[static_cast<std::size_t>(r)] = model.params;
    iterations[static_cast<std::size_t>(r)] = optimizer.steps;
    steps[static_cast<std::size_t>(r)] = ctx.step;
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(params[static_cast<std::size_t>(r)], (std::vector<float>{20, 21, 22, 23, 24})) << "rank " << r;
    EXPECT_EQ(iterations[static_cast<std::size_t>(r)], 220) << "rank " << r;
    EXPECT_EQ(steps[static_cast<std::size_t>(r)], 4u) << "rank " << r;
  }
}

TEST(in_memory_recovery, fit_refuses_recovery_on_a_strategy_that_cannot_rebuild_its_collective) {
  static_assert(!recoverable_strategy<mirrored_strategy<local_collective&>>);
  spawn_ranks(1, [](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    test::softmax_regression model(4, 2, 1);
    test::plain_sgd sgd;
    test::blob_batches data(16, 4, 2, 8, 1, 0, 7);
    fit_options options;
    options.recovery.enabled = true;
    try {
      fit(strategy, model, sgd, data, options);
      ADD_FAILURE() << "fit trained without the recovery it was asked for";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("fit_options::recovery is enabled"), std::string::npos) << e.what();
    }
  });
}

}  // namespace in_memory_recovery_test
