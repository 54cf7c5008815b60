#pragma once
// Whether the gradient reduction should overlap backward (reduction_overlap::automatic), from the host topology.
//
// Overlap pays when the reduction mostly waits (on a network, or on cores that backward leaves idle). When several
// replicas share a machine and their compute threads already take all of its CPUs, the reduction is memory copies
// that can only run on those same cores: overlapping then interleaves them with the matrix kernels (context
// switches, caches refilled) and the step gets slower — 2 workers × 1 thread on 2 cores trained ~3% faster without
// it (median of 14 interleaved pairs; benchmarks/history/2026-passes-1-6.md). Whether to overlap never changes
// which elements are summed, only the bucket boundaries (which, with three or more replicas, can change the last
// bits of the mean: gradient_sync_options.hpp); every replica takes the same decision from the same gathered facts.

#include <mwstrat/detail/hash.hpp>
#include <mwstrat/detail/host_identity.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat::detail {

// What one replica tells the others for the decision: its machine, its compute threads (0: unknown) and the CPUs
// it may run on.
struct replica_load {
  std::int64_t host = 0;
  std::int64_t threads = 0;
  std::int64_t cpus = 1;
};

// A digest of the running kernel instance (its boot id, random per boot): replicas with equal keys share CPUs,
// containers on one kernel included, whatever their hostnames. Without /proc, the hostname stands in.
inline std::int64_t host_key() {
  std::string id = kernel_boot_id();
  if (id.empty()) id = "host:" + host_name();
  return static_cast<std::int64_t>(fnv1a64(id));
}

// CPUs this process may run on (its affinity mask, which containers and taskset narrow).
inline std::int64_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::thread::hardware_concurrency()));
}

// True when some machine runs more than one replica and their known threads fill its CPUs (the fewest any of
// them may use). A replica of unknown threads makes its machine count as not full.
inline bool some_host_is_full(std::span<const replica_load> replicas) {
  struct host_total {
    std::int64_t replicas = 0, threads = 0, cpus = 0;
    bool unknown = false;
  };
  std::map<std::int64_t, host_total> hosts;
  for (const auto& r : replicas) {
    auto& h = hosts[r.host];
    h.cpus = h.replicas == 0 ? r.cpus : std::min(h.cpus, r.cpus);
    ++h.replicas;
    h.threads += r.threads;
    h.unknown = h.unknown || r.threads <= 0;
  }
  return std::any_of(hosts.begin(), hosts.end(), [](const auto& kv) {
    const host_total& h = kv.second;
    return h.replicas > 1 && !h.unknown && h.threads >= h.cpus;
  });
}

// The decision, taken identically by every rank of `collective` (one all-gather for `automatic`; call it on all of
// them at the same point).
template <class Collective, class Model>
bool overlap_reduction(Collective& collective, const Model& model, reduction_overlap policy) {
  if (policy != reduction_overlap::automatic) return policy == reduction_overlap::always;
  replica_load mine;
  mine.host = host_key();
  if constexpr (model_with_threads<Model>) mine.threads = static_cast<std::int64_t>(model.threads());
  mine.cpus = usable_cpus();
  const auto n = static_cast<std::size_t>(collective.size());
  const std::array<std::int64_t, 3> packed{mine.host, mine.threads, mine.cpus};
  std::vector<std::int64_t> all(3 * n);
  collective.all_gather(std::span<const std::int64_t>(packed), std::span<std::int64_t>(all));
  std::vector<replica_load> replicas(n);
  for (std::size_t r = 0; r < n; ++r) replicas[r] = {all[3 * r], all[3 * r + 1], all[3 * r + 2]};
  return !some_host_is_full(replicas);
}

}  // namespace mwstrat::detail
