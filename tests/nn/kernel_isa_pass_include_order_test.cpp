// nn/detail/kernel_isa_pass.hpp, the list of headers each ISA pass compiles, included first and alone (this file
// compiles outside the unity units: its name says include_order): a direct include is the driver's
// (nn/detail/kernel_isas.hpp), so every pass is compiled, each into its own namespaces with its own ISA's macros,
// and none of those macros outlives its pass; the driver then hands a factory the pass of the ISA this process chose.
#include <mwstrat/nn/detail/kernel_isa_pass.hpp>
#include <mwstrat/nn/detail/kernel_isa_pass.hpp>  // again: the driver once, no pass twice

#include <gtest/gtest.h>

#include <cstddef>
#include <typeinfo>
#include <utility>

#if defined(MWSTRAT_ISA_NS) || defined(MWSTRAT_ISA_IS_BUILD) || defined(MWSTRAT_ISA_AVX512) || \
    defined(MWSTRAT_ISA_AVX) || defined(MWSTRAT_ISA_FMA) || defined(MWSTRAT_ISA_SSE2) || defined(MWSTRAT_ISA_PRELUDE)
#error "an ISA pass's macros outlive the pass"
#endif

namespace kernel_isa_pass_include_order_test {

// Each pass's copy of the list (simd.hpp first, isa_pass.hpp last) sees its own ISA: vector width and registers.
#if defined(__AVX512F__)
constexpr std::size_t build_bytes = 64;
constexpr int build_registers = 32;
#elif defined(__AVX__)
constexpr std::size_t build_bytes = 32;
constexpr int build_registers = 16;
#elif defined(__aarch64__)
constexpr std::size_t build_bytes = 16;
constexpr int build_registers = 32;
#else
constexpr std::size_t build_bytes = 16;
constexpr int build_registers = 16;
#endif
static_assert(mwstrat::detail::vector_bytes == build_bytes && mwstrat::detail::vector_registers == build_registers);
static_assert(mwstrat::detail::isa_pass::float_lanes == int(build_bytes / sizeof(float)));
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 1
static_assert(mwstrat::isa_avx2::detail::vector_bytes == 32 && mwstrat::isa_avx2::detail::vector_registers == 16);
static_assert(mwstrat::isa_avx2::detail::isa_pass::float_lanes == 8);
#endif
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 2
static_assert(mwstrat::isa_avx512::detail::vector_bytes == 64 && mwstrat::isa_avx512::detail::vector_registers == 32);
static_assert(mwstrat::isa_avx512::detail::isa_pass::float_lanes == 16);
#endif

TEST(kernel_isa_pass, a_factory_gets_the_pass_of_the_isa_this_process_chose) {
  using mwstrat::nn::kernel_isa;
  const kernel_isa chosen = mwstrat::nn::kernel_isa_in_use().isa;
  const std::type_info& want =
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 2
      chosen == kernel_isa::avx512 ? typeid(mwstrat::isa_avx512::detail::isa_pass) :
#endif
#if MWSTRAT_KERNEL_DISPATCH && MWSTRAT_BUILD_ISA_LEVEL < 1
      chosen == kernel_isa::avx2 ? typeid(mwstrat::isa_avx2::detail::isa_pass) :
#endif
                                   typeid(mwstrat::detail::isa_pass);
  const auto [got, lanes] = mwstrat::detail::with_running_pass(
      []<class Pass>(Pass) { return std::pair<const std::type_info*, int>{&typeid(Pass), Pass::float_lanes}; });
  EXPECT_TRUE(*got == want) << got->name() << " for " << mwstrat::nn::kernel_isa_in_use().name;
  const int chosen_lanes = chosen == kernel_isa::avx512 ? 16 : chosen == kernel_isa::avx2 ? 8 : int(build_bytes / 4);
  EXPECT_EQ(lanes, chosen_lanes) << mwstrat::nn::kernel_isa_in_use().name;
}

}  // namespace kernel_isa_pass_include_order_test
