#pragma once
// The topology finder: which ranks of a ring share a host. Pure functions of the host digests every rank sent in its
// handshake (gathered over the flat ring once it is up), tested without sockets; the builder (builder.hpp) decides
// from the layout whether the ring is flat or hierarchical.

#include <mwstrat/collective/ring/options.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mwstrat::detail {

// The 32-byte host digest of each rank, as four 64-bit words (the all-gather's element type).
inline constexpr std::size_t host_digest_words = 4;

struct host_layout {
  std::vector<int> host_of;               // rank -> its host
  std::vector<std::vector<int>> members;  // host -> its ranks in order; hosts in order of their first rank

  [[nodiscard]] int hosts() const noexcept { return static_cast<int>(members.size()); }
  // The ranks on rank r's host, r among them.
  [[nodiscard]] const std::vector<int>& mates(int r) const {
    return members[static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)])];
  }
  // True when every host runs as many ranks as rank r's.
  [[nodiscard]] bool even(int r) const {
    const std::size_t per_host = mates(r).size();
    return std::all_of(members.begin(), members.end(), [&](const auto& m) { return m.size() == per_host; });
  }
  // The hierarchical all-reduce's condition: several hosts, the same number L >= 2 of ranks on each, and a topology
  // that asks for it.
  [[nodiscard]] bool hierarchical(int r, ring_topology topology) const {
    return hosts() > 1 && even(r) && mates(r).size() > 1 && topology == ring_topology::hierarchical;
  }
};

// Ranks whose digests are equal share a host.
inline host_layout find_hosts(std::span<const std::int64_t> digests) {
  const std::size_t n = digests.size() / host_digest_words;
  const auto digest_of = [&](std::size_t r) { return digests.subspan(host_digest_words * r, host_digest_words); };
  host_layout l;
  l.host_of.assign(n, -1);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t q = 0; q < r && l.host_of[r] < 0; ++q)
      if (std::ranges::equal(digest_of(q), digest_of(r))) l.host_of[r] = l.host_of[q];
    if (l.host_of[r] < 0) {
      l.host_of[r] = static_cast<int>(l.members.size());
      l.members.emplace_back();
    }
    l.members[static_cast<std::size_t>(l.host_of[r])].push_back(static_cast<int>(r));
  }
  return l;
}

}  // namespace mwstrat::detail
