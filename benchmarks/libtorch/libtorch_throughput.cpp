// Training throughput of examples/libtorch_mnist's CNN (the very module, tutorial_cnn.hpp) on libtorch 1.13, in two
// loops that run the same kernels (see benchmarks/RESULTS.md, "DDP for libtorch"):
//   --loop mwstrat  mwstrat::fit over mwstrat::libtorch::module_model (MultiWorkerMirroredStrategy from TF_CONFIG,
//                   one process per worker: mwstrat-launch -n N -- libtorch_throughput --loop mwstrat ...)
//   --loop plain    one process, no distribution at all: libtorch's own MNIST reader, torch::optim::SGD and the
//                   textbook zero_grad / forward / backward / step loop, the ceiling of what any wrapper can reach
//                   (glibc's malloc thresholds pinned: see run_plain)
// `--update shared|sharded|mirrored` (mwstrat only) picks the strategy's gradient_sync_options::update for A/B runs:
// `shared` (the default: update_placement::automatic, which on one host is one shared parameter copy in the host's
// region), `sharded` (the ring's fused all-reduce and sharded update) or `mirrored` (replicated).
// Both: real MNIST, per-worker batch --batch (64), SGD(--learning-rate), --threads intra-op threads; --warmup steps,
// then --steps timed steps, the clock read after the last warm-up step and after the last step
// (ddp_throughput.py times the same span). CPU time is the whole process's (every thread: the ring's, gloo's), summed
// over the workers. The chief prints one JSON line:
//   {"impl":"mwstrat"|"plain","workers":N,"threads":T,"batch":B,"steps":S,"seconds":...,"steps_per_s":...,
//    "samples_per_s":... (global),"cpu_s_per_step":... (all workers),"cpu_user_s_per_step":...,
//    "cpu_system_s_per_step":...,"peak_rss_mib":...,"loss":... (the timed steps' mean),"torch":"1.13.1",
//    "update":"shared"|"sharded"|"mirrored"|"none" (plain)}
#include <mwstrat/data.hpp>
#include <mwstrat/libtorch/module_model.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy.hpp>
#include <mwstrat/train.hpp>

#include <torch/torch.h>

#include "libtorch_mnist/tutorial_cnn.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

struct flags {
  std::string loop = "mwstrat";
  std::string data_dir = ".cache/mnist";
  std::size_t batch = 64;  // per worker
  std::size_t warmup = 10;
  std::size_t steps = 100;
  int threads = 1;
  std::uint64_t seed = 42;
  double learning_rate = 0.05;  // the example's
  std::string update = "shared";  // --update shared|sharded|mirrored
  mwstrat::update_placement placement = mwstrat::update_placement::automatic;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "libtorch_throughput: " << problem << "\n"
            << "usage: libtorch_throughput [--loop mwstrat|plain] [--data-dir D] [--batch B (per worker)] "
               "[--warmup N] [--steps N] [--threads T] [--seed S] [--learning-rate X]\n"
               "       [--update shared|sharded|mirrored]\n";
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
    if (a == "--loop") f.loop = value();
    else if (a == "--data-dir") f.data_dir = value();
    else if (a == "--batch") f.batch = count(value());
    else if (a == "--warmup") f.warmup = count(value());
    else if (a == "--steps") f.steps = count(value());
    else if (a == "--threads") f.threads = static_cast<int>(count(value()));
    else if (a == "--seed") f.seed = count(value());
    else if (a == "--update") {
      f.update = value();
      if (f.update == "shared") f.placement = mwstrat::update_placement::automatic;
      else if (f.update == "sharded") f.placement = mwstrat::update_placement::sharded;
      else if (f.update == "mirrored") f.placement = mwstrat::update_placement::replicated;
      else usage("--update: '" + f.update + "' is not shared, sharded or mirrored");
    }
    else if (a == "--learning-rate") {
      const std::string v = value();
      char* end = nullptr;
      f.learning_rate = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(f.learning_rate > 0)) usage("--learning-rate: '" + v + "' is not positive");
    } else usage("unknown flag '" + a + "'");
  }
  if (f.loop != "mwstrat" && f.loop != "plain") usage("--loop: '" + f.loop + "' is not mwstrat or plain");
  if (f.batch == 0 || f.steps == 0 || f.threads < 1) usage("--batch, --steps and --threads must be at least 1");
  return f;
}

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); }

// Wall clock, the whole process's CPU clock and its user/system split, read together.
struct reading {
  std::chrono::steady_clock::time_point wall{};
  double cpu = 0, user = 0, system = 0;
  static reading now() {
    reading r;
    r.wall = std::chrono::steady_clock::now();
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    r.cpu = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    r.user = seconds_of(u.ru_utime);
    r.system = seconds_of(u.ru_stime);
    return r;
  }
};

// What one process measured over the timed steps.
struct measured {
  double seconds = 0, cpu = 0, user = 0, system = 0, loss = 0;
};

measured between(const reading& a, const reading& b, double loss) {
  return {std::chrono::duration<double>(b.wall - a.wall).count(), b.cpu - a.cpu, b.user - a.user,
          b.system - a.system, loss};
}

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  }
  return 0;
}

void print(const char* impl, const flags& f, std::size_t workers, const measured& m, double rss) {
  const double steps = static_cast<double>(f.steps);
  const double steps_per_s = steps / m.seconds;
  std::printf("{\"impl\":\"%s\",\"workers\":%zu,\"threads\":%d,\"batch\":%zu,\"steps\":%zu,\"seconds\":%.4f,"
              "\"steps_per_s\":%.3f,\"samples_per_s\":%.1f,\"cpu_s_per_step\":%.5f,\"cpu_user_s_per_step\":%.5f,"
              "\"cpu_system_s_per_step\":%.5f,\"peak_rss_mib\":%.1f,\"loss\":%.5f,\"torch\":\"%d.%d.%d\","
              "\"update\":\"%s\"}\n",
              impl, workers, f.threads, f.batch, f.steps, m.seconds, steps_per_s,
              steps_per_s * static_cast<double>(f.batch * workers), m.cpu / steps, m.user / steps, m.system / steps,
              rss, m.loss, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH,
              impl == std::string("plain") ? "none" : f.update.c_str());
  std::fflush(stdout);
}

// Reads the clocks at the end of step warmup - 1 (the start of training when there is none) and of the last step;
// sums the timed steps' losses (fit's batch loss: already the mean over every worker's examples).
struct step_timer {
  std::size_t warmup, last;
  reading start{}, stop{};
  double loss_sum = 0;
  template <class Ctx>
  void on_train_begin(Ctx&) {
    if (warmup == 0) start = reading::now();
  }
  template <class Ctx>
  void on_train_batch_end(Ctx&, std::size_t step, const mwstrat::batch_logs& logs) {
    if (step >= warmup) loss_sum += logs.batch_loss;
    if (step + 1 == warmup) start = reading::now();
    if (step == last) stop = reading::now();
  }
};

int run_mwstrat(const flags& f) {
  mwstrat::communication_options communication;
  communication.gradient_sync.update = f.placement;
  auto strategy = mwstrat::make_multi_worker_mirrored_strategy(communication);  // TF_CONFIG; waits for every worker
  const auto workers = static_cast<std::size_t>(strategy.num_replicas_in_sync());
  mwstrat::distributed_input train(mwstrat::data::load_mnist(f.data_dir, mwstrat::data::mnist_split::train),
                                   f.batch * workers, strategy, f.seed);
  if (train.steps_per_epoch() < f.warmup + f.steps) {
    usage("--warmup + --steps must fit in one epoch (" + std::to_string(train.steps_per_epoch()) + " global steps)");
  }
  torch::manual_seed(f.seed);
  mwstrat::libtorch::module_model model(std::make_shared<libtorch_mnist::cnn>(), libtorch_mnist::classify);
  mwstrat::nn::sgd optimizer(f.learning_rate);
  mwstrat::fit_options options;
  options.epochs = 1;
  options.steps_per_epoch = f.warmup + f.steps;
  step_timer timer{f.warmup, f.warmup + f.steps - 1};
  mwstrat::fit(strategy, model, optimizer, train, options, timer);

  measured m = between(timer.start, timer.stop, timer.loss_sum / static_cast<double>(f.steps));
  // CPU seconds summed over the workers, the slowest worker's time and the largest peak RSS are the job's.
  std::vector<double> sums{m.cpu, m.user, m.system};
  strategy.sum_metrics(std::span<double>(sums));
  std::vector<double> maxima{m.seconds, peak_rss_mib()};
  strategy.collective().all_reduce(std::span<double>(maxima), mwstrat::reduce_op::max);
  m.cpu = sums[0];
  m.user = sums[1];
  m.system = sums[2];
  m.seconds = maxima[0];
  if (strategy.is_chief()) print("mwstrat", f, workers, m, maxima[1]);
  return 0;
}

int run_plain(const flags& f) {
#ifdef __GLIBC__
  // The ceiling should not pay for glibc handing the step's freed tensors back to the kernel and faulting them in
  // again (about 11 ms per step in the kernel here), which mwstrat and the Python processes escape by their start-up's
  // allocations: the thresholds pinned where a large freed buffer would raise them (benchmarks/history/, 2026-12-03).
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
  const auto images_and_labels = torch::data::datasets::MNIST(f.data_dir, torch::data::datasets::MNIST::Mode::kTrain);
  const torch::Tensor images = images_and_labels.images();  // float [0, 1], N × 1 × 28 × 28
  const torch::Tensor labels = images_and_labels.targets();
  const auto batch = static_cast<std::int64_t>(f.batch);
  if (static_cast<std::int64_t>(f.warmup + f.steps) * batch > images.size(0)) {
    usage("--warmup + --steps must fit in one epoch (" + std::to_string(images.size(0) / batch) + " steps)");
  }
  torch::manual_seed(f.seed);
  const torch::Tensor order = torch::randperm(images.size(0), torch::kInt64);
  libtorch_mnist::cnn net;
  net.train();
  torch::optim::SGD optimizer(net.parameters(), torch::optim::SGDOptions(f.learning_rate));
  double loss_sum = 0;
  auto step = [&](std::size_t s) {
    const torch::Tensor idx = order.narrow(0, static_cast<std::int64_t>(s) * batch, batch);
    const torch::Tensor x = images.index_select(0, idx);
    const torch::Tensor y = labels.index_select(0, idx);
    optimizer.zero_grad();
    const torch::Tensor loss = torch::nn::functional::cross_entropy(net.forward(x), y);
    loss.backward();
    optimizer.step();
    return loss.item<double>();  // a training loop reads its loss every step, as fit does
  };
  for (std::size_t s = 0; s < f.warmup; ++s) step(s);
  const reading start = reading::now();
  for (std::size_t s = f.warmup; s < f.warmup + f.steps; ++s) loss_sum += step(s);
  const reading stop = reading::now();
  print("plain", f, 1, between(start, stop, loss_sum / static_cast<double>(f.steps)), peak_rss_mib());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const flags f = parse(argc, argv);
  try {
    torch::set_num_threads(f.threads);
    return f.loop == "mwstrat" ? run_mwstrat(f) : run_plain(f);
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "libtorch_throughput: " << e.what() << "\n";
    return 1;
  }
}
