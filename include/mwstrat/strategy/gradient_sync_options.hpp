#pragma once
/// \file
/// `gradient_sync_options`: how a strategy turns each step's gradients into the update — whether the all-reduce
/// overlaps backward, in buckets of what size, and where the optimizer's update runs. A small value held by the
/// strategy (`mirrored_strategy`'s constructor, `communication_options::gradient_sync`), as TensorFlow keeps its
/// `CommunicationOptions` with the strategy; `fit` never sees it.
///
/// Every placement of the update gives the same bits (the same elements are summed in the same order; an
/// elementwise update of an element reads only its own parameter and gradient). Overlap and `bucket_bytes` decide
/// where the gradient is cut into all-reduces: with two replicas that changes no bit (a sum of two terms is the same
/// in either order), but with three or more the ring adds an element's terms starting from the rank that owns its
/// part of the bucket, so another cut can change the last bits of the mean (3 ranks, buckets of one layer against
/// one all-reduce: about a quarter of the elements differ, in their last bit). A fixed choice gives the same bits on
/// every replica and in every run; `automatic` overlap depends on the hosts' CPUs, so with three or more replicas
/// two clusters of different machines may round differently. Otherwise the options trade only speed and memory.
///
/// `automatic` decides as follows, the same way on every replica:
///   1. overlap: reduce in buckets while backward runs, unless some machine runs more than one replica and their
///      compute threads already take all its CPUs (then the reduction's copies could only steal those cores).
///      "Machine" is the kernel instance (boot id), not the host identity (`MWSTRAT_HOST_ID`): replicas declared
///      on different hosts but sharing one machine's CPUs (scripts/simhosts) count as one full machine. Measured
///      so (2026-11-24, MNIST CNN, 2 simulated hosts x 1 worker x 1 thread on 2 shared cores, bf16 mirrored update,
///      overlap always vs never alternating, 3 pairs each, a quiet machine, after Dense's first reported part was
///      made to fill a default bucket — before, the tutorial CNN's gradient left in one bucket after backward and
///      overlap overlapped nothing): at 10 Gbit/s overlap is slower (0.92x: the split product and the pump's copies
///      take CPU the other replica's compute needs), at 1 Gbit/s it wins 1.10x (the link is the bottleneck). The
///      rule stays. On real separate hosts (one replica per machine) it overlaps; a job whose hosts share CPUs
///      behind a slow link should ask for `always`;
///   2. without overlap, the update: one shared parameter copy per host (`shared_host_copy`) when every replica
///      runs on one host with shared memory, the model can adopt storage and the optimizer is elementwise without
///      slots; else `sharded` when the optimizer is elementwise without slots and the collective fuses the update
///      with the all-reduce; else `replicated`.
///
/// An explicit `update` is a request honoured where the job can honour it, else it falls back along
/// `shared_host_copy` → `sharded` → `replicated` (as TensorFlow's NCCL request falls back to its ring on CPUs):
/// what a placement needs (one host, a fusing collective, an optimizer without slots) depends on where the job
/// runs, and every placement gives the same bits, so the same program stays correct everywhere. The placement
/// taken is reported by the synchroniser (`placement()`). Options that contradict themselves are refused with a
/// `config_error` when the strategy is made: `bucket_bytes` of 0, or `overlap = always` with a `sharded` or
/// `shared_host_copy` update (both need the whole gradient after backward). An explicit `sharded` or
/// `shared_host_copy` update makes `automatic` overlap resolve to no overlap.

#include <mwstrat/error.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mwstrat {

/// Whether the gradient all-reduce runs in buckets while backward still runs.
enum class reduction_overlap {
  /// Overlap, except when on some machine more than one replica runs and their compute threads (the model's
  /// `threads()`, `model_with_threads`) add up to at least the CPUs there: then reduce once after backward.
  /// A model that does not say how many threads it uses counts as leaving room (overlap).
  automatic,
  always,  ///< buckets of `gradient_sync_options::bucket_bytes`, sent as backward makes them ready
  never,   ///< one all-reduce of every gradient after backward
};

/// Where the optimizer's update runs once the gradients are reduced.
enum class update_placement {
  automatic,   ///< the first of `shared_host_copy`, `sharded`, `replicated` that the job can run (file comment)
  replicated,  ///< every replica updates every parameter after a mean all-reduce
  /// Each replica updates only the part of the parameters it finished reducing (the collective's fused
  /// `all_reduce_update`), then the updated parameters are gathered: 1/N of the update's work on each of N.
  sharded,
  /// The replicas of one host keep one copy of the parameters and their gradients in one shared region for the
  /// length of `fit`; each means its part of the gradients straight from the others' and updates its part.
  shared_host_copy,
};

/// The stable name of a placement, for messages and logs.
[[nodiscard]] constexpr std::string_view to_string(update_placement p) noexcept {
  switch (p) {
    case update_placement::automatic: return "automatic";
    case update_placement::replicated: return "replicated";
    case update_placement::sharded: return "sharded";
    case update_placement::shared_host_copy: return "shared_host_copy";
  }
  return "unknown";
}

/// How a strategy synchronises gradients (see the file comment for `automatic` and the fallback rule).
struct gradient_sync_options {
  reduction_overlap overlap = reduction_overlap::automatic;  ///< whether the reduction overlaps backward
  /// Bucket size when overlapping: whole reported slices (layers, or a large dense kernel's two parts).
  std::size_t bucket_bytes = std::size_t{4} << 20;
  update_placement update = update_placement::automatic;  ///< where the update runs
};

namespace detail {
// Refuses options that contradict themselves; `rank` names the replica in the message.
inline void validate(const gradient_sync_options& o, std::optional<int> rank) {
  if (o.bucket_bytes == 0) {
    throw config_error({"strategy", rank}, "gradient_sync_options.bucket_bytes is 0: a bucket holds at least one "
                                           "gradient (reduction_overlap::never reduces once after backward)");
  }
  if (o.overlap == reduction_overlap::always &&
      (o.update == update_placement::sharded || o.update == update_placement::shared_host_copy)) {
    throw config_error({"strategy", rank}, "gradient_sync_options: overlap = always contradicts update = " +
                                               std::string(to_string(o.update)) +
                                               ": that update needs the whole gradient after backward");
  }
}
}  // namespace detail

}  // namespace mwstrat
