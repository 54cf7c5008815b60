// Issue 18's defects 1-3 and preemption, over the local collective (replicas as threads) with the library's own
// distributed input: epochs longer than a pass read on into the next reshuffled pass and resume exactly;
// evaluation where some workers get nothing equals one worker's; a stop decided on one worker stops all at the
// same step; a preemption request stops all at the same step, backs up, and resumes bitwise.
#include <mwstrat/checkpoint/manager.hpp>
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/distributed_input.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/preemption.hpp>

#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stream_and_stop_test {

using namespace mwstrat;
using test::momentum_sgd;
using test::softmax_regression;
namespace fs = std::filesystem;

constexpr std::size_t rows = 2, cols = 4, features = rows * cols, classes = 4;

data::labeled_images blobs(std::size_t count, std::uint32_t seed = 3) { return test::learnable_blobs(count, seed); }

// softmax_regression that records the first pixel and label of every training batch it sees.
struct recording_model : softmax_regression {
  using softmax_regression::softmax_regression;
  std::vector<std::vector<float>> seen;
  template <class OnReady>
  batch_stats train_batch(const data::image_batch& b, OnReady&& r) {
    seen.emplace_back(b.inputs.begin(), b.inputs.end());
    return softmax_regression::train_batch(b, r);
  }
};

TEST(fit_stream, steps_per_epoch_longer_than_a_pass_reads_on_into_the_next_reshuffled_pass) {
  // 100 examples, global batch 16: a pass is 6 steps. 2 epochs of 9 steps (1.5 passes) read passes 0, 1, 2.
  const data::labeled_images set = blobs(100);
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    recording_model model(features, classes, 5);
    test::plain_sgd sgd;
    distributed_input train(set, 16, strategy, 11);
    ASSERT_EQ(train.steps_per_epoch(), 6u);
    fit_options fo;
    fo.epochs = 2;
    fo.steps_per_epoch = 9;
    const history h = fit(strategy, model, sgd, train, fo);
    ASSERT_EQ(h.epochs.size(), 2u);
    EXPECT_EQ(h.epochs[1].steps, 9u);
    ASSERT_EQ(model.seen.size(), 18u);
    // Each step read step g mod 6 of pass g / 6, each pass in its own order.
    data::distributed_batches reference(set, [] {
      data::distribution_options o;
      o.global_batch = 16;
      o.seed = 11;
      return o;
    }());
    std::vector<float> images(16 * features);
    std::vector<std::int64_t> labels(16);
    for (std::uint64_t g = 0; g < 18; ++g) {
      const std::size_t n = reference.fill(data::stream_position(g, 6, 11), images, labels);
      ASSERT_EQ(n, 16u);
      EXPECT_EQ(model.seen[g], std::vector<float>(images.begin(), images.end())) << "global step " << g;
    }
    EXPECT_NE(model.seen[0], model.seen[6]) << "the second pass is reshuffled";
  });
}

// Throws on every worker once `global_step` steps are done: a job that dies mid-run.
struct die_at {
  std::uint64_t global_step;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.global_step() == global_step) throw std::runtime_error("injected failure");
  }
};

struct stream_run {
  std::vector<float> params;
  std::vector<float> velocity;
  std::optional<std::uint64_t> resumed_at;
  bool failed = false;
};

// 2 workers, 100 examples, global batch 16 (6 steps a pass), 2 epochs of 9 steps, backups every 4 steps.
stream_run run_stream(const fs::path& backup_dir, std::optional<std::uint64_t> die, std::uint32_t init_seed) {
  const data::labeled_images set = blobs(100);
  stream_run out;
  std::mutex m;
  try {
    spawn_ranks(2, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      softmax_regression model(features, classes, init_seed);
      momentum_sgd sgd(model.parameters().size());
      distributed_input train(set, 16, strategy, 11);
      fit_options fo;
      fo.epochs = 2;
      fo.steps_per_epoch = 9;
      std::ostringstream silent;
      backup_options bo{backup_dir, save_frequency::every(4)};
      bo.log = &silent;
      backup_and_restore backup(bo);
      die_at d{die.value_or(~std::uint64_t{0})};
      fit(strategy, model, sgd, train, fo, backup, d);
      if (c.rank() == 0) {
        const std::lock_guard lock(m);
        out.params.assign(model.parameters().begin(), model.parameters().end());
        out.velocity = sgd.velocity;
        out.resumed_at = backup.resumed_at();
      }
    });
  } catch (const std::exception&) {
    out.failed = true;
  }
  return out;
}

TEST(fit_stream, a_backup_written_in_the_second_pass_resumes_bitwise) {
  test::temp_dir ref_dir, dir;
  const stream_run reference = run_stream(ref_dir.path() / "b", std::nullopt, 1);
  ASSERT_FALSE(reference.failed);
  // Dies after global step 10 (epoch 2, step 1); the last backup is global step 8: pass 1, step 2.
  const stream_run crashed = run_stream(dir.path() / "b", 10, 1);
  ASSERT_TRUE(crashed.failed);
  checkpoint_manager manager(dir.path() / "b", 2, "backup");
  const auto latest = manager.restore_latest_checkpoint();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->state.step, 8);
  EXPECT_EQ(latest->state.epoch, 0);
  EXPECT_EQ(latest->state.cursor, (data::data_cursor{1, 2, 0})) << "the data cursor counts passes";
  const stream_run resumed = run_stream(dir.path() / "b", std::nullopt, 99);
  ASSERT_FALSE(resumed.failed);
  EXPECT_EQ(resumed.resumed_at, std::optional<std::uint64_t>(8));
  EXPECT_EQ(resumed.params, reference.params);
  EXPECT_EQ(resumed.velocity, reference.velocity);
}

// ------------------------------------------------------------------------------------------------ evaluation

// Refuses an empty batch, as the reference CNN does.
struct refuses_empty_batches : softmax_regression {
  using softmax_regression::softmax_regression;
  batch_stats evaluate_batch(const data::image_batch& b) {
    if (b.size == 0) throw std::invalid_argument("evaluate_batch: an empty batch");
    return softmax_regression::evaluate_batch(b);
  }
};

// Evaluates a fixed model on `count` examples with `workers` workers and a global batch of `global_batch`, for
// `steps` steps (0: the whole set).
evaluation evaluate_with(int workers, std::size_t count, std::size_t global_batch, std::size_t steps = 0) {
  const data::labeled_images set = blobs(count, 8);
  evaluation result;
  std::mutex m;
  spawn_ranks(workers, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    refuses_empty_batches model(features, classes, 21);
    auto input = distributed_input::for_evaluation(set, global_batch, strategy);
    const evaluation e = evaluate(strategy, model, input, steps);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      result = e;
    }
  });
  return result;
}

TEST(evaluate, workers_whose_share_of_the_last_batch_is_empty_give_the_one_worker_result) {
  // (workers, examples, global batch): the last step has fewer examples than workers, or the set is smaller than
  // the workers, so some workers get nothing.
  struct shape {
    int workers;
    std::size_t count, global_batch;
  };
  for (const shape s : {shape{3, 10, 9}, shape{4, 3, 4}, shape{4, 1, 8}, shape{2, 7, 6}, shape{4, 17, 4},
                        shape{3, 2, 3}}) {
    const evaluation one = evaluate_with(1, s.count, s.global_batch / static_cast<std::size_t>(s.workers));
    const evaluation many = evaluate_with(s.workers, s.count, s.global_batch);
    EXPECT_EQ(many.count, static_cast<double>(s.count)) << s.workers << " workers, " << s.count << " examples";
    EXPECT_EQ(many.accuracy, one.accuracy) << s.workers << " workers, " << s.count << " examples";
    EXPECT_NEAR(many.loss, one.loss, 1e-6 * std::abs(one.loss)) << s.workers << " workers, " << s.count;
  }
}

// More steps than the data has (Keras: the input runs out): every example once, not the next pass's again.
TEST(evaluate, more_steps_than_the_data_has_evaluate_every_example_once) {
  const evaluation whole = evaluate_with(2, 10, 4);  // 3 steps
  for (const std::size_t steps : {std::size_t{3}, std::size_t{4}, std::size_t{6}}) {
    const evaluation e = evaluate_with(2, 10, 4, steps);
    EXPECT_EQ(e.count, 10.0) << steps << " steps";
    EXPECT_EQ(e.loss, whole.loss) << steps << " steps";
  }
  EXPECT_EQ(evaluate_with(2, 10, 4, 2).count, 8.0);
}

// ------------------------------------------------------------------------------------------------ validation_split

TEST(validation_split, holds_out_the_last_fraction_in_file_order_like_keras_and_validates_on_it) {
  const data::labeled_images set = blobs(100);
  const split_sets parts = validation_split(set, 0.2);  // Keras: split_at = int(100 * 0.8) = 80
  ASSERT_EQ(parts.training.count(), 80u);
  ASSERT_EQ(parts.validation.count(), 20u);
  EXPECT_EQ(parts.validation.label(0), set.label(80));
  EXPECT_TRUE(std::equal(parts.validation.image(19).begin(), parts.validation.image(19).end(), set.image(99).begin()));
  EXPECT_EQ(validation_split(set, 0.25).training.count(), 75u);
  EXPECT_THROW((void)validation_split(set, 0.0), config_error);
  EXPECT_THROW((void)validation_split(set, 1.0), config_error);
  EXPECT_EQ(validation_split(blobs(3), 0.1).validation.count(), 1u) << "int(3 * 0.9) = 2, as in Keras";
  EXPECT_THROW((void)validation_split(blobs(3), 0.9), config_error) << "no training example";
  EXPECT_THROW((void)validation_split(blobs(3), 1e-17), config_error) << "no validation example";
  // Per-file counts survive: files of 30 and 70 examples split at 80 give [30, 50] and [20].
  const data::labeled_images two_files(std::vector<std::uint8_t>(set.pixels().begin(), set.pixels().end()),
                                       std::vector<std::int64_t>(set.labels().begin(), set.labels().end()), rows,
                                       cols, {30, 70});
  const split_sets by_file = validation_split(two_files, 0.2);
  EXPECT_EQ(std::vector<std::size_t>(by_file.training.file_counts().begin(), by_file.training.file_counts().end()),
            (std::vector<std::size_t>{30, 50}));
  EXPECT_EQ(by_file.validation.file_counts().size(), 1u);

  // fit with 2 workers validates on exactly the held-out examples.
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    test::plain_sgd sgd;
    distributed_input train(parts.training, 16, strategy, 3);
    auto val = distributed_input::for_evaluation(parts.validation, 16, strategy);
    fit_options fo;
    fo.epochs = 2;
    const history h = fit(strategy, model, sgd, train, val, fo);
    ASSERT_EQ(h.epochs.size(), 2u);
    ASSERT_TRUE(h.epochs[1].val_loss.has_value());
    const evaluation e = evaluate(strategy, model, val);
    EXPECT_EQ(e.count, 20.0);
    EXPECT_EQ(e.loss, *h.epochs[1].val_loss);
  });
}

// ------------------------------------------------------------------------------------------------ stopping

// Sets stop_training on one rank only, after global step `at`.
struct stop_on_rank {
  int rank;
  std::uint64_t at;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.strategy.replica_id() == rank && ctx.global_step() == at) ctx.stop_training = true;
  }
};

// Sets stop_training on one rank only at the end of epoch `at` (as a chief-only early stop would).
struct stop_at_epoch_end_on_rank {
  int rank;
  int at;
  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs&) {
    if (ctx.strategy.replica_id() == rank && epoch == at) ctx.stop_training = true;
  }
};

TEST(fit_stop, a_stop_decided_on_one_worker_stops_every_worker_after_the_same_step) {
  const data::labeled_images set = blobs(96);
  for (const int deciding : {0, 1}) {
    std::vector<std::uint64_t> iterations(2);
    std::vector<std::vector<float>> params(2);
    spawn_ranks(2, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      softmax_regression model(features, classes, 5);
      momentum_sgd sgd(model.parameters().size());
      distributed_input train(set, 16, strategy, 3);  // 6 steps an epoch
      fit_options fo;
      fo.epochs = 3;
      stop_on_rank stop{deciding, 8};
      const history h = fit(strategy, model, sgd, train, fo, stop);
      EXPECT_TRUE(h.stopped_early);
      ASSERT_EQ(h.epochs.size(), 2u);
      EXPECT_EQ(h.epochs[1].steps, 2u);
      const auto r = static_cast<std::size_t>(c.rank());
      iterations[r] = static_cast<std::uint64_t>(sgd.iterations());
      params[r].assign(model.parameters().begin(), model.parameters().end());
    });
    EXPECT_EQ(iterations[0], 8u) << "rank " << deciding << " decided";
    EXPECT_EQ(iterations[1], 8u) << "rank " << deciding << " decided";
    EXPECT_EQ(params[0], params[1]);
  }
}

TEST(fit_stop, a_stop_decided_in_on_epoch_end_on_the_chief_ends_every_worker_before_the_next_epoch) {
  const data::labeled_images set = blobs(96);
  std::vector<std::size_t> epochs(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    test::plain_sgd sgd;
    distributed_input train(set, 16, strategy, 3);
    fit_options fo;
    fo.epochs = 5;
    stop_at_epoch_end_on_rank stop{0, 1};
    const history h = fit(strategy, model, sgd, train, fo, stop);
    EXPECT_TRUE(h.stopped_early);
    epochs[static_cast<std::size_t>(c.rank())] = h.epochs.size();
  });
  EXPECT_EQ(epochs[0], 2u);
  EXPECT_EQ(epochs[1], 2u);
}

// As in Keras, an epoch that a stop ends part-way is still validated: its logs have val_loss.
TEST(fit_stop, an_epoch_stopped_part_way_is_validated) {
  const data::labeled_images set = blobs(96);
  const data::labeled_images held_out = blobs(32, 9);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    momentum_sgd sgd(model.parameters().size());
    distributed_input train(set, 16, strategy, 3);  // 6 steps an epoch
    auto validation = distributed_input::for_evaluation(held_out, 16, strategy);
    fit_options fo;
    fo.epochs = 3;
    stop_on_rank stop{0, 8};  // two steps into the second epoch
    const history h = fit(strategy, model, sgd, train, validation, fo, stop);
    ASSERT_EQ(h.epochs.size(), 2u);
    EXPECT_EQ(h.epochs[1].steps, 2u);
    ASSERT_TRUE(h.epochs[1].val_loss.has_value());
    EXPECT_EQ(*h.epochs[1].val_loss, evaluate(strategy, model, validation).loss);
  });
}

// Sets stop_training on one rank only in on_epoch_begin of epoch `at` (or in on_train_begin when `at` is -1).
struct stop_at_begin_on_rank {
  int rank;
  int at;
  template <class Ctx>
  void on_train_begin(Ctx& ctx) {
    if (ctx.strategy.replica_id() == rank && at < 0) ctx.stop_training = true;
  }
  template <class Ctx>
  void on_epoch_begin(Ctx& ctx, int epoch) {
    if (ctx.strategy.replica_id() == rank && epoch == at) ctx.stop_training = true;
  }
};

// A stop set in on_train_begin or on_epoch_begin on one worker: every worker stops before that epoch's steps (the
// worker that set it used to skip them while the others ran them, and the ranks' operations went apart).
TEST(fit_stop, a_stop_decided_in_a_begin_hook_on_one_worker_stops_every_worker_before_the_epochs_steps) {
  const data::labeled_images set = blobs(96);
  for (const int at : {1, -1}) {
    std::vector<std::uint64_t> iterations(2);
    std::vector<std::vector<float>> params(2);
    std::vector<std::string> errors(2);
    spawn_ranks(2, [&](local_collective& c) {
      const auto r = static_cast<std::size_t>(c.rank());
      try {
        mirrored_strategy<local_collective&> strategy(c);
        softmax_regression model(features, classes, 5);
        momentum_sgd sgd(model.parameters().size());
        distributed_input train(set, 16, strategy, 3);  // 6 steps an epoch
        fit_options fo;
        fo.epochs = 3;
        stop_at_begin_on_rank stop{1, at};
        const history h = fit(strategy, model, sgd, train, fo, stop);
        EXPECT_TRUE(h.stopped_early);
        iterations[r] = static_cast<std::uint64_t>(sgd.iterations());
        params[r].assign(model.parameters().begin(), model.parameters().end());
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
    const std::uint64_t expected = at < 0 ? 0u : 6u * static_cast<std::uint64_t>(at);
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(errors[r], "") << "rank " << r << ", stop at " << at;
      EXPECT_EQ(iterations[r], expected) << "rank " << r << ", stop at " << at;
    }
    EXPECT_EQ(params[0], params[1]);
  }
}

// ------------------------------------------------------------------------------------------------ preemption

// Requests preemption (as the SIGTERM handler would) on one rank after global step `at`, on the first run only.
struct preempt_at {
  int rank;
  std::optional<std::uint64_t> at;
  template <class Ctx>
  void on_train_batch_begin(Ctx& ctx, std::size_t) {
    if (at && ctx.strategy.replica_id() == rank && ctx.global_step() == *at) request_preemption();
  }
};

struct preempt_run {
  std::vector<float> params;
  std::vector<std::uint64_t> stopped_at = std::vector<std::uint64_t>(2);
  int preempted_workers = 0;
};

preempt_run run_preemptible(const fs::path& dir, std::optional<std::uint64_t> preempt_step, std::uint32_t seed) {
  const data::labeled_images set = blobs(100);
  preempt_run out;
  std::mutex m;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, seed);
    momentum_sgd sgd(model.parameters().size());
    distributed_input train(set, 16, strategy, 11);
    fit_options fo;
    fo.epochs = 3;
    fo.steps_per_epoch = 5;
    fo.catch_preemption_signals = false;  // the test raises the flag itself; signals stay the test runner's
    std::ostringstream silent;
    backup_options bo{dir};  // backups per epoch only: the preemption's backup is the mid-epoch one
    bo.log = &silent;
    backup_and_restore backup(bo);
    preempt_at p{1, preempt_step};
    try {
      fit(strategy, model, sgd, train, fo, backup, p);
    } catch (const preempted& e) {
      const std::lock_guard lock(m);
      ++out.preempted_workers;
      out.stopped_at[static_cast<std::size_t>(c.rank())] = e.global_step();
      return;
    }
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      out.params.assign(model.parameters().begin(), model.parameters().end());
    }
  });
  return out;
}

TEST(fit_preemption, a_request_on_one_worker_stops_all_after_the_same_step_and_the_resumed_run_is_bitwise_equal) {
  test::temp_dir ref_dir, dir;
  const preempt_run reference = run_preemptible(ref_dir.path() / "b", std::nullopt, 1);
  ASSERT_EQ(reference.preempted_workers, 0);
  ASSERT_FALSE(reference.params.empty());
  // Rank 1 is preempted as step 7 begins (epoch 2, step 2): both stop after step 7, mid-epoch.
  const preempt_run stopped = run_preemptible(dir.path() / "b", 7, 1);
  EXPECT_EQ(stopped.preempted_workers, 2);
  EXPECT_EQ(stopped.stopped_at, (std::vector<std::uint64_t>{8, 8}));
  EXPECT_FALSE(preemption_requested()) << "fit clears the request it acted on";
  checkpoint_manager manager(dir.path() / "b", 2, "backup");
  const auto latest = manager.restore_latest_checkpoint();
  ASSERT_TRUE(latest.has_value()) << "the chief backed up before fit threw";
  EXPECT_EQ(latest->state.step, 8);
  const preempt_run resumed = run_preemptible(dir.path() / "b", std::nullopt, 42);
  EXPECT_EQ(resumed.preempted_workers, 0);
  EXPECT_EQ(resumed.params, reference.params);
  EXPECT_FALSE(fs::exists(dir.path() / "b")) << "the finished run removes its backup";
}

TEST(preemption_signals, sigterm_and_sigint_each_set_the_request_while_a_guard_lives_and_the_old_handlers_return) {
  // A real signal delivered to this process (raise), for each of the two signals fit catches: the request records
  // which one came, the process goes on, and once the last guard is gone the previous disposition is back.
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction before {};
    ASSERT_EQ(::sigaction(sig, nullptr, &before), 0);
    clear_preemption_request();
    {
      preemption_signal_guard outer;
      {
        preemption_signal_guard inner;  // replicas as threads each hold one
      }
      ASSERT_EQ(std::raise(sig), 0);
      EXPECT_TRUE(preemption_requested()) << "signal " << sig;
      EXPECT_EQ(preemption_signal_number(), sig);
    }
    struct sigaction after {};
    ASSERT_EQ(::sigaction(sig, nullptr, &after), 0);
    EXPECT_EQ(after.sa_handler, before.sa_handler) << "signal " << sig << ": the previous handler is restored";
    clear_preemption_request();
    EXPECT_FALSE(preemption_requested());
  }
}

}  // namespace stream_and_stop_test
