#pragma once
// Portable 64-byte vectors (GCC/Clang vector extensions): one AVX-512 register with -march=native, split into
// narrower registers by the compiler elsewhere. Vectors never cross a function boundary by value (psABI).

#include <cstddef>
#include <cstring>

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

}  // namespace mwstrat::detail
