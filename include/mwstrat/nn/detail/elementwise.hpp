// Elementwise loops written once for a scalar and for a whole register of lanes (detail/simd.hpp's vectors):
// `for_each_lane_block` calls a generic body with the vector type over whole vectors, then with the scalar type
// over the tail, and the helpers here (load, store, square root, clamp) take either. The operations per element
// are the same in both, so the bits do not depend on where a vector starts.
//
// Why by hand: compilers do not vectorise std::sqrt under the default -fmath-errno (it may set errno for a
// negative input), which made Adam, RMSprop and Adagrad ~4x slower than their memory traffic; a header-only
// library cannot change its users' flags. IEEE square root is correctly rounded, so the vector instruction gives
// the scalar call's bits.


#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

/// The `V` (a scalar T or vec_t<T>) starting at p.
template <class V, class T>
inline V load_lanes(const T* p) noexcept {
  if constexpr (std::is_same_v<V, T>) {
    return *p;
  } else {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
}

/// Stores `v` (a scalar T or vec_t<T>) at p.
template <class V, class T>
inline void store_lanes(T* p, const V& v) noexcept {
  if constexpr (std::is_same_v<V, T>) {
    *p = v;
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

/// The square root of each lane, correctly rounded (std::sqrt's bits), without the errno check.
template <class V>
inline V sqrt_lanes(const V& x) noexcept {
  if constexpr (std::is_floating_point_v<V>) {
    return std::sqrt(x);
  } else {
    using T = std::remove_cvref_t<decltype(x[0])>;
    V r;
#if MWSTRAT_ISA_AVX512
    if constexpr (sizeof(V) == 64 && std::is_same_v<T, float>) {
      __m512 a;
      std::memcpy(&a, &x, sizeof a);
      a = _mm512_maskz_sqrt_ps(0xFFFF, a);  // (maskz: GCC 12 warns on the plain form's undefined source)
      std::memcpy(&r, &a, sizeof r);
      return r;
    } else if constexpr (sizeof(V) == 64 && std::is_same_v<T, double>) {
      __m512d a;
      std::memcpy(&a, &x, sizeof a);
      a = _mm512_maskz_sqrt_pd(0xFF, a);
      std::memcpy(&r, &a, sizeof r);
      return r;
    }
#endif
#if MWSTRAT_ISA_AVX
    if constexpr (sizeof(V) == 32 && std::is_same_v<T, float>) {
      __m256 a;
      std::memcpy(&a, &x, sizeof a);
      a = _mm256_sqrt_ps(a);
      std::memcpy(&r, &a, sizeof r);
      return r;
    } else if constexpr (sizeof(V) == 32 && std::is_same_v<T, double>) {
      __m256d a;
      std::memcpy(&a, &x, sizeof a);
      a = _mm256_sqrt_pd(a);
      std::memcpy(&r, &a, sizeof r);
      return r;
    }
#endif
#if MWSTRAT_ISA_SSE2
    if constexpr (sizeof(V) == 16 && std::is_same_v<T, float>) {
      __m128 a;
      std::memcpy(&a, &x, sizeof a);
      a = _mm_sqrt_ps(a);
      std::memcpy(&r, &a, sizeof r);
      return r;
    } else if constexpr (sizeof(V) == 16 && std::is_same_v<T, double>) {
      __m128d a;
      std::memcpy(&a, &x, sizeof a);
      a = _mm_sqrt_pd(a);
      std::memcpy(&r, &a, sizeof r);
      return r;
    }
#endif
    for (std::size_t k = 0; k < sizeof(V) / sizeof(T); ++k) r[k] = std::sqrt(x[k]);  // another ISA: lane by lane
    return r;
  }
}

/// Each lane of `x` clamped to [lo, hi] as std::clamp does it (a NaN stays NaN).
template <class V, class T>
inline V clamp_lanes(V x, T lo, T hi) noexcept {
  const V low = V{} + lo, high = V{} + hi;  // every lane (a scalar V: the value itself)
  x = x < low ? low : x;
  return high < x ? high : x;
}

/// body.template operator()<V>(i) for i in [begin, end): V = vec_t<T> over whole vectors, then V = T for the tail;
/// with `vectors` false, V = T throughout (a body that only takes scalars).
template <class T, bool vectors = true, class Body>
inline void for_each_lane_block(std::size_t begin, std::size_t end, Body&& body) {
  std::size_t i = begin;
  if constexpr (vectors) {
    constexpr std::size_t lanes = static_cast<std::size_t>(lanes_v<T>);
    for (; i + lanes <= end; i += lanes) body.template operator()<vec_t<T>>(i);
  }
  for (; i < end; ++i) body.template operator()<T>(i);
}

// y = (x − mean)·scale + shift (a layer_impl.hpp channel_map's rule), with fmadd's rounding on every path.
template <class T>
inline T apply_channel_map(T x, T mean, T scale, T shift) noexcept {
  return fmadd(x - mean, scale, shift);
}

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
