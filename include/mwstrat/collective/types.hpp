#pragma once
/// \file
/// Value types shared by every collective backend: the reduction operations, per-call options and the element
/// types a collective moves.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace mwstrat {

/// How `all_reduce` combines the ranks' values, element by element.
///
/// `mean` is the sum divided by the number of ranks; for integer elements the division truncates towards zero.
/// Every backend reduces in a fixed order, so the same inputs give the same bits on every rank and every run.
enum class reduce_op : std::uint8_t { sum = 1, mean = 2, min = 3, max = 4 };

/// The stable name of a reduction, as used in logs and error messages.
[[nodiscard]] constexpr std::string_view to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::mean: return "mean";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
  }
  return "unknown";
}

/// Per-call options of a collective operation.
struct op_options {
  /// The deadline of the whole operation, counted from the call; zero means the backend's default
  /// (`local_options::op_timeout`, `ring_options::op_timeout`).
  std::chrono::milliseconds timeout{0};
};

/// The element types every collective backend reduces, broadcasts and gathers.
template <class T>
concept collective_element = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t> ||
                             std::same_as<T, std::int64_t>;

}  // namespace mwstrat
