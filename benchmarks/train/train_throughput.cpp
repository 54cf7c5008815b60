// Training throughput of the tutorial CNN under MultiWorkerMirroredStrategy (see benchmarks/RESULTS.md,
// "Training throughput"). Every worker runs this program with its own TF_CONFIG (mwstrat-launch sets it):
//   mwstrat-launch -n 2 -- train_throughput --data-dir .cache/mnist --threads 1
// It trains on real MNIST with SGD(0.001), per-worker batch --batch (64), global batch = 64 × workers, in one `fit`
// of --warmup + --steps steps; a callback reads a steady clock at the end of the last warm-up step and at the end of
// the last step, so the timed part is --steps whole steps (input, forward, backward, all-reduce, update, metrics)
// and nothing of fit's start. ddp_throughput.py and tf_throughput.py time the same span. The chief prints:
//   {"impl":"mwstrat","workers":N,"threads":T,"batch":64,"steps":S,"seconds":...,"steps_per_s":...,
//    "samples_per_s":... (global),"peak_rss_mib":... (max over workers),"peak_rss_mib_per_worker":[...],
//    "cpu_s_per_step":... (CPU seconds of all workers per timed step),"cpu_user_s_per_step":...,
//    "cpu_system_s_per_step":... (its user and kernel parts, getrusage),"context_switches_per_step":... (voluntary
//    and involuntary, all workers),"loss":... (mean training loss),
//    "gradients":"mean"|"local"}
// `--gradients local` is a measurement, not training: the workers step in lockstep (the metrics are still summed
// every step) but each applies its own gradients, so the difference to `mean` is what the gradient all-reduce costs
// and the difference to two independent one-worker runs is what lockstep costs (benchmarks/train/ceiling.py).
// `--update` picks where the update runs (the strategy's gradient_sync_options::update), for A/B runs: `shared` (the
// default: update_placement::automatic, which on one host is one shared parameter copy), `sharded` (the ring's fused
// all-reduce and sharded update) or `mirrored` (replicated: every worker applies the whole SGD update). `--overlap`
// is gradient_sync_options::overlap; `--overlap always` with `--update sharded` is refused (a contradiction).
// `--momentum M` trains with SGD(0.001, momentum M): an optimizer with slots, which never takes the sharded update.
#include <mwstrat/mwstrat.hpp>

#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <span>
#include <optional>
#include <string>
#include <vector>

namespace {

struct flags {
  std::string data_dir = ".cache/mnist";
  std::size_t batch = 64;  // per worker
  std::size_t warmup = 10;
  std::size_t steps = 100;
  int threads = 1;
  std::uint64_t seed = 42;
  std::string backup_dir;     // with --save-freq: BackupAndRestore's cost (issue 8's speed goal)
  std::size_t save_freq = 0;  // steps between backups; 0: no backup
  mwstrat::reduction_overlap overlap = mwstrat::reduction_overlap::automatic;  // --overlap auto|always|never
  bool local_gradients = false;  // --gradients local: no gradient all-reduce (see the header comment)
  mwstrat::update_placement update = mwstrat::update_placement::automatic;  // --update shared|sharded|mirrored
  double momentum = 0.0;  // --momentum: SGD's (0: the tutorial's plain SGD; with slots, `replicated` only)
};

// The strategy with every member forwarded except the gradient mean, which leaves each worker's gradients as they
// are. It offers no synchroniser of its own, so fit takes the replicated path (mean_gradients, then the update).
template <class Strategy>
class local_gradients {
 public:
  explicit local_gradients(Strategy& s) : s_(s) {}
  int num_replicas_in_sync() const { return s_.num_replicas_in_sync(); }
  int replica_id() const { return s_.replica_id(); }
  bool is_chief() const { return s_.is_chief(); }
  void verify_same(std::string_view what, std::string_view text) { s_.verify_same(what, text); }
  template <class T>
  void mirror(std::span<T> values) {
    s_.mirror(values);
  }
  void mean_gradients(std::span<float>) {}
  void sum_metrics(std::span<double> m) { s_.sum_metrics(m); }
  void barrier() { s_.barrier(); }

 private:
  Strategy& s_;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "train_throughput: " << problem << "\n"
            << "usage: train_throughput [--data-dir D] [--batch B (per worker)] [--warmup N] [--steps N] "
               "[--threads T] [--seed S] [--backup-dir DIR --save-freq N] [--overlap auto|always|never] "
               "[--gradients mean|local] [--update shared|sharded|mirrored] [--momentum M]\n";
  std::exit(2);
}

flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    auto count = [&](const std::string& text) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || text[0] == '-') usage(a + ": '" + text + "' is not a whole number");
      return static_cast<std::size_t>(v);
    };
    if (a == "--data-dir") f.data_dir = value();
    else if (a == "--batch") f.batch = count(value());
    else if (a == "--warmup") f.warmup = count(value());
    else if (a == "--steps") f.steps = count(value());
    else if (a == "--threads") f.threads = static_cast<int>(count(value()));
    else if (a == "--seed") f.seed = count(value());
    else if (a == "--backup-dir") f.backup_dir = value();
    else if (a == "--save-freq") f.save_freq = count(value());
    else if (a == "--momentum") {
      const std::string v = value();
      char* end = nullptr;
      f.momentum = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(f.momentum >= 0.0 && f.momentum < 1.0))
        usage("--momentum: '" + v + "' is not a number in [0, 1)");
    }
    else if (a == "--overlap") {
      const std::string v = value();
      if (v == "auto") f.overlap = mwstrat::reduction_overlap::automatic;
      else if (v == "always") f.overlap = mwstrat::reduction_overlap::always;
      else if (v == "never") f.overlap = mwstrat::reduction_overlap::never;
      else usage("--overlap: '" + v + "' is not auto, always or never");
    } else if (a == "--gradients") {
      const std::string v = value();
      if (v == "mean") f.local_gradients = false;
      else if (v == "local") f.local_gradients = true;
      else usage("--gradients: '" + v + "' is not mean or local");
    } else if (a == "--update") {
      const std::string v = value();
      if (v == "shared") f.update = mwstrat::update_placement::automatic;
      else if (v == "sharded") f.update = mwstrat::update_placement::sharded;
      else if (v == "mirrored") f.update = mwstrat::update_placement::replicated;
      else usage("--update: '" + v + "' is not shared, sharded or mirrored");
    }
    else usage("unknown flag '" + a + "'");
  }
  if (f.batch == 0) usage("--batch must be at least 1");
  if (f.steps == 0) usage("--steps must be at least 1");
  if (f.threads < 1) usage("--threads must be at least 1");
  if (f.backup_dir.empty() != (f.save_freq == 0)) usage("--backup-dir and --save-freq go together");
  if (f.local_gradients && f.save_freq != 0) usage("--gradients local does not go with --save-freq");
  if (f.overlap == mwstrat::reduction_overlap::always && f.update == mwstrat::update_placement::sharded)
    usage("--overlap always does not go with --update sharded (the sharded update needs the whole gradient)");
  return f;
}

// Peak resident set size of this process so far, in MiB (VmHWM; getrusage as a fallback).
// Reads the clock at the end of step `warmup - 1` (at the start of training when there is no warm-up) and at the
// end of step `warmup + steps - 1`.
struct step_timer {
  using clock = std::chrono::steady_clock;
  std::size_t warmup;
  std::size_t last;
  clock::time_point start{};
  clock::time_point stop{};
  double cpu_start = 0;
  double cpu_stop = 0;
  rusage usage_start{};  // user and system CPU and context switches, to tell computing from the kernel's work
  rusage usage_stop{};

  // CPU time of the whole process (every thread), to tell a busy machine from a slow program.
  static double cpu_now() {
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }

  template <class Ctx>
  void on_train_begin(Ctx&) {
    if (warmup == 0) mark_start();
  }
  template <class Ctx>
  void on_train_batch_end(Ctx&, std::size_t step, const mwstrat::batch_logs&) {
    if (step + 1 == warmup) mark_start();
    if (step == last) {
      stop = clock::now();
      cpu_stop = cpu_now();
      ::getrusage(RUSAGE_SELF, &usage_stop);
    }
  }
  void mark_start() {
    start = clock::now();
    cpu_start = cpu_now();
    ::getrusage(RUSAGE_SELF, &usage_start);
  }
  static double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); }
  [[nodiscard]] double user_seconds() const { return seconds_of(usage_stop.ru_utime) - seconds_of(usage_start.ru_utime); }
  [[nodiscard]] double system_seconds() const {
    return seconds_of(usage_stop.ru_stime) - seconds_of(usage_start.ru_stime);
  }
  [[nodiscard]] double context_switches() const {
    return static_cast<double>((usage_stop.ru_nvcsw - usage_start.ru_nvcsw) + (usage_stop.ru_nivcsw - usage_start.ru_nivcsw));
  }
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(stop - start).count(); }
};

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  }
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // kB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  const flags f = parse(argc, argv);
  try {
    mwstrat::communication_options communication;
    communication.gradient_sync.overlap = f.overlap;
    communication.gradient_sync.update = f.update;
    auto strategy = mwstrat::make_multi_worker_mirrored_strategy(communication);  // TF_CONFIG; waits for everyone
    const auto workers = static_cast<std::size_t>(strategy.num_replicas_in_sync());
    const std::size_t global_batch = f.batch * workers;
    mwstrat::distributed_input train(mwstrat::data::load_mnist(f.data_dir, mwstrat::data::mnist_split::train),
                                     global_batch, strategy, f.seed);
    if (train.steps_per_epoch() < f.warmup + f.steps) {
      usage("--warmup + --steps must fit in one epoch (" + std::to_string(train.steps_per_epoch()) +
            " global steps)");
    }

    mwstrat::nn::model_options mo;
    mo.threads = f.threads;
    mo.seed = f.seed;
    mo.max_batch = f.batch;
    auto model = mwstrat::nn::reference_cnn(mo);
    mwstrat::nn::sgd optimizer(0.001, f.momentum);

    mwstrat::fit_options options;
    options.epochs = 1;
    options.steps_per_epoch = f.warmup + f.steps;
    step_timer timer{f.warmup, f.warmup + f.steps - 1};
    std::optional<mwstrat::backup_and_restore> backup;
    if (f.save_freq != 0) {
      backup.emplace(mwstrat::backup_options{f.backup_dir, mwstrat::save_frequency::every(f.save_freq)});
    }
    local_gradients<decltype(strategy)> unreduced(strategy);
    const mwstrat::history h = f.local_gradients ? mwstrat::fit(unreduced, model, optimizer, train, options, timer)
                               : backup ? mwstrat::fit(strategy, model, optimizer, train, options, timer, *backup)
                                        : mwstrat::fit(strategy, model, optimizer, train, options, timer);
    const double seconds = timer.seconds();
    const double cpu_seconds = timer.cpu_stop - timer.cpu_start;

    // Every worker's peak RSS and CPU seconds, gathered (a sum over one-hot slots: the ring's double all-reduce).
    std::vector<double> slots(5 * workers, 0.0);
    const auto me = static_cast<std::size_t>(strategy.replica_id());
    slots[me] = peak_rss_mib();
    slots[workers + me] = cpu_seconds;
    slots[2 * workers + me] = timer.user_seconds();
    slots[3 * workers + me] = timer.system_seconds();
    slots[4 * workers + me] = timer.context_switches();
    strategy.sum_metrics(std::span<double>(slots));
    double user_total = 0, system_total = 0, switches_total = 0;
    for (std::size_t i = 0; i < workers; ++i) {
      user_total += slots[2 * workers + i];
      system_total += slots[3 * workers + i];
      switches_total += slots[4 * workers + i];
    }
    const std::vector<double> rss(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(workers));
    double cpu_total = 0;
    for (std::size_t i = workers; i < 2 * workers; ++i) cpu_total += slots[i];
    // The slowest worker's time is the job's.
    double job_seconds = seconds;
    strategy.collective().all_reduce(std::span<double>(&job_seconds, 1), mwstrat::reduce_op::max);

    if (strategy.is_chief()) {
      double peak = 0;
      std::string per_worker;
      for (std::size_t i = 0; i < rss.size(); ++i) {
        peak = std::max(peak, rss[i]);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.1f", i == 0 ? "" : ",", rss[i]);
        per_worker += buf;
      }
      const double steps_per_s = static_cast<double>(f.steps) / job_seconds;
      std::printf("{\"impl\":\"mwstrat\",\"workers\":%zu,\"threads\":%d,\"batch\":%zu,\"steps\":%zu,"
                  "\"seconds\":%.4f,\"steps_per_s\":%.3f,\"samples_per_s\":%.1f,\"peak_rss_mib\":%.1f,"
                  "\"peak_rss_mib_per_worker\":[%s],\"cpu_s_per_step\":%.5f,\"cpu_user_s_per_step\":%.5f,"
                  "\"cpu_system_s_per_step\":%.5f,\"context_switches_per_step\":%.1f,\"loss\":%.5f,\"gradients\":\"%s\",\"kernels\":\"%s\"}\n",
                  workers, f.threads, f.batch, f.steps, job_seconds, steps_per_s,
                  steps_per_s * static_cast<double>(global_batch), peak, per_worker.c_str(),
                  cpu_total / static_cast<double>(f.steps), user_total / static_cast<double>(f.steps),
                  system_total / static_cast<double>(f.steps), switches_total / static_cast<double>(f.steps), h.epochs.empty() ? 0.0 : h.epochs.back().loss,
                  f.local_gradients ? "local" : "mean", mwstrat::nn::kernel_isa_in_use().name.c_str());
      std::fflush(stdout);
    }
    return 0;
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
