#pragma once
// Portable 64-byte vectors (GCC/Clang vector extensions): one AVX-512 register with -march=native, split into
// narrower registers by the compiler elsewhere. Vectors never cross a function boundary by value (psABI).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace mwstrat::detail {

template <class T>
struct simd {
  static constexpr int lanes = static_cast<int>(64 / sizeof(T));
  typedef T vec __attribute__((vector_size(64)));
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

// Non-temporal store of a whole vector to 64-byte aligned memory: the line goes straight to memory without being
// read first (write-allocate), for large outputs that will not be read again soon. Plain store where the ISA has
// none; the bits stored are the same either way.
template <class V, class T>
inline void vstream(T* p, const V& v) noexcept {
  static_assert(sizeof(V) == 64);
#if defined(__AVX512F__)
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
#elif defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    __m256 r[2];
    std::memcpy(r, &v, sizeof r);
    _mm256_stream_ps(p, r[0]);
    _mm256_stream_ps(p + 8, r[1]);
    return;
  } else if constexpr (std::is_same_v<T, double>) {
    __m256d r[2];
    std::memcpy(r, &v, sizeof r);
    _mm256_stream_pd(p, r[0]);
    _mm256_stream_pd(p + 4, r[1]);
    return;
  }
#endif
  vstore(p, v);
}

/// Orders earlier non-temporal stores before later stores (before another thread may read them).
inline void stream_fence() noexcept {
#if defined(__SSE2__) || defined(__AVX__) || defined(__AVX512F__)
  _mm_sfence();
#endif
}

/// Whether p is 64-byte aligned (vstream's requirement).
inline bool line_aligned(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

}  // namespace mwstrat::detail
