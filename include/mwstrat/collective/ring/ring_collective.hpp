#pragma once
/// \file
/// `ring_collective`: ranks as processes connected in a TCP ring (Boost.Asio for name resolution and the
/// listening socket, non-blocking POSIX sockets and poll() on the data path).
///
/// Rank r listens on `addresses[r]`, connects to rank r+1 (retrying with backoff until the start-up
/// deadline) and accepts rank r-1; both connections are authenticated by a handshake (magic, protocol version,
/// world size, ranks, cluster and model fingerprints, and an HMAC-SHA256 proof of the job token when one is
/// set). All-reduce is the bandwidth-optimal ring: a reduce-scatter then an all-gather, 2(n-1) steps over
/// n segments, each segment cut into chunks that are pipelined, the send to the next rank and the receive from
/// the previous one progressing at the same time. Each element is combined in a fixed order, so the same
/// inputs give the same bits on every rank and every run. See docs/collectives.md.
///
/// Failure: a closed connection raises `peer_lost_error`, a missed deadline `timeout_error`, a frame that is
/// not the one expected `protocol_error`; the rank that detects a failure tells both neighbours (an abort
/// frame naming the culprit), which pass it on, so every rank fails fast naming the same culprit. A failed
/// ring stays failed: later operations rethrow the first error.
///
/// Liveness, apart from step time (detail/liveness.hpp): beside each link a second connection carries heartbeats,
/// sent and read by a thread of the ring's own, so a neighbour that stops, freezes or is cut off is named within
/// `ring_options::liveness_timeout` (5 s by default) whatever the training thread is doing, while a slow but living
/// one never is. The verdict (culprit, cause, detector) travels ahead of any close, so every rank reports the same
/// one: a `peer_lost_error` whose message is the same on every surviving rank.
///
/// Transport: when both ends of a link are on the same host (and `ring_options::transport` allows it), the
/// payloads travel through a shared-memory region owned by that link, and the TCP connection carries only the
/// frame headers (one per chunk, naming the slot implicitly: slots are used in turn) and, backwards, one credit
/// per slot the receiver is done with.
///
/// The class is the front-end (shared with the other backends: collective/detail/front_end.hpp) over four seams in
/// ring/detail/: the schedule (schedule.hpp, which chunk goes where at each step), start-up (startup.hpp, which
/// returns the connected links), the fail-fast abort protocol (abort.hpp) and the data path below, which moves the
/// schedule's chunks over the links.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/front_end.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/compress.hpp>
#include <mwstrat/collective/ring/detail/hierarchy.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/liveness.hpp>
#include <mwstrat/collective/ring/detail/plan.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/startup.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// One rank of a TCP ring. Construction blocks until the ring is connected (or throws); use from one thread
/// at a time (plus its own asynchronous worker).
class ring_collective : public detail::front_end<ring_collective> {
 public:
  /// The component named in this backend's errors.
  static constexpr const char* component = "ring";

  /// Listens, connects and handshakes per `options`; throws `config_error` for bad options, `timeout_error`
  /// when the neighbours do not appear before `connect_timeout`, `protocol_error` when a neighbour refuses
  /// this rank or is not an mwstrat peer, `io_error` when the address cannot be listened on.
  explicit ring_collective(ring_options options)
      : ring_collective(std::move(options), detail::unique_socket{}, nullptr) {}

  ring_collective(const ring_collective&) = delete;
  ring_collective& operator=(const ring_collective&) = delete;

  /// Waits for queued asynchronous operations (each bounded by its deadline), then closes the connections.
  /// When destroyed by an exception, shuts the connections down first, so queued operations and the other
  /// ranks fail fast (`peer_lost_error` naming this rank) instead of waiting for their deadline.
  ~ring_collective() {
    const bool failing = std::uncaught_exceptions() > uncaught_;
    if (failing) shutdown_links();
    queue_.stop();  // the worker is joined before the sockets close
    // Leaving normally, this rank says goodbye, so its neighbours do not take its silence for a loss; destroyed by
    // an exception (or after the ring failed) it just closes, and they find it lost.
    if (liveness_) liveness_->stop(!failing && !broken_);
  }

  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks in the ring.
  [[nodiscard]] int size() const noexcept { return n_; }
  /// True when both links of this rank carry payloads through shared memory (see `ring_transport`).
  [[nodiscard]] bool uses_shared_memory() const noexcept { return out_.through_shm() && in_.through_shm(); }
  /// The number of hosts the ranks are on (by `ring_options::host_identity`, or as derived).
  [[nodiscard]] int hosts() const noexcept { return hosts_; }
  /// True when all-reduce is hierarchical: within each host, then a TCP ring between hosts (see `ring_topology`).
  [[nodiscard]] bool hierarchical() const noexcept { return local_ != nullptr; }
  /// The configured address of rank `r`.
  [[nodiscard]] const std::string& address(int r) const { return options_.addresses.at(static_cast<std::size_t>(r)); }
  /// Which ring of the job this is (`ring_options::generation`).
  [[nodiscard]] std::uint64_t generation() const noexcept { return options_.generation; }
  /// The options of the ring that replaces this one once it has lost a rank (in-memory recovery): the same ranks,
  /// addresses and checks, the next generation, and `timeout` for the new start-up (how long the survivors wait for
  /// a replacement). Destroy this ring before making that one: it listens on the same address.
  [[nodiscard]] ring_options next_generation(std::chrono::milliseconds timeout) const {
    ring_options o = options_;
    o.generation = options_.generation + 1;
    o.connect_timeout = timeout;
    return o;
  }

  // all_reduce, all_reduce_async, broadcast, all_gather, barrier: see detail::front_end.
  //
  // all_reduce_update(gradients, op, params, update): all-reduce fused with an elementwise update, so that each
  // rank updates only its own part of the parameters: the reduce-scatter half of the ring leaves each rank one
  // part of `gradients` fully reduced, and as each chunk of it is final this rank calls `update(first, count)`
  // (gradients[first, first + count) hold the result; the call must update params[first, first + count) from
  // them, touch nothing else, and not throw); the all-gather half then carries those parts of `params`, not of the
  // gradients. Every rank ends with the same `params`, each part exactly as its owner updated it; the other parts
  // of `gradients` are left partially reduced. For an optimizer whose update of an element depends only on that
  // element (plain SGD) this is the same result as `all_reduce` then updating everything, with a fraction
  // 1/size() of the update work and of its memory traffic.

 private:
  friend class detail::front_end<ring_collective>;
  friend struct detail::ring_hierarchy;  // the hierarchical all-reduce over local_ and cross_ (detail/hierarchy.hpp)

  // The ranks of a ring inside a hierarchical ring (a host's ranks, or one rank of each host) as the parent knows
  // them: errors and logs name the parent's ranks and addresses.
  struct sub_ring_info {
    std::string scope;                   // "host ring", "ring between hosts"
    std::vector<int> global;             // this ring's rank k is the parent's rank global[k]
    std::vector<std::string> addresses;  // the parent's addresses
    int global_rank = 0;
  };

  ring_collective(ring_options options, detail::unique_socket listener, const sub_ring_info* sub)
      : options_(std::move(options)), uncaught_(std::uncaught_exceptions()) {
    if (sub) sub_ = *sub;
    n_ = static_cast<int>(options_.addresses.size());
    rank_ = options_.rank;
    if (n_ < 1) throw config_error({"ring"}, "ring_options.addresses is empty");
    if (rank_ < 0 || rank_ >= n_)
      throw config_error({"ring"}, "rank " + std::to_string(rank_) + " is out of range for " + std::to_string(n_) +
                                       " addresses");
    detail::ring_identity id;
    id.rank = rank_;
    id.world = n_;
    for (int k = 0; k < n_; ++k) {
      // Port 0 only in a world of one, where nobody connects (the single local worker's default address).
      auto parsed = detail::parse_address_nothrow(options_.addresses[static_cast<std::size_t>(k)], n_ == 1);
      if (!parsed.reason.empty())
        throw config_error({"ring", rank_}, "address of rank " + std::to_string(k) + " '" +
                                                options_.addresses[static_cast<std::size_t>(k)] +
                                                "' is not host:port or [v6]:port: " + parsed.reason);
      id.hosts.push_back(std::move(parsed.value));
    }
    id.token = options_.job_token.value_or(std::string());
    chunk_bytes_ = std::max<std::size_t>(4096, (options_.chunk_bytes + 63) / 64 * 64);
    id.chunk_bytes = chunk_bytes_;
    id.want_shm = options_.transport == ring_transport::automatic;
    spin_ = options_.spin;
    if (spin_ < std::chrono::microseconds::zero())
      throw config_error({"ring", rank_}, "ring_options.spin is negative");
    static_assert(ring_max_streams_per_peer == static_cast<int>(detail::max_streams_per_peer));
    if (options_.streams_per_peer < 1 || options_.streams_per_peer > static_cast<int>(detail::max_streams_per_peer))
      throw config_error({"ring", rank_}, "ring_options.streams_per_peer is " + std::to_string(options_.streams_per_peer) +
                                              ": expected 1.." + std::to_string(detail::max_streams_per_peer) +
                                              " connections per link between hosts");
    id.streams = static_cast<unsigned>(options_.streams_per_peer);
    if (options_.host_identity && options_.host_identity->empty())
      throw config_error({"ring", rank_}, "ring_options.host_identity is empty (leave it unset to derive it)");
    if (n_ > 1) id.host = options_.host_identity ? detail::explicit_host_identity(*options_.host_identity)
                                                 : detail::host_identity();
    // A later generation (a ring rebuilt after a lost rank) has its own digest: nothing of another generation connects.
    id.cluster = detail::sha256(options_.generation == 0 ? options_.cluster_fingerprint
                                                         : options_.cluster_fingerprint + "\ngeneration " +
                                                               std::to_string(options_.generation));
    id.model = detail::sha256(options_.model_fingerprint);
    id.listener = listener.release();
    id.quiet = sub != nullptr;
    id.liveness = sub == nullptr;
    if (options_.liveness_timeout < std::chrono::milliseconds::zero() ||
        (options_.liveness_timeout.count() != 0 && options_.liveness_timeout < std::chrono::milliseconds(100)))
      throw config_error({"ring", rank_}, "ring_options.liveness_timeout is " +
                                              std::to_string(options_.liveness_timeout.count()) +
                                              " ms: expected 0 (never judged) or at least 100 ms (heartbeats every "
                                              "fifth of it must outrun scheduling noise)");
    if (n_ > 1) {
      auto links = detail::ring_startup(options_, id).run();  // connected links (link.hpp)
      out_ = std::move(links.out);
      in_ = std::move(links.in);
      in_.make_scratch(chunk_bytes_);
      more_out_ = std::move(links.more_out);
      more_in_ = std::move(links.more_in);
      for (auto& lane : more_in_) lane.make_scratch(chunk_bytes_);
      if (!sub) {
        const ring_options* o = &options_;
        const int me = rank_;
        liveness_ = std::make_unique<detail::liveness_monitor>(
            std::move(links.liveness_out), next(), std::move(links.liveness_in), prev(), rank_,
            options_.liveness_timeout, options_.addresses, [o, me](const std::string& text) { detail::ring_log(*o, me, text); });
        monitor_ = liveness_.get();
        arrange_hosts(id);
      }
    } else if (rank_ == 0 && !sub) {
      log("started: tcp://" + options_.addresses[0] + ", waiting for 1 worker (itself)");
    }
  }

  using steady = detail::steady;
  using failure = detail::ring_failure;
  using plan = detail::ring_plan;
  using item = detail::ring_item;

  template <class T>
  plan make_plan(const detail::ring_schedule& sched, reduce_op op, std::uint8_t reduction, T* base) {
    plan p;
    p.sched = sched;
    p.type = detail::dtype_of<T>();
    p.op = op;
    p.reduction = reduction;
    p.seq = next_seq_++;
    p.esize = sizeof(T);
    p.wire_esize = sizeof(T);
    p.base = reinterpret_cast<std::uint8_t*>(base);
    return p;
  }

  int next() const { return (rank_ + 1) % n_; }
  int prev() const { return (rank_ + n_ - 1) % n_; }

  // ---------------------------------------------------------------------------------------------------------
  // The operations, behind the front-end's argument checks.

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    if (local_ && data.size_bytes() >= options_.hierarchical_min_bytes)
      return detail::ring_hierarchy::all_reduce(*this, data, op, options);
    plan p = make_plan(detail::all_reduce_schedule(detail::op_kind::all_reduce, rank_, n_, data.size(), sizeof(T),
                                                   chunk_bytes_),
                       op, static_cast<std::uint8_t>(op), data.data());
    if constexpr (std::is_same_v<T, float>) {
      if (compression_ != wire_compression::none && (op == reduce_op::sum || op == reduce_op::mean)) {
        p.wire = compression_;
        p.wire_esize = sizeof(std::uint16_t);
      }
    }
    run<T>(p, options);
  }

  template <class T, class Update>
  void all_reduce_update_now(std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                             op_options options) {
    if (n_ == 1) {  // the reduction of one rank is its input
      if (!gradients.empty()) update(std::size_t{0}, gradients.size());
      return;
    }
    if (local_ && gradients.size_bytes() >= options_.hierarchical_min_bytes)
      return detail::ring_hierarchy::all_reduce_update(*this, gradients, op, params, update, options);
    flat_all_reduce_update(gradients, op, params, update, options);
  }

  // all_reduce_update on this ring alone (a separate function: the hierarchical one calls it with its own wrapper of
  // `update`, and calling the dispatcher would instantiate wrappers of wrappers without end).
  template <class T, class Update>
  void flat_all_reduce_update(std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                              op_options options) {
    plan p = make_plan(detail::all_reduce_schedule(detail::op_kind::all_reduce_update, rank_, n_, gradients.size(),
                                                   sizeof(T), chunk_bytes_),
                       op, static_cast<std::uint8_t>(op), gradients.data());
    if constexpr (std::is_same_v<T, float>) {  // the reduce-scatter's gradients narrowed; parameters travel exact
      if (compression_ != wire_compression::none && (op == reduce_op::sum || op == reduce_op::mean)) {
        p.wire = compression_;
        p.wire_esize = sizeof(std::uint16_t);
      }
    }
    p.gather_base = reinterpret_cast<std::uint8_t*>(params.data());
    p.on_reduced_context = static_cast<void*>(std::addressof(update));
    p.on_reduced = [](void* context, std::size_t first, std::size_t count) {
      (*static_cast<Update*>(context))(first, count);
    };
    run<T>(p, options);
  }

  template <class T>
  void broadcast_now(std::span<T> data, int root, op_options options) {
    plan p = make_plan(detail::broadcast_schedule(rank_, n_, root, data.size(), sizeof(T), chunk_bytes_),
                       reduce_op::sum, 0, data.data());
    run<T>(p, options);
  }

  template <class T>
  void all_gather_now(std::span<const T> mine, std::span<T> all, op_options options) {
    T* own = all.data() + static_cast<std::size_t>(rank_) * mine.size();
    if (!mine.empty() && own != mine.data()) std::memmove(own, mine.data(), mine.size_bytes());
    plan p = make_plan(detail::all_gather_schedule(rank_, n_, mine.size(), sizeof(T), chunk_bytes_), reduce_op::sum,
                       0, all.data());
    run<T>(p, options);
  }

  // A one-element all-reduce around the ring.
  void barrier_now(op_options options) {
    std::int32_t token = 0;
    plan p = make_plan(detail::all_reduce_schedule(detail::op_kind::barrier, rank_, n_, 1, sizeof(token),
                                                   chunk_bytes_),
                       reduce_op::sum, static_cast<std::uint8_t>(reduce_op::sum), &token);
    run<std::int32_t>(p, options);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Hosts: which ranks share one, and the rings of the hierarchical all-reduce.

  // Collective, once the flat ring is up: every rank learns every rank's host (the digests of the handshake); when
  // every host runs the same number L >= 2 of ranks, each rank joins two more rings on ports the kernel picks —
  // the ranks of its host (shared memory where proven) and the ranks with its index on every host (TCP) — and rank
  // 0 logs what it found.
  void arrange_hosts(const detail::ring_identity& id) {
    const auto n = static_cast<std::size_t>(n_);
    std::array<std::int64_t, 4> mine{};
    static_assert(sizeof mine == sizeof id.host);
    std::memcpy(mine.data(), id.host.data(), sizeof mine);
    std::vector<std::int64_t> all(4 * n);
    all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
    std::vector<int> host_of(n, -1);
    std::vector<std::vector<int>> members;  // per host, its ranks in order; hosts in order of their first rank
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t q = 0; q < r && host_of[r] < 0; ++q)
        if (std::equal(all.begin() + 4 * static_cast<std::ptrdiff_t>(q), all.begin() + 4 * static_cast<std::ptrdiff_t>(q + 1),
                       all.begin() + 4 * static_cast<std::ptrdiff_t>(r)))
          host_of[r] = host_of[q];
      if (host_of[r] < 0) {
        host_of[r] = static_cast<int>(members.size());
        members.emplace_back();
      }
      members[static_cast<std::size_t>(host_of[r])].push_back(static_cast<int>(r));
    }
    hosts_ = static_cast<int>(members.size());
    const auto& mates = members[static_cast<std::size_t>(host_of[static_cast<std::size_t>(rank_)])];
    const std::size_t per_host = mates.size();
    const bool even = std::all_of(members.begin(), members.end(), [&](const auto& m) { return m.size() == per_host; });
    std::string between;
    if (hosts_ > 1 && even && per_host > 1 && options_.topology == ring_topology::hierarchical) {
      join_host_rings(id, members, host_of);
      cross_->compress(options_.compression);
      between = "tcp ring between hosts (each host's ranks carry a part)";
    } else if (hosts_ > 1) {
      // Narrowing is for the links between hosts: on a flat ring that also passes through ranks of one host it
      // would narrow those hops too (and break the documented error bound), so there it is left off.
      if (per_host == 1 && even) compress(options_.compression);
      between = per_host == 1 && even ? "tcp ring between hosts"
                : options_.topology == ring_topology::flat ? "one flat ring through every rank (topology flat)"
                                                           : "one flat ring through every rank (hosts run unequal numbers of ranks)";
    }
    // Which ranks' host links carry payloads through shared memory, for the log line.
    const std::int64_t shm = local_ ? (local_->uses_shared_memory() ? 1 : 0)
                                    : (out_.through_shm() || in_.through_shm() ? 1 : 0);
    std::vector<std::int64_t> shm_of(n);
    all_gather(std::span<const std::int64_t>(&shm, 1), std::span<std::int64_t>(shm_of));
    if (rank_ != 0) return;
    std::string text = std::to_string(n_) + " workers on " + std::to_string(hosts_);
    text += hosts_ == 1 ? " host (" : " hosts (";
    for (std::size_t h = 0; h < members.size(); ++h) {
      const auto& m = members[h];
      std::string label = id.hosts[static_cast<std::size_t>(m.front())].host;
      for (std::size_t g = 0; g < members.size(); ++g)
        if (g != h && id.hosts[static_cast<std::size_t>(members[g].front())].host == label) {
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
    if (hosts_ > 1 && options_.compression != wire_compression::none) {
      const bool narrowed =
          compression_ != wire_compression::none || (cross_ && cross_->compression_ != wire_compression::none);
      text += !narrowed ? ", compression off (a flat ring through ranks of one host)"
              : options_.compression == wire_compression::bf16 ? ", bf16 on the wire" : ", fp16 on the wire";
    }
    if (hosts_ > 1 && options_.streams_per_peer > 1)
      text += ", " + std::to_string(options_.streams_per_peer) + " tcp streams per link between hosts";
    announce(text);
  }

  void compress(wire_compression c) {
    compression_ = c;
    // A chunk's float32 bytes per connection to the next rank: room to spare.
    if (c != wire_compression::none) wire_stage_.assign(chunk_bytes_ * out_lanes(), 0);
  }

  void join_host_rings(const detail::ring_identity& id, const std::vector<std::vector<int>>& members,
                       const std::vector<int>& host_of) {
    const auto n = static_cast<std::size_t>(n_);
    const auto my_host = static_cast<std::size_t>(host_of[static_cast<std::size_t>(rank_)]);
    const auto& mates = members[my_host];
    const auto index = static_cast<std::size_t>(std::find(mates.begin(), mates.end(), rank_) - mates.begin());
    int host_port = 0, between_port = 0;
    const auto& here = id.hosts[static_cast<std::size_t>(rank_)];
    auto host_listener = detail::listen_ephemeral(here, options_.socket_buffer_bytes, rank_, host_port);
    auto between_listener = detail::listen_ephemeral(here, options_.socket_buffer_bytes, rank_, between_port);
    const std::array<std::int64_t, 2> mine{host_port, between_port};
    std::vector<std::int64_t> ports(2 * n);
    all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(ports));
    const auto ring_of = [&](const std::vector<int>& ranks, std::size_t which, int my_index, std::string scope) {
      ring_options o = options_;
      o.addresses.clear();
      for (int g : ranks) {
        auto a = id.hosts[static_cast<std::size_t>(g)];
        a.port = static_cast<std::uint16_t>(ports[2 * static_cast<std::size_t>(g) + which]);
        o.addresses.push_back(a.to_string());
      }
      o.rank = my_index;
      o.cluster_fingerprint = options_.cluster_fingerprint + '\n' + scope;
      o.topology = ring_topology::flat;
      if (which == 1) o.transport = ring_transport::tcp;  // other hosts: nothing to share
      sub_ring_info info{std::move(scope), ranks, options_.addresses, rank_};
      return std::pair{std::move(o), std::move(info)};
    };
    auto [host_options, host_info] = ring_of(mates, 0, static_cast<int>(index), "host ring");
    local_.reset(new ring_collective(std::move(host_options), std::move(host_listener), &host_info));
    local_->monitor_ = monitor_;  // the flat ring's liveness watches the same ranks
    std::vector<int> peers;  // rank `index` of every host, in host order
    for (const auto& m : members) peers.push_back(m[index]);
    auto [between_options, between_info] =
        ring_of(peers, 1, static_cast<int>(my_host), "ring between hosts (rank " + std::to_string(index) + " of each)");
    cross_.reset(new ring_collective(std::move(between_options), std::move(between_listener), &between_info));
    cross_->monitor_ = monitor_;
  }

  template <class T>
  void run_half(detail::ring_half half, std::span<T> data, reduce_op op, op_options options) {
    plan p = make_plan(detail::all_reduce_half_schedule(half, rank_, n_, data.size(), sizeof(T), chunk_bytes_), op,
                       static_cast<std::uint8_t>(op), data.data());
    run<T>(p, options);
  }

  // ---------------------------------------------------------------------------------------------------------
  // The data path.

  template <class T>
  void run(plan& p, op_options options) {
    if (broken_) std::rethrow_exception(broken_);
    if (n_ == 1 || p.sched.items <= p.sched.begin) return;  // one rank: the result is the input (mean over one rank is a no-op)
    if (monitor_ && monitor_->fired()) fail(p, *monitor_->verdict());  // a peer was lost between operations
    const auto timeout = options.timeout.count() > 0 ? options.timeout : options_.op_timeout;
    const auto deadline = steady::now() + timeout;
    std::optional<failure> f = pump<T>(p, deadline, timeout);
    if (f) fail(p, *f);
  }

  // The data connections of the two links: the first (out_, in_) and, to or from a rank on another host, the others
  // (streams_per_peer). Chunk j of a segment travels on connection j mod (the link's connections).
  std::size_t out_lanes() const { return 1 + more_out_.size(); }
  std::size_t in_lanes() const { return 1 + more_in_.size(); }
  detail::send_link& out_lane(std::size_t k) { return k == 0 ? out_ : more_out_[k - 1]; }
  detail::recv_link& in_lane(std::size_t k) { return k == 0 ? in_ : more_in_[k - 1]; }
  static std::size_t lane_of(const plan& p, std::size_t t, std::size_t lanes) { return t % p.sched.chunks % lanes; }

  // Shuts every data connection down, so that the neighbours (and queued operations) fail fast.
  void shutdown_links() {
    for (std::size_t k = 0; k < out_lanes(); ++k)
      if (out_lane(k).socket) ::shutdown(out_lane(k).socket.get(), SHUT_RDWR);
    for (std::size_t k = 0; k < in_lanes(); ++k)
      if (in_lane(k).socket) ::shutdown(in_lane(k).socket.get(), SHUT_RDWR);
  }

  // After an abort on the first connection: the others are shut too, so a neighbour waiting only on one of them
  // sees it end at once (and reads the abort on the first) instead of waiting for the liveness verdict.
  void shutdown_extra_lanes() {
    for (std::size_t k = 1; k < out_lanes(); ++k)
      if (out_lane(k).socket) ::shutdown(out_lane(k).socket.get(), SHUT_RDWR);
    for (std::size_t k = 1; k < in_lanes(); ++k)
      if (in_lane(k).socket) ::shutdown(in_lane(k).socket.get(), SHUT_RDWR);
  }

  // The progress of one data connection's send stream (to the next rank) or receive stream (from the previous one):
  // the items whose chunk is its own, in the schedule's order.
  struct send_stream {
    std::size_t t = 0;         // next item to send
    item it;                   // the item being sent
    bool active = false;       // its frame is on its way
    bool credit_wait = false;  // the next frame waits for a shared-memory slot to come back
    bool want_out = false;     // the socket was full: wait until it can take more
    std::size_t payload = 0;   // bytes of the item that go on the socket (0 through a slot)
    const std::uint8_t* src = nullptr;  // where they are: the buffer, or the narrowed copy when compressed
    std::size_t sent = 0;      // bytes of the frame (header, then payload) sent so far
    std::array<std::uint8_t, detail::frame_header_size> header{};
  };
  struct recv_stream {
    std::size_t t = 0;            // next item to receive
    item it;                      // the item being received
    bool active = false;          // its frame is arriving
    bool reading_header = true;
    std::size_t got = 0;          // bytes of the header, then of the payload, received so far
    std::size_t combined = 0;     // elements of a reduced payload already combined
    std::array<std::uint8_t, detail::frame_header_size> header{};
  };
  // Every stream of one operation.
  struct streams {
    std::array<send_stream, detail::max_streams_per_peer> send;
    std::array<recv_stream, detail::max_streams_per_peer> recv;
    std::size_t sends = 1, recvs = 1;  // connections of the two links

    // Receive item x is complete (each stream receives its items in order).
    [[nodiscard]] bool received(const plan& p, std::size_t x) const {
      return x < p.sched.begin || recv[lane_of(p, x, recvs)].t > x;
    }
    [[nodiscard]] bool sends_left(const plan& p) const {
      for (std::size_t k = 0; k < sends; ++k)
        if (send[k].t < p.sched.items) return true;
      return false;
    }
  };

  // Drives every stream of one operation with non-blocking calls until all are done, sleeping in poll() only when
  // none can move; the failure to report, if any.
  template <class T>
  std::optional<failure> pump(const plan& p, steady::time_point deadline, std::chrono::milliseconds timeout) {
    streams st;
    st.sends = out_lanes();
    st.recvs = in_lanes();
    for (std::size_t k = 0; k < st.sends; ++k) st.send[k].t = p.sched.begin;
    for (std::size_t k = 0; k < st.recvs; ++k) st.recv[k].t = p.sched.begin;
    out_.inflight = {};
    steady::time_point idle_since{};  // when the current wait began (zero: not waiting)
    for (;;) {
      bool busy = false;
      for (std::size_t k = 0; k < st.sends; ++k) {
        if (auto f = start_send(p, st, k)) return f;
        busy = busy || st.send[k].active || st.send[k].credit_wait;
      }
      for (std::size_t k = 0; k < st.recvs; ++k) {
        start_receive(p, st.recv[k], k, st.recvs);
        busy = busy || st.recv[k].active;
      }
      if (!busy) {
        if (!st.sends_left(p)) break;
        // A send waits for a receive that is not coming: only possible if the plan is inconsistent.
        return failure{error_kind::protocol, rank_, "internal: ring schedule stalled during " + detail::where_of(p)};
      }
      bool progress = false;
      const std::size_t frames_before = frames_done(st);
      for (std::size_t k = 0; k < st.sends; ++k) {
        st.send[k].want_out = false;
        if (st.send[k].active)
          if (auto f = send_some(p, st.send[k], k, progress)) return f;
      }
      for (std::size_t k = 0; k < st.recvs; ++k)
        if (st.recv[k].active)
          if (auto f = receive_some<T>(p, st.recv[k], k, deadline, progress)) return f;
      if (progress) {
        // Only a finished frame restarts the spin: on a slow link bytes trickle in all the time, and restarting it
        // on every one kept the rank polling for the whole transfer (a core per rank at 1 Gbit/s, taken from
        // compute when the reduction overlaps backward). Within a frame it sleeps in poll() once spin_ is spent.
        if (frames_done(st) != frames_before) idle_since = steady::time_point{};
        continue;
      }
      if (auto f = wait_ready(p, st, idle_since, deadline, timeout)) return f;
    }
    return std::nullopt;
  }

  std::string peer(int r) const { return detail::ring_peer(options_.addresses, r); }

  // Starts the next send item of connection k once what it forwards has been received and, through shared memory,
  // a slot is free.
  std::optional<failure> start_send(const plan& p, streams& st, std::size_t k) {
    send_stream& s = st.send[k];
    s.credit_wait = false;
    if (s.active) return std::nullopt;
    const std::size_t total = p.sched.items;
    while (s.t < total && (lane_of(p, s.t, st.sends) != k || !detail::send_item(p, s.t, s.it))) ++s.t;
    if (s.t >= total) return std::nullopt;
    if (const std::size_t need = detail::send_dependency(p.sched, s.t); need > 0 && !st.received(p, need - 1))
      return std::nullopt;
    detail::send_link& out = out_lane(k);
    // Through shared memory a send needs a free slot: collect the credits that have come back.
    if (out.waits_for_credit() && !out.eof)
      if (auto f = read_back_channel(true, p)) return f;
    if (out.waits_for_credit()) {
      if (out.eof)
        return failure{error_kind::peer_lost, next(),
                       "send to " + peer(next()) + ": connection closed during " + detail::where_of(p)};
      s.credit_wait = true;
      return std::nullopt;
    }
    s.src = s.it.ptr;
    if (s.it.narrowed) {
      std::uint8_t* stage = wire_stage_.data() + k * chunk_bytes_;
      detail::narrow_into(reinterpret_cast<std::uint16_t*>(stage), reinterpret_cast<const float*>(s.it.ptr),
                          s.it.bytes / sizeof(float), p.wire);
      s.src = stage;
    }
    s.payload = out.stage(s.src, s.it.wire_bytes);
    detail::encode(detail::header_for(p, s.it, out.data_frame()), std::span<std::uint8_t, detail::frame_header_size>(s.header));
    s.active = true;
    s.sent = 0;
    return std::nullopt;
  }

  void start_receive(const plan& p, recv_stream& r, std::size_t k, std::size_t lanes) const {
    if (r.active) return;
    while (r.t < p.sched.items && (lane_of(p, r.t, lanes) != k || !detail::recv_item(p, r.t, r.it))) ++r.t;
    if (r.t < p.sched.items) {
      r.active = true;
      r.reading_header = true;
      r.got = 0;
      r.combined = 0;
    }
  }

  // One non-blocking send of what is left of connection k's current frame (header and payload in one call).
  std::optional<failure> send_some(const plan& p, send_stream& s, std::size_t k, bool& progress) {
    detail::send_link& out = out_lane(k);
    const auto n = out.send_some(s.header, s.sent, s.src, s.payload);
    if (n > 0) {
      s.sent += static_cast<std::size_t>(n);
      progress = true;
      // An abort goes on the first connection, after the frame in flight there (the others are shut).
      if (k == 0) out_.inflight = {s.src, s.header.size() + s.payload, s.sent, s.header};
      if (s.sent == s.header.size() + s.payload) {
        s.active = false;
        if (k == 0) out_.inflight = {};
        ++s.t;
      }
      return std::nullopt;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      s.want_out = true;
      return std::nullopt;
    }
    const int err = errno;
    // The next rank may have said why before it closed: an abort waiting on the back channel names the real
    // culprit (it is readable even after a reset).
    if (auto told = read_back_channel(true, p)) return told;
    out.dead = true;
    const detail::io_result res{err == ECONNRESET || err == EPIPE ? detail::io_status::closed : detail::io_status::failed,
                                err};
    return failure{error_kind::peer_lost, next(),
                   "send to " + peer(next()) + ": " + res.describe() + " during " + detail::where_of(p)};
  }

  // Non-blocking receives of connection k's current frame: its header (checked against the schedule before any
  // payload byte is read), then its payload — from the link's next slot, or from the socket, combined as it arrives.
  template <class T>
  std::optional<failure> receive_some(const plan& p, recv_stream& r, std::size_t k, steady::time_point deadline,
                                      bool& progress) {
    detail::recv_link& link = in_lane(k);
    const int in = link.socket.get();
    if (r.reading_header) {
      const auto n = ::recv(in, r.header.data() + r.got, r.header.size() - r.got, MSG_DONTWAIT);
      if (n > 0) {
        r.got += static_cast<std::size_t>(n);
        progress = true;
        if (r.got == r.header.size()) {
          std::string why;
          const auto h = detail::decode_frame_header(r.header, &why);
          if (!h)
            return failure{error_kind::protocol, prev(),
                           "recv from " + peer(prev()) + ": " + why + " during " + detail::where_of(p)};
          if (h->type == detail::frame_type::abort) {
            in_.dead = true;  // it gave up; do not wait on it again
            return detail::read_abort(in, *h, prev(), detail::where_of(p), options_.addresses);
          }
          if (auto bad = detail::frame_mismatch(*h, detail::header_for(p, r.it, link.data_frame())))
            return failure{error_kind::protocol, prev(),
                           "recv from " + peer(prev()) + ": " + *bad + " during " + detail::where_of(p)};
          r.reading_header = false;
          r.got = 0;
          if (link.through_shm()) {
            if (auto f = take_slot<T>(p, r.it, deadline)) return f;
            r.active = false;
            ++r.t;
          }
        }
      } else if (auto f = recv_failed(n, prev(), p)) {
        return f;
      }
    }
    if (r.active && !r.reading_header) {
      const item& it = r.it;
      const bool narrowed = it.narrowed;
      std::uint8_t* dest = it.reduce || narrowed ? link.scratch() : it.ptr;
      ssize_t n = 0;
      if (r.got < it.wire_bytes) n = ::recv(in, dest + r.got, it.wire_bytes - r.got, MSG_DONTWAIT);
      if (n > 0) {
        r.got += static_cast<std::size_t>(n);
        progress = true;
        if (it.reduce || narrowed) {
          const std::size_t ready = r.got / (narrowed ? p.wire_esize : p.esize);
          combine<T>(p, it, link.scratch(), r.combined, ready - r.combined);
          r.combined = ready;
        }
      } else if (r.got < it.wire_bytes) {
        if (auto f = recv_failed(n, prev(), p)) return f;
      }
      if (r.got == it.wire_bytes) {
        if (it.finish) finish_part<T>(p, it);
        r.active = false;
        ++r.t;
        progress = true;
      }
    }
    return std::nullopt;
  }

  // Frames sent and received so far by the connections of one operation.
  static std::size_t frames_done(const streams& st) {
    std::size_t n = 0;
    for (std::size_t k = 0; k < st.sends; ++k) n += st.send[k].t;
    for (std::size_t k = 0; k < st.recvs; ++k) n += st.recv[k].t;
    return n;
  }

  // Nothing moved: waits until a socket is ready, the next rank speaks on its back channel, or the deadline —
  // polling without sleeping (but yielding) for the first `spin_` of the wait (a sleeping rank's wake-up is the
  // slow part of a small operation), then sleeping in poll().
  std::optional<failure> wait_ready(const plan& p, const streams& st, steady::time_point& idle_since,
                                    steady::time_point deadline, std::chrono::milliseconds timeout) {
    const auto now = steady::now();
    if (idle_since == steady::time_point{}) idle_since = now;
    const bool spinning = now - idle_since < spin_ && now < deadline;
    if (monitor_ && monitor_->fired()) return monitor_->verdict();
    std::array<pollfd, 2 * detail::max_streams_per_peer + 1> fds{};
    nfds_t count = 0;
    const bool watch_next = !out_.eof;
    if (watch_next) fds[count++] = {out_.socket.get(), static_cast<short>(POLLIN | (st.send[0].want_out ? POLLOUT : 0)), 0};
    for (std::size_t k = 1; k < st.sends; ++k)
      if (st.send[k].want_out) fds[count++] = {more_out_[k - 1].socket.get(), POLLOUT, 0};
    bool receiving = false;
    for (std::size_t k = 0; k < st.recvs; ++k)
      if (st.recv[k].active) {
        receiving = true;
        fds[count++] = {(k == 0 ? in_ : more_in_[k - 1]).socket.get(), POLLIN, 0};
      }
    const bool sending_or_receiving = count > 0;
    if (monitor_) fds[count++] = {monitor_->wake_fd(), POLLIN, 0};  // a verdict ends the wait at once
    if (!sending_or_receiving) {
      // The only thing left is a send to a rank that already closed: it has everything it needs.
      return failure{error_kind::peer_lost, next(),
                     "send to " + peer(next()) + ": connection closed during " + detail::where_of(p)};
    }
    const int rc = ::poll(fds.data(), count, spinning ? 0 : detail::poll_ms(deadline));
    // A spinning rank still lets other runnable threads have its CPU (more ranks or threads than cores).
    if (spinning && rc == 0) std::this_thread::yield();
    if (rc < 0 && errno != EINTR)
      return failure{error_kind::io, rank_, std::string("poll: ") + std::strerror(errno) + " during " + detail::where_of(p)};
    if (monitor_ && monitor_->fired()) return monitor_->verdict();
    if (rc == 0 && steady::now() >= deadline) {
      const int waited = receiving ? prev() : next();
      std::size_t sent = p.sched.items, got = p.sched.items;  // the slowest connection's place
      for (std::size_t k = 0; k < st.sends; ++k) sent = std::min(sent, st.send[k].t);
      for (std::size_t k = 0; k < st.recvs; ++k) got = std::min(got, st.recv[k].t);
      return failure{error_kind::timeout, waited,
                     (receiving ? "no data from " : "could not send to ") + peer(waited) + " within " +
                         std::to_string(timeout.count()) + " ms: " + detail::where_of(p) + " timed out (sent " +
                         std::to_string(sent) + " of " + std::to_string(p.sched.items) + " chunks, received " +
                         std::to_string(got) + ")"};
    }
    if (watch_next && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0)
      if (auto f = read_back_channel(st.sends_left(p), p)) return f;
    return std::nullopt;
  }

  // The payload of a slot frame: combined (or copied) straight from the link's next slot, then the slot is
  // handed back with a credit on the reverse direction of the same connection.
  template <class T>
  std::optional<failure> take_slot(const plan& p, const item& ri, steady::time_point deadline) {
    if (ri.wire_bytes > in_.shm.slot_bytes())
      return failure{error_kind::protocol, rank_, "internal: a chunk larger than a shared-memory slot during " + detail::where_of(p)};
    const std::uint8_t* src = in_.take_slot();
    combine<T>(p, ri, src, 0, ri.bytes / sizeof(T));
    if (ri.finish) finish_part<T>(p, ri);
    if (in_.return_credit(detail::op_header(p), deadline).status == detail::io_status::timed_out)
      return failure{error_kind::timeout, prev(), "could not return a shared-memory slot to rank " +
                                                      std::to_string(prev()) + " (" + address(prev()) + ") during " + detail::where_of(p)};
    // Otherwise the credit went, or the previous rank closed its end after sending its last frame (it needs no more
    // slots) or died (the data stream reports that, naming it, on the next receive).
    return std::nullopt;
  }

  // Elements [from, from + count) of item `it` arrived in `wire` (the payload as sent): combined into the buffer
  // (reduce-scatter) or copied there, widened from 16 bits when the plan narrows them.
  template <class T>
  static void combine(const plan& p, const item& it, const std::uint8_t* wire, std::size_t from, std::size_t count) {
    T* to = reinterpret_cast<T*>(it.ptr) + from;
    if constexpr (std::is_same_v<T, float>) {
      if (it.narrowed) {
        const auto* in = reinterpret_cast<const std::uint16_t*>(wire) + from;
        if (it.reduce) detail::widen_add(to, in, count, p.wire);  // narrowing is for sum and mean only
        else detail::widen_into(to, in, count, p.wire);
        return;
      }
    }
    const T* in = reinterpret_cast<const T*>(wire) + from;
    if (it.reduce) detail::reduce_into(to, in, count, p.op);
    else std::memcpy(to, in, count * sizeof(T));
  }

  // A chunk of this rank's part is fully reduced: the mean's division, then all_reduce_update's update of it.
  template <class T>
  void finish_part(const plan& p, const item& ri) const {
    detail::finish_reduce(reinterpret_cast<T*>(ri.ptr), ri.bytes / sizeof(T), p.op, n_);
    if constexpr (std::is_same_v<T, float>)  // keep what the other ranks will receive: the same bits everywhere
      if (p.wire != wire_compression::none && !p.sched.separate_gather)  // (all_reduce_update gathers parameters)
        detail::round_to_wire(reinterpret_cast<float*>(ri.ptr), ri.bytes / sizeof(T), p.wire);
    if (p.on_reduced != nullptr) p.on_reduced(p.on_reduced_context, ri.first, ri.bytes / sizeof(T));
  }

  std::optional<failure> recv_failed(ssize_t n, int from, const plan& p) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
    in_.dead = true;
    const std::string why = n == 0 ? "connection closed" : std::strerror(errno);
    return failure{error_kind::peer_lost, from,
                   "recv from rank " + std::to_string(from) + " (" + address(from) + "): " + why + " during " + detail::where_of(p)};
  }


  // The next rank writes to us only to return shared-memory slots (credits) and to abort. EOF there matters only
  // while we still have something to send.
  std::optional<failure> read_back_channel(bool sends_left, const plan& p) {
    for (;;) {
      bool credit = false;
      auto f = read_back_frame(sends_left, p, credit);
      if (!credit) return f;
    }
  }

  // One frame from the back channel, if any is waiting; `credit` is set when it was a credit (taken).
  std::optional<failure> read_back_frame(bool sends_left, const plan& p, bool& credit) {
    std::array<std::uint8_t, detail::frame_header_size> raw{};
    const auto first = ::recv(out_.socket.get(), raw.data(), raw.size(), MSG_DONTWAIT);
    if (first < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
    if (first <= 0) {
      out_.eof = true;
      if (!sends_left) return std::nullopt;
      out_.dead = true;
      return failure{error_kind::peer_lost, next(),
                     "send to rank " + std::to_string(next()) + " (" + address(next()) + "): " +
                         (first == 0 ? std::string("connection closed") : std::string(std::strerror(errno))) +
                         " during " + detail::where_of(p)};
    }
    const auto r = detail::read_exact(out_.socket.get(), raw.data() + first, raw.size() - static_cast<std::size_t>(first),
                                      steady::now() + detail::abort_read_grace);
    std::string why;  // set only on failure: a credit must not allocate
    std::optional<detail::frame_header> h;
    if (r.status == detail::io_status::ok) h = detail::decode_frame_header(raw, &why);
    if (h && h->type == detail::frame_type::credit && out_.credit()) {
      credit = true;
      return std::nullopt;
    }
    out_.dead = true;
    if (!h || h->type != detail::frame_type::abort)
      return failure{error_kind::protocol, next(),
                     "rank " + std::to_string(next()) + " (" + address(next()) + ") wrote " +
                         (h ? std::string(h->type == detail::frame_type::credit ? "a credit it did not owe"
                                                                                : "a data frame")
                            : why.empty() ? std::string("truncated message") : why) +
                         " on the back channel during " + detail::where_of(p)};
    return detail::read_abort(out_.socket.get(), *h, next(), detail::where_of(p), options_.addresses);
  }

  // Tells both neighbours, breaks the ring for good, and throws the error this rank reports.
  [[noreturn]] void fail(const plan& p, const failure& found) {
    if (monitor_) {
      // One verdict for the whole job: the liveness verdict, when there is one, is the cause. A neighbour that closed
      // or aborted may be its echo, so this waits (briefly) for the verdict that travels ahead of it; without one,
      // this rank's own finding becomes the verdict, passed on before anything of this rank closes. (The monitor logs
      // it.)
      auto verdict = monitor_->verdict();
      if (!verdict) verdict = monitor_->await_verdict(detail::abort_read_grace);
      if (!verdict) {
        failure own = found;
        if (sub_) {
          if (own.culprit >= 0 && own.culprit < n_) own.culprit = sub_->global[static_cast<std::size_t>(own.culprit)];
          own.text = sub_->scope + ", whose rank k is rank " + global_names() + ": " + own.text;
        }
        own.text += " (reported by rank " + std::to_string(sub_ ? sub_->global_rank : rank_) + ")";
        verdict = monitor_->publish(std::move(own));
      }
      // The verdict names the flat ring's ranks: the ranks of a ring inside hear this rank's abort as "it gave up".
      failure told = *verdict;
      if (sub_) told.culprit = -1;
      detail::send_abort(out_.socket.get(), in_.socket.get(), out_.dead, in_.dead, out_.inflight, detail::op_header(p),
                         told);
      shutdown_extra_lanes();
      broken_ = detail::ring_error(sub_ ? sub_->global_rank : rank_, *verdict, sub_ ? sub_->addresses : options_.addresses);
      std::rethrow_exception(broken_);
    }
    const failure& f = found;  // a world without liveness (none is started in a world of one)
    detail::send_abort(out_.socket.get(), in_.socket.get(), out_.dead, in_.dead, out_.inflight, detail::op_header(p), f);
    shutdown_extra_lanes();
    if (sub_) {  // name the parent's ranks and addresses
      failure mapped = f;
      if (f.culprit >= 0 && f.culprit < n_) mapped.culprit = sub_->global[static_cast<std::size_t>(f.culprit)];
      mapped.text = sub_->scope + ", whose rank k is rank " + global_names() + ": " + f.text;
      broken_ = detail::ring_error(sub_->global_rank, mapped, sub_->addresses);
      log(mapped.text);
    } else {
      broken_ = detail::ring_error(rank_, f, options_.addresses);
      log(f.text);
    }
    std::rethrow_exception(broken_);
  }

  void log(const std::string& text) const { detail::ring_log(options_, sub_ ? sub_->global_rank : rank_, text); }

  // "[0,2]": the parent's rank of each of this ring's ranks.
  std::string global_names() const {
    std::string s = "[";
    for (std::size_t k = 0; k < sub_->global.size(); ++k) {
      if (k) s += ',';
      s += std::to_string(sub_->global[k]);
    }
    return s + "]";
  }

  // A line about the whole job ("[mwstrat] ..."), to `options.log` or standard error.
  void announce(const std::string& text) const {
    const std::string line = "[mwstrat] " + text;
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  }


  ring_options options_;
  int uncaught_ = 0;
  int n_ = 0;
  int rank_ = 0;
  std::size_t chunk_bytes_ = 0;
  detail::send_link out_;  // to the next rank
  detail::recv_link in_;   // from the previous rank
  std::vector<detail::send_link> more_out_;  // more data connections to the next rank (another host: streams_per_peer)
  std::vector<detail::recv_link> more_in_;   // more data connections from the previous rank
  std::chrono::microseconds spin_{0};  // ring_options::spin
  std::uint64_t next_seq_ = 0;
  std::exception_ptr broken_;
  std::unique_ptr<detail::liveness_monitor> liveness_;  // the flat ring's (none in a world of one or a ring inside)
  detail::liveness_monitor* monitor_ = nullptr;         // liveness_, or the parent ring's
  std::optional<sub_ring_info> sub_;        // set when this ring is one of a hierarchical ring's
  int hosts_ = 1;
  std::unique_ptr<ring_collective> local_;  // hierarchical: this host's ranks
  std::unique_ptr<ring_collective> cross_;  // hierarchical: this rank's index on every host
  wire_compression compression_ = wire_compression::none;  // set on the ring that carries the inter-host leg
  std::vector<std::uint8_t> wire_stage_;  // a chunk per connection narrowed for the wire (allocated once, when compression is on)
};

static_assert(collective<ring_collective>);

}  // namespace mwstrat

// Last, so that whoever sees the ring sees its host_arena maker too: the gradient synchroniser finds it by
// argument-dependent lookup (host_arena_collective), and a translation unit that saw the ring without it would
// silently choose another update path — and give collective_gradient_sync<ring_collective, ...> a different
// definition from one that did. host_arena.hpp includes this header first; #pragma once ends the cycle.
#include <mwstrat/collective/ring/host_arena.hpp>  // IWYU pragma: export
