// The packed-panel path of gemm_nn (the dense layer's dK and dX) against a plain double-precision product on
// shapes that exercise its edges (partial slivers and row groups, k blocks, streamed and unaligned outputs),
// the dense layer's three products' thread invariance, and the vector relu gradient.
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/conv_filter_gradient.hpp>
#include <mwstrat/nn/detail/gemm.hpp>
#include <mwstrat/nn/detail/relu_backward.hpp>
#include <mwstrat/nn/layers/conv2d.hpp>
#include <mwstrat/nn/detail/counter_random.hpp>

#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace gemm_paths_test {

namespace d = mwstrat::detail;

template <class T>
d::aligned_vector<T> filled(std::size_t n, std::uint64_t seed) {
  d::aligned_vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(d::random_unit(seed, 0, i) * 2.0 - 1.0);
  return v;
}

// C[i][j] = bias[j] + sum_k A(i, k) B[k][j] in double, A(i, k) = a[i * ars + k * aks].
template <class T>
double reference_nn(std::size_t i, std::size_t j, std::size_t K, const T* a, std::ptrdiff_t ars, std::ptrdiff_t aks,
                    const T* b, std::size_t ldb, const T* bias) {
  double s = bias != nullptr ? static_cast<double>(bias[j]) : 0.0;
  for (std::size_t k = 0; k < K; ++k)
    s += static_cast<double>(a[static_cast<std::ptrdiff_t>(i) * ars + static_cast<std::ptrdiff_t>(k) * aks]) *
         static_cast<double>(b[k * ldb + j]);
  return s;
}

// gemm_nn on a wide B (the packed-panel path), both layouts of A, into an output that starts `offset` elements
// past a line boundary (offset 0: aligned, streamed when large; otherwise plain stores).
template <class T>
void check_panel(std::size_t M, std::size_t N, std::size_t K, std::size_t offset, bool relu, double tol) {
  SCOPED_TRACE(testing::Message() << M << "x" << N << "x" << K << " offset " << offset << (relu ? " relu" : ""));
  ASSERT_TRUE(d::gemm_nn_uses_panels<T>(N, K));
  const auto a = filled<T>(M * K, 11);
  const auto b = filled<T>(K * N, 12);
  const auto bias = filled<T>(N, 13);
  d::aligned_vector<T> c_rows(offset + M * N, T{7}), c_cols(offset + M * N, T{7});
  // A row-major (dX = dZ K) and A column-major (dK = dZ^T X) over the same values.
  d::aligned_vector<T> at(K * M);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t k = 0; k < K; ++k) at[k * M + i] = a[i * K + k];
  d::gemm_nn<T>(M, N, K, a.data(), static_cast<std::ptrdiff_t>(K), 1, b.data(), N, c_rows.data() + offset, N,
                bias.data(), relu);
  d::gemm_nn<T>(M, N, K, at.data(), 1, static_cast<std::ptrdiff_t>(M), b.data(), N, c_cols.data() + offset, N,
                nullptr, relu);
  const double t = tol * std::sqrt(static_cast<double>(K) + 1.0);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double with_bias = reference_nn(i, j, K, a.data(), static_cast<std::ptrdiff_t>(K), 1, b.data(), N, bias.data());
      double without = with_bias - static_cast<double>(bias[j]);
      if (relu) {
        with_bias = std::max(with_bias, 0.0);
        without = std::max(without, 0.0);
      }
      ASSERT_NEAR(c_rows[offset + i * N + j], with_bias, t) << i << "," << j;
      ASSERT_NEAR(c_cols[offset + i * N + j], without, t) << i << "," << j;
    }
  for (std::size_t q = 0; q < offset; ++q) ASSERT_EQ(c_rows[q], T{7});  // nothing written before C
}


TEST(NnGemmPaths, PanelsMatchReferenceOnEdgeShapes) {
  for (std::size_t M : {1, 5, 6, 7, 13, 40})
    for (std::size_t N : {256, 300, 1100})
      for (std::size_t K : {1, 3, 64, 257, 600}) check_panel<float>(M, N, K, 0, false, 1e-5);
  check_panel<float>(13, 1100, 300, 3, false, 1e-5);
  check_panel<float>(7, 300, 64, 0, true, 1e-5);
  for (std::size_t M : {1, 7, 13})
    for (std::size_t N : {128, 150, 600})
      for (std::size_t K : {1, 100, 300}) check_panel<double>(M, N, K, 0, false, 1e-12);
}

TEST(NnGemmPaths, LargeOutputIsStreamedAlignedOrNot) {
  // 70 x 16005 floats (4.5 MB) is above the streaming threshold; 16005 columns leave a partial sliver and make
  // rows start off line boundaries (plain stores), and offset 5 misaligns the first row too.
  check_panel<float>(70, 16005, 40, 0, false, 1e-5);
  check_panel<float>(70, 16005, 40, 5, false, 1e-5);
  check_panel<float>(67, 16384, 40, 0, false, 1e-5);  // every row line-aligned: the streamed stores
}

TEST(NnGemmPaths, SameBitsForAnyThreadCount) {
  // The dense layer's three products at a small batch: dK (A column-major, streamed), dX and the forward.
  const std::size_t B = 24, F = 40000, U = 70;
  const auto x = filled<float>(B * F, 41);
  const auto kern = filled<float>(U * F, 42);
  const auto dz = filled<float>(B * U, 43);
  const auto bias = filled<float>(U, 44);
  ASSERT_GT(U * F * sizeof(float), d::nn_panel_shape<float>::stream_bytes);
  std::vector<d::aligned_vector<float>> dks, dxs, ys;
  tbb::global_control allow_four(tbb::global_control::max_allowed_parallelism, 4);
  for (int threads : {1, 2, 4}) {
    tbb::task_arena arena(threads);
    d::aligned_vector<float> dk(U * F), dx(B * F), y(B * U), ws(d::gemm_nt_workspace(B, U, F));
    arena.execute([&] {
      d::gemm_nn<float>(U, F, B, dz.data(), 1, static_cast<std::ptrdiff_t>(U), x.data(), F, dk.data(), F);
      d::gemm_nn<float>(B, F, U, dz.data(), static_cast<std::ptrdiff_t>(U), 1, kern.data(), F, dx.data(), F);
      d::gemm_nt<float>(B, U, F, x.data(), F, kern.data(), F, y.data(), U, bias.data(), true, ws);
    });
    dks.push_back(std::move(dk));
    dxs.push_back(std::move(dx));
    ys.push_back(std::move(y));
  }
  for (std::size_t r = 1; r < dks.size(); ++r) {
    EXPECT_EQ(std::memcmp(dks[0].data(), dks[r].data(), U * F * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(dxs[0].data(), dxs[r].data(), B * F * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(ys[0].data(), ys[r].data(), B * U * sizeof(float)), 0);
  }
  // And against the reference, on a sample of dK's elements.
  for (std::size_t u = 0; u < U; u += 13)
    for (std::size_t f = 0; f < F; f += 997)
      ASSERT_NEAR(dks[0][u * F + f], reference_nn(u, f, B, dz.data(), 1, static_cast<std::ptrdiff_t>(U), x.data(), F,
                                                  static_cast<const float*>(nullptr)),
                  1e-4);
}

TEST(NnGemmPaths, ReluBackwardSelectsTheGradientWherePositive) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t n : {1, 15, 16, 17, 100}) {
    std::vector<float> y(n), dy(n), dz(n, 5.0f);
    const float pattern[] = {1.0f, -1.0f, 0.0f, -0.0f, 2.5f, -inf, inf, nan, 1e-30f};
    for (std::size_t i = 0; i < n; ++i) {
      y[i] = pattern[i % 9];
      dy[i] = static_cast<float>(i) + 0.5f;
    }
    d::relu_backward<float>(n, y.data(), dy.data(), dz.data());
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(dz[i], y[i] > 0.0f ? dy[i] : 0.0f) << n << " " << i;
  }
}

// The conv layer's filter gradient takes one of three paths: a small patch with a few vectors of filters
// runs the one-pass register kernel; otherwise a first layer (no input gradient wanted) masks its ReLU gradient
// block by block on the stack, and a layer below others keeps the whole masked gradient. All must give the same
// bits. 3 samples of 26x26 positions: several stack blocks and 2048-row chunks, a partial last block, and ReLU
// zeros on both sides.
void expect_first_conv_gradient_same_bits(std::size_t channels) {
  SCOPED_TRACE("channels " + std::to_string(channels));
  const mwstrat::nn::conv2d spec{32, {3, 3}, mwstrat::nn::activation::relu};
  d::conv2d_layer<float> conv(spec, {28, 28, channels});
  const std::size_t batch = 3;
  const std::size_t patch = 9 * channels;
  conv.reserve(batch);
  const std::size_t out = 26 * 26 * 32;
  const auto x = filled<float>(batch * 28 * 28 * channels, 11);
  const auto params = filled<float>(conv.param_count(), 12);
  const auto dy = filled<float>(batch * out, 13);
  d::aligned_vector<float> y(batch * out);
  conv.forward({batch, x.data(), y.data(), params.data(), true, 0, nullptr, nullptr, nullptr});
  ASSERT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
  ASSERT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v > 0.0f; }));
  d::aligned_vector<float> first(conv.param_count(), -1.0f), inner(conv.param_count(), -2.0f);
  d::aligned_vector<float> dx(batch * 28 * 28 * channels);
  conv.backward({batch, x.data(), y.data(), dy.data(), nullptr, params.data(), first.data(), 0, nullptr, nullptr, true});
  conv.backward({batch, x.data(), y.data(), dy.data(), dx.data(), params.data(), inner.data(), 0, nullptr, nullptr, true});
  ASSERT_EQ(0, std::memcmp(first.data(), inner.data(), first.size() * sizeof(float)));
  // And both are the gradient: the bias gradient of filter j is the sum of its masked output gradient.
  for (std::size_t j = 0; j < 32; ++j) {
    double s = 0;
    for (std::size_t m = 0; m < batch * 26 * 26; ++m)
      if (y[m * 32 + j] > 0) s += dy[m * 32 + j];
    EXPECT_NEAR(first[patch * 32 + j], s, 1e-3) << "filter " << j;
  }
}

TEST(NnGemmPaths, FirstConvLayerGradientIsTheSameOnEveryPath) {
  ASSERT_TRUE(d::small_filter_gradient<float>(9, 32));    // grey images: the register kernel
  ASSERT_FALSE(d::small_filter_gradient<float>(27, 32));  // colour images: stack blocks or the whole gradient
  expect_first_conv_gradient_same_bits(1);
  expect_first_conv_gradient_same_bits(3);
}

// The register kernel against the general path it replaces (vector ReLU mask, gemm_nn_block, a bias loop), bit
// for bit, for every patch it takes, one to four vectors of filters (whole groups and a last odd vector on every
// register file), with and without a ReLU, and the masked gradient it writes when asked to.
TEST(NnGemmPaths, SmallFilterGradientKernelMatchesTheGeneralPathBits) {
  constexpr std::size_t L = d::lanes_v<float>;
  const std::size_t rows = 301;
  for (std::size_t patch = 1; patch <= d::small_patch_limit; ++patch)
    for (const std::size_t f : {L, 2 * L, 3 * L, 4 * L})
      for (const bool relu : {true, false}) {
        SCOPED_TRACE("patch " + std::to_string(patch) + ", filters " + std::to_string(f) + (relu ? ", relu" : ""));
        ASSERT_TRUE(d::small_filter_gradient<float>(patch, f));
        const auto cols = filled<float>(rows * patch, 21 + patch);
        const auto y = filled<float>(rows * f, 22 + f);  // half of it negative: the mask matters
        const auto dy = filled<float>(rows * f, 23);
        d::aligned_vector<float> expected_dz(rows * f), expected((patch + 1) * f, 0.0f);
        if (relu) {
          d::relu_backward_range<float>(0, rows * f, y.data(), dy.data(), expected_dz.data());
        } else {
          std::copy(dy.begin(), dy.end(), expected_dz.begin());
        }
        d::gemm_nn_block<float>(0, patch, 0, f, rows, cols.data(), 1, static_cast<std::ptrdiff_t>(patch),
                                expected_dz.data(), f, expected.data(), f, nullptr);
        for (std::size_t m = 0; m < rows; ++m)
          for (std::size_t j = 0; j < f; ++j) expected[patch * f + j] += expected_dz[m * f + j];

        d::aligned_vector<float> got((patch + 1) * f, -7.0f), dz(rows * f, -7.0f);
        d::conv_filter_gradient<float>(patch, f, rows, cols.data(), relu ? y.data() : nullptr, dy.data(), dz.data(),
                                       got.data());
        EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)));
        if (relu) {
          EXPECT_EQ(0, std::memcmp(dz.data(), expected_dz.data(), dz.size() * sizeof(float)));
        }
        d::aligned_vector<float> again((patch + 1) * f, -9.0f);
        d::conv_filter_gradient<float>(patch, f, rows, cols.data(), relu ? y.data() : nullptr, dy.data(), nullptr,
                                       again.data());
        EXPECT_EQ(0, std::memcmp(again.data(), expected.data(), again.size() * sizeof(float)));
      }
}

}  // namespace gemm_paths_test
