#pragma once
/// \file
/// `host_arena`: one shared-memory region that every rank of a ring maps when all of them run on one host, laid
/// out as [parameters | gradients of rank 0 | … | gradients of rank n−1]: one copy of the parameters that every
/// replica reads, and a gradient buffer per rank that every rank can read.
///
/// With it a mirrored step copies nothing: after backward each rank averages one segment straight from everyone's
/// gradients — in the ring's order of combination, so the result has the ring's bits — and updates that segment
/// of the one parameter copy; a barrier before (every rank's gradients are final) and one after (every segment is
/// updated, so nobody reads parameters that are still changing) are the only messages. The barriers are ring
/// operations, so a rank that dies or stops is reported exactly as in any other operation. See
/// docs/collectives.md.
///
/// This header needs nothing of the ring: ring_collective.hpp includes it and declares the ring's `make_host_arena`
/// with the ring itself, so no translation unit can see the ring without it, whatever it included first.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/types.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// One shared parameter copy and every rank's gradients, for the ranks of a ring on one host.
class host_arena {
 public:
  /// Collective call: every rank of `ring` (a `ring_collective`) calls it, in the same order as its other
  /// operations. Returns the arena of `count` parameters when every rank's links carry their payloads through shared
  /// memory (the ring is one host) and every rank could map the region; otherwise nullopt on every rank, with the
  /// reason in `*why`. The region starts zeroed; its name exists only until every rank has mapped it. `ring` must
  /// outlive the arena.
  template <collective Ring>
    requires requires(const Ring& r) { { r.uses_shared_memory() } -> std::same_as<bool>; }
  static std::optional<host_arena> open(Ring& ring, std::size_t count, std::string* why = nullptr) {
    const auto fail = [&](std::string reason) -> std::optional<host_arena> {
      if (why) *why = std::move(reason);
      return std::nullopt;
    };
    const int n = ring.size();
    if (n < 2) return fail("one rank: nothing to share");
    std::int64_t everyone_shares = ring.uses_shared_memory() ? 1 : 0;
    ring.all_reduce(std::span<std::int64_t>(&everyone_shares, 1), reduce_op::min);
    if (everyone_shares == 0) return fail("not every rank's links use shared memory (not one host, or tcp chosen)");

    host_arena a;
    a.ring_ = &ring;
    a.barrier_ = [](void* r, op_options o) { static_cast<Ring*>(r)->barrier(o); };
    a.rank_ = ring.rank();
    a.size_ = n;
    a.count_ = count;
    a.stride_ = (count + floats_per_line - 1) / floats_per_line * floats_per_line;  // each buffer on its own lines
    const std::size_t bytes = std::max<std::size_t>(1, (1 + static_cast<std::size_t>(n)) * a.stride_) * sizeof(float);

    // Rank 0 creates the region and tells the others its name: [status, name in 8 × 8 bytes].
    std::array<std::int64_t, 1 + detail::shm_name_size / 8> offer{};
    std::string local_why;
    if (ring.rank() == 0) {
      local_why = a.region_.create(detail::shm_directory, 1, bytes);
      if (local_why.empty()) {
        offer[0] = 1;
        std::memcpy(offer.data() + 1, a.region_.name().data(), a.region_.name().size());
      }
    }
    ring.broadcast(std::span<std::int64_t>(offer), 0);
    if (ring.rank() != 0) {
      if (offer[0] == 1) {
        char name[detail::shm_name_size + 1] = {};
        std::memcpy(name, offer.data() + 1, detail::shm_name_size);
        local_why = a.region_.open_shared(detail::shm_directory, name, bytes);
      } else {
        local_why = "rank 0 could not create the region";
      }
    }
    // Every rank learns whether all of them hold it; then the name goes (the mappings stay).
    std::int64_t mapped = local_why.empty() ? 1 : 0;
    ring.all_reduce(std::span<std::int64_t>(&mapped, 1), reduce_op::min);
    a.region_.unlink();
    if (mapped == 0) return fail(local_why.empty() ? "another rank could not map the region" : local_why);
    a.scratch_.resize(n > 2 ? chunk : 0);
    return a;
  }

  host_arena(host_arena&&) noexcept = default;
  host_arena& operator=(host_arena&&) noexcept = default;
  host_arena(const host_arena&) = delete;
  host_arena& operator=(const host_arena&) = delete;

  /// The one copy of the parameters (`count` floats, 64-byte aligned).
  [[nodiscard]] std::span<float> parameters() const { return {base(), count_}; }
  /// This rank's gradients (`count` floats, 64-byte aligned).
  [[nodiscard]] std::span<float> gradients() const { return gradients_of(rank_); }
  /// Rank `r`'s gradients.
  [[nodiscard]] std::span<float> gradients_of(int r) const {
    return {base() + (1 + static_cast<std::size_t>(r)) * stride_, count_};
  }

  /// Collective call. Waits until every rank's gradients are final; then means segment rank() of all of them
  /// into this rank's gradients, chunk by chunk, calling `update(first, count)` on each chunk while it is in
  /// cache (gradients()[first, first + count) hold the mean; the call must update parameters()[first, first +
  /// count) from them, touch nothing else, and not throw); then waits until every rank has updated its segment.
  /// Element e of segment k is combined as (((x₍k₎ + x₍k+1₎) + x₍k+2₎) + …) / n, as the ring's all-reduce does.
  template <class Update>
  void mean_and_update(Update&& update, op_options options = {}) {
    std::atomic_thread_fence(std::memory_order_release);  // this rank's gradients before the barrier says so
    barrier_(ring_, options);
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::size_t n = static_cast<std::size_t>(size_), k = static_cast<std::size_t>(rank_);
    const std::size_t first = k * count_ / n, last = (k + 1) * count_ / n;
    float* mine = gradients().data();
    const auto other = [&](std::size_t step) { return gradients_of(static_cast<int>((k + step) % n)).data(); };
    const auto divisor = static_cast<float>(n);
    for (std::size_t c = first; c < last; c += chunk) {
      const std::size_t len = std::min(chunk, last - c);
      float* __restrict out = mine + c;
      if (n == 2) {
        const float* __restrict in = other(1) + c;
        for (std::size_t i = 0; i < len; ++i) out[i] = (out[i] + in[i]) / divisor;
      } else {
        float* acc = scratch_.data();
        std::memcpy(acc, out, len * sizeof(float));
        for (std::size_t s = 1; s < n; ++s) detail::reduce_into(acc, other(s) + c, len, reduce_op::sum);
        for (std::size_t i = 0; i < len; ++i) out[i] = acc[i] / divisor;
      }
      update(c, len);
    }
    std::atomic_thread_fence(std::memory_order_release);  // this segment's parameters before the barrier
    barrier_(ring_, options);
    std::atomic_thread_fence(std::memory_order_acquire);
  }

 private:
  static constexpr std::size_t floats_per_line = 64 / sizeof(float);
  static constexpr std::size_t chunk = 16384;  // 64 KiB of each input: the chunk's update finds it in L2

  host_arena() = default;
  [[nodiscard]] float* base() const { return reinterpret_cast<float*>(region_.data()); }

  // The ring, seen only through its barrier (one call per barrier, not per element).
  void* ring_ = nullptr;
  void (*barrier_)(void*, op_options) = nullptr;
  int rank_ = 0, size_ = 0;
  detail::shm_region region_;
  std::size_t count_ = 0, stride_ = 0;
  std::vector<float> scratch_;  // the running sum of a chunk when more than two ranks add up
};

}  // namespace mwstrat
