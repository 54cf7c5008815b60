#pragma once
// 64-byte aligned storage for arenas and activations (whole cache lines, aligned vector loads).

#include <cstddef>
#include <new>
#include <vector>

namespace mwstrat::detail {

template <class T>
struct aligned_allocator {
  using value_type = T;
  static constexpr std::align_val_t alignment{64};
  aligned_allocator() noexcept = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), alignment)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, alignment); }
  template <class U>
  bool operator==(const aligned_allocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

}  // namespace mwstrat::detail
