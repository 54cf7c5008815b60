// The parts `fit` is made of, each alone on in-process ranks: the step-boundary agreement
// (train/detail/step_agreement.hpp), one step and an epoch's steps and end (train/detail/epoch_runner.hpp), and
// the in-memory recovery session's start and snapshots (train/in_memory_recovery.hpp). fit_test.cpp tests them
// together.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/detail/batch_steps.hpp>
#include <mwstrat/train/detail/epoch_runner.hpp>
#include <mwstrat/train/detail/step_agreement.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/in_memory_recovery.hpp>
#include <mwstrat/train/train_context.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fit_parts_test {

using namespace mwstrat;
using test::blob_batches;
using test::plain_sgd;
using test::softmax_regression;

using strategy_t = mirrored_strategy<local_collective&>;
using context = train_context<strategy_t, softmax_regression, plain_sgd>;

struct rank_run {
  strategy_t strategy;
  softmax_regression model;
  plain_sgd sgd;
  blob_batches data;
  context ctx;
  explicit rank_run(local_collective& c, int workers)
      : strategy(c), model(6, 3, static_cast<std::uint32_t>(1 + c.rank())), data(48, 6, 3, 24, workers, c.rank(), 9),
        ctx(strategy, model, sgd) {
    ctx.steps_per_pass = static_cast<std::size_t>(data.steps_per_epoch());
    ctx.steps_per_epoch = ctx.steps_per_pass;
  }
};

TEST(step_agreement, a_stop_or_a_preemption_on_one_rank_reaches_every_rank) {
  spawn_ranks(3, [](local_collective& c) {
    rank_run r(c, 3);
    detail::preemption_watch watch;
    r.ctx.stop_training = c.rank() == 1;
    detail::agree_after_step<true>(r.ctx, c.rank() == 2, watch);  // rank 2 alone saw a signal during the hooks
    EXPECT_TRUE(r.ctx.stop_training) << "rank " << c.rank();
    EXPECT_TRUE(r.ctx.preempted) << "rank " << c.rank();

    r.ctx.stop_training = c.rank() == 0;
    r.ctx.preempted = false;
    detail::agree_after_epoch(r.ctx, watch);
    EXPECT_TRUE(r.ctx.stop_training) << "rank " << c.rank();
    EXPECT_FALSE(r.ctx.preempted) << "rank " << c.rank();

    r.ctx.stop_training = false;
    r.ctx.preempted = c.rank() == 2;
    detail::agree_after_epoch(r.ctx, watch);
    EXPECT_TRUE(r.ctx.stop_training) << "rank " << c.rank();
    EXPECT_TRUE(r.ctx.preempted) << "rank " << c.rank();
  });
}

TEST(step_agreement, without_a_callback_that_stops_one_worker_nothing_is_exchanged) {
  // No agreement: a stop stays where it was set (no all-reduce), the reduced preemption vote still stops.
  spawn_ranks(2, [](local_collective& c) {
    rank_run r(c, 2);
    detail::preemption_watch watch;
    r.ctx.stop_training = c.rank() == 1;
    detail::agree_after_step<false>(r.ctx, false, watch);
    EXPECT_EQ(r.ctx.stop_training, c.rank() == 1);
    EXPECT_FALSE(r.ctx.preempted);
    detail::agree_after_step<false>(r.ctx, true, watch);
    EXPECT_TRUE(r.ctx.stop_training);
    EXPECT_TRUE(r.ctx.preempted);
  });
}

TEST(epoch_runner, one_step_trains_on_the_global_batch_and_sums_it_on_every_rank) {
  std::mutex m;
  std::vector<std::vector<float>> params(2);
  spawn_ranks(2, [&](local_collective& c) {
    rank_run r(c, 2);
    r.strategy.mirror(r.model.parameters());
    auto sync = make_gradient_sync(r.strategy, r.model, r.sgd);
    detail::preemption_watch watch;
    bool preempt = true;
    const batch_stats first = detail::run_step(r.ctx, sync, r.data, 0, preempt, watch);
    EXPECT_FALSE(preempt);
    EXPECT_EQ(first.count, 24.0);  // both workers' 12
    EXPECT_EQ(r.ctx.step, 1u);
    EXPECT_EQ(r.ctx.epoch_sums.count, 24.0);
    const batch_stats second = detail::run_step(r.ctx, sync, r.data, 1, preempt, watch);
    EXPECT_EQ(r.ctx.step, 2u);
    EXPECT_EQ(r.ctx.epoch_sums.count, 48.0);
    EXPECT_EQ(r.ctx.epoch_sums.loss_sum, first.loss_sum + second.loss_sum);
    const std::lock_guard lock(m);
    params[static_cast<std::size_t>(c.rank())].assign(r.model.parameters().begin(), r.model.parameters().end());
  });
  EXPECT_EQ(params[0], params[1]);  // the same update on both replicas
}

// Stops training on rank 0 alone after the given step (a callback that may stop one worker: agreed on).
struct stop_on_chief_after {
  std::size_t step;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t s, const batch_logs&) {
    if (ctx.strategy.is_chief() && s == step) ctx.stop_training = true;
  }
};

TEST(epoch_runner, the_epochs_steps_stop_after_the_same_step_on_every_rank) {
  spawn_ranks(2, [](local_collective& c) {
    rank_run r(c, 2);
    r.strategy.mirror(r.model.parameters());
    auto sync = make_gradient_sync(r.strategy, r.model, r.sgd);
    detail::preemption_watch watch;
    std::size_t steps_run = 0;
    std::size_t boundaries = 0;
    std::vector<named_value> batch_values;
    stop_on_chief_after stop{0};
    detail::run_epoch_steps(r.ctx, sync, r.data, watch, steps_run, batch_values, [&] { ++boundaries; }, stop);
    EXPECT_EQ(steps_run, 1u) << "rank " << c.rank();
    EXPECT_EQ(boundaries, 1u);
    EXPECT_EQ(r.ctx.step, 1u);
    EXPECT_TRUE(r.ctx.stop_training) << "rank " << c.rank();
  });
}

// Stops training on rank 1 alone at an epoch's end.
struct stop_on_rank_one_at_epoch_end {
  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int, const epoch_logs&) {
    if (ctx.strategy.replica_id() == 1) ctx.stop_training = true;
  }
};

TEST(epoch_runner, the_epochs_end_logs_it_resets_the_position_and_agrees_on_a_stop) {
  spawn_ranks(2, [](local_collective& c) {
    rank_run r(c, 2);
    r.ctx.epoch = 3;
    r.ctx.step = r.ctx.steps_per_epoch;  // every step done
    r.ctx.epoch_sums = {12.0, 18.0, 48.0};
    detail::preemption_watch watch;
    history hist;
    no_validation none;
    const detail::validation_plan<no_validation> plan{none, 0, 1};
    stop_on_rank_one_at_epoch_end stop;
    detail::finish_epoch(r.ctx, 3, std::chrono::steady_clock::now(), 2, plan, hist, watch, stop);
    ASSERT_EQ(hist.epochs.size(), 1u);
    EXPECT_EQ(hist.epochs[0].epoch, 3);
    EXPECT_EQ(hist.epochs[0].steps, 2u);
    EXPECT_EQ(hist.epochs[0].loss, 0.25);
    EXPECT_EQ(hist.epochs[0].accuracy, 0.375);
    EXPECT_EQ(r.ctx.step, 0u);                   // finished: the next epoch's top
    EXPECT_TRUE(r.ctx.stop_training) << "rank " << c.rank();  // rank 1's stop reached rank 0

    r.ctx.step = 1;  // stopped part-way: keeps its position
    r.ctx.stop_training = false;
    detail::finish_epoch(r.ctx, 3, std::chrono::steady_clock::now(), 1, plan, hist, watch);
    EXPECT_EQ(r.ctx.step, 1u);
    EXPECT_FALSE(r.ctx.stop_training);
  });
}

TEST(recovery_session, off_it_starts_from_the_chiefs_weights_and_takes_no_snapshot) {
  std::mutex m;
  std::vector<std::vector<float>> params(2);
  spawn_ranks(2, [&](local_collective& c) {
    rank_run r(c, 2);  // each rank's model has its own seed
    const in_memory_recovery_options off{};
    detail::recovery_session<strategy_t> session(r.strategy, off);
    EXPECT_FALSE(session.on());
    session.start(r.ctx);
    EXPECT_FALSE(r.ctx.rejoined);
    session.at_epoch_top(r.ctx, 0);
    session.at_step_boundary(r.ctx, 0);
    EXPECT_EQ(session.snapshot().at(), 0u);
    const std::lock_guard lock(m);
    params[static_cast<std::size_t>(c.rank())].assign(r.model.parameters().begin(), r.model.parameters().end());
  });
  EXPECT_EQ(params[0], params[1]);
}

TEST(recovery_session, refuses_recovery_on_a_strategy_that_cannot_rebuild_its_collective) {
  spawn_ranks(1, [](local_collective& c) {
    rank_run r(c, 1);
    in_memory_recovery_options on;
    on.enabled = true;
    try {
      detail::recovery_session<strategy_t> session(r.strategy, on);
      ADD_FAILURE() << "accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("needs a recoverable_strategy"), std::string::npos) << e.what();
    }
  });
}

// batch_steps.hpp: an evaluation step skips a worker's empty batch only when the batch's type says how many examples
// it holds, in any of the three spellings; a type that says nothing is never taken for empty.
struct sized_by_member { std::size_t size = 0; };
struct sized_by_count { std::size_t count = 0; };
struct sized_by_call {
  std::size_t n = 0;
  [[nodiscard]] std::size_t size() const { return n; }
};
struct unsized {};

TEST(batch_steps, examples_in_reads_a_batchs_size_count_or_size_call_and_nothing_else) {
  EXPECT_EQ(mwstrat::detail::examples_in(sized_by_member{7}), std::optional<std::size_t>{7});
  EXPECT_EQ(mwstrat::detail::examples_in(sized_by_member{0}), std::optional<std::size_t>{0});
  EXPECT_EQ(mwstrat::detail::examples_in(sized_by_count{3}), std::optional<std::size_t>{3});
  EXPECT_EQ(mwstrat::detail::examples_in(sized_by_call{5}), std::optional<std::size_t>{5});
  EXPECT_EQ(mwstrat::detail::examples_in(unsized{}), std::nullopt);
  EXPECT_EQ(mwstrat::detail::examples_in(std::vector<int>(4)), std::optional<std::size_t>{4});
}

}  // namespace fit_parts_test
