// The training state as one value (train/detail/run_state.hpp) and the trainer's resume engine
// (train/detail/resume.hpp, train/resume.hpp), without BackupAndRestore: the value goes to a backup's keys and comes
// back bit for bit; a resume source of the test's own is resumed from by `detail::resume` on every rank; a worker
// that rejoined under in-memory recovery reads nothing.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/detail/resume.hpp>
#include <mwstrat/train/detail/run_state.hpp>
#include <mwstrat/train/resume.hpp>
#include <mwstrat/train/train_context.hpp>

#include <support/tiny_training.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace resume_test {

using namespace mwstrat;

using test::tiny_adam;
using test::tiny_model;

template <class Strategy>
using context = train_context<Strategy, tiny_model, tiny_adam>;

template <class Ctx>
void fill(Ctx& ctx, float seed) {
  for (std::size_t i = 0; i < ctx.model.params.size(); ++i) ctx.model.params[i] = seed + static_cast<float>(i);
  for (std::size_t i = 0; i < ctx.optimizer.slots.size(); ++i) ctx.optimizer.slots[i] = -seed - static_cast<float>(i);
  ctx.model.rng = static_cast<std::uint64_t>(seed) * 7;
  ctx.optimizer.steps = static_cast<std::int64_t>(seed) * 11;
  ctx.optimizer.rate = seed / 1000;
  ctx.epoch = 2;
  ctx.step = 4;
  ctx.epoch_sums = {seed + 0.1, seed + 1, seed + 2};
  ctx.epoch_metric_sums[0] = seed * 5 + 0.3;
}

// One checkpoint in memory.
struct one_checkpoint {
  std::optional<training_state> held;
  std::filesystem::path save(const training_state_view& state, std::int64_t) {
    held.emplace();
    snapshot_into(state, *held);
    return "mem://one";
  }
  std::optional<std::filesystem::path> latest() const {
    return held ? std::optional<std::filesystem::path>("mem://one") : std::nullopt;
  }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const {
    if (!held) return std::nullopt;
    return restored_checkpoint{"mem://one", held->step, *held};
  }
  void remove_all() { held.reset(); }
};
static_assert(checkpointer<one_checkpoint>);

// A resume source of the test's own: no BackupAndRestore anywhere.
struct memory_source {
  one_checkpoint* store = nullptr;
  std::ostream* log = nullptr;
  int asked = 0;
  std::optional<resume_point> told;
  template <class Ctx>
  resume_target<one_checkpoint> resume_target(Ctx& ctx) {
    ++asked;
    return {ctx.strategy.is_chief() ? store : nullptr, "memory", log};
  }
  void resumed(const std::optional<resume_point>& p) { told = p; }
};

using local_ctx = context<mirrored_strategy<local_collective&>>;

// One rank's run over the tiny model: 10 steps an epoch, one metric.
struct rank_run {
  mirrored_strategy<local_collective&> strategy;
  tiny_model model;
  tiny_adam optimizer;
  std::array<double, 1> metric{};
  local_ctx ctx;
  rank_run(local_collective& c, std::size_t steps_per_pass) : strategy(c), ctx(strategy, model, optimizer) {
    ctx.steps_per_epoch = 10;
    ctx.steps_per_pass = steps_per_pass;
    ctx.epoch_metric_sums = metric;
  }
};

// Near misses of resume_source, one defect each.
struct no_resumed {
  template <class Ctx>
  resume_target<one_checkpoint> resume_target(Ctx&) { return {}; }
};
struct target_of_another_type {
  template <class Ctx>
  std::string resume_target(Ctx&) { return {}; }
  void resumed(const std::optional<resume_point>&) {}
};
struct no_target {
  void resumed(const std::optional<resume_point>&) {}
};
static_assert(resume_source<memory_source, local_ctx>);
static_assert(resume_source<backup_and_restore, local_ctx>);
static_assert(!resume_source<no_resumed, local_ctx>);
static_assert(!resume_source<target_of_another_type, local_ctx>);
static_assert(!resume_source<no_target, local_ctx>);

TEST(run_state, a_backup_holds_it_under_the_train_keys_and_gives_it_back_bit_for_bit) {
  spawn_ranks(1, [](local_collective& c) {
    rank_run r(c, 7);
    auto& model = r.model;
    auto& optimizer = r.optimizer;
    auto& metric = r.metric;
    auto& ctx = r.ctx;
    fill(ctx, 3.5f);
    detail::run_state taken;
    taken.capture(ctx);
    const training_state_view file = taken.to_file(ctx);
    EXPECT_EQ(file.epoch, 2);
    EXPECT_EQ(file.step, 24);                    // global
    EXPECT_EQ(file.cursor.epoch, 3u);            // pass 3, step 3 of a 7-step pass
    EXPECT_EQ(file.cursor.step, 3u);
    EXPECT_EQ(file.optimizer_iterations, 33);
    std::vector<std::string> keys;
    for (const auto& [k, v] : file.extra) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"train.epoch_correct", "train.epoch_count", "train.epoch_loss_sum",
                                              "train.epoch_metric.0", "train.learning_rate", "train.model_step",
                                              "train.steps_per_epoch", "train.steps_per_pass"}));
    EXPECT_EQ(file.extra.at("train.steps_per_epoch"), "10");
    EXPECT_EQ(file.extra.at("train.steps_per_pass"), "7");
    EXPECT_EQ(file.extra.at("train.epoch_loss_sum"), detail::exact_text(3.5 + 0.1));

    training_state owned;
    snapshot_into(file, owned);
    fill(ctx, 9.0f);  // training went on
    ctx.epoch = 0;
    ctx.step = 0;
    const detail::run_state back = detail::run_state::from_file(owned, ctx, "mem://one", "memory");
    back.apply(ctx);
    EXPECT_EQ(ctx.epoch, 2);
    EXPECT_EQ(ctx.step, 4u);
    EXPECT_EQ(ctx.epoch_sums.loss_sum, 3.5 + 0.1);
    EXPECT_EQ(ctx.epoch_sums.correct, 4.5);
    EXPECT_EQ(ctx.epoch_sums.count, 5.5);
    EXPECT_EQ(metric[0], 3.5 * 5 + 0.3);
    EXPECT_EQ(optimizer.steps, 33);
    EXPECT_EQ(model.rng, 21u);
    EXPECT_EQ(optimizer.rate, 0.0035f);

    // The top of an epoch has summed nothing: a backup there holds zero sums, whatever the finished epoch held.
    taken.move_to(3, 0);
    const training_state_view top = taken.to_file(ctx);
    EXPECT_EQ(top.step, 30);
    EXPECT_EQ(top.extra.at("train.epoch_loss_sum"), detail::exact_text(0.0));
    EXPECT_EQ(top.extra.at("train.epoch_metric.0"), detail::exact_text(0.0));
  });
}

TEST(run_state, travels_as_doubles_and_comes_back_equal) {
  detail::run_state a;
  a.epoch = 5;
  a.step = 17;
  a.sums = {1.25, 2, 3};
  a.metric_sums = {0.5, -7};
  a.optimizer_iterations = 123456789;
  a.model_step = 42;
  a.learning_rate = detail::run_state::none;
  std::vector<double> wire(detail::run_state::wire_size(2));
  a.to_wire(wire);
  detail::run_state b;
  b.from_wire(wire, 2);
  EXPECT_EQ(b.epoch, 5);
  EXPECT_EQ(b.step, 17u);
  EXPECT_EQ(b.sums.loss_sum, 1.25);
  EXPECT_EQ(b.sums.count, 3.0);
  EXPECT_EQ(b.metric_sums, (std::vector<double>{0.5, -7}));
  EXPECT_EQ(b.optimizer_iterations, 123456789u);
  EXPECT_EQ(b.model_step, 42.0);
  EXPECT_TRUE(std::isnan(b.learning_rate));
}

TEST(resume, the_trainer_resumes_every_rank_from_a_resume_source_of_its_own) {
  // The chief's store holds a backup of rank 0's state at seed 4; every rank starts elsewhere and ends there.
  one_checkpoint store;
  std::mutex m;
  std::vector<std::vector<float>> params(3);
  std::vector<std::optional<resume_point>> told(3);
  std::ostringstream log;
  spawn_ranks(3, [&](local_collective& c) {
    rank_run r(c, 10);
    auto& model = r.model;
    auto& optimizer = r.optimizer;
    auto& metric = r.metric;
    auto& ctx = r.ctx;
    if (c.rank() == 0) {
      fill(ctx, 4.0f);
      detail::run_state s;
      s.capture(ctx);
      const std::lock_guard lock(m);
      store.save(s.to_file(ctx), 24);
    }
    c.barrier();
    fill(ctx, 1.0f + static_cast<float>(c.rank()));
    ctx.epoch = 0;
    ctx.step = 0;
    memory_source source;
    source.store = &store;
    source.log = c.rank() == 0 ? &log : nullptr;
    detail::resume(ctx, source);
    EXPECT_EQ(source.asked, 1);
    EXPECT_EQ(ctx.epoch, 2);
    EXPECT_EQ(ctx.step, 4u);
    EXPECT_EQ(optimizer.steps, 44);
    EXPECT_EQ(optimizer.slots[3], -7.0f);
    EXPECT_EQ(metric[0], 4.0 * 5 + 0.3);
    const std::lock_guard lock(m);
    params[static_cast<std::size_t>(c.rank())] = model.params;
    told[static_cast<std::size_t>(c.rank())] = source.told;
  });
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(params[r], (std::vector<float>{4, 5, 6, 7, 8})) << "rank " << r;
    ASSERT_TRUE(told[r]) << "rank " << r;
    EXPECT_EQ(told[r]->global_step, 24u);
  }
  EXPECT_EQ(told[0]->source, "mem://one");
  EXPECT_EQ(told[1]->source, "");  // only the chief read it
  EXPECT_NE(log.str().find("restored mem://one: resuming at epoch 3, step 4 (global step 24)"), std::string::npos)
      << log.str();
}

TEST(resume, a_rejoined_worker_is_asked_for_its_target_but_reads_nothing) {
  spawn_ranks(1, [](local_collective& c) {
    rank_run r(c, 10);
    auto& ctx = r.ctx;
    one_checkpoint store;
    fill(ctx, 4.0f);
    detail::run_state s;
    s.capture(ctx);
    store.save(s.to_file(ctx), 24);
    ctx.epoch = 1;
    ctx.step = 0;
    ctx.rejoined = true;
    memory_source source;
    source.store = &store;
    source.told = resume_point{"stale", 1};
    detail::resume(ctx, source);
    EXPECT_EQ(source.asked, 1);
    EXPECT_FALSE(source.told);
    EXPECT_EQ(ctx.epoch, 1);
    EXPECT_EQ(ctx.step, 0u);
  });
}

}  // namespace resume_test
