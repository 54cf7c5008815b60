// OpenBLAS sgemm on the reference CNN's dense GEMM shapes, same layouts and names as mwstrat_bench_nn's Dense.
// Threads: OPENBLAS_NUM_THREADS; kernel: OPENBLAS_CORETYPE (Debian's build may pick a generic one otherwise).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

namespace {

void Dense(benchmark::State& state) {
  const auto batch = static_cast<int>(state.range(0));
  const auto kind = state.range(2);
  const int F = 21632, U = 128;
  std::vector<float> x(static_cast<std::size_t>(batch) * F, 0.5f), k(static_cast<std::size_t>(U) * F, 0.25f),
      y(static_cast<std::size_t>(batch) * U), dz(static_cast<std::size_t>(batch) * U, 0.1f),
      dk(static_cast<std::size_t>(U) * F), dx(static_cast<std::size_t>(batch) * F);
  auto run = [&] {
    if (kind == 0)  // Y[B,U] = X[B,F] K[U,F]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, U, F, 1.0f, x.data(), F, k.data(), F, 0.0f,
                  y.data(), U);
    else if (kind == 1)  // dK[U,F] = dZ[B,U]^T X[B,F]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, U, F, batch, 1.0f, dz.data(), U, x.data(), F, 0.0f,
                  dk.data(), F);
    else  // dX[B,F] = dZ[B,U] K[U,F]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, F, U, 1.0f, dz.data(), U, k.data(), F, 0.0f,
                  dx.data(), F);
  };
  openblas_set_num_threads(static_cast<int>(state.range(1)));
  run();
  for (auto _ : state) run();
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(batch) * F * U * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(Dense)->ArgNames({"batch", "threads", "kind"})->ArgsProduct({{64, 128}, {1, 2}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
