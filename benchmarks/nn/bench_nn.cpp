// Reference CNN training throughput (forward + backward + SGD update) and the GFLOP/s of its dense GEMMs.
//   mwstrat_bench_nn --benchmark_filter=Train     samples/s at batch 64/128, 1 and 2 threads
//   mwstrat_bench_nn --benchmark_filter=Dense     Dense(21632 -> 128) forward, dW and dX products
#include <mwstrat/nn.hpp>
#include <mwstrat/nn/detail/aligned.hpp>

#include <benchmark/benchmark.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <vector>

namespace nn = mwstrat::nn;

namespace {

void Train(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  auto model = nn::reference_cnn({.threads = threads, .seed = 1, .max_batch = batch});
  nn::sgd opt(0.001);
  std::vector<float> x(batch * 784);
  std::vector<std::int64_t> y(batch);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(mwstrat::detail::random_unit(1, 0, i));
  for (std::size_t i = 0; i < batch; ++i) y[i] = static_cast<std::int64_t>(i % 10);
  for (int warm = 0; warm < 3; ++warm) model.train_batch(x, y, batch);
  for (auto _ : state) {
    auto st = model.train_batch(x, y, batch);
    benchmark::DoNotOptimize(st);
    model.execute([&] { opt.apply(model.parameters(), model.gradients()); });
  }
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(Train)->ArgNames({"batch", "threads"})->Args({64, 1})->Args({128, 1})->Args({64, 2})->Args({128, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

// kind 0: forward Y[B,128] = X[B,21632] K^T; 1: dK[128,21632] = dZ^T X; 2: dX[B,21632] = dZ K.
void Dense(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto kind = state.range(2);
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  tbb::task_arena arena(threads);
  const std::size_t F = 21632, U = 128;
  // 64-byte aligned like the model's arena and activations (gemm_nn streams large aligned outputs).
  mwstrat::detail::aligned_vector<float> x(batch * F, 0.5f), k(U * F, 0.25f), y(batch * U), dz(batch * U, 0.1f),
      dk(U * F), dx(batch * F), bias(U, 0.0f), ws(mwstrat::detail::gemm_nt_workspace(batch, U, F));
  auto run = [&] {
    arena.execute([&] {
      if (kind == 0)
        mwstrat::detail::gemm_nt<float>(batch, U, F, x.data(), F, k.data(), F, y.data(), U, bias.data(), true, ws);
      else if (kind == 1)
        mwstrat::detail::gemm_nn<float>(U, F, batch, dz.data(), 1, static_cast<std::ptrdiff_t>(U), x.data(), F,
                                        dk.data(), F);
      else
        mwstrat::detail::gemm_nn<float>(batch, F, U, dz.data(), static_cast<std::ptrdiff_t>(U), 1, k.data(), F,
                                        dx.data(), F);
    });
  };
  run();
  for (auto _ : state) run();
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(batch * F * U) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(Dense)->ArgNames({"batch", "threads", "kind"})->ArgsProduct({{64, 128}, {1, 2}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("kernels", mwstrat::nn::kernel_isa_in_use().name);  // in the JSON's context
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
