#pragma once
// The deadline `timeout` from now, saturating at the clock's end: a timeout of years (milliseconds::max(), "never")
// would otherwise overflow now() + timeout into a deadline in the past, and every operation would time out at once.

#include <chrono>

namespace mwstrat::detail {

template <class Rep, class Period>
[[nodiscard]] std::chrono::steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> timeout) {
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  const auto room = clock::time_point::max() - now;  // what the clock can still add, in its own unit
  if (timeout >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(room)) return clock::time_point::max();
  return now + std::chrono::duration_cast<clock::duration>(timeout);
}

}  // namespace mwstrat::detail
