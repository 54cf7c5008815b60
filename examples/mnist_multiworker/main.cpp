// The multi-worker Keras tutorial (tf.distribute.MultiWorkerMirroredStrategy), in C++.
//
// Every worker runs this same program with its own TF_CONFIG (mwstrat-launch sets it):
//   mwstrat-launch -n 2 -- mnist_multiworker --data-dir .cache/mnist
// Each trains the tutorial's CNN on its share of every global batch (per-worker batch × workers); the chief logs,
// saves the final model to --model-dir and evaluates it on the 10 000 test images.
//
// Under an MPI launcher (no TF_CONFIG; `mpirun -np 2 mnist_multiworker ...`) the workers find each other through
// mpi_resolver and train with the ring. Built where MPI is found (and not under a sanitizer), it also takes
// `--collective mpi`: the gradients then go through MPI itself (mpi_collective).
#include <mwstrat/mwstrat.hpp>

#include "common/flags.hpp"
#include "common/step_times.hpp"

#include <unistd.h>
#ifdef MWSTRAT_EXAMPLE_WITH_MPI
#include <mwstrat/collective/mpi/mpi_collective.hpp>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

namespace {

struct flags {
  std::string data_dir = ".cache/mnist";
  int epochs = 3;
  std::size_t steps_per_epoch = 70;
  std::size_t batch_size = 64;  // per worker
  std::size_t global_batch = 0;  // 0: batch_size × workers, as in the tutorial; else fixed whatever the worker count
  std::string optimizer = "sgd";
  std::optional<double> learning_rate;  // default: SGD 0.001 (the tutorial's), Adam 0.001
  std::uint64_t seed = 42;
  int threads = 1;
  std::string model_dir;
  std::string backup_dir;
  std::string tensorboard_dir;  // --tensorboard DIR: TensorBoard event files (chief only); empty: none
  std::string save_freq = "epoch";
  double connect_timeout_s = 60;
  double op_timeout_s = 60;
  bool evaluate_test = true;
  // Fault injection (tests, demos of BackupAndRestore): each rank of kill_ranks (--kill-rank, repeatable: workers
  // lost at once; rank 1 when none is given) SIGKILLs itself after global step kill_at_step, on the first launch attempt only (MWSTRAT_LAUNCH_ATTEMPT unset or 0). Every worker must be
  // given the same flags: they all meet at that step (see fault_injector).
  std::optional<std::uint64_t> kill_at_step;
  std::vector<int> kill_ranks;
  bool stop_instead = false;  // --fault-signal stop: the rank SIGSTOPs itself instead (a hung machine)
  // In-memory recovery (fit_options::recovery): a lost worker is replaced and the survivors go on. Also on when the
  // launcher says so (mwstrat-launch --replace-lost sets MWSTRAT_REPLACE_LOST=1).
  bool in_memory_recovery = false;
  std::optional<double> recovery_timeout_s;  // unset: the launcher's MWSTRAT_RECOVERY_TIMEOUT_MS, else 60 s
  // Elastic training (in_memory_recovery_options::min_workers): a lost worker's survivors go on without it, down to
  // this many workers, with the same global batch. Also the launcher's MWSTRAT_MIN_WORKERS (--min-workers).
  int min_workers = 0;
  // Growing: the job takes joiners in up to this many workers (a worker started later, e.g. by mwstrat-launch
  // --max-workers in a lost worker's place). Also the launcher's MWSTRAT_MAX_WORKERS.
  int max_workers = 0;
  // For tests: joiners are taken in only after this global step, where every worker waits for one (at most the
  // recovery timeout), so the join lands on the same step in every run.
  std::optional<std::uint64_t> await_joiner_at_step;
  std::string step_log;  // --step-log PREFIX: each worker writes PREFIX.wN (see step_log)
  bool step_times = false;  // --step-times PREFIX: the same files, each step's wall-clock time instead (benchmarks)
  std::string collective = "ring";  // ring (TF_CONFIG or an MPI launcher's variables) or mpi
  std::size_t train_examples = 0;  // 0: the whole training set; N: its first N examples (short runs, tests)
  std::size_t test_examples = 0;   // 0: the whole test set
  // The chief alone asks to stop after this global step: a stop decided on one worker reaches every worker.
  std::optional<std::uint64_t> stop_at_step;
  // For tests: every worker pauses 2 s after this global step, so a signal a test sends lands mid-training
  // whatever the build's speed (the result is unchanged).
  std::optional<std::uint64_t> pause_at_step;
  // EarlyStopping on the training loss with this patience (epochs), restoring the best epoch's weights.
  std::optional<int> early_stopping_patience;
};

// Sets stop_training on the chief only, after a chosen global step; fit makes every worker stop there too.
struct chief_stops_at {
  std::optional<std::uint64_t> at;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs&) {
    if (at && ctx.strategy.is_chief() && ctx.global_step() == *at) ctx.stop_training = true;
  }
};

// Holds the job after a chosen global step until a joiner is pending (train_context::await_joiners), on every
// worker at the same step.
struct await_joiner_at {
  static constexpr bool stops_one_worker = false;
  std::optional<std::uint64_t> at;
  std::chrono::milliseconds wait;
  bool fired = false;  // once: a boundary run again after a later loss does not wait again
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs&) {
    if (!at || fired || ctx.global_step() != *at) return;
    fired = true;
    ctx.await_joiners = wait;
  }
};

// Pauses every worker for 2 s after a chosen global step (tests send a signal then); the chief says so first.
struct pause_at {
  static constexpr bool stops_one_worker = false;  // never stops: fit need not agree on a stop because of it
  std::optional<std::uint64_t> at;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs&) {
    if (!at || ctx.global_step() != *at) return;
    if (ctx.strategy.is_chief()) std::cout << "pausing at step " << *at << std::endl;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
};

// A user's metric (train/fit_metrics.hpp): the fraction of examples classified wrong. Its state is two sums, which
// fit adds up over the workers in the step's own reduction; `result` is its rule.
struct error_rate {
  static constexpr std::size_t state_size = 2;
  std::string_view name() const { return "error_rate"; }
  void update_state(std::span<double> s, const mwstrat::metric_input<mwstrat::data::image_batch>& in) const {
    s[0] += in.count - in.correct;
    s[1] += in.count;
  }
  double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};

// The first `n` examples of `set` (all of them when n is 0 or larger than the set).
mwstrat::data::labeled_images first_examples(const mwstrat::data::labeled_images& set, std::size_t n) {
  if (n == 0 || n >= set.count()) return set;
  const auto pixels = set.pixels().first(n * set.example_size());
  const auto labels = set.labels().first(n);
  return {std::vector<std::uint8_t>(pixels.begin(), pixels.end()), std::vector<std::int64_t>(labels.begin(), labels.end()),
          set.rows(), set.cols()};
}

// Kills this process (SIGKILL: no cleanup, no goodbye to its peers) at a chosen step, like a lost machine.
//
// The chief writes backups in the background, so a kill right after a save point could land before that backup
// is on disk, and the job would then resume from the one before: still exact, but the resume point would depend
// on the timing. To make the resume point deterministic (tests assert it), the kill stands for a machine lost
// *after* the last backup started is durable: at the kill step the chief waits for it, and every worker waits
// for the chief (a one-value broadcast) before the chosen rank kills itself.
//
// With in-memory recovery the survivors run the fault's step again with the replacement: the fault fires once per
// process (and never in a replacement, which the launcher marks).
struct fault_injector {
  std::optional<std::uint64_t> at_step;
  std::vector<int> ranks;
  mwstrat::backup_and_restore* backup = nullptr;
  bool stop_instead = false;
  bool fired = false;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs&) {
    if (!at_step || fired || ctx.relaunched || ctx.global_step() != *at_step) return;
    fired = true;
    if (backup) {
      backup->wait_for_backup();  // on the chief; other workers have nothing in flight
      std::array<double, 1> durable{};
      ctx.strategy.mirror(std::span<double>(durable));
    }
    const int rank = ctx.strategy.replica_id();
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      std::fprintf(stderr, "fault injection: rank %d %s itself after global step %llu\n", rank,
                   stop_instead ? "stops" : "kills", static_cast<unsigned long long>(*at_step));
      std::fflush(stderr);
      ::raise(stop_instead ? SIGSTOP : SIGKILL);
    }
  }
};

// For tests (--step-log PREFIX): each worker appends one line per step it trained to PREFIX.wN (N: its TF_CONFIG
// index) — the global step, the step's mean loss over all workers and the set indices of this worker's examples —
// so a test can check that an elastic job trained every step on the same examples as a fixed one.
// With --step-times instead, the step's wall-clock time (common/step_times.hpp).
struct step_log {
  static constexpr bool stops_one_worker = false;
  std::FILE* out = nullptr;
  mwstrat::distributed_input* data = nullptr;
  std::vector<std::size_t> indices;  // room for a whole global batch: any worker's share fits
  bool times_only = false;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs& logs) {
    if (out == nullptr) return;
    const std::uint64_t done = ctx.global_step() - 1;  // the step just trained
    if (times_only) {
      examples::write_step_time(out, ctx);
      return;
    }
    const auto at = mwstrat::data::stream_position(done, ctx.steps_per_pass);
    const std::size_t n = data->indices_at(at.epoch, at.step, indices);
    std::fprintf(out, "step %llu loss %.9g workers %d examples", static_cast<unsigned long long>(done), logs.batch_loss,
                 ctx.strategy.num_replicas_in_sync());
    for (std::size_t i = 0; i < n; ++i) std::fprintf(out, " %zu", indices[i]);
    std::fprintf(out, "\n");
    std::fflush(out);
  }
};

const char* const usage =
    "usage: mnist_multiworker [--data-dir D] [--epochs N] [--steps-per-epoch N (0: a full epoch)]\n"
    "  [--batch-size B (per worker)] [--global-batch G (default B x workers)] [--optimizer sgd|adam]\n"
    "  [--learning-rate X] [--seed S] [--threads T]\n"
    "  [--model-dir DIR] [--backup-dir DIR] [--save-freq epoch|N] [--connect-timeout S] [--op-timeout S]\n"
    "  [--no-test] [--kill-at-step N [--kill-rank R]... [--fault-signal kill|stop]] [--tensorboard DIR]\n"
    "  [--collective ring|mpi] [--in-memory-recovery [--recovery-timeout S]]\n"
    "  [--min-workers K [--max-workers M [--await-joiner-at-step N (tests)]]]\n"
    "  [--train-examples N] [--test-examples N]\n"
    "  [--stop-at-step N] [--early-stopping PATIENCE] [--pause-at-step N (tests: 2 s there)]\n"
    "  [--step-log PREFIX (tests: each worker's steps, losses and examples)]\n"
    "  [--step-times PREFIX (benchmarks: each worker's steps and their wall-clock times)] [--help]\n"
    "A bad flag or value is refused before anything connects (status 2). Exit status: 0 trained, 1 an error,\n"
    "69 another worker was lost (mwstrat::peer_lost_exit_code), 75 preempted (mwstrat::preempted_exit_code),\n"
    "78 removed from an elastic job while stopped or cut off (mwstrat::removed_exit_code).\n"
    "SIGTERM or SIGINT stops every worker at the next step boundary (the chief backs up when --backup-dir is\n"
    "given); each then exits with status 75: restart the job to resume.\n"
    "--in-memory-recovery (or MWSTRAT_REPLACE_LOST=1, set by mwstrat-launch --replace-lost): a lost worker's\n"
    "survivors wait (--recovery-timeout, else MWSTRAT_RECOVERY_TIMEOUT_MS, else 60 s) for its replacement\n"
    "and hand it the training state from memory; without one in time they exit with status 69.\n"
    "--min-workers K (or mwstrat-launch --min-workers K): elastic — a lost worker's survivors go on without it\n"
    "at once, down to K workers, with the same global batch (each worker's share computed in micro-batches of\n"
    "at most --batch-size).\n"
    "--max-workers M (or mwstrat-launch --max-workers M): an elastic job also takes in workers started later\n"
    "(up to M), at a step boundary, with the state from a member's memory and the same global batch.\n";

// Timeouts in seconds: above 0, at most this (about 11 days).
constexpr double max_timeout_s = 1e6;

flags parse(int argc, char** argv) {
  flags f;
  example_flags::reader args(argc, argv, "mnist_multiworker", usage);
  while (args.next()) {
    if (args.is("--data-dir")) f.data_dir = args.value();
    else if (args.is("--epochs")) f.epochs = args.whole(0);  // 0: no training, the untrained model is evaluated
    else if (args.is("--steps-per-epoch")) f.steps_per_epoch = args.whole<std::size_t>(0);
    else if (args.is("--batch-size")) f.batch_size = args.whole<std::size_t>(1);
    else if (args.is("--global-batch")) f.global_batch = args.whole<std::size_t>(1);
    else if (args.is("--optimizer")) f.optimizer = args.value();
    else if (args.is("--learning-rate")) f.learning_rate = args.positive();
    else if (args.is("--seed")) f.seed = args.whole<std::uint64_t>(0);
    else if (args.is("--threads")) f.threads = args.whole(1);
    else if (args.is("--model-dir")) f.model_dir = args.value();
    else if (args.is("--tensorboard")) f.tensorboard_dir = args.value();
    else if (args.is("--backup-dir")) f.backup_dir = args.value();
    else if (args.is("--save-freq")) f.save_freq = args.epoch_or_steps();
    else if (args.is("--connect-timeout")) f.connect_timeout_s = args.positive(max_timeout_s);
    else if (args.is("--op-timeout")) f.op_timeout_s = args.positive(max_timeout_s);
    else if (args.is("--no-test")) f.evaluate_test = false;
    else if (args.is("--kill-at-step")) f.kill_at_step = args.whole<std::uint64_t>(0);
    else if (args.is("--kill-rank")) f.kill_ranks.push_back(args.whole(0));
    else if (args.is("--fault-signal")) {
      const std::string v = args.value();
      if (v != "kill" && v != "stop") args.fail("--fault-signal: '" + v + "' is not kill or stop");
      f.stop_instead = v == "stop";
    }
    else if (args.is("--in-memory-recovery")) f.in_memory_recovery = true;
    else if (args.is("--recovery-timeout")) f.recovery_timeout_s = args.positive(max_timeout_s);
    else if (args.is("--min-workers")) f.min_workers = args.whole(1);
    else if (args.is("--max-workers")) f.max_workers = args.whole(1);
    else if (args.is("--await-joiner-at-step")) f.await_joiner_at_step = args.whole<std::uint64_t>(1);
    else if (args.is("--step-log")) f.step_log = args.value();
    else if (args.is("--step-times")) {
      f.step_log = args.value();
      f.step_times = true;
    }
    else if (args.is("--collective")) f.collective = args.value();
    else if (args.is("--train-examples")) f.train_examples = args.whole<std::size_t>(0);
    else if (args.is("--test-examples")) f.test_examples = args.whole<std::size_t>(0);
    else if (args.is("--stop-at-step")) f.stop_at_step = args.whole<std::uint64_t>(0);
    else if (args.is("--pause-at-step")) f.pause_at_step = args.whole<std::uint64_t>(0);
    else if (args.is("--early-stopping")) f.early_stopping_patience = args.whole(0);
    else args.unknown();
  }
  if (f.optimizer != "sgd" && f.optimizer != "adam") args.fail("--optimizer: '" + f.optimizer + "' is not sgd or adam");
  if (f.collective != "ring" && f.collective != "mpi")
    args.fail("--collective: '" + f.collective + "' is not ring or mpi");
#ifndef MWSTRAT_EXAMPLE_WITH_MPI
  if (f.collective == "mpi")
    args.fail("--collective mpi: this build has no MPI (it is built with it where MPI is found, outside a sanitizer)");
#endif
  return f;
}

// A checked time in seconds (parse bounds it) as whole milliseconds, rounded up so that it stays above 0.
std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(s * 1000)));
}

template <class Strategy, class Optimizer>
int train(const flags& f, Strategy& strategy, Optimizer& optimizer) {
  const bool chief = strategy.is_chief();
  // Global batch = per-worker batch × workers, as in the tutorial; or fixed (--global-batch), so that a job resumed on
  // another number of workers trains the same steps (shares larger than --batch-size go in micro-batches).
  const std::size_t global_batch =
      f.global_batch != 0 ? f.global_batch : f.batch_size * static_cast<std::size_t>(strategy.num_replicas_in_sync());
  mwstrat::distributed_input train_data(
      first_examples(mwstrat::data::load_mnist(f.data_dir, mwstrat::data::mnist_split::train), f.train_examples),
      global_batch, strategy, f.seed);

  mwstrat::nn::model_options mo;
  mo.threads = f.threads;
  mo.seed = f.seed;
  mo.max_batch = f.batch_size;
  auto model = mwstrat::nn::reference_cnn(mo);
  if (chief) model.summary(std::cout);

  mwstrat::fit_options options;
  options.epochs = f.epochs;
  options.steps_per_epoch = f.steps_per_epoch;
  // In-memory recovery: on with --in-memory-recovery; under mwstrat-launch --replace-lost fit turns it on itself and
  // reports lost ranks to the launcher. A timeout the program sets wins over the launcher's (fit's one rule).
  options.recovery.enabled = f.in_memory_recovery;
  if (f.recovery_timeout_s) options.recovery.timeout = seconds(*f.recovery_timeout_s);
  options.recovery.min_workers = f.min_workers;
  options.recovery.max_workers = f.max_workers;
  if (f.await_joiner_at_step) options.recovery.admission = mwstrat::in_memory_recovery_options::join_admission::when_awaited;
  // A shrunk job's larger shares are computed in micro-batches no larger than the model was sized for.
  options.max_micro_batch = f.batch_size;
  mwstrat::progress_logger progress;
  mwstrat::terminate_on_nan nan_guard;
  mwstrat::tensorboard board({.log_dir = f.tensorboard_dir, .update_freq = 10});
  std::optional<mwstrat::backup_and_restore> backup;
  if (!f.backup_dir.empty()) {
    backup.emplace(mwstrat::backup_options{f.backup_dir, mwstrat::save_frequency::parse(f.save_freq, "--save-freq")});
  }
  fault_injector fault{f.kill_at_step, f.kill_ranks.empty() ? std::vector<int>{1} : f.kill_ranks, backup ? &*backup : nullptr, f.stop_instead};
  chief_stops_at stop{f.stop_at_step};
  pause_at pause{f.pause_at_step};
  await_joiner_at joins{f.await_joiner_at_step,
                        f.recovery_timeout_s ? seconds(*f.recovery_timeout_s) : std::chrono::milliseconds(60000)};
  step_log steps;
  examples::step_file step_file(nullptr, &std::fclose);
  if (!f.step_log.empty()) {
    step_file = examples::open_step_file(f.step_log, strategy.task_id(), "mnist_multiworker",
                                         f.step_times ? "--step-times" : "--step-log");
    steps = {step_file.get(), &train_data, std::vector<std::size_t>(global_batch), f.step_times};
  }
  // Keras's EarlyStopping(monitor="loss", patience=P, restore_best_weights=True); every worker runs it on the same
  // reduced logs. Without the flag its patience is endless (it never stops).
  mwstrat::early_stopping_options eo;
  eo.monitor = "loss";
  eo.patience = f.early_stopping_patience.value_or(std::numeric_limits<int>::max());
  eo.restore_best_weights = f.early_stopping_patience.has_value();
  eo.log = chief ? &std::cout : nullptr;
  mwstrat::early_stopping early(eo);
  mwstrat::metrics user_metrics(error_rate{});  // shown by name in the progress line: "- error_rate: 0.1234"
  try {
    if (backup) {
      mwstrat::fit(strategy, model, optimizer, train_data, options, user_metrics, progress, nan_guard, *backup, steps,
                   fault, stop, early, board, pause, joins);
    } else {
      mwstrat::fit(strategy, model, optimizer, train_data, options, user_metrics, progress, nan_guard, steps, fault,
                   stop, early, board, pause, joins);
    }
  } catch (const mwstrat::preempted& p) {
    // Every worker stopped after the same step (and the chief's backup is on disk): ask to be restarted.
    std::cerr << p.what() << "\n";
    return mwstrat::preempted_exit_code;
  }

  if (!f.model_dir.empty()) {
    const auto path = std::filesystem::path(f.model_dir) / "model.safetensors";
    if (mwstrat::save_model(strategy, path, model, optimizer)) std::cout << "saved " << path.string() << "\n";
  }
  if (f.evaluate_test) {
    // Every worker evaluates its share of the test set; the result is reduced over all of them.
    auto test = mwstrat::distributed_input::for_evaluation(
        first_examples(mwstrat::data::load_mnist(f.data_dir, mwstrat::data::mnist_split::test), f.test_examples),
        global_batch, strategy);
    const mwstrat::evaluation e = mwstrat::evaluate(strategy, model, test);
    // The chief now: an elastic job that lost its first chief has another.
    if (strategy.is_chief()) std::printf("test: loss=%.6f accuracy=%.6f examples=%.0f\n", e.loss, e.accuracy, e.count);
  }
  return 0;
}

}  // namespace

template <class Strategy>
int train_with_optimizer(const flags& f, Strategy& strategy) {
  if (f.optimizer == "adam") {
    mwstrat::nn::adam optimizer(f.learning_rate.value_or(0.001));
    return train(f, strategy, optimizer);
  }
  mwstrat::nn::sgd optimizer(f.learning_rate.value_or(0.001));
  return train(f, strategy, optimizer);
}

// The ring's workers: from TF_CONFIG, or from an MPI launcher's variables when there is no TF_CONFIG (the library
// chooses).
mwstrat::multi_worker_mirrored_strategy make_ring_strategy(const flags& f) {
  mwstrat::communication_options comm;  // what the code leaves unset, the strategy reads from the environment
  comm.connect_timeout = seconds(f.connect_timeout_s);
  comm.op_timeout = seconds(f.op_timeout_s);
  return mwstrat::make_multi_worker_mirrored_strategy(comm);  // waits for every worker
}

#ifdef MWSTRAT_EXAMPLE_WITH_MPI
// The gradients through MPI (mpirun started the processes; MPI is initialised here and finalised at the end).
int train_over_mpi(const flags& f, int& argc, char**& argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int code = 1;
  {
    mwstrat::mpi_options mo;
    mo.op_timeout = seconds(f.op_timeout_s);
    using mpi_strategy = mwstrat::mirrored_strategy<std::unique_ptr<mwstrat::mpi_collective>>;
    mpi_strategy strategy(std::make_unique<mwstrat::mpi_collective>(MPI_COMM_WORLD, mo));
    code = train_with_optimizer(f, strategy);
  }
  MPI_Finalize();
  return code;
}
#endif

int main(int argc, char** argv) {
  const flags f = parse(argc, argv);
  try {
#ifdef MWSTRAT_EXAMPLE_WITH_MPI
    if (f.collective == "mpi") return train_over_mpi(f, argc, argv);
#endif
    auto strategy = make_ring_strategy(f);
    return train_with_optimizer(f, strategy);
  } catch (const mwstrat::environment_error& e) {
    // A malformed MWSTRAT_* variable, refused before anything connected: a bad argument, as a bad flag is.
    std::cerr << "mnist_multiworker: " << e.what() << "\n";
    return 2;
  } catch (const mwstrat::removed_error& e) {
    // The others shrank the job without this worker while it was stopped or cut off: it must not go on.
    std::cerr << e.what() << "\n";
    return mwstrat::removed_exit_code;
  } catch (const mwstrat::peer_lost_error& e) {
    // Another worker died, stopped or was cut off (every survivor names the same one): not this worker's fault.
    std::cerr << e.what() << "\n";
    return mwstrat::peer_lost_exit_code;
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // not mwstrat's (out of memory, a thread that could not start): still a message
    std::cerr << "mnist_multiworker: " << e.what() << "\n";
    return 1;
  }
}
