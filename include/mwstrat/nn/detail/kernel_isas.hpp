#pragma once
// The nn compute (SIMD helpers, GEMM, the convolution kernels, the layers) compiled once for each instruction set
// the kernels support, in one program whatever its compiler flags; nn/kernels/isa.hpp chooses one at run time.
//
// How: the headers listed in kernel_isa_pass.hpp are written once, inside `namespace MWSTRAT_ISA_NS(detail)`,
// `MWSTRAT_ISA_NS(nn::kernels)`, ..., and test MWSTRAT_ISA_* instead of the compiler's __AVX__-style macros. This
// header includes that list once per ISA:
//   - the program's own flags, into mwstrat::detail and mwstrat::nn::kernels, as any other header's code;
//   - with dispatch (MWSTRAT_KERNEL_DISPATCH), each wider ISA inside `#pragma GCC target(...)`, into
//     mwstrat::isa_avx2::... and mwstrat::isa_avx512::... (only those wider than the program's own flags).
// Inside a pass, names resolve to the pass's own namespace first and fall back to the shared ones through
// using-directives, so the code reads as ordinary code in mwstrat::detail.
//
// Everything such a pass uses from elsewhere is included here first, outside any target region: a function first
// defined inside one would be compiled for that ISA and could run on a CPU without it.

#include <mwstrat/error.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/counter_random.hpp>
#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/window_2d.hpp>
#include <mwstrat/nn/initializers.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>
#include <mwstrat/nn/kernels/isa.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mwstrat::detail {

// The kernel entry points that a call into the program's own pass hands to the ISA this process runs (a test or a
// benchmark that calls the kernels directly, not through a layer): true when it did.
enum class kernel_entry { conv2d_forward, conv2d_backward_data, conv2d_backward_filter, gemm_nn, gemm_nt };
template <kernel_entry E, class... A>
bool on_dispatched_isa(A&&... args);  // defined at the end of this file, once every pass is declared

}  // namespace mwstrat::detail

// The program's own flags.
#define MWSTRAT_ISA_NS(ns) mwstrat::ns
#define MWSTRAT_ISA_IS_BUILD 1
#if defined(__AVX512F__)
#define MWSTRAT_ISA_AVX512 1
#else
#define MWSTRAT_ISA_AVX512 0
#endif
#if defined(__AVX__)
#define MWSTRAT_ISA_AVX 1
#else
#define MWSTRAT_ISA_AVX 0
#endif
#if defined(__FMA__)
#define MWSTRAT_ISA_FMA 1
#else
#define MWSTRAT_ISA_FMA 0
#endif
#if defined(__SSE2__)
#define MWSTRAT_ISA_SSE2 1
#else
#define MWSTRAT_ISA_SSE2 0
#endif
#include <mwstrat/nn/detail/kernel_isa_pass.hpp>

#if MWSTRAT_KERNEL_DISPATCH

// A pass's namespaces see the shared ones (mwstrat::detail, mwstrat::nn, mwstrat::nn::kernels) where they do not
// declare a name themselves.
#define MWSTRAT_ISA_PRELUDE(isa)                                      \
  namespace mwstrat::isa::detail {                                    \
  using namespace ::mwstrat::detail;                                  \
  }                                                                   \
  namespace mwstrat::isa::nn {                                        \
  using namespace ::mwstrat::nn;                                      \
  }                                                                   \
  namespace mwstrat::isa::nn::kernels {                               \
  using namespace ::mwstrat::nn::kernels;                             \
  }

#if MWSTRAT_BUILD_ISA_LEVEL < 1
MWSTRAT_ISA_PRELUDE(isa_avx2)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define MWSTRAT_ISA_NS(ns) mwstrat::isa_avx2::ns
#define MWSTRAT_ISA_IS_BUILD 0
#define MWSTRAT_ISA_AVX512 0
#define MWSTRAT_ISA_AVX 1
#define MWSTRAT_ISA_FMA 1
#define MWSTRAT_ISA_SSE2 1
#include <mwstrat/nn/detail/kernel_isa_pass.hpp>
#pragma GCC pop_options
#endif

#if MWSTRAT_BUILD_ISA_LEVEL < 2
MWSTRAT_ISA_PRELUDE(isa_avx512)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define MWSTRAT_ISA_NS(ns) mwstrat::isa_avx512::ns
#define MWSTRAT_ISA_IS_BUILD 0
#define MWSTRAT_ISA_AVX512 1
#define MWSTRAT_ISA_AVX 1
#define MWSTRAT_ISA_FMA 1
#define MWSTRAT_ISA_SSE2 1
#include <mwstrat/nn/detail/kernel_isa_pass.hpp>
#pragma GCC pop_options
#endif

#undef MWSTRAT_ISA_PRELUDE
#endif  // MWSTRAT_KERNEL_DISPATCH

namespace mwstrat::detail {

// f(layers) with the layers of the ISA this process runs (nn/kernels/isa.hpp): the one place a factory of layers
// chooses among the passes. Called per layer made, never in a hot loop.
template <class F>
decltype(auto) with_running_pass(F&& f) {
#if MWSTRAT_KERNEL_DISPATCH
  switch (kernel_isa_choice().isa) {
#if MWSTRAT_BUILD_ISA_LEVEL < 2
    case nn::kernel_isa::avx512: return f(::mwstrat::isa_avx512::detail::isa_pass{});
#endif
#if MWSTRAT_BUILD_ISA_LEVEL < 1
    case nn::kernel_isa::avx2: return f(::mwstrat::isa_avx2::detail::isa_pass{});
#endif
    default: break;
  }
#else
  (void)kernel_isa_choice();  // a request this build cannot run is still refused
#endif
  return f(isa_pass{});
}

}  // namespace mwstrat::detail

namespace mwstrat::detail {

#if MWSTRAT_KERNEL_DISPATCH
#define MWSTRAT_CALL_KERNEL_ENTRY(isa)                                                                         \
  if constexpr (E == kernel_entry::conv2d_forward) ::mwstrat::isa::nn::kernels::conv2d_forward(args...);       \
  else if constexpr (E == kernel_entry::conv2d_backward_data)                                                  \
    ::mwstrat::isa::nn::kernels::conv2d_backward_data(args...);                                                \
  else if constexpr (E == kernel_entry::conv2d_backward_filter)                                                \
    ::mwstrat::isa::nn::kernels::conv2d_backward_filter(args...);                                              \
  else if constexpr (E == kernel_entry::gemm_nn) ::mwstrat::isa::detail::gemm_nn(args...);                     \
  else ::mwstrat::isa::detail::gemm_nt(args...);
#endif

template <kernel_entry E, class... A>
bool on_dispatched_isa(A&&... args) {
  ((void)args, ...);  // a build whose own flags are the widest has no pass to hand over to
#if MWSTRAT_KERNEL_DISPATCH
  switch (kernel_isa_choice().isa) {
#if MWSTRAT_BUILD_ISA_LEVEL < 2
    case nn::kernel_isa::avx512: {
      MWSTRAT_CALL_KERNEL_ENTRY(isa_avx512)
      return true;
    }
#endif
#if MWSTRAT_BUILD_ISA_LEVEL < 1
    case nn::kernel_isa::avx2: {
      MWSTRAT_CALL_KERNEL_ENTRY(isa_avx2)
      return true;
    }
#endif
    default: break;
  }
#endif
  return false;
}

#undef MWSTRAT_CALL_KERNEL_ENTRY

}  // namespace mwstrat::detail
