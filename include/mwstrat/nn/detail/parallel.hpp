#pragma once
// Deterministic task parallelism: work is cut into tasks by the problem's shape only (never by the number of
// threads), each task owns its outputs, and any cross-task sum is taken afterwards in a fixed order.

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <cstddef>

namespace mwstrat::detail {

/// Runs f(i) for i in [0, n), each index as one task, in the current task arena.
template <class F>
void parallel_tasks(std::size_t n, F&& f) {
  if (n == 0) return;
  if (n == 1) {
    f(std::size_t{0});
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, n, 1),
      [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) f(i);
      },
      tbb::simple_partitioner{});
}

/// Cuts [0, n) into ceil(n / grain) tasks of `grain` elements and runs f(begin, end) for each.
template <class F>
void parallel_chunks(std::size_t n, std::size_t grain, F&& f) {
  if (grain == 0) grain = 1;
  const std::size_t tasks = (n + grain - 1) / grain;
  parallel_tasks(tasks, [&](std::size_t t) {
    const std::size_t begin = t * grain;
    const std::size_t end = begin + grain < n ? begin + grain : n;
    f(begin, end);
  });
}

constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept { return (a + b - 1) / b; }
constexpr std::size_t round_up(std::size_t a, std::size_t b) noexcept { return ceil_div(a, b) * b; }

}  // namespace mwstrat::detail
