// The convolution kernels (nn/kernels/conv2d.hpp) on every layer shape of ResNet-56 (CIFAR-10, the TensorFlow
// variant: zero-pad(1) + 3x3 valid stem, 1x1 projection shortcuts) at batch 128: forward, backward-data and
// backward-filter (+ bias), one TBB thread by default. Counters: GFLOP/s (2 * N * OH * OW * OC * KH * KW * IC
// per pass) and, with --peak=<GFLOP/s> (the one-thread figure of mwstrat_bench_peak), the percentage of it.
//   mwstrat_bench_conv [--threads=1] [--peak=115.6] [--reference] [Google Benchmark flags]
// --reference times the im2col reference path as well. Rates are per CPU second of the (one) thread: on a shared
// machine the wall time also counts the time other processes held the core. compare.py interleaves this with torch_conv_bench.py.
#include <mwstrat/nn/detail/counter_random.hpp>
#include <mwstrat/nn/kernels/conv2d.hpp>

#include <benchmark/benchmark.h>
#include <oneapi/tbb/global_control.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace k = mwstrat::nn::kernels;

struct layer_shape {
  const char* key;  // benchmark name suffix (also torch_conv_bench.py's)
  int count;        // how many layers of ResNet-56 have this shape
  std::size_t h, w, c, f, kernel, stride;
  bool same;
};

// ResNet-56: stem, then 3 stages of 9 blocks (2 convolutions each; the first block of each stage has a 1x1
// projection, strided from the second stage on).
constexpr layer_shape shapes[] = {
    {"stem_34x34_3-16_3x3", 1, 34, 34, 3, 16, 3, 1, false},
    {"32x32_16-16_3x3", 18, 32, 32, 16, 16, 3, 1, true},
    {"32x32_16-16_1x1", 1, 32, 32, 16, 16, 1, 1, true},
    {"32x32_16-32_3x3_s2", 1, 32, 32, 16, 32, 3, 2, true},
    {"32x32_16-32_1x1_s2", 1, 32, 32, 16, 32, 1, 2, true},
    {"16x16_32-32_3x3", 17, 16, 16, 32, 32, 3, 1, true},
    {"16x16_32-64_3x3_s2", 1, 16, 16, 32, 64, 3, 2, true},
    {"16x16_32-64_1x1_s2", 1, 16, 16, 32, 64, 1, 2, true},
    {"8x8_64-64_3x3", 17, 8, 8, 64, 64, 3, 1, true},
};

constexpr std::size_t batch = 128;
double peak_gflops = 0.0;

k::conv2d_geometry geometry(const layer_shape& s) {
  k::conv2d_geometry g{batch, s.h, s.w, s.c, s.f, s.kernel, s.kernel, s.stride, s.stride, 0, 0, 0, 0};
  if (s.same) {  // Keras/TensorFlow `same`: the larger half of the padding at the bottom/right
    g.out_h = (s.h + s.stride - 1) / s.stride;
    g.out_w = (s.w + s.stride - 1) / s.stride;
    const std::size_t need_h = (g.out_h - 1) * s.stride + s.kernel, need_w = (g.out_w - 1) * s.stride + s.kernel;
    g.pad_top = need_h > s.h ? (need_h - s.h) / 2 : 0;
    g.pad_left = need_w > s.w ? (need_w - s.w) / 2 : 0;
  } else {
    g.out_h = (s.h - s.kernel) / s.stride + 1;
    g.out_w = (s.w - s.kernel) / s.stride + 1;
  }
  return g;
}

std::vector<float> filled(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(mwstrat::detail::random_unit(seed, 0, i) - 0.5);
  return v;
}

enum class pass { forward, backward_data, backward_filter };

void run_pass(benchmark::State& state, const layer_shape& s, pass p, k::conv2d_path path) {
  const k::conv2d_geometry g = geometry(s);
  const auto x = filled(g.batch * g.in_h * g.in_w * g.in_c, 1);
  const auto w = filled(g.kernel_h * g.kernel_w * g.in_c * g.out_c, 2);
  const auto b = filled(g.out_c, 3);
  const auto dy = filled(g.batch * g.out_h * g.out_w * g.out_c, 4);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  k::conv2d_workspace ws;
  ws.path = path;
  auto once = [&] {
    switch (p) {
      case pass::forward: k::conv2d_forward(g, x.data(), w.data(), b.data(), y.data(), ws); break;
      case pass::backward_data: k::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws); break;
      case pass::backward_filter: k::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), db.data(), ws); break;
    }
  };
  once();  // warm the workspace: the timed calls allocate nothing
  for (auto _ : state) {
    once();
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(g.batch * g.out_h * g.out_w * g.out_c * g.kernel_h * g.kernel_w * g.in_c);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (peak_gflops > 0)
    state.counters["pct_peak"] =
        benchmark::Counter(flops * 1e-9 * 100.0 / peak_gflops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["layers"] = s.count;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t threads = 1;
  bool reference = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) threads = std::strtoul(a.c_str() + 10, nullptr, 10);
    else if (a.rfind("--peak=", 0) == 0) peak_gflops = std::strtod(a.c_str() + 7, nullptr);
    else if (a == "--reference") reference = true;
    else rest.push_back(argv[i]);
  }
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads == 0 ? 1 : threads);
  for (const layer_shape& s : shapes)
    for (auto [p, name] : {std::pair{pass::forward, "forward"}, std::pair{pass::backward_data, "backward_data"},
                           std::pair{pass::backward_filter, "backward_filter"}}) {
      if (p == pass::backward_data && s.c == 3) continue;  // the stem's input is the data: no gradient needed
      for (bool ref : {false, true}) {
        if (ref && !reference) continue;
        const std::string label = std::string(name) + "/" + s.key + (ref ? "/reference" : "");
        // The binding copied by name: Clang before 16 cannot capture a structured binding.
        benchmark::RegisterBenchmark(label.c_str(), [s, which = p, ref](benchmark::State& st) {
          run_pass(st, s, which, ref ? k::conv2d_path::reference : k::conv2d_path::automatic);
        })->Unit(benchmark::kMillisecond);
      }
    }
  int n = static_cast<int>(rest.size());
  benchmark::AddCustomContext("kernels", mwstrat::nn::kernel_isa_in_use().name);  // in the JSON's context
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
