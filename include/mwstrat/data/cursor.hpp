#pragma once
/// \file
/// `data_cursor`: where a job is in its data, as three integers a checkpoint can store; and `stream_position`,
/// which places a training step in the endless stream of passes a repeated pipeline reads.

#include <cstdint>

namespace mwstrat::data {

/// The position of a distributed input in its data: the next global step to produce. Plain data (three
/// integers); the same on every worker, since it counts global steps, not per-worker examples. Restoring it
/// (`distributed_batches::restore`) yields exactly the batches an uninterrupted run would have produced next;
/// with data sharding also with a different number of workers, as long as the global batch and the data set are
/// unchanged (file sharding gives each worker count its own split of the files).
///
/// `epoch` counts *passes over the data*, which are not `fit`'s epochs when `steps_per_epoch` differs from a
/// pass: training input is a repeated pipeline (tf.data's `.repeat()`), each pass in its own shuffled order, and
/// a `fit` epoch of 1.5 passes ends in the middle of the second one (`stream_position`).
struct data_cursor {
  std::uint64_t epoch = 0;  ///< passes over the data completed (the pass being read, 0-based)
  std::uint64_t step = 0;   ///< global steps completed in the current pass, in [0, steps of a pass)
  std::uint64_t seed = 0;   ///< the shuffle seed; each pass's order is a function of (seed, pass) only

  friend constexpr bool operator==(const data_cursor&, const data_cursor&) = default;
};

/// The cursor of global step `global_step` (0-based, counted from the start of training) of a repeated pipeline
/// whose passes have `steps_per_pass` steps: pass ⌊global_step / steps_per_pass⌋, the remainder its step. A
/// `steps_per_pass` of 0 (an empty pass) is treated as 1, so that the division is defined; callers refuse it first.
[[nodiscard]] constexpr data_cursor stream_position(std::uint64_t global_step, std::uint64_t steps_per_pass,
                                                    std::uint64_t seed = 0) noexcept {
  const std::uint64_t pass_steps = steps_per_pass == 0 ? 1 : steps_per_pass;
  return {global_step / pass_steps, global_step % pass_steps, seed};
}

}  // namespace mwstrat::data
