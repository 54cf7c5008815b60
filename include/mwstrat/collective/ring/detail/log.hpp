#pragma once
// The ring's log writer: its lines go to `ring_options::log` or, when none is set, to standard error. Rank lines
// ("[mwstrat.ring] rank r: ..."), job lines ("[mwstrat] ..."), and the job line that says where the ranks are
// (`hosts_line`, a pure function of what the topology finder found).

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/ring/detail/topology.hpp>
#include <mwstrat/collective/ring/options.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

inline void write_ring_line(const ring_options& options, const std::string& line) {
  if (options.log) {
    options.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
}

// One rank's line ("[mwstrat.ring] rank r: ...").
inline void ring_log(const ring_options& options, int rank, const std::string& text) {
  write_ring_line(options, "[mwstrat.ring] rank " + std::to_string(rank) + ": " + text);
}

// A line about the whole job ("[mwstrat] ...").
inline void ring_announce(const ring_options& options, const std::string& text) {
  write_ring_line(options, "[mwstrat] " + text);
}

// What rank 0 says once the rings are up: "4 workers on 2 hosts (10.9.0.1: ranks 0,1 shared memory; 10.9.0.2: ranks
// 2,3 shared memory); tcp ring between hosts (each host's ranks carry a part)". `hosts` are the ranks' parsed
// addresses, `shm_of` whether each rank's host links carry payloads through shared memory, `between` how the hosts are
// joined ("" on one host), `narrowed` whether a ring narrows the wire as `options.compression` asks.
inline std::string hosts_line(const host_layout& layout, const std::vector<mwstrat::address>& hosts,
                              std::span<const std::int64_t> shm_of, const std::string& between,
                              const ring_options& options, bool narrowed) {
  const int n = static_cast<int>(hosts.size());
  const int h_count = layout.hosts();
  std::string text = std::to_string(n) + " workers on " + std::to_string(h_count);
  text += h_count == 1 ? " host (" : " hosts (";
  const auto& members = layout.members;
  for (std::size_t h = 0; h < members.size(); ++h) {
    const auto& m = members[h];
    std::string label = hosts[static_cast<std::size_t>(m.front())].host;
    for (std::size_t g = 0; g < members.size(); ++g)
      if (g != h && hosts[static_cast<std::size_t>(members[g].front())].host == label) {
        label += " #" + std::to_string(h);  // simulated hosts on one address: told apart by their index
        break;
      }
    if (h) text += "; ";
    text += label;
    text += m.size() == 1 ? ": rank " : ": ranks ";
    bool all_shm = true;
    for (std::size_t k = 0; k < m.size(); ++k) {
      if (k) text += ',';  // appended apart: GCC 12 -O3 takes "literal" + string for an overlapping copy
      text += std::to_string(m[k]);
      all_shm = all_shm && shm_of[static_cast<std::size_t>(m[k])] != 0;
    }
    if (m.size() > 1) text += all_shm ? " shared memory" : " tcp";
  }
  text += ")";
  if (!between.empty()) text += "; " + between;
  if (h_count > 1 && options.compression != wire_compression::none) {
    text += !narrowed ? ", compression off (a flat ring through ranks of one host)"
            : options.compression == wire_compression::bf16 ? ", bf16 on the wire" : ", fp16 on the wire";
  }
  if (h_count > 1 && options.streams_per_peer > 1)
    text += ", " + std::to_string(options.streams_per_peer) + " tcp streams per link between hosts";
  // What frames between hosts carry (frame_seal.hpp): said only when they are sealed, so plain jobs log as before.
  if (h_count > 1 && !options.job_token.value_or(std::string()).empty())
    text += options.encrypt ? "; frames between hosts encrypted (AES-256-GCM)"
                            : "; frames between hosts authenticated (AES-256-GCM tag)";
  return text;
}

}  // namespace mwstrat::detail
