// Training throughput of the second tutorial's ResNet (ResNet-56 on CIFAR-10) under MultiWorkerMirroredStrategy,
// against pytorch_resnet.py and tf_resnet.py (benchmarks/RESULTS.md, "ResNet-56 training throughput"). Every worker
// runs this program with its own TF_CONFIG (mwstrat-launch sets it):
//   mwstrat-launch -n 2 -- resnet_throughput --data-dir .cache/cifar10 --depth 56 --batch 128 --threads 1
// It trains nn::resnet_cifar (the TF variant by default) on real CIFAR-10 with the tutorial's augmentation and
// SGD(0.1, momentum 0.9), per-worker batch --batch, in one `fit` of --warmup + --steps steps; as in
// benchmarks/train/train_throughput.cpp a callback reads a steady clock (and the process's CPU clock) at the end of
// the last warm-up step and at the end of the last step, so the timed part is --steps whole steps. The chief prints
// one JSON line with the same fields as pytorch_resnet.py ("impl":"mwstrat", samples_per_s (global),
// samples_per_s_per_worker, cpu_s_per_step (all workers' CPU seconds per timed step), peak_rss_mib, loss) and
// conv_gflop_per_step: the multiply-adds × 2 of every convolution's forward, data gradient and filter gradient in
// one worker's step (the stem's data gradient is not needed and not counted).
//
// `--conv-kernels` measures no training: it runs nn/kernels' three convolution calls on every convolution shape of
// the model at --batch (random data, one task arena of --threads), --steps times after --warmup untimed passes, and
// prints {"impl":"mwstrat-conv-kernels", "conv_seconds_per_step", "conv_gflops", ...}: the convolutions' own rate,
// to set against the FP32 FMA peak (benchmarks/peak) and the whole step's time.
//
// `--records GLOB` (where mwstrat::images is built) trains from TFRecord shards of PNG images instead of the set in
// memory (tools/tfrecord_convert cifar10 ... --image png): mwstrat::distributed_input::from_records with the same
// augmentation, data sharding and --decode-threads threads decoding (default 1; the input's prefetch thread runs
// them beside the step). The JSON line's "input" says which ("memory" or "records"); benchmarks/run.py's `records`
// family sets the two against each other.
#include <mwstrat/mwstrat.hpp>
#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/image_augmentation.hpp>
#ifdef MWSTRAT_BENCH_HAVE_IMAGES
#include <mwstrat/data/images/image_decode.hpp>
#endif
#include <mwstrat/nn/kernels/conv2d.hpp>
#include <mwstrat/nn/optimizers/sgd.hpp>
#include <mwstrat/nn/resnet_cifar.hpp>

#include <oneapi/tbb/task_arena.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

struct flags {
  std::string data_dir = ".cache/cifar10";
  std::size_t depth = 56;
  std::size_t batch = 128;  // per worker
  std::size_t warmup = 2;
  std::size_t steps = 10;
  int threads = 1;
  std::uint64_t seed = 42;
  std::string variant = "tf";
  std::string records;             // --records: TFRecord shards (a glob) instead of the set in memory
  std::size_t decode_threads = 1;  // --records: record_batch_options::decode_threads
  bool conv_kernels = false;
  std::string conv_path = "automatic";  // --conv-kernels: which kernels (conv2d_path)
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "resnet_throughput: " << problem << "\n"
            << "usage: resnet_throughput [--data-dir D] [--depth 6n+2 (56)] [--batch B (per worker, 128)] "
               "[--warmup N] [--steps N] [--threads T] [--seed S] [--variant tf|he] [--records GLOB "
               "[--decode-threads N (1)]] [--conv-kernels [--conv-path automatic|direct|reference]]\n";
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
    else if (a == "--depth") f.depth = count(value());
    else if (a == "--batch") f.batch = count(value());
    else if (a == "--warmup") f.warmup = count(value());
    else if (a == "--steps") f.steps = count(value());
    else if (a == "--threads") f.threads = static_cast<int>(count(value()));
    else if (a == "--seed") f.seed = count(value());
    else if (a == "--variant") f.variant = value();
    else if (a == "--conv-kernels") f.conv_kernels = true;
    else if (a == "--records") f.records = value();
    else if (a == "--decode-threads") f.decode_threads = count(value());
    else if (a == "--conv-path") f.conv_path = value();
    else usage("unknown flag '" + a + "'");
  }
  if (f.batch == 0) usage("--batch must be at least 1");
  if (f.steps == 0) usage("--steps must be at least 1");
  if (f.threads < 1) usage("--threads must be at least 1");
  if (f.depth < 8 || (f.depth - 2) % 6 != 0) usage("--depth: " + std::to_string(f.depth) + " is not 6n + 2");
  if (f.variant != "tf" && f.variant != "he") usage("--variant: '" + f.variant + "' is not tf or he");
  if (f.conv_path != "automatic" && f.conv_path != "direct" && f.conv_path != "reference")
    usage("--conv-path: '" + f.conv_path + "' is not automatic, direct or reference");
  return f;
}

double cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

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

// Reads the clocks at the end of step `warmup - 1` (at the start of training when there is no warm-up) and at the
// end of step `warmup + steps - 1`.
struct step_timer {
  using clock = std::chrono::steady_clock;
  std::size_t warmup;
  std::size_t last;
  clock::time_point start{};
  clock::time_point stop{};
  double cpu_start = 0;
  double cpu_stop = 0;

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
    }
  }
  void mark_start() {
    start = clock::now();
    cpu_start = cpu_now();
  }
  [[nodiscard]] double seconds() const { return std::chrono::duration<double>(stop - start).count(); }
};

// Every convolution of nn::resnet_cifar(depth) at `batch` images, with Keras's padding (a strided 3×3 'same'
// convolution pads 0 top/left and 1 bottom/right on an even input; stride 1 pads 1 all round). Written from the
// model's definition (include/mwstrat/nn/resnet_cifar.hpp); the TF variant has the 1×1 projections.
struct conv_shape {
  mwstrat::nn::kernels::conv2d_geometry g;
  bool needs_data_gradient;
};

std::vector<conv_shape> resnet_convolutions(std::size_t depth, std::size_t batch, bool tf) {
  using mwstrat::nn::kernels::conv2d_geometry;
  std::vector<conv_shape> out;
  // The stem: zero-pad 1, then a 3×3 'valid' convolution, 3 → 16 channels at 32×32; its input is the data.
  out.push_back({conv2d_geometry{batch, 34, 34, 3, 16, 3, 3, 1, 1, 0, 0, 32, 32}, false});
  const std::size_t blocks = (depth - 2) / 6;
  std::size_t size = 32, channels = 16;
  for (std::size_t stage = 0; stage < 3; ++stage) {
    const std::size_t filters = std::size_t{16} << stage;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t stride = b == 0 && stage > 0 ? 2 : 1;
      const std::size_t out_size = size / stride;
      const std::size_t pad = stride == 1 ? 1 : 0;  // 'same': Keras pads the strided case bottom/right only
      out.push_back({conv2d_geometry{batch, size, size, channels, filters, 3, 3, stride, stride, pad, pad, out_size,
                                     out_size},
                     true});
      out.push_back(
          {conv2d_geometry{batch, out_size, out_size, filters, filters, 3, 3, 1, 1, 1, 1, out_size, out_size}, true});
      if (tf && b == 0) {
        out.push_back({conv2d_geometry{batch, size, size, channels, filters, 1, 1, stride, stride, 0, 0, out_size,
                                       out_size},
                       true});
      }
      size = out_size;
      channels = filters;
    }
  }
  return out;
}

double macs(const mwstrat::nn::kernels::conv2d_geometry& g) {
  return static_cast<double>(g.batch * g.out_h * g.out_w * g.out_c * g.kernel_h * g.kernel_w * g.in_c);
}

// GFLOP (2 × multiply-adds) of one training step's convolutions: forward, filter gradient, and the data gradient
// where the input is not the data.
double conv_gflop_per_step(const std::vector<conv_shape>& shapes) {
  double total = 0;
  for (const auto& s : shapes) total += macs(s.g) * (s.needs_data_gradient ? 3.0 : 2.0);
  return 2.0 * total * 1e-9;
}

int run_conv_kernels(const flags& f) {
  namespace k = mwstrat::nn::kernels;
  const auto shapes = resnet_convolutions(f.depth, f.batch, f.variant == "tf");
  struct buffers {
    std::vector<float> x, w, b, y, dy, dx, dw, db;
    k::conv2d_workspace ws;
  };
  std::mt19937 rng(static_cast<std::uint32_t>(f.seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto filled = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = normal(rng);
    return v;
  };
  std::vector<buffers> bufs;
  const k::conv2d_path path = f.conv_path == "direct"      ? k::conv2d_path::direct
                              : f.conv_path == "reference" ? k::conv2d_path::reference
                                                           : k::conv2d_path::automatic;
  for (const auto& s : shapes) {
    const auto& g = s.g;
    const std::size_t in = g.batch * g.in_h * g.in_w * g.in_c, out = g.batch * g.out_h * g.out_w * g.out_c;
    const std::size_t wn = g.kernel_h * g.kernel_w * g.in_c * g.out_c;
    bufs.push_back({filled(in), filled(wn), filled(g.out_c), std::vector<float>(out), filled(out),
                    std::vector<float>(s.needs_data_gradient ? in : 0), std::vector<float>(wn),
                    std::vector<float>(g.out_c), {}});
    bufs.back().ws.path = path;
  }
  tbb::task_arena arena(f.threads);
  auto pass = [&] {
    arena.execute([&] {
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        auto& b = bufs[i];
        k::conv2d_forward(shapes[i].g, b.x.data(), b.w.data(), b.b.data(), b.y.data(), b.ws);
        if (shapes[i].needs_data_gradient) k::conv2d_backward_data(shapes[i].g, b.dy.data(), b.w.data(), b.dx.data(), b.ws);
        k::conv2d_backward_filter(shapes[i].g, b.x.data(), b.dy.data(), b.dw.data(), b.db.data(), b.ws);
      }
    });
  };
  for (std::size_t i = 0; i < f.warmup; ++i) pass();
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_now();
  for (std::size_t i = 0; i < f.steps; ++i) pass();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_now() - c0;
  const double gflop = conv_gflop_per_step(shapes);
  const double per_step = seconds / static_cast<double>(f.steps);
  std::printf("{\"impl\":\"mwstrat-conv-kernels\",\"conv_path\":\"%s\",\"model\":\"resnet%zu\",\"variant\":\"%s\",\"threads\":%d,"
              "\"batch\":%zu,\"steps\":%zu,\"convolutions\":%zu,\"conv_gflop_per_step\":%.3f,"
              "\"conv_seconds_per_step\":%.4f,\"conv_cpu_s_per_step\":%.4f,\"conv_gflops\":%.2f,"
              "\"conv_gflops_per_cpu_s\":%.2f,\"kernels\":\"%s\"}\n",
              f.conv_path.c_str(), f.depth, f.variant.c_str(), f.threads, f.batch, f.steps, shapes.size(), gflop, per_step,
              cpu / static_cast<double>(f.steps), gflop / per_step, gflop * static_cast<double>(f.steps) / cpu,
              mwstrat::nn::kernel_isa_in_use().name.c_str());
  std::fflush(stdout);
  return 0;
}

int run_training(const flags& f) {
  namespace data = mwstrat::data;
  namespace nn = mwstrat::nn;
  auto strategy = mwstrat::make_multi_worker_mirrored_strategy(mwstrat::communication_options{});
  const auto workers = static_cast<std::size_t>(strategy.num_replicas_in_sync());
  const std::size_t global_batch = f.batch * workers;

  data::augmentation_options aug;  // the tutorial's: pad 4 + random crop + flip, per-image standardization
  aug.seed = f.seed;
  data::distribution_options o;
  o.global_batch = global_batch;
  o.num_workers = static_cast<int>(workers);
  o.worker_index = strategy.replica_id();
  o.seed = f.seed;
  o.transform = data::image_augmentation(aug).transform();
  const auto make_input = [&]() -> mwstrat::distributed_input {
    if (f.records.empty()) {
      return mwstrat::distributed_input(
          data::distributed_batches(data::load_cifar10(f.data_dir, data::cifar10_split::train), o));
    }
#ifdef MWSTRAT_BENCH_HAVE_IMAGES
    data::record_image_format format;
    format.shape = {32, 32, 3};
    format.decode = data::png_jpeg_decoder();
    o.policy = data::data_shard{};  // one shared order, as the set in memory is read with one worker or several
    data::record_batch_options reading;
    reading.decode_threads = f.decode_threads;
    return mwstrat::distributed_input::from_records(data::list_files(f.records), format, o, strategy, reading);
#else
    usage("--records: this build has no mwstrat::images (libpng and libjpeg)");
#endif
  };
  mwstrat::distributed_input train = make_input();
  if (train.steps_per_epoch() < f.warmup + f.steps) {
    usage("--warmup + --steps must fit in one epoch (" + std::to_string(train.steps_per_epoch()) + " global steps)");
  }

  nn::resnet_options ro;
  ro.variant = f.variant == "he" ? nn::resnet_variant::he : nn::resnet_variant::tf;
  ro.model.threads = f.threads;
  ro.model.seed = f.seed;
  ro.model.max_batch = f.batch;
  auto model = nn::resnet_cifar(f.depth, ro);
  nn::sgd optimizer(0.1, 0.9);

  mwstrat::fit_options options;
  options.epochs = 1;
  options.steps_per_epoch = f.warmup + f.steps;
  step_timer timer{f.warmup, f.warmup + f.steps - 1};
  const mwstrat::history h = mwstrat::fit(strategy, model, optimizer, train, options, timer);
  const double seconds = timer.seconds();

  std::vector<double> slots(2 * workers, 0.0);  // every worker's peak RSS and CPU seconds (one-hot sums)
  slots[static_cast<std::size_t>(strategy.replica_id())] = peak_rss_mib();
  slots[workers + static_cast<std::size_t>(strategy.replica_id())] = timer.cpu_stop - timer.cpu_start;
  strategy.sum_metrics(std::span<double>(slots));
  double cpu_total = 0, peak = 0;
  for (std::size_t i = 0; i < workers; ++i) {
    peak = std::max(peak, slots[i]);
    cpu_total += slots[workers + i];
  }
  double job_seconds = seconds;  // the slowest worker's time is the job's
  strategy.collective().all_reduce(std::span<double>(&job_seconds, 1), mwstrat::reduce_op::max);

  if (strategy.is_chief()) {
    const double steps_per_s = static_cast<double>(f.steps) / job_seconds;
    std::printf("{\"impl\":\"mwstrat\",\"input\":\"%s\",\"decode_threads\":%zu,\"model\":\"resnet%zu\",\"variant\":\"%s\",\"workers\":%zu,\"threads\":%d,"
                "\"batch\":%zu,\"warmup\":%zu,\"steps\":%zu,\"seconds\":%.4f,\"steps_per_s\":%.4f,"
                "\"samples_per_s\":%.2f,\"samples_per_s_per_worker\":%.2f,\"cpu_s_per_step\":%.4f,"
                "\"peak_rss_mib\":%.1f,\"loss\":%.5f,\"conv_gflop_per_step\":%.3f,\"kernels\":\"%s\"}\n",
                f.records.empty() ? "memory" : "records", f.records.empty() ? std::size_t{0} : f.decode_threads,
                f.depth, f.variant.c_str(), workers, f.threads, f.batch, f.warmup, f.steps, job_seconds, steps_per_s,
                steps_per_s * static_cast<double>(global_batch), steps_per_s * static_cast<double>(f.batch),
                cpu_total / static_cast<double>(f.steps), peak, h.epochs.empty() ? 0.0 : h.epochs.back().loss,
                conv_gflop_per_step(resnet_convolutions(f.depth, f.batch, f.variant == "tf")),
                mwstrat::nn::kernel_isa_in_use().name.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const flags f = parse(argc, argv);
  try {
    return f.conv_kernels ? run_conv_kernels(f) : run_training(f);
  } catch (const mwstrat::error& e) {
    std::cerr << "resnet_throughput: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "resnet_throughput: " << e.what() << "\n";
    return 1;
  }
}
