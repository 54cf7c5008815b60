// The GEMM kernels against a plain double-precision product, across edge sizes, and their thread invariance.
#include <mwstrat/nn/detail/gemm.hpp>
#include <mwstrat/nn/detail/counter_random.hpp>

#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace gemm_test {

template <class T>
std::vector<T> filled(std::size_t n, std::uint64_t seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(mwstrat::detail::random_unit(seed, 0, i) * 2.0 - 1.0);
  return v;
}

template <class T>
void check_shapes(double tolerance) {
  const std::size_t sizes_m[] = {1, 4, 7, 13, 65};
  const std::size_t sizes_n[] = {1, 5, 16, 33, 70, 300};
  const std::size_t sizes_k[] = {0, 1, 17, 100, 1030, 2100};
  for (auto M : sizes_m)
    for (auto N : sizes_n)
      for (auto K : sizes_k) {
        auto a = filled<T>(M * K, 1);
        auto b = filled<T>(K * N, 2);
        auto bias = filled<T>(N, 3);
        std::vector<T> bt(N * K), at(K * M);
        for (std::size_t k = 0; k < K; ++k)
          for (std::size_t j = 0; j < N; ++j) bt[j * K + k] = b[k * N + j];
        for (std::size_t i = 0; i < M; ++i)
          for (std::size_t k = 0; k < K; ++k) at[k * M + i] = a[i * K + k];
        std::vector<T> nn(M * N), nn_t(M * N), nt(M * N), nt_relu(M * N);
        std::vector<T> ws(mwstrat::detail::gemm_nt_workspace(M, N, K));
        mwstrat::detail::gemm_nn<T>(M, N, K, a.data(), static_cast<std::ptrdiff_t>(K), 1, b.data(), N, nn.data(), N,
                                    bias.data());
        mwstrat::detail::gemm_nn<T>(M, N, K, at.data(), 1, static_cast<std::ptrdiff_t>(M), b.data(), N, nn_t.data(),
                                    N, nullptr);
        mwstrat::detail::gemm_nt<T>(M, N, K, a.data(), K, bt.data(), K, nt.data(), N, bias.data(), false, ws);
        mwstrat::detail::gemm_nt<T>(M, N, K, a.data(), K, bt.data(), K, nt_relu.data(), N, nullptr, true, ws);
        for (std::size_t i = 0; i < M; ++i)
          for (std::size_t j = 0; j < N; ++j) {
            double s = 0;
            for (std::size_t k = 0; k < K; ++k) s += static_cast<double>(a[i * K + k]) * static_cast<double>(b[k * N + j]);
            const double tol = tolerance * std::sqrt(static_cast<double>(K) + 1.0);
            ASSERT_NEAR(nn[i * N + j], s + bias[j], tol) << M << "x" << N << "x" << K << " at " << i << "," << j;
            ASSERT_NEAR(nn_t[i * N + j], s, tol) << M << "x" << N << "x" << K;
            ASSERT_NEAR(nt[i * N + j], s + bias[j], tol) << M << "x" << N << "x" << K;
            ASSERT_NEAR(nt_relu[i * N + j], s > 0 ? s : 0.0, tol) << M << "x" << N << "x" << K;
          }
      }
}


TEST(NnGemm, FloatMatchesReferenceOnEdgeShapes) { check_shapes<float>(1e-5); }
TEST(NnGemm, DoubleMatchesReferenceOnEdgeShapes) { check_shapes<double>(1e-12); }

TEST(NnGemm, SameBitsForAnyThreadCount) {
  const std::size_t M = 70, N = 130, K = 3000;
  auto a = filled<float>(M * K, 4);
  auto b = filled<float>(N * K, 5);
  std::vector<std::vector<float>> nn_results, nt_results;
  tbb::global_control allow_four(tbb::global_control::max_allowed_parallelism, 4);
  for (int threads : {1, 2, 4}) {
    tbb::task_arena arena(threads);
    std::vector<float> nn(M * N), nt(M * N), ws(mwstrat::detail::gemm_nt_workspace(M, N, K));
    arena.execute([&] {
      mwstrat::detail::gemm_nn<float>(M, N, K, a.data(), static_cast<std::ptrdiff_t>(K), 1, b.data(), N, nn.data(), N);
      mwstrat::detail::gemm_nt<float>(M, N, K, a.data(), K, b.data(), K, nt.data(), N, nullptr, false, ws);
    });
    nn_results.push_back(nn);
    nt_results.push_back(nt);
  }
  for (std::size_t r = 1; r < nn_results.size(); ++r) {
    EXPECT_EQ(std::memcmp(nn_results[0].data(), nn_results[r].data(), M * N * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(nt_results[0].data(), nt_results[r].data(), M * N * sizeof(float)), 0);
  }
}

TEST(NnGemm, HorizontalSumsPutEachVectorsSumInItsSlot) {
  using V = mwstrat::detail::vec_t<float>;
  constexpr int L = mwstrat::detail::lanes_v<float>;
  V acc[L];
  for (int q = 0; q < L; ++q)
    for (int lane = 0; lane < L; ++lane) acc[q][lane] = static_cast<float>(q * 100 + lane);
  float out[L];
  mwstrat::detail::horizontal_sums<float>(acc, out);
  for (int q = 0; q < L; ++q) EXPECT_EQ(out[q], static_cast<float>(q * 100 * L + L * (L - 1) / 2)) << q;
}

}  // namespace gemm_test
