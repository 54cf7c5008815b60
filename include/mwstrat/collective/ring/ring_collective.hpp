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
/// returns the connected links), the fail-fast abort protocol (abort.hpp) and the data path (data_path.hpp), which
/// moves the schedule's chunks over the links.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/detail/front_end.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/compress.hpp>
#include <mwstrat/collective/ring/detail/data_path.hpp>
#include <mwstrat/collective/ring/detail/hierarchy.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/liveness.hpp>
#include <mwstrat/collective/ring/detail/option_checks.hpp>
#include <mwstrat/collective/ring/detail/plan.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/startup.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/host_arena.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <array>
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
  [[nodiscard]] bool uses_shared_memory() const noexcept { return data_.out_through_shm() && data_.in_through_shm(); }
  /// The number of hosts the ranks are on (by `ring_options::host_identity`, or as derived).
  [[nodiscard]] int hosts() const noexcept { return hosts_; }
  /// True when all-reduce is hierarchical: within each host, then a TCP ring between hosts (see `ring_topology`).
  [[nodiscard]] bool hierarchical() const noexcept { return local_ != nullptr; }
  /// The configured address of rank `r`; a rank outside [0, size()) is a `config_error`.
  [[nodiscard]] const std::string& address(int r) const {
    if (r < 0 || r >= n_)
      throw config_error({"ring", rank_}, "address(" + std::to_string(r) + "): no such rank in a ring of " +
                                              std::to_string(n_));
    return ranks_.address(r);
  }
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

  /// `host_arena::open(ring, count, why)` under the name the gradient synchroniser looks for (`host_arena_collective`
  /// in collective/concepts.hpp). A hidden friend, declared with the ring itself: argument-dependent lookup finds it
  /// in every translation unit that sees the ring, whatever that unit included first.
  friend std::optional<host_arena> make_host_arena(ring_collective& ring, std::size_t count,
                                                   std::string* why = nullptr) {
    return host_arena::open(ring, count, why);
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
  //
  // all_reduce_streamed(data, op, on_final): `all_reduce`, calling `on_final(first, count)` on this rank as each part
  // data[first, first + count) of the result is final here and no longer read by the ring — after this rank's last
  // send of it, or as it arrives at the last step — so the caller can use (and change) each part while the rest still
  // travels: the gradient synchroniser applies the update of each part there, with the part still in cache. Every
  // element is reported exactly once, in no fixed order; the call must not throw. The hierarchical all-reduce reports
  // the whole buffer at its end.

 private:
  friend class detail::front_end<ring_collective>;
  friend struct detail::ring_hierarchy;  // the hierarchical all-reduce over local_ and cross_ (detail/hierarchy.hpp)

  // `inner`: the ranks of a ring inside a hierarchical one (a host's ranks, or one rank of each host) as the job knows
  // them, so that its errors and logs name the job's ranks and addresses; null for the job's own ring.
  ring_collective(ring_options options, detail::unique_socket listener, const detail::rank_map* inner)
      : options_(std::move(options)), uncaught_(std::uncaught_exceptions()) {
    detail::check_ring_options(options_);  // before anything listens or connects
    ranks_ = inner ? *inner : detail::rank_map(options_.addresses);
    const bool sub = inner != nullptr;
    n_ = static_cast<int>(options_.addresses.size());
    rank_ = options_.rank;
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
    id.streams = static_cast<unsigned>(options_.streams_per_peer);
    if (n_ > 1) id.host = options_.host_identity ? detail::explicit_host_identity(*options_.host_identity)
                                                 : detail::host_identity();
    // A later generation (a ring rebuilt after a lost rank) has its own digest: nothing of another generation connects.
    id.cluster = detail::sha256(options_.generation == 0 ? options_.cluster_fingerprint
                                                         : options_.cluster_fingerprint + "\ngeneration " +
                                                               std::to_string(options_.generation));
    id.model = detail::sha256(options_.model_fingerprint);
    id.listener = listener.release();
    id.quiet = sub;
    id.liveness = !sub;
    if (n_ > 1) {
      const auto joined_by = detail::deadline_after(options_.connect_timeout);  // every rank, not just the neighbours
      auto links = detail::ring_startup(options_, id).run();  // connected links (link.hpp)
      data_ = detail::ring_data_path(links, rank_, n_, chunk_bytes_, options_.spin, ranks_);
      if (!sub) {
        const ring_options* o = &options_;
        const int me = rank_;
        liveness_ = std::make_unique<detail::liveness_monitor>(
            std::move(links.liveness_out), next(), std::move(links.liveness_in), prev(), rank_,
            options_.liveness_timeout, ranks_, [o, me](const std::string& text) { detail::ring_log(*o, me, text); });
        data_.watch(liveness_.get());
        arrange_hosts(id, joined_by);
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

  // Float32 sums and means travel as 16 bits when this ring compresses (the links between hosts).
  template <class T>
  void narrow_on_the_wire(plan& p, reduce_op op) const {
    if constexpr (std::is_same_v<T, float>) {
      if (compression_ != wire_compression::none && (op == reduce_op::sum || op == reduce_op::mean)) {
        p.wire = compression_;
        p.wire_esize = sizeof(std::uint16_t);
      }
    }
  }

  // An all-reduce of `data` on this ring alone.
  template <class T>
  plan flat_all_reduce_plan(std::span<T> data, reduce_op op) {
    plan p = make_plan(detail::all_reduce_schedule(detail::op_kind::all_reduce, rank_, n_, data.size(), sizeof(T),
                                                   chunk_bytes_),
                       op, static_cast<std::uint8_t>(op), data.data());
    narrow_on_the_wire<T>(p, op);
    return p;
  }

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    if (local_ && data.size_bytes() >= options_.hierarchical_min_bytes)
      return detail::ring_hierarchy::all_reduce(*this, data, op, options);
    plan p = flat_all_reduce_plan(data, op);
    run<T>(p, options);
  }

  // all_reduce_streamed on this ring: all_reduce_now's plan with the final parts reported as they come (the flat
  // ring); the hierarchical all-reduce reports the whole buffer once it is done.
  template <class T, class OnFinal>
  void all_reduce_streamed_now(std::span<T> data, reduce_op op, OnFinal& on_final, op_options options) {
    if (n_ == 1 || (local_ && data.size_bytes() >= options_.hierarchical_min_bytes)) {
      all_reduce_now(data, op, options);
      if (!data.empty()) on_final(std::size_t{0}, data.size());
      return;
    }
    plan p = flat_all_reduce_plan(data, op);
    p.on_final_context = static_cast<void*>(std::addressof(on_final));
    p.on_final = [](void* context, std::size_t first, std::size_t count) {
      (*static_cast<OnFinal*>(context))(first, count);
    };
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
    narrow_on_the_wire<T>(p, op);  // the reduce-scatter's gradients; the parameters travel exact (resolve_chunk)
    p.gather_base = reinterpret_cast<std::uint8_t*>(params.data());
    p.on_reduced_context = static_cast<void*>(std::addressof(update));
    p.on_reduced = [](void* context, std::size_t first, std::size_t count) {
      (*static_cast<Update*>(context))(first, count);
    };
    run<T>(p, options);
  }

  template <class T>
  void broadcast_now(std::span<T> data, int root, op_options options) {
    check_broadcast(root, detail::dtype_of<T>(), data.size(), options);
    plan p = make_plan(detail::broadcast_schedule(rank_, n_, root, data.size(), sizeof(T), chunk_bytes_),
                       reduce_op::sum, 0, data.data());
    run<T>(p, options);
  }

  // Before a broadcast moves data, the ranks compare what they were called with: a rank that takes itself for the
  // root only sends, so ranks passing different roots would otherwise each end with their own data and no error, and
  // the root, which receives nothing, would not see another rank's different size or type. One all-reduce of the
  // maximum of each value and of its negation gives every rank the range of each; all must be single values.
  void check_broadcast(int root, detail::wire_dtype type, std::size_t count, op_options options) {
    if (n_ == 1) return;
    const auto c = static_cast<std::int64_t>(count), t = static_cast<std::int64_t>(type);
    std::array<std::int64_t, 6> v{root, -root, c, -c, t, -t};
    const std::uint64_t seq = next_seq_;
    plan p = make_plan(detail::all_reduce_schedule(detail::op_kind::broadcast_check, rank_, n_, v.size(),
                                                   sizeof(std::int64_t), chunk_bytes_),
                       reduce_op::max, static_cast<std::uint8_t>(reduce_op::max), v.data());
    run<std::int64_t>(p, options);
    std::string differ;
    const auto range = [&](const char* what, std::int64_t low, std::int64_t high, auto name) {
      if (low == high) return;
      differ += std::string(differ.empty() ? "" : ", ") + what + " from " + name(low) + " to " + name(high);
    };
    const auto number = [](std::int64_t x) { return std::to_string(x); };
    const auto type_name = [](std::int64_t x) {
      return std::string(detail::dtype_name(static_cast<detail::wire_dtype>(x)));
    };
    range("roots", -v[1], v[0], number);
    range("element counts", -v[3], v[2], number);
    range("element types", -v[5], v[4], type_name);
    // As any protocol failure: the verdict goes to the neighbours before this rank leaves, so a rank still in the
    // check reads it rather than finding this one gone; the ring stays failed.
    if (!differ.empty())
      fail(p, failure{error_kind::protocol, rank_,
                      "broadcast #" + std::to_string(seq + 1) + ": the ranks were called with different arguments (" +
                          differ + "); every rank must pass the same root, type and size"});
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
  //
  // Start-up connects a rank to its two neighbours only; this first gather is what proves every rank has joined. A
  // rank that starts late is still within `connect_timeout`, so the gather waits until then (or for the operation
  // timeout, if that is longer), and rank 0 says the ring is connected only once it has come round.
  void arrange_hosts(const detail::ring_identity& id, steady::time_point joined_by) {
    const auto n = static_cast<std::size_t>(n_);
    std::array<std::int64_t, 4> mine{};
    static_assert(sizeof mine == sizeof id.host);
    std::memcpy(mine.data(), id.host.data(), sizeof mine);
    std::vector<std::int64_t> all(4 * n);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(joined_by - steady::now());
    all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all),
               op_options{std::max(left, options_.op_timeout)});
    if (rank_ == 0) log("ring of " + std::to_string(n_) + " ranks connected");
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
                                    : (data_.out_through_shm() || data_.in_through_shm() ? 1 : 0);
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
    if (c != wire_compression::none) data_.make_wire_stage();
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
      detail::rank_map names(std::move(scope), o.addresses, ranks, ranks_);
      return std::pair{std::move(o), std::move(names)};
    };
    auto [host_options, host_info] = ring_of(mates, 0, static_cast<int>(index), "host ring");
    local_.reset(new ring_collective(std::move(host_options), std::move(host_listener), &host_info));
    local_->data_.watch(data_.monitor());  // the flat ring's liveness watches the same ranks
    std::vector<int> peers;  // rank `index` of every host, in host order
    for (const auto& m : members) peers.push_back(m[index]);
    auto [between_options, between_info] =
        ring_of(peers, 1, static_cast<int>(my_host), "ring between hosts (rank " + std::to_string(index) + " of each)");
    cross_.reset(new ring_collective(std::move(between_options), std::move(between_listener), &between_info));
    cross_->data_.watch(data_.monitor());
  }

  template <class T>
  void run_half(detail::ring_half half, std::span<T> data, reduce_op op, op_options options) {
    plan p = make_plan(detail::all_reduce_half_schedule(half, rank_, n_, data.size(), sizeof(T), chunk_bytes_), op,
                       static_cast<std::uint8_t>(op), data.data());
    run<T>(p, options);
  }

  // ---------------------------------------------------------------------------------------------------------
  // The data path (detail/data_path.hpp) and what a failure on it does to the ring.

  template <class T>
  void run(plan& p, op_options options) {
    if (broken_) std::rethrow_exception(broken_);
    if (n_ == 1 || p.sched.items <= p.sched.begin) return;  // one rank: the result is the input (mean over one rank is a no-op)
    if (auto* monitor = data_.monitor(); monitor && monitor->fired())
      fail(p, *monitor->verdict());  // a peer was lost between operations
    const auto timeout = options.timeout.count() > 0 ? options.timeout : options_.op_timeout;
    const auto deadline = detail::deadline_after(timeout);
    std::optional<failure> f = data_.pump<T>(p, deadline, timeout);
    if (f) fail(p, *f);
  }

  // Shuts every data connection down, so that the neighbours (and queued operations) fail fast.
  void shutdown_links() { data_.shutdown_links(); }

  // Tells both neighbours, breaks the ring for good, and throws the error this rank reports.
  [[noreturn]] void fail(const plan& p, const failure& found) {
    if (auto* monitor = data_.monitor()) {
      // One verdict for the whole job: the liveness verdict, when there is one, is the cause. A neighbour that closed
      // or aborted may be its echo, so this waits (briefly) for the verdict that travels ahead of it; without one,
      // this rank's own finding becomes the verdict, passed on before anything of this rank closes. (The monitor logs
      // it.)
      auto verdict = monitor->verdict();
      if (!verdict) verdict = monitor->await_verdict(detail::abort_read_grace);
      if (!verdict) {
        failure own = ranks_.in_job_terms(found);
        own.text += " (reported by rank " + std::to_string(ranks_.job_rank(rank_)) + ")";
        verdict = monitor->publish(std::move(own));
      }
      // The verdict names the flat ring's ranks: the ranks of a ring inside hear this rank's abort as "it gave up".
      failure told = *verdict;
      if (ranks_.inner()) told.culprit = -1;
      data_.abort_neighbours(p, told);
      broken_ = detail::ring_error(ranks_, rank_, *verdict);
      std::rethrow_exception(broken_);
    }
    // A world without liveness (none is started in a world of one): the neighbours hear this ring's own terms, the
    // error and the log name the job's.
    data_.abort_neighbours(p, found);
    const failure mapped = ranks_.in_job_terms(found);
    broken_ = detail::ring_error(ranks_, rank_, mapped);
    log(mapped.text);
    std::rethrow_exception(broken_);
  }

  void log(const std::string& text) const { detail::ring_log(options_, ranks_.job_rank(rank_), text); }

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
  detail::ring_data_path data_;  // the links to the neighbours and the pump over them
  std::uint64_t next_seq_ = 0;
  std::exception_ptr broken_;
  std::unique_ptr<detail::liveness_monitor> liveness_;  // the flat ring's (none in a world of one or a ring inside)
  detail::rank_map ranks_;                  // who this ring's ranks are in the job, for every message naming one
  int hosts_ = 1;
  std::unique_ptr<ring_collective> local_;  // hierarchical: this host's ranks
  std::unique_ptr<ring_collective> cross_;  // hierarchical: this rank's index on every host
  wire_compression compression_ = wire_compression::none;  // set on the ring that carries the inter-host leg
};

static_assert(collective<ring_collective>);
// Where the ring is complete, before anything else is seen: the gradient synchroniser's choice of update path cannot
// depend on what a translation unit includes after this header.
static_assert(host_arena_collective<ring_collective>);

}  // namespace mwstrat
