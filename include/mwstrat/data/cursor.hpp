#pragma once
/// \file
/// `data_cursor`: where a job is in its data, as three integers a checkpoint can store.

#include <cstdint>

namespace mwstrat::data {

/// The position of a distributed input in its data: the next global step to produce. Plain data (three
/// integers); the same on every worker, since it counts global steps, not per-worker examples. Restoring it
/// (`distributed_batches::restore`) yields exactly the batches an uninterrupted run would have produced next,
/// also with a different number of workers, as long as the global batch and the data set are unchanged.
struct data_cursor {
  std::uint64_t epoch = 0;  ///< epochs completed
  std::uint64_t step = 0;   ///< global steps completed in the current epoch, in [0, steps_per_epoch)
  std::uint64_t seed = 0;   ///< the shuffle seed; each epoch's order is a function of (seed, epoch) only

  friend constexpr bool operator==(const data_cursor&, const data_cursor&) = default;
};

}  // namespace mwstrat::data
