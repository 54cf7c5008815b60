// The pieces of nn/kernels/conv2d_winograd.hpp on their own: the one-dimensional transforms of F(2, 3) and F(4, 3)
// reproduce a direct 3-tap correlation, those of the filter gradient (conv2d_winograd_filter.hpp) the taps'
// gradients, and the shapes the paths take (the whole convolutions are checked against
// double sums in conv2d_kernels_test.cpp).
#include <mwstrat/nn/detail/counter_random.hpp>
#include <mwstrat/nn/kernels/conv2d_winograd.hpp>
#include <mwstrat/nn/kernels/conv2d_winograd_filter.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>

namespace conv2d_winograd_test {

namespace wg = mwstrat::nn::kernels::winograd;
using mwstrat::nn::kernels::conv2d_geometry;
using wg::V;

float value(std::uint64_t seed, std::size_t i) {
  return static_cast<float>(mwstrat::detail::random_unit(seed, 0, i) * 2.0 - 1.0);
}

// y = A^T [(G g) . (B^T d)] for alpha inputs d and 3 taps g (a different signal in every lane) equals the
// correlation y[i] = sum_k d[i + k] g[k], i < M.
template <int M>
void expect_transforms_correlate() {
  constexpr std::size_t alpha = wg::transforms<M>::alpha;
  const auto L = static_cast<std::size_t>(wg::lanes);
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    V d[alpha];
    float dv[alpha][64], gv[3][64];
    for (std::size_t i = 0; i < alpha; ++i)
      for (std::size_t l = 0; l < L; ++l) dv[i][l] = value(seed, i * L + l);
    for (std::size_t k = 0; k < 3; ++k)
      for (std::size_t l = 0; l < L; ++l) gv[k][l] = value(seed + 100, k * L + l);
    for (std::size_t i = 0; i < alpha; ++i) mwstrat::detail::vload(d[i], dv[i]);
    wg::transforms<M>::input(d, 1);
    V products[alpha];
    for (std::size_t i = 0; i < alpha; ++i) products[i] = d[i];
    for (std::size_t l = 0; l < L; ++l) {
      const float g[3] = {gv[0][l], gv[1][l], gv[2][l]};
      float u[alpha];
      wg::transforms<M>::kernel(g, u);
      for (std::size_t i = 0; i < alpha; ++i) products[i][l] *= u[i];
    }
    V y[M];
    wg::transforms<M>::output(products, 1, y, 1);
    for (std::size_t i = 0; i < static_cast<std::size_t>(M); ++i)
      for (std::size_t l = 0; l < L; ++l) {
        double want = 0;
        for (std::size_t k = 0; k < 3; ++k) want += static_cast<double>(dv[i + k][l]) * gv[k][l];
        EXPECT_NEAR(y[i][l], want, 1e-5) << "F(" << M << ", 3), output " << i << ", lane " << l;
      }
  }
}

TEST(Conv2dWinograd, TwoOutputTransformsReproduceTheCorrelation) { expect_transforms_correlate<2>(); }

TEST(Conv2dWinograd, FourOutputTransformsReproduceTheCorrelation) { expect_transforms_correlate<4>(); }

// The filter gradient's transforms: G^T [(A dy) . (B^T d)] for 6 inputs d and 4 output gradients dy (a different
// signal in every lane) equals the 3 taps' gradients dg[k] = sum_i d[i + k] dy[i].
TEST(Conv2dWinograd, FilterGradientTransformsReproduceTheTapGradients) {
  using T = wg::transforms<4>;
  constexpr std::size_t alpha = T::alpha;
  const auto L = static_cast<std::size_t>(wg::lanes);
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    float dv[alpha][64], yv[4][64];
    for (std::size_t i = 0; i < alpha; ++i)
      for (std::size_t l = 0; l < L; ++l) dv[i][l] = value(seed, i * L + l);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t l = 0; l < L; ++l) yv[i][l] = value(seed + 200, i * L + l);
    V d[alpha], y[alpha], products[alpha], dg[3];
    for (std::size_t i = 0; i < alpha; ++i) mwstrat::detail::vload(d[i], dv[i]);
    for (std::size_t i = 0; i < 4; ++i) mwstrat::detail::vload(y[i], yv[i]);
    T::input(d, 1);
    T::output_gradient(y, 1);
    for (std::size_t i = 0; i < alpha; ++i) products[i] = d[i] * y[i];
    T::filter(products, 1, dg, 1);
    for (std::size_t k = 0; k < 3; ++k)
      for (std::size_t l = 0; l < L; ++l) {
        double want = 0;
        for (std::size_t i = 0; i < 4; ++i) want += static_cast<double>(dv[i + k][l]) * yv[i][l];
        EXPECT_NEAR(dg[k][l], want, 1e-5) << "tap " << k << ", lane " << l;
      }
  }
}

TEST(Conv2dWinograd, TakesThreeByThreeStrideOneOverWholeVectorsOfChannels) {
  const std::size_t c = static_cast<std::size_t>(wg::lanes);
  const conv2d_geometry same{2, 8, 8, c, 2 * c, 3, 3, 1, 1, 1, 1, 8, 8};
  EXPECT_TRUE(wg::applies(same));
  conv2d_geometry strided = same;
  strided.stride_h = strided.stride_w = 2;
  strided.out_h = strided.out_w = 4;
  EXPECT_FALSE(wg::applies(strided));
  const conv2d_geometry pointwise{2, 8, 8, c, c, 1, 1, 1, 1, 0, 0, 8, 8};
  EXPECT_FALSE(wg::applies(pointwise));
  const conv2d_geometry rgb{2, 8, 8, 3, c, 3, 3, 1, 1, 1, 1, 8, 8};
  EXPECT_FALSE(wg::applies(rgb));
  // 4x4 tiles wherever the output holds one, 2x2 below.
  EXPECT_EQ(wg::tile_size(same), 4);
  const conv2d_geometry narrow{1, 40, 3, c, c, 3, 3, 1, 1, 1, 1, 40, 3};
  EXPECT_EQ(wg::tile_size(narrow), 2);
  // The filter gradient takes it with 4x4 tiles only.
  EXPECT_TRUE(wg::filter_applies(same));
  EXPECT_FALSE(wg::filter_applies(narrow));
  EXPECT_FALSE(wg::filter_applies(strided));
}

}  // namespace conv2d_winograd_test
