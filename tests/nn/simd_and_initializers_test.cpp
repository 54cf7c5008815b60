// The vector helpers the kernels are built on (loads, stores, the non-temporal store and the line-alignment test) and
// Keras's default initialisers (glorot_uniform's range, spread and reproducibility; zeros).
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/simd.hpp>
#include <mwstrat/nn/initializers.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

namespace d = mwstrat::detail;
namespace nn = mwstrat::nn;

namespace simd_and_initializers_test {

template <class T>
void round_trips_through_every_store() {
  using V = d::vec_t<T>;
  constexpr int L = d::lanes_v<T>;
  static_assert(sizeof(V) == d::vector_bytes && L * sizeof(T) == d::vector_bytes);
  d::aligned_vector<T> src(2 * L), plain(2 * L, T{-1}), streamed(2 * L, T{-1});
  for (int i = 0; i < 2 * L; ++i) src[i] = static_cast<T>(i) * T{0.5} - T{3};
  ASSERT_TRUE(d::line_aligned(streamed.data()));
  ASSERT_FALSE(d::line_aligned(streamed.data() + 1));
  V v;
  d::vload(v, src.data() + L);  // the second vector
  d::vstore(plain.data(), v);
  d::vstream(streamed.data(), v);
  d::stream_fence();
  for (int i = 0; i < L; ++i) {
    EXPECT_EQ(plain[i], src[L + i]) << i;
    EXPECT_EQ(streamed[i], src[L + i]) << i;
    EXPECT_EQ(streamed[L + i], T{-1}) << "wrote past its vector at " << i;
  }
}


TEST(NnSimd, LoadStoreAndStreamedStoreKeepEveryBitAndStayInTheirVector) {
  round_trips_through_every_store<float>();
  round_trips_through_every_store<double>();
}

TEST(NnInitializers, GlorotUniformIsWithinItsLimitSpreadAndSeeded) {
  const std::size_t fan_in = 21632, fan_out = 128;
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  std::vector<float> a(100000), b(100000), c(100000), d2(100000);
  nn::glorot_uniform(std::span<float>(a), fan_in, fan_out, 7);
  nn::glorot_uniform(std::span<float>(b), fan_in, fan_out, 7);
  nn::glorot_uniform(std::span<float>(c), fan_in, fan_out, 8);
  nn::glorot_uniform(std::span<float>(d2), fan_in, fan_out, 7, 1);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));   // another seed
  EXPECT_NE(0, std::memcmp(a.data(), d2.data(), a.size() * sizeof(float)));  // another stream
  double sum = 0, sq = 0, lo = 0, hi = 0;
  for (float v : a) {
    ASSERT_LE(std::abs(static_cast<double>(v)), limit);
    sum += v;
    sq += static_cast<double>(v) * v;
    lo = std::min(lo, static_cast<double>(v));
    hi = std::max(hi, static_cast<double>(v));
  }
  const double n = static_cast<double>(a.size());
  // U(-l, l): mean 0, variance l^2 / 3; 100 000 draws put both within a few percent, and the extremes near +-l.
  EXPECT_NEAR(sum / n, 0.0, 0.01 * limit);
  EXPECT_NEAR(sq / n, limit * limit / 3.0, 0.02 * limit * limit);
  EXPECT_LT(lo, -0.99 * limit);
  EXPECT_GT(hi, 0.99 * limit);
  // A prefix does not depend on how many values are drawn after it.
  std::vector<float> prefix(10);
  nn::glorot_uniform(std::span<float>(prefix), fan_in, fan_out, 7);
  EXPECT_EQ(0, std::memcmp(prefix.data(), a.data(), prefix.size() * sizeof(float)));
}

TEST(NnInitializers, ZerosClearsEveryValue) {
  std::vector<double> v{1.0, -2.0, std::nan("")};
  nn::zeros(std::span<double>(v));
  for (double x : v) EXPECT_EQ(x, 0.0);
}

}  // namespace simd_and_initializers_test
