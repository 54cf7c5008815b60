// Portable vectors (GCC/Clang vector extensions) as wide as one register of the ISA the code is compiled for
// (-march=native in optimised builds): 64 bytes with AVX-512, 32 with AVX/AVX2, 16 otherwise. The kernels size
// their register blocks from `vector_registers`, so a micro-kernel's accumulators stay in registers on every ISA
// (64-byte vectors on a 16-register AVX2 machine spill every accumulator and run ~10x slower). Vectors never
// cross a function boundary by value (psABI).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

#if MWSTRAT_ISA_AVX512
inline constexpr std::size_t vector_bytes = 64;
inline constexpr int vector_registers = 32;
#elif MWSTRAT_ISA_AVX
inline constexpr std::size_t vector_bytes = 32;
inline constexpr int vector_registers = 16;
#elif defined(__aarch64__)
inline constexpr std::size_t vector_bytes = 16;
inline constexpr int vector_registers = 32;
#else
inline constexpr std::size_t vector_bytes = 16;
inline constexpr int vector_registers = 16;
#endif

template <class T>
struct simd {
  static constexpr int lanes = static_cast<int>(vector_bytes / sizeof(T));
  typedef T vec __attribute__((vector_size(vector_bytes)));
};

template <class T>
using vec_t = typename simd<T>::vec;

template <class T>
inline constexpr int lanes_v = simd<T>::lanes;

template <class V, class T>
inline void vload(V& v, const T* p) noexcept {
  std::memcpy(&v, p, sizeof(V));
}

template <class V, class T>
inline void vstore(T* p, const V& v) noexcept {
  std::memcpy(p, &v, sizeof(V));
}

// Non-temporal store of a whole vector to memory aligned to its size: the line goes straight to memory without
// being read first (write-allocate), for large outputs that will not be read again soon. Plain store where the ISA
// has none; the bits stored are the same either way.
template <class V, class T>
inline void vstream(T* p, const V& v) noexcept {
  static_assert(sizeof(V) == vector_bytes);
#if MWSTRAT_ISA_AVX512
  if constexpr (std::is_same_v<T, float>) {
    __m512 r;
    std::memcpy(&r, &v, sizeof r);
    _mm512_stream_ps(p, r);
    return;
  } else if constexpr (std::is_same_v<T, double>) {
    __m512d r;
    std::memcpy(&r, &v, sizeof r);
    _mm512_stream_pd(p, r);
    return;
  }
#elif MWSTRAT_ISA_AVX
  if constexpr (std::is_same_v<T, float>) {
    __m256 r;
    std::memcpy(&r, &v, sizeof r);
    _mm256_stream_ps(p, r);
    return;
  } else if constexpr (std::is_same_v<T, double>) {
    __m256d r;
    std::memcpy(&r, &v, sizeof r);
    _mm256_stream_pd(p, r);
    return;
  }
#elif MWSTRAT_ISA_SSE2
  if constexpr (std::is_same_v<T, float>) {
    __m128 r;
    std::memcpy(&r, &v, sizeof r);
    _mm_stream_ps(p, r);
    return;
  } else if constexpr (std::is_same_v<T, double>) {
    __m128d r;
    std::memcpy(&r, &v, sizeof r);
    _mm_stream_pd(p, r);
    return;
  }
#endif
  vstore(p, v);
}

// acc += s * b, rounded once (a fused multiply-add) where the ISA has FMA, else a multiply and an add. The kernels
// that must agree bit for bit (gemm_nn's micro-kernel and the conv filter-gradient register kernel) both use it, so
// their sums do not depend on where the compiler chose to contract a multiply and an add.
template <class V, class T>
inline void vfma(V& acc, T s, const V& b) noexcept {
#if MWSTRAT_ISA_AVX512
  if constexpr (sizeof(V) == 64 && std::is_same_v<T, float>) {
    __m512 a, x;
    std::memcpy(&a, &acc, sizeof a);
    std::memcpy(&x, &b, sizeof x);
    a = _mm512_fmadd_ps(_mm512_set1_ps(s), x, a);
    std::memcpy(&acc, &a, sizeof a);
    return;
  } else if constexpr (sizeof(V) == 64 && std::is_same_v<T, double>) {
    __m512d a, x;
    std::memcpy(&a, &acc, sizeof a);
    std::memcpy(&x, &b, sizeof x);
    a = _mm512_fmadd_pd(_mm512_set1_pd(s), x, a);
    std::memcpy(&acc, &a, sizeof a);
    return;
  }
#endif
#if MWSTRAT_ISA_FMA
  if constexpr (sizeof(V) == 32 && std::is_same_v<T, float>) {
    __m256 a, x;
    std::memcpy(&a, &acc, sizeof a);
    std::memcpy(&x, &b, sizeof x);
    a = _mm256_fmadd_ps(_mm256_set1_ps(s), x, a);
    std::memcpy(&acc, &a, sizeof a);
    return;
  } else if constexpr (sizeof(V) == 32 && std::is_same_v<T, double>) {
    __m256d a, x;
    std::memcpy(&a, &acc, sizeof a);
    std::memcpy(&x, &b, sizeof x);
    a = _mm256_fmadd_pd(_mm256_set1_pd(s), x, a);
    std::memcpy(&acc, &a, sizeof a);
    return;
  } else if constexpr (sizeof(V) == 16 && std::is_same_v<T, float>) {
    __m128 a, x;
    std::memcpy(&a, &acc, sizeof a);
    std::memcpy(&x, &b, sizeof x);
    a = _mm_fmadd_ps(_mm_set1_ps(s), x, a);
    std::memcpy(&acc, &a, sizeof a);
    return;
  } else if constexpr (sizeof(V) == 16 && std::is_same_v<T, double>) {
    __m128d a, x;
    std::memcpy(&a, &acc, sizeof a);
    std::memcpy(&x, &b, sizeof x);
    a = _mm_fmadd_pd(_mm_set1_pd(s), x, a);
    std::memcpy(&acc, &a, sizeof a);
    return;
  }
#endif
  acc += s * b;
}

// a * b + c lane by lane, rounded once where the ISA has FMA (one instruction on x86), else a multiply and an add:
// fmadd's bits in every lane, whatever the compiler contracts, for the element-wise passes that must agree with a
// scalar fmadd elsewhere.
template <class V>
inline V vfmadd(const V& a, const V& b, const V& c) noexcept {
#if MWSTRAT_ISA_FMA || MWSTRAT_ISA_AVX512 || defined(__ARM_FEATURE_FMA)
  using T = std::remove_cvref_t<decltype(a[0])>;
#if MWSTRAT_ISA_FMA || MWSTRAT_ISA_AVX512
  constexpr bool f = std::is_same_v<T, float>, d = std::is_same_v<T, double>;
#if MWSTRAT_ISA_AVX512
  if constexpr (sizeof(V) == 64 && f) return _mm512_fmadd_ps(a, b, c);
  if constexpr (sizeof(V) == 64 && d) return _mm512_fmadd_pd(a, b, c);
#endif
  if constexpr (sizeof(V) == 32 && f) return _mm256_fmadd_ps(a, b, c);
  if constexpr (sizeof(V) == 32 && d) return _mm256_fmadd_pd(a, b, c);
  if constexpr (sizeof(V) == 16 && f) return _mm_fmadd_ps(a, b, c);
  if constexpr (sizeof(V) == 16 && d) return _mm_fmadd_pd(a, b, c);
#endif
  V r;  // elsewhere (AArch64): std::fma lane by lane, as fmadd rounds
  for (std::size_t i = 0; i < sizeof(V) / sizeof(T); ++i) r[i] = std::fma(a[i], b[i], c[i]);
  return r;
#else
  return a * b + c;  // no FMA instruction to contract into
#endif
}

// Keeps a loaded vector in a register for all the FMAs that use it: the empty asm statement stands for an
// instruction that produced the value, so the compiler cannot fold the load into each FMA instead (GCC does so in
// the register tiles when it counts registers as short: on Zen 3 with AVX2 the direct tile<4, 2> then issued 12
// loads per 8 FMAs and ran at ~45% of the FMA peak, load-bound). Changes no bits: the same FMAs in the same order.
template <class V>
inline void in_register(V& v) noexcept {
#if MWSTRAT_ISA_AVX512
  asm("" : "+v"(v));
#elif MWSTRAT_ISA_AVX || MWSTRAT_ISA_SSE2
  asm("" : "+x"(v));
#elif defined(__aarch64__)
  asm("" : "+w"(v));
#else
  (void)v;
#endif
}

// a * b + c, rounded once (std::fma, one instruction) where the ISA has FMA, else a multiply and an add: the same
// bits at every call site, whatever the compiler contracts elsewhere. Batch norm's inference map and the
// convolution that applies it to its input (graph executor's folding) both use it.
template <class T>
inline T fmadd(T a, T b, T c) noexcept {
#if MWSTRAT_ISA_FMA || MWSTRAT_ISA_AVX512 || defined(__ARM_FEATURE_FMA)
  return std::fma(a, b, c);
#else
  return a * b + c;  // no FMA instruction to contract into
#endif
}

/// Orders earlier non-temporal stores before later stores (before another thread may read them).
inline void stream_fence() noexcept {
#if MWSTRAT_ISA_SSE2 || MWSTRAT_ISA_AVX || MWSTRAT_ISA_AVX512
  _mm_sfence();
#endif
}

/// Whether p is 64-byte (cache-line) aligned: enough for vstream at every vector width.
inline bool line_aligned(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
