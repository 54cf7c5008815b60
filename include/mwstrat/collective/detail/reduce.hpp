#pragma once
// Element-wise reduction kernels shared by the backends. Plain loops the compiler vectorises; the order of
// combination is fixed by the caller, which is what makes results deterministic.

#include <mwstrat/collective/types.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace mwstrat::detail {

// True for a NaN (the only value unequal to itself); integers have none.
template <class T>
constexpr bool is_nan_value(T v) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    (void)v;
    return false;
  }
}

template <class T>
inline void reduce_into(T* __restrict acc, const T* __restrict in, std::size_t n, reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::mean:
      if constexpr (std::is_integral_v<T>) {
        // Integers wrap around on overflow, as two's complement does, instead of the undefined signed overflow.
        using U = std::make_unsigned_t<T>;
        for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(in[i]));
      } else {
        for (std::size_t i = 0; i < n; ++i) acc[i] += in[i];
      }
      break;
    // A NaN on any rank makes the element NaN, in whatever order the ranks combine (as numpy's minimum and
    // PyTorch's amin do): a NaN in `acc` stays, since no comparison with it is true, and one in `in` is taken.
    case reduce_op::min:
      for (std::size_t i = 0; i < n; ++i) acc[i] = (in[i] < acc[i] || is_nan_value(in[i])) ? in[i] : acc[i];
      break;
    case reduce_op::max:
      for (std::size_t i = 0; i < n; ++i) acc[i] = (acc[i] < in[i] || is_nan_value(in[i])) ? in[i] : acc[i];
      break;
  }
}

// Turns a sum over `ranks` ranks into the mean; a no-op for other operations.
template <class T>
inline void finish_reduce(T* data, std::size_t n, reduce_op op, int ranks) noexcept {
  if (op != reduce_op::mean || ranks == 1) return;
  const T divisor = static_cast<T>(ranks);
  for (std::size_t i = 0; i < n; ++i) data[i] /= divisor;
}

enum class wire_dtype : std::uint8_t { f32 = 1, f64 = 2, i32 = 3, i64 = 4 };

template <class T>
constexpr wire_dtype dtype_of() noexcept {
  if constexpr (std::is_same_v<T, float>) return wire_dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return wire_dtype::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return wire_dtype::i32;
  else return wire_dtype::i64;
}

constexpr const char* dtype_name(wire_dtype t) noexcept {
  switch (t) {
    case wire_dtype::f32: return "float";
    case wire_dtype::f64: return "double";
    case wire_dtype::i32: return "int32";
    case wire_dtype::i64: return "int64";
  }
  return "?";
}

constexpr std::size_t dtype_size(wire_dtype t) noexcept {
  return (t == wire_dtype::f64 || t == wire_dtype::i64) ? 8 : 4;
}

// Which operation a message or rendezvous belongs to (also on the wire).
// broadcast_check: the all-reduce before a ring's broadcast in which the ranks compare their roots, types and counts.
enum class op_kind : std::uint8_t {
  all_reduce = 1,
  broadcast = 2,
  all_gather = 3,
  barrier = 4,
  all_reduce_update = 5,
  broadcast_check = 6
};

constexpr const char* op_name(op_kind k) noexcept {
  switch (k) {
    case op_kind::all_reduce: return "all_reduce";
    case op_kind::broadcast: return "broadcast";
    case op_kind::all_gather: return "all_gather";
    case op_kind::barrier: return "barrier";
    case op_kind::all_reduce_update: return "all_reduce_update";
    case op_kind::broadcast_check: return "broadcast_check";
  }
  return "?";
}

}  // namespace mwstrat::detail
