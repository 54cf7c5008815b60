// detail::isa_pass (nn/detail/isa_pass.hpp), the one type of each ISA pass compiled in (nn/detail/kernel_isas.hpp):
// its layer templates are that pass's layers and no other's, its float_lanes is its vector width, its fmadd rounds
// once exactly where the pass has FMA, and its scatter kernel applies at its own width and computes the data
// gradient there. Types are checked for every pass; code runs only for the passes this CPU runs (detect_cpu_isa), so
// an AVX2-only machine checks the AVX-512 pass's types and skips its code.
#include <mwstrat/nn/detail/isa_pass.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>
#include <mwstrat/nn/kernels/isa.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

namespace isa_pass_test {

namespace d = mwstrat::detail;
using mwstrat::nn::kernels::conv2d_geometry;

// Each pass with the namespace its code is compiled into, its width and whether it rounds a * b + c once.
#if defined(__AVX512F__)
constexpr int build_lanes = 16;
#elif defined(__AVX__)
constexpr int build_lanes = 8;
#else
constexpr int build_lanes = 4;
#endif
#if defined(__FMA__) || defined(__AVX512F__) || defined(__ARM_FEATURE_FMA)
constexpr bool build_fma = true;
#else
constexpr bool build_fma = false;
#endif

// The layer templates of pass `Pass` are the classes of namespace `ns` (the pass's detail namespace).
#define ISA_PASS_TEST_LAYERS_ARE(Pass, ns)                                                                         \
  static_assert(std::is_same_v<Pass::activation<float>, ns::activation_layer<float>>);                            \
  static_assert(std::is_same_v<Pass::add<float>, ns::add_layer<float>>);                                          \
  static_assert(std::is_same_v<Pass::alias<float>, ns::alias_layer<float>>);                                      \
  static_assert(std::is_same_v<Pass::batch_normalization<float>, ns::batch_normalization_layer<float>>);          \
  static_assert(std::is_same_v<Pass::conv2d<float>, ns::conv2d_layer<float>>);                                    \
  static_assert(std::is_same_v<Pass::dense<double>, ns::dense_layer<double>>);                                    \
  static_assert(std::is_same_v<Pass::dropout<float>, ns::dropout_layer<float>>);                                  \
  static_assert(std::is_same_v<Pass::global_average_pooling2d<float>, ns::global_average_pooling2d_layer<float>>); \
  static_assert(std::is_same_v<Pass::max_pool2d<float>, ns::max_pool2d_layer<float>>);                            \
  static_assert(std::is_same_v<Pass::pad_channels_shortcut<float>, ns::pad_channels_shortcut_layer<float>>);      \
  static_assert(std::is_same_v<Pass::relu<float>, ns::relu_layer<float>>);                                        \
  static_assert(std::is_same_v<Pass::softmax<float>, ns::softmax_layer<float>>);                                  \
  static_assert(std::is_same_v<Pass::zero_padding2d<float>, ns::zero_padding2d_layer<float>>)

ISA_PASS_TEST_LAYERS_ARE(d::isa_pass, d);
static_assert(d::isa_pass::float_lanes == build_lanes);
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 1
ISA_PASS_TEST_LAYERS_ARE(mwstrat::isa_avx2::detail::isa_pass, mwstrat::isa_avx2::detail);
static_assert(mwstrat::isa_avx2::detail::isa_pass::float_lanes == 8);
static_assert(!std::is_same_v<mwstrat::isa_avx2::detail::isa_pass::conv2d<float>, d::isa_pass::conv2d<float>>);
#endif
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 2
ISA_PASS_TEST_LAYERS_ARE(mwstrat::isa_avx512::detail::isa_pass, mwstrat::isa_avx512::detail);
static_assert(mwstrat::isa_avx512::detail::isa_pass::float_lanes == 16);
static_assert(!std::is_same_v<mwstrat::isa_avx512::detail::isa_pass::conv2d<float>, d::isa_pass::conv2d<float>>);
#endif
#undef ISA_PASS_TEST_LAYERS_ARE

// f(pass, its name, whether it has FMA) for every pass compiled in that this CPU runs; returns how many it skipped.
template <class F>
int for_each_running_pass(F&& f) {
  const d::cpu_isa_support cpu = d::detect_cpu_isa();
  int skipped = 0;
  f(d::isa_pass{}, "build", build_fma);  // the program's own flags: this CPU runs them, or the test would not start
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 1
  if (cpu.avx2_fma) f(mwstrat::isa_avx2::detail::isa_pass{}, "avx2", true);
  else ++skipped;
#endif
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 2
  if (cpu.avx512) f(mwstrat::isa_avx512::detail::isa_pass{}, "avx512", true);
  else ++skipped;
#endif
  (void)cpu;
  return skipped;
}

TEST(isa_pass, fmadd_rounds_once_exactly_where_the_pass_has_fma) {
  // (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 exactly; the product alone rounds to 1 + 2^-11 (a tie, to even), so a
  // multiply then an add gives 0.
  volatile float a = 1.0f + std::ldexp(1.0f, -12);
  volatile float c = -(1.0f + std::ldexp(1.0f, -11));
  for_each_running_pass([&]<class Pass>(Pass, const char* name, bool fma) {
    const float got = Pass::fmadd(a, a, c);
    EXPECT_EQ(got, fma ? std::ldexp(1.0f, -24) : 0.0f) << name << (fma ? " has FMA" : " has no FMA");
  });
}

conv2d_geometry stride_two_3x3(std::size_t in_c) {
  // Keras's `same` for 9 x 11: out 5 x 6, the larger half of the padding at the bottom/right.
  return {1, 9, 11, in_c, 16, 3, 3, 2, 2, 1, 1, 5, 6};
}

// The data gradient by its definition, in double: dx[iy][ix][c] = sum dy[oy][ox][f] w[ky][kx][c][f] over the windows
// that read (iy, ix).
std::vector<double> data_gradient(const conv2d_geometry& g, const std::vector<float>& dy, const std::vector<float>& w) {
  std::vector<double> dx(g.in_h * g.in_w * g.in_c, 0.0);
  for (std::size_t oy = 0; oy < g.out_h; ++oy)
    for (std::size_t ox = 0; ox < g.out_w; ++ox)
      for (std::size_t ky = 0; ky < g.kernel_h; ++ky)
        for (std::size_t kx = 0; kx < g.kernel_w; ++kx) {
          const auto iy = static_cast<std::ptrdiff_t>(oy * g.stride_h + ky) - static_cast<std::ptrdiff_t>(g.pad_top);
          const auto ix = static_cast<std::ptrdiff_t>(ox * g.stride_w + kx) - static_cast<std::ptrdiff_t>(g.pad_left);
          if (iy < 0 || ix < 0 || iy >= std::ptrdiff_t(g.in_h) || ix >= std::ptrdiff_t(g.in_w)) continue;
          for (std::size_t c = 0; c < g.in_c; ++c)
            for (std::size_t f = 0; f < g.out_c; ++f)
              dx[(std::size_t(iy) * g.in_w + std::size_t(ix)) * g.in_c + c] +=
                  double(dy[(oy * g.out_w + ox) * g.out_c + f]) *
                  double(w[((ky * g.kernel_w + kx) * g.in_c + c) * g.out_c + f]);
        }
  return dx;
}

std::vector<float> filled(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float((i * 7919 + seed * 104729) % 2001) / 1000.0f - 1.0f;
  return v;
}

TEST(isa_pass, the_scatter_kernel_applies_at_the_pass_s_width_and_computes_the_data_gradient) {
  const int skipped = for_each_running_pass([]<class Pass>(Pass, const char* name, bool) {
    SCOPED_TRACE(name);
    const auto lanes = static_cast<std::size_t>(Pass::float_lanes);
    const conv2d_geometry g = stride_two_3x3(lanes);
    EXPECT_TRUE(Pass::scatter_applies(g));
    EXPECT_FALSE(Pass::scatter_applies(stride_two_3x3(2 * lanes))) << "one vector of input channels only";
    EXPECT_FALSE(Pass::scatter_applies(stride_two_3x3(lanes / 2)));
    const auto w = filled(3 * 3 * g.in_c * g.out_c, 1);
    const auto dy = filled(g.out_h * g.out_w * g.out_c, 2);
    std::vector<float> dx(g.in_h * g.in_w * g.in_c, 7.0f);  // every element written, whatever was there
    mwstrat::nn::kernels::conv2d_workspace ws;
    Pass::scatter_backward_data(g, dy.data(), w.data(), dx.data(), ws);
    const auto want = data_gradient(g, dy, w);
    int differ = 0;
    for (std::size_t i = 0; i < dx.size(); ++i) {
      if (std::abs(double(dx[i]) - want[i]) > 1e-4 * (1.0 + std::abs(want[i])) && differ++ < 3)
        ADD_FAILURE() << "dx[" << i << "] is " << dx[i] << ", want " << want[i];
    }
    EXPECT_EQ(differ, 0);
  });
  if (skipped > 0) std::cout << "[ NOTE     ] " << skipped << " pass(es) this CPU cannot run: types checked only\n";
}

}  // namespace isa_pass_test
