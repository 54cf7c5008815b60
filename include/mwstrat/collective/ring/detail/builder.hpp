#pragma once
// The ring builder: what `ring_collective`'s constructor does. It checks the options, starts the job's flat ring
// (start-up: listen, connect, accept, handshake; startup.hpp) with its liveness monitor, proves with a first
// all-gather that every rank has joined, asks the topology finder (topology.hpp) which ranks share a host, and then
// returns either that flat ring alone or, when every host runs the same number L >= 2 of ranks and the options ask
// for it, the flat ring and a hierarchical ring made of two flat rings (hierarchy.hpp). Rank 0 logs what it found
// (log.hpp).

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/ring/detail/flat_ring.hpp>
#include <mwstrat/collective/ring/detail/hierarchy.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/liveness.hpp>
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/option_checks.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/startup.hpp>
#include <mwstrat/collective/ring/detail/topology.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// What the builder returns. Members go in reverse order: the rings inside first, then the liveness thread, then the
// job's ring, whose data path the monitor's verdict reaches.
struct built_ring {
  flat_ring job;                                // every operation, but the large all-reduces of a hierarchical ring
  std::unique_ptr<liveness_monitor> liveness;   // the job's ring's (none in a world of one)
  std::unique_ptr<ring_hierarchy> hierarchy;    // set when all-reduce is hierarchical
  int hosts = 1;                                // by host identity
};

// The largest frame payload: `chunk_bytes` rounded up to 64 bytes, at least 4 KiB.
inline std::size_t ring_chunk_bytes(const ring_options& o) {
  return std::max<std::size_t>(4096, (o.chunk_bytes + 63) / 64 * 64);
}

// What start-up needs beyond the options. `inner`: a ring inside a hierarchical one (quiet, no liveness), listening
// on `listener`. Throws config_error for an address that is not host:port.
inline ring_identity ring_identity_of(const ring_options& o, unique_socket listener, bool inner) {
  ring_identity id;
  id.rank = o.rank;
  id.world = static_cast<int>(o.addresses.size());
  for (int k = 0; k < id.world; ++k) {
    // Port 0 only in a world of one, where nobody connects (the single local worker's default address).
    auto parsed = parse_address_nothrow(o.addresses[static_cast<std::size_t>(k)], id.world == 1);
    if (!parsed.reason.empty())
      throw config_error({"ring", o.rank}, "address of rank " + std::to_string(k) + " '" +
                                               o.addresses[static_cast<std::size_t>(k)] +
                                               "' is not host:port or [v6]:port: " + parsed.reason);
    id.hosts.push_back(std::move(parsed.value));
  }
  id.token = o.job_token.value_or(std::string());
  id.seal = id.token.empty() ? seal_mode::none : o.encrypt ? seal_mode::encrypt : seal_mode::authenticate;
  id.chunk_bytes = ring_chunk_bytes(o);
  id.want_shm = o.transport == ring_transport::automatic;
  id.streams = static_cast<unsigned>(o.streams_per_peer);
  if (id.world > 1) id.host = o.host_identity ? explicit_host_identity(*o.host_identity) : host_identity();
  // A later generation (a ring rebuilt after a lost rank) has its own digest: nothing of another generation connects.
  id.cluster = sha256(o.generation == 0 ? o.cluster_fingerprint
                                        : o.cluster_fingerprint + "\ngeneration " + std::to_string(o.generation));
  id.model = sha256(o.model_fingerprint);
  id.listener = listener.release();
  id.quiet = inner;
  id.liveness = !inner;
  return id;
}

class ring_builder {
 public:
  // Listens, connects and handshakes per `options`; throws what ring_collective's constructor documents.
  static built_ring build(ring_options options) {
    check_ring_options(options);  // before anything listens or connects
    const auto o = std::make_shared<const ring_options>(std::move(options));
    const ring_identity id = ring_identity_of(*o, unique_socket{}, false);
    built_ring b{flat_ring(o, rank_map(o->addresses), id.chunk_bytes), nullptr, nullptr, 1};
    if (id.world == 1) {
      if (o->rank == 0) b.job.log("started: tcp://" + o->addresses[0] + ", waiting for 1 worker (itself)");
      return b;
    }
    const auto joined_by = deadline_after(o->connect_timeout);  // every rank, not just the neighbours
    ring_links links = ring_startup(*o, id).run();
    b.job = flat_ring(o, rank_map(o->addresses), id.chunk_bytes, links);
    const int me = o->rank;
    b.liveness = std::make_unique<liveness_monitor>(
        std::move(links.liveness_out), b.job.next(), std::move(links.liveness_in), b.job.prev(), me,
        o->liveness_timeout, b.job.ranks(), [o, me](const std::string& text) { ring_log(*o, me, text); },
        std::move(links.liveness_out_seal), std::move(links.liveness_in_seal));
    b.job.watch(b.liveness.get());
    arrange_hosts(b, id, joined_by);
    return b;
  }

 private:
  // Collective, once the job's ring is up: every rank learns every rank's host (the digests of the handshake); when
  // the layout calls for it, each rank joins the two rings of the hierarchical all-reduce; rank 0 logs what it found.
  //
  // Start-up connects a rank to its two neighbours only; this first gather is what proves every rank has joined. A
  // rank that starts late is still within `connect_timeout`, so the gather waits until then (or for the operation
  // timeout, if that is longer), and rank 0 says the ring is connected only once it has come round.
  static void arrange_hosts(built_ring& b, const ring_identity& id, steady::time_point joined_by) {
    flat_ring& job = b.job;
    const ring_options& o = job.options();
    const int me = job.rank();
    const auto n = static_cast<std::size_t>(job.size());
    std::array<std::int64_t, host_digest_words> mine{};
    static_assert(sizeof mine == sizeof id.host);
    std::memcpy(mine.data(), id.host.data(), sizeof mine);
    std::vector<std::int64_t> all(host_digest_words * n);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(joined_by - steady::now());
    job.all_gather_now<std::int64_t>(mine, all, op_options{std::max(left, o.op_timeout)});
    if (me == 0) job.log("ring of " + std::to_string(n) + " ranks connected");
    const host_layout layout = find_hosts(all);
    b.hosts = layout.hosts();
    const bool one_each = layout.even(me) && layout.mates(me).size() == 1;
    std::string between;
    if (layout.hierarchical(me, o.topology)) {
      b.hierarchy = join_host_rings(job, id, layout);
      between = "tcp ring between hosts (each host's ranks carry a part)";
    } else if (b.hosts > 1) {
      // Narrowing is for the links between hosts: on a flat ring that also passes through ranks of one host it
      // would narrow those hops too (and break the documented error bound), so there it is left off.
      if (one_each) job.compress(o.compression);
      between = one_each ? "tcp ring between hosts"
                : o.topology == ring_topology::flat ? "one flat ring through every rank (topology flat)"
                                                    : "one flat ring through every rank (hosts run unequal numbers of ranks)";
    }
    // Which ranks' host links carry payloads through shared memory, for the log line.
    const std::int64_t shm = b.hierarchy ? (b.hierarchy->host().uses_shared_memory() ? 1 : 0)
                                         : (job.touches_shared_memory() ? 1 : 0);
    std::vector<std::int64_t> shm_of(n);
    job.all_gather_now<std::int64_t>(std::span<const std::int64_t>(&shm, 1), shm_of, op_options{});
    if (me != 0) return;
    const bool narrowed = job.compression() != wire_compression::none ||
                          (b.hierarchy && b.hierarchy->between().compression() != wire_compression::none);
    ring_announce(o, hosts_line(layout, id.hosts, shm_of, between, o, narrowed));
  }

  // The two rings of the hierarchical all-reduce, on ports the kernel picks (exchanged over the job's ring): the
  // ranks of this host (shared memory where proven) and the ranks with this rank's index on every host (TCP).
  static std::unique_ptr<ring_hierarchy> join_host_rings(flat_ring& job, const ring_identity& id,
                                                         const host_layout& layout) {
    const ring_options& o = job.options();
    const int me = job.rank();
    const auto n = static_cast<std::size_t>(job.size());
    const auto my_host = static_cast<std::size_t>(layout.host_of[static_cast<std::size_t>(me)]);
    const auto& mates = layout.members[my_host];
    const auto index = static_cast<std::size_t>(std::find(mates.begin(), mates.end(), me) - mates.begin());
    int host_port = 0, between_port = 0;
    const auto& here = id.hosts[static_cast<std::size_t>(me)];
    auto host_listener = listen_ephemeral(here, o.socket_buffer_bytes, me, host_port);
    auto between_listener = listen_ephemeral(here, o.socket_buffer_bytes, me, between_port);
    const std::array<std::int64_t, 2> mine{host_port, between_port};
    std::vector<std::int64_t> ports(2 * n);
    job.all_gather_now<std::int64_t>(mine, ports, op_options{});
    const auto ring_of = [&](const std::vector<int>& ranks, std::size_t which, int my_index, std::string scope,
                             unique_socket listener) {
      ring_options inner = o;
      inner.addresses.clear();
      for (int g : ranks) {
        auto a = id.hosts[static_cast<std::size_t>(g)];
        a.port = static_cast<std::uint16_t>(ports[2 * static_cast<std::size_t>(g) + which]);
        inner.addresses.push_back(a.to_string());
      }
      inner.rank = my_index;
      inner.cluster_fingerprint = o.cluster_fingerprint + '\n' + scope;
      inner.topology = ring_topology::flat;
      if (which == 1) inner.transport = ring_transport::tcp;  // other hosts: nothing to share
      check_ring_options(inner);
      rank_map names(std::move(scope), inner.addresses, ranks, job.ranks());
      const auto shared = std::make_shared<const ring_options>(std::move(inner));
      const ring_identity inner_id = ring_identity_of(*shared, std::move(listener), true);
      ring_links links = ring_startup(*shared, inner_id).run();
      flat_ring ring(shared, std::move(names), inner_id.chunk_bytes, links);
      ring.watch(job.monitor());  // the job's liveness watches the same ranks
      return ring;
    };
    flat_ring host = ring_of(mates, 0, static_cast<int>(index), "host ring", std::move(host_listener));
    std::vector<int> peers;  // rank `index` of every host, in host order
    for (const auto& m : layout.members) peers.push_back(m[index]);
    flat_ring between = ring_of(peers, 1, static_cast<int>(my_host),
                                "ring between hosts (rank " + std::to_string(index) + " of each)",
                                std::move(between_listener));
    between.compress(o.compression);
    return std::make_unique<ring_hierarchy>(std::move(host), std::move(between));
  }
};

}  // namespace mwstrat::detail
