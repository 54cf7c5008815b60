// BackupAndRestore and ModelCheckpoint over local replicas, with real files in a temporary folder.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/callbacks/model_checkpoint.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/saved_model.hpp>

#include <support/comma_locale.hpp>
#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace checkpoint_callbacks_test {

using namespace mwstrat;
using test::blob_batches;
using test::momentum_sgd;
using test::softmax_regression;
namespace fs = std::filesystem;

constexpr std::size_t features = 6, classes = 3, examples = 240;

using test::temp_dir;

// Throws on every worker once `global_step` steps are done: a job that dies mid-run.
struct die_at {
  std::uint64_t global_step;
  template <class Ctx> void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.global_step() == global_step) throw std::runtime_error("injected failure");
  }
};

struct run_options {
  int workers = 2;
  std::size_t global_batch = 24;
  int epochs = 3;
  std::optional<backup_options> backup;
  std::optional<std::uint64_t> die_at_step;
  std::uint32_t init_seed = 1;
  bool halve_rate_after_first_epoch = false;  // as ReduceLROnPlateau would
};

// Halves the learning rate at the end of the first epoch (a rate changed during training, as ReduceLROnPlateau's).
struct halve_rate_once {
  bool on = false;
  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs&) {
    if (on && epoch == 0) ctx.optimizer.set_learning_rate(ctx.optimizer.learning_rate() * 0.5f);
  }
};

struct run_result {
  std::vector<float> params;
  std::vector<float> velocity;
  bool failed = false;
  std::optional<std::uint64_t> resumed_at;
  std::string error;
};

run_result run(const run_options& o) {
  run_result out;
  std::mutex m;
  try {
    spawn_ranks(o.workers, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      softmax_regression model(features, classes, o.init_seed);
      momentum_sgd sgd(model.parameters().size());
      blob_batches data(examples, features, classes, o.global_batch, c.size(), c.rank(), 9);
      fit_options fo;
      fo.epochs = o.epochs;
      std::ostringstream silent;  // outlives `backup`, which logs to it
      std::optional<backup_and_restore> backup;
      if (o.backup) {
        backup_options bo = *o.backup;
        bo.log = &silent;
        backup.emplace(bo);
      }
      die_at die{o.die_at_step.value_or(~std::uint64_t{0})};
      halve_rate_once halve{o.halve_rate_after_first_epoch};
      if (backup) fit(strategy, model, sgd, data, fo, *backup, die, halve);
      else fit(strategy, model, sgd, data, fo, die, halve);
      if (c.rank() == 0) {
        const std::lock_guard lock(m);
        out.params.assign(model.parameters().begin(), model.parameters().end());
        out.velocity = sgd.velocity;
        if (backup) out.resumed_at = backup->resumed_at();
      }
    });
  } catch (const std::exception& e) {
    out.failed = true;
    out.error = e.what();
  }
  return out;
}

TEST(backup_and_restore, resumed_run_is_bitwise_identical_to_an_uninterrupted_one) {
  const run_result reference = run({});
  ASSERT_FALSE(reference.failed) << reference.error;
  for (std::size_t freq : {0u, 1u, 4u, 7u}) {  // 0: every epoch
    temp_dir dir;
    run_options o;
    o.backup = backup_options{dir.path(), freq == 0 ? save_frequency::epoch() : save_frequency::every(freq)};
    o.die_at_step = 23;  // mid-epoch 2 (10 steps per epoch)
    const run_result crashed = run(o);
    ASSERT_TRUE(crashed.failed);
    EXPECT_TRUE(fs::exists(dir.path() / "backup.index.json"));
    o.die_at_step.reset();
    o.init_seed = 77;  // a restarted job initialises differently; the backup must override it
    const run_result resumed = run(o);
    ASSERT_FALSE(resumed.failed) << resumed.error;
    const std::uint64_t expected_resume = freq == 0 ? 20 : 23 / freq * freq;
    EXPECT_EQ(resumed.resumed_at, expected_resume) << "save_freq " << freq;
    EXPECT_EQ(resumed.params, reference.params) << "save_freq " << freq;
    EXPECT_EQ(resumed.velocity, reference.velocity) << "save_freq " << freq;
    EXPECT_FALSE(fs::exists(dir.path())) << "the backup is removed after a successful fit";
  }
}

// The backup is listed before the callback that halves the rate at the end of the first epoch (run() passes it
// first): the epoch's backup must still hold the halved rate, so a backup's epoch-end hook runs after every other
// callback's (saves_training_state).
TEST(backup_and_restore, a_learning_rate_changed_during_training_is_restored_with_the_backup) {
  run_options o;
  o.halve_rate_after_first_epoch = true;
  const run_result reference = run(o);
  ASSERT_FALSE(reference.failed) << reference.error;
  struct save_point {
    save_frequency freq;
    std::uint64_t die_at, resumed_at;
  };
  // Every 4 steps: dies mid-epoch 2, the backup of step 20 came after the halving. Every epoch: dies in epoch 2,
  // and the backup is the one written at the very epoch end that halved the rate.
  for (const save_point p : {save_point{save_frequency::every(4), 23, 20}, save_point{save_frequency::epoch(), 13, 10}}) {
    temp_dir dir;
    o.backup = backup_options{dir.path(), p.freq};
    o.die_at_step = p.die_at;
    ASSERT_TRUE(run(o).failed);
    o.die_at_step.reset();
    const run_result resumed = run(o);
    ASSERT_FALSE(resumed.failed) << resumed.error;
    EXPECT_EQ(resumed.resumed_at, p.resumed_at);
    EXPECT_EQ(resumed.params, reference.params) << "the resumed run trains on with the halved rate, resumed at step "
                                                << p.resumed_at;
  }
}

// A program may set a locale whose decimal point is a comma (setlocale(LC_ALL, "") on a German system). A backup
// written without one resumes under one and the other way round: its numbers (here the halved learning rate and
// the epoch's sums) are written and read in the C locale's form whatever the locale.
TEST(backup_and_restore, a_backup_resumes_under_another_decimal_point) {
  run_options o;
  o.halve_rate_after_first_epoch = true;
  const run_result reference = run(o);
  ASSERT_FALSE(reference.failed) << reference.error;
  for (const bool comma_when_written : {false, true}) {
    temp_dir dir;
    o.backup = backup_options{dir.path(), save_frequency::every(4)};
    o.die_at_step = 23;
    {
      std::optional<test::comma_locale> comma;
      if (comma_when_written) comma.emplace();
      ASSERT_TRUE(run(o).failed);
    }
    o.die_at_step.reset();
    run_result resumed;
    {
      std::optional<test::comma_locale> comma;
      if (!comma_when_written) comma.emplace();
      resumed = run(o);
    }
    ASSERT_FALSE(resumed.failed) << resumed.error;
    EXPECT_EQ(resumed.resumed_at, 20u);
    EXPECT_EQ(resumed.params, reference.params) << "written with a comma locale: " << comma_when_written;
  }
}

TEST(backup_and_restore, a_corrupt_latest_backup_falls_back_to_the_previous_one) {
  const run_result reference = run({});
  temp_dir dir;
  run_options o;
  o.backup = backup_options{dir.path(), save_frequency::every(5)};
  o.die_at_step = 17;
  ASSERT_TRUE(run(o).failed);
  const fs::path latest = dir.path() / "backup-15.safetensors";
  ASSERT_TRUE(fs::exists(latest));
  {
    std::fstream f(latest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x5a');
  }
  o.die_at_step.reset();
  const run_result resumed = run(o);
  ASSERT_FALSE(resumed.failed) << resumed.error;
  EXPECT_EQ(resumed.resumed_at, 10u);
  EXPECT_EQ(resumed.params, reference.params);
}

TEST(backup_and_restore, changing_the_world_size_with_the_same_global_batch_stays_close) {
  const run_result reference = run({});
  temp_dir dir;
  run_options o;
  o.backup = backup_options{dir.path(), save_frequency::every(6)};
  o.die_at_step = 14;
  ASSERT_TRUE(run(o).failed);
  o.die_at_step.reset();
  o.workers = 4;  // 24 / 4 = 6 per worker instead of 12
  const run_result resumed = run(o);
  ASSERT_FALSE(resumed.failed) << resumed.error;
  EXPECT_EQ(resumed.resumed_at, 12u);
  for (std::size_t i = 0; i < reference.params.size(); ++i) {
    EXPECT_NEAR(resumed.params[i], reference.params[i], 1e-5 * std::max(1.0f, std::abs(reference.params[i])));
  }
}

// A model with state of each replica's own, as plain batch norm's moving statistics: a running mean of the
// first feature of the replica's own batches, and a count of them.
struct replica_state_regression : softmax_regression {
  using softmax_regression::softmax_regression;
  std::vector<float> state{0.0f, 0.0f};
  std::span<float> model_state() { return state; }
  template <class OnReady>
  batch_stats train_batch(const data::image_batch& b, OnReady&& on_ready) {
    if (b.size > 0) state[0] = 0.75f * state[0] + 0.25f * b.inputs[0];
    state[1] += 1.0f;
    return softmax_regression::train_batch(b, std::forward<OnReady>(on_ready));
  }
};

// Every rank's model state after 3 epochs of 2 workers (with a backup every 4 steps, dying after `die_at`).
std::vector<std::vector<float>> replica_states(const std::optional<fs::path>& backup_dir,
                                               std::optional<std::uint64_t> die_at_step) {
  std::vector<std::vector<float>> states(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    replica_state_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches data(examples, features, classes, 24, c.size(), c.rank(), 9);
    fit_options fo;
    fo.epochs = 3;
    std::ostringstream silent;
    die_at die{die_at_step.value_or(~std::uint64_t{0})};
    if (backup_dir) {
      backup_options bo{*backup_dir, save_frequency::every(4)};
      bo.log = &silent;
      backup_and_restore backup(bo);
      fit(strategy, model, sgd, data, fo, backup, die);
    } else {
      fit(strategy, model, sgd, data, fo, die);
    }
    states[static_cast<std::size_t>(c.rank())] = model.state;
  });
  return states;
}

TEST(backup_and_restore, every_replica_gets_its_own_model_state_back) {
  const auto reference = replica_states(std::nullopt, std::nullopt);
  ASSERT_NE(reference[0], reference[1]) << "the replicas' states differ (each sees its own batches)";
  temp_dir dir;
  EXPECT_THROW((void)replica_states(dir.path(), 23), std::exception);  // mid-epoch 2; the backup of step 20 stays
  const auto resumed = replica_states(dir.path(), std::nullopt);
  EXPECT_EQ(resumed[0], reference[0]);
  EXPECT_EQ(resumed[1], reference[1]) << "rank 1 resumed with its own state, not the chief's";
}

TEST(backup_and_restore, a_backup_of_another_model_fails_every_worker_clearly) {
  temp_dir dir;
  run_options o;
  o.backup = backup_options{dir.path(), save_frequency::every(3)};
  o.die_at_step = 4;
  ASSERT_TRUE(run(o).failed);
  std::vector<std::string> errors(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features + 1, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches data(examples, features + 1, classes, 24, 2, c.rank(), 9);
    backup_and_restore backup({dir.path()});
    try {
      fit(strategy, model, sgd, data, fit_options{}, backup);
    } catch (const checkpoint_error& e) {
      errors[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("the backup is of another model ('softmax_regression(6x3)', this one is "
                           "'softmax_regression(7x3)')"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("the chief could not restore the backup"), std::string::npos) << errors[1];
  EXPECT_TRUE(fs::exists(dir.path() / "backup-3.safetensors")) << "nothing already saved is lost";
}

// A write hook that throws when the backup of `step` reaches `stage`, on whichever thread writes it.
std::function<void(write_stage, const fs::path&, const fs::path&)> fail_backup_of(std::int64_t step,
                                                                                  write_stage stage) {
  return [name = "backup-" + std::to_string(step) + ".safetensors", stage](write_stage s, const fs::path&,
                                                                           const fs::path& target) {
    if (s == stage && target.filename() == name) throw std::runtime_error("injected write failure");
  };
}

// A write hook that holds the backup of `step` just before its rename, so it is still in flight for a while.
std::function<void(write_stage, const fs::path&, const fs::path&)> slow_backup_of(std::int64_t step) {
  return [name = "backup-" + std::to_string(step) + ".safetensors"](write_stage s, const fs::path&,
                                                                     const fs::path& target) {
    if (s == write_stage::synced && target.filename() == name) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  };
}

TEST(backup_and_restore, a_failed_background_write_is_an_error_at_the_next_save_point) {
  temp_dir dir;
  run_options o;
  backup_options bo{dir.path(), save_frequency::every(5)};
  bo.write.on_stage = fail_backup_of(5, write_stage::written);
  o.backup = bo;
  const run_result r = run(o);
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.error.find("the backup of global step 5 (written in the background to " + dir.path().string() +
                         ") failed: injected write failure"),
            std::string::npos)
      << r.error;
  EXPECT_FALSE(fs::exists(dir.path() / "backup-5.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path() / "backup-10.safetensors")) << "the job stops at the next save point";
}

TEST(backup_and_restore, a_failed_last_background_write_is_an_error_at_the_end_of_fit) {
  temp_dir dir;
  run_options o;  // 3 epochs of 10 steps: backups at global steps 10, 20 and 30
  backup_options bo{dir.path(), save_frequency::every(10)};
  bo.write.on_stage = fail_backup_of(30, write_stage::synced);
  o.backup = bo;
  const run_result r = run(o);
  ASSERT_TRUE(r.failed) << "the last backup failed after the last step: fit must not succeed silently";
  EXPECT_NE(r.error.find("the backup of global step 30"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("injected write failure"), std::string::npos) << r.error;
  EXPECT_TRUE(fs::exists(dir.path() / "backup-20.safetensors")) << "the previous backup is kept, not deleted";
  EXPECT_FALSE(fs::exists(dir.path() / "backup-30.safetensors"));
}

TEST(backup_and_restore, the_synchronous_mode_fails_at_the_save_itself) {
  temp_dir dir;
  run_options o;
  backup_options bo{dir.path(), save_frequency::every(5)};
  bo.write_in_background = false;
  bo.write.on_stage = fail_backup_of(5, write_stage::written);
  o.backup = bo;
  const run_result r = run(o);
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.error.find("injected write failure"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find("in the background"), std::string::npos) << r.error;
}

TEST(backup_and_restore, background_and_synchronous_backups_are_byte_identical_and_a_failed_fit_waits_for_its_write) {
  temp_dir background_dir;
  temp_dir synchronous_dir;
  run_options o;
  o.die_at_step = 20;  // right after the save point of step 20: its write is still in flight when fit fails
  backup_options background{background_dir.path(), save_frequency::every(4)};
  background.write.on_stage = slow_backup_of(20);
  o.backup = background;
  ASSERT_TRUE(run(o).failed);
  // The callback is gone, and with it the writer: the step-20 backup it had in flight is complete on disk.
  const training_state restored = load_training_state(background_dir.path() / "backup-20.safetensors");
  EXPECT_EQ(restored.step, 20);

  backup_options synchronous{synchronous_dir.path(), save_frequency::every(4)};
  synchronous.write_in_background = false;
  o.backup = synchronous;
  ASSERT_TRUE(run(o).failed);
  for (const char* name : {"backup-16.safetensors", "backup-20.safetensors", "backup.index.json"}) {
    const auto read = [](const fs::path& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string bytes = read(background_dir.path() / name);
    EXPECT_FALSE(bytes.empty()) << name;
    EXPECT_EQ(bytes, read(synchronous_dir.path() / name)) << name;
  }
  EXPECT_FALSE(fs::exists(background_dir.path() / "backup-12.safetensors")) << "pruned in the background too";
}

// On the chief at `step`: whether `file` exists before and after `wait_for_backup`.
struct check_durable_at {
  std::uint64_t step;
  backup_and_restore* backup;
  fs::path file;
  std::vector<std::string>* seen;
  template <class Ctx> void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.global_step() != step || !ctx.strategy.is_chief()) return;
    seen->push_back(fs::exists(file) ? "before: there" : "before: not yet");
    backup->wait_for_backup();
    seen->push_back(fs::exists(file) ? "after: there" : "after: missing");
  }
};

TEST(backup_and_restore, wait_for_backup_returns_once_the_backup_is_durable) {
  temp_dir dir;
  std::vector<std::string> seen;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches data(examples, features, classes, 24, 2, c.rank(), 9);
    std::ostringstream silent;
    backup_options bo{dir.path(), save_frequency::every(5)};
    bo.log = &silent;
    bo.write.on_stage = slow_backup_of(5);
    backup_and_restore backup(bo);
    check_durable_at check{5, &backup, dir.path() / "backup-5.safetensors", &seen};
    fit_options fo;
    fo.epochs = 1;
    fit(strategy, model, sgd, data, fo, backup, check);
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"before: not yet", "after: there"}));
}

TEST(backup_and_restore, save_freq_parses_like_keras) {
  EXPECT_TRUE(save_frequency::parse("epoch").per_epoch());
  EXPECT_EQ(save_frequency::parse("30").steps, 30u);
  for (const char* bad : {"", "0", "-3", "12x", "epochs"}) {
    EXPECT_THROW((void)save_frequency::parse(bad), config_error) << bad;
  }
}

TEST(model_checkpoint, formats_paths_like_keras) {
  epoch_logs logs;
  logs.loss = 0.123456;
  logs.val_loss = 1.5;
  EXPECT_EQ(model_checkpoint::format("w.{epoch:02d}-{val_loss:.2f}.st", 3, logs), "w.03-1.50.st");
  EXPECT_EQ(model_checkpoint::format("{epoch}/{loss:.3f}", 12, logs), "12/0.123");
  EXPECT_THROW((void)model_checkpoint::format("{epoch", 1, logs), config_error);
  EXPECT_THROW((void)model_checkpoint::format("{speed}", 1, logs), config_error);
  EXPECT_THROW(model_checkpoint({"x-{epoch:.2f}"}), config_error);
  // A large value is written whole (it was cut at 63 characters), and a precision past 100 digits is refused.
  logs.loss = 1e70;
  const std::string whole = model_checkpoint::format("{loss:.2f}", 1, logs);
  EXPECT_EQ(whole.size(), 71u + 3) << whole;  // 1e70's 71 digits, the point and two decimals
  EXPECT_TRUE(whole.starts_with("1000000000") && whole.ends_with(".00")) << whole;
  EXPECT_EQ(model_checkpoint::format("{loss:.100f}", 1, logs).size(), 71u + 1 + 100);
  EXPECT_THROW((void)model_checkpoint::format("{loss:.101f}", 1, logs), config_error);
  EXPECT_THROW((void)model_checkpoint::format("{loss:.99999999999f}", 1, logs), config_error);
}

TEST(model_checkpoint, chief_saves_each_epoch_or_only_the_best) {
  temp_dir dir;
  std::vector<std::vector<fs::path>> saved(2), best(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches train(examples, features, classes, 24, 2, c.rank(), 9), val(120, features, classes, 24, 2, c.rank(), 10);
    model_checkpoint every({(dir.path() / "all/w.{epoch:02d}.safetensors").string()});
    model_checkpoint_options bo;
    bo.filepath = (dir.path() / "best.safetensors").string();
    bo.save_best_only = true;
    bo.monitor = "val_accuracy";
    bo.save_weights_only = true;
    model_checkpoint only_best(bo);
    fit_options fo;
    fo.epochs = 3;
    fit(strategy, model, sgd, train, val, fo, every, only_best);
    saved[static_cast<std::size_t>(c.rank())] = every.saved();
    best[static_cast<std::size_t>(c.rank())] = only_best.saved();
  });
  EXPECT_EQ(saved[0].size(), 3u);
  EXPECT_TRUE(saved[1].empty()) << "only the chief writes";
  EXPECT_TRUE(fs::exists(dir.path() / "all/w.01.safetensors"));
  EXPECT_TRUE(fs::exists(dir.path() / "all/w.03.safetensors"));
  EXPECT_GE(best[0].size(), 1u);
  EXPECT_LE(best[0].size(), 3u);
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(saved_model, same_weights_give_byte_identical_files_and_load_back) {
  temp_dir dir;
  softmax_regression a(features, classes, 5), b(features, classes, 6);
  momentum_sgd sa(a.parameters().size()), sb(b.parameters().size());
  sa.velocity[3] = 0.5f;
  sa.steps = 42;
  save_model(dir.path() / "a.safetensors", a, sa);
  save_model(dir.path() / "a2.safetensors", a, sa);
  EXPECT_EQ(read_all(dir.path() / "a.safetensors"), read_all(dir.path() / "a2.safetensors"));
  load_model(dir.path() / "a.safetensors", b, sb);
  EXPECT_TRUE(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  EXPECT_EQ(sb.velocity, sa.velocity);
  EXPECT_EQ(sb.steps, 42);
  softmax_regression other(features + 2, classes, 5);
  EXPECT_THROW(load_weights(dir.path() / "a.safetensors", other), checkpoint_error);
}

TEST(saved_model, a_saved_multi_worker_model_continues_training_on_one_worker) {
  temp_dir dir;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches data(examples, features, classes, 24, 2, c.rank(), 9);
    fit(strategy, model, sgd, data, fit_options{});
    EXPECT_EQ(save_model(strategy, dir.path() / "model.safetensors", model, sgd), c.rank() == 0);
  });
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 99);
    momentum_sgd sgd(model.parameters().size());
    load_model(dir.path() / "model.safetensors", model, sgd);
    EXPECT_EQ(sgd.steps, 10);
    blob_batches data(examples, features, classes, 24, 1, 0, 9);
    const evaluation before = evaluate(strategy, model, data);
    fit_options fo;
    fo.epochs = 2;
    fit(strategy, model, sgd, data, fo);
    const evaluation after = evaluate(strategy, model, data);
    EXPECT_GT(before.accuracy, 0.5) << "the loaded weights are the trained ones";
    EXPECT_LE(after.loss, before.loss);
  });
}

// A user's checkpointer: training states kept in memory (a store shared by the "restarts" of one test), under
// paths of its own ("mem://<step>"), the newest two kept. Structural: no tag, only the four members.
struct memory_store {
  std::mutex m;
  std::map<std::int64_t, std::vector<std::byte>> states;
  int removals = 0;
};
struct memory_checkpointer {
  std::shared_ptr<memory_store> store;
  fs::path save(const training_state_view& state, std::int64_t step) {
    std::vector<std::byte> bytes = encode_training_state(state);
    const std::lock_guard lock(store->m);
    store->states[step] = std::move(bytes);
    while (store->states.size() > 2) store->states.erase(store->states.begin());
    return "mem://" + std::to_string(step);
  }
  std::optional<fs::path> latest() const {
    const std::lock_guard lock(store->m);
    if (store->states.empty()) return std::nullopt;
    return fs::path("mem://" + std::to_string(store->states.rbegin()->first));
  }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const {
    const std::lock_guard lock(store->m);
    if (store->states.empty()) return std::nullopt;
    const auto& [step, bytes] = *store->states.rbegin();
    const fs::path where = "mem://" + std::to_string(step);
    return restored_checkpoint{where, step, decode_training_state(bytes, where)};
  }
  void remove_all() {
    const std::lock_guard lock(store->m);
    store->states.clear();
    ++store->removals;
  }
};
static_assert(checkpointer<memory_checkpointer>);

run_result run_in_memory(const std::shared_ptr<memory_store>& store, std::optional<std::uint64_t> die_at_step,
                         std::uint32_t init_seed, std::string* resumed_from = nullptr) {
  run_result out;
  std::mutex m;
  try {
    spawn_ranks(2, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      softmax_regression model(features, classes, init_seed);
      momentum_sgd sgd(model.parameters().size());
      blob_batches data(examples, features, classes, 24, c.size(), c.rank(), 9);
      fit_options fo;
      fo.epochs = 3;
      std::ostringstream silent;
      backup_options bo{"", save_frequency::every(4)};
      bo.log = &silent;
      basic_backup_and_restore backup(memory_checkpointer{store}, bo);
      die_at die{die_at_step.value_or(~std::uint64_t{0})};
      fit(strategy, model, sgd, data, fo, backup, die);
      if (c.rank() == 0) {
        const std::lock_guard lock(m);
        out.params.assign(model.parameters().begin(), model.parameters().end());
        out.velocity = sgd.velocity;
        out.resumed_at = backup.resumed_at();
        if (resumed_from) *resumed_from = backup.resumed_from();
      }
    });
  } catch (const std::exception& e) {
    out.failed = true;
    out.error = e.what();
  }
  return out;
}

TEST(backup_and_restore, a_user_checkpointer_resumes_exactly) {
  const run_result reference = run({});
  ASSERT_FALSE(reference.failed) << reference.error;
  const auto store = std::make_shared<memory_store>();
  const run_result crashed = run_in_memory(store, 23, 1);
  ASSERT_TRUE(crashed.failed);
  ASSERT_EQ(store->states.size(), 2u);
  EXPECT_EQ(store->states.rbegin()->first, 20);
  std::string from;
  const run_result resumed = run_in_memory(store, std::nullopt, 77, &from);
  ASSERT_FALSE(resumed.failed) << resumed.error;
  EXPECT_EQ(resumed.resumed_at, 20u);
  EXPECT_EQ(from, "mem://20");
  EXPECT_EQ(resumed.params, reference.params);
  EXPECT_EQ(resumed.velocity, reference.velocity);
  EXPECT_TRUE(store->states.empty()) << "removed after a successful fit";
  EXPECT_EQ(store->removals, 1);
}

TEST(model_checkpoint, a_user_checkpointer_receives_each_save) {
  const auto store = std::make_shared<memory_store>();
  std::vector<float> final_params;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches data(examples, features, classes, 24, 2, c.rank(), 9);
    basic_model_checkpoint<memory_checkpointer> checkpoint(memory_checkpointer{store}, {});
    fit_options fo;
    fo.epochs = 2;
    fit(strategy, model, sgd, data, fo, checkpoint);
    if (c.rank() == 0) {
      EXPECT_EQ(checkpoint.saved(), (std::vector<fs::path>{"mem://10", "mem://20"}));
      final_params.assign(model.parameters().begin(), model.parameters().end());
    } else {
      EXPECT_TRUE(checkpoint.saved().empty());
    }
  });
  const training_state last = decode_training_state(store->states.at(20));
  ASSERT_EQ(last.weights.size(), 1u);
  EXPECT_EQ(last.weights[0].values, final_params);
  EXPECT_EQ(last.epoch, 1);
  EXPECT_EQ(last.optimizer_iterations, 20);
}

}  // namespace checkpoint_callbacks_test
