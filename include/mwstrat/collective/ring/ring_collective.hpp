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
/// The class is the front-end (shared with the other backends: collective/detail/front_end.hpp) over what the ring
/// builder (ring/detail/builder.hpp) makes: a flat ring (flat_ring.hpp: the operations over one ring's links), or that
/// flat ring and a hierarchical ring made of two more flat rings (hierarchy.hpp), which takes the large all-reduces.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/front_end.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/ring/detail/builder.hpp>
#include <mwstrat/collective/ring/detail/join_client.hpp>
#include <mwstrat/collective/ring/detail/join_desk.hpp>
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/regroup.hpp>
#include <mwstrat/collective/ring/host_arena.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
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
  /// With `join_via` set (a worker started after the job), it first waits to be admitted by the job's chief
  /// (`config_error` when refused, `timeout_error` when nobody admits it in time) and joins that ring.
  explicit ring_collective(ring_options options)
      : uncaught_(std::uncaught_exceptions()), joined_(!options.join_via.empty()), desk_(options.join_desk),
        ring_(detail::ring_builder::build(joined_ ? detail::join_job(std::move(options)) : std::move(options))) {
    open_join_desk();
  }

  ring_collective(const ring_collective&) = delete;
  ring_collective& operator=(const ring_collective&) = delete;

  /// Waits for queued asynchronous operations (each bounded by its deadline), then closes the connections.
  /// When destroyed by an exception, shuts the connections down first, so queued operations and the other
  /// ranks fail fast (`peer_lost_error` naming this rank) instead of waiting for their deadline.
  ~ring_collective() {
    const bool failing = std::uncaught_exceptions() > uncaught_;
    if (failing) ring_.job.shutdown_links();
    queue_.stop();  // the worker is joined before the sockets close
    // Leaving normally, this rank says goodbye, so its neighbours do not take its silence for a loss; destroyed by
    // an exception (or after the ring failed) it just closes, and they find it lost.
    if (ring_.liveness) ring_.liveness->stop(!failing && !ring_.job.broken());
  }

  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const noexcept { return ring_.job.rank(); }
  /// The number of ranks in the ring.
  [[nodiscard]] int size() const noexcept { return ring_.job.size(); }
  /// True when both links of this rank carry payloads through shared memory (see `ring_transport`).
  [[nodiscard]] bool uses_shared_memory() const noexcept { return ring_.job.uses_shared_memory(); }
  /// The number of hosts the ranks are on (by `ring_options::host_identity`, or as derived).
  [[nodiscard]] int hosts() const noexcept { return ring_.hosts; }
  /// True when all-reduce is hierarchical: within each host, then a TCP ring between hosts (see `ring_topology`).
  [[nodiscard]] bool hierarchical() const noexcept { return ring_.hierarchy != nullptr; }
  /// The configured address of rank `r`; a rank outside [0, size()) is a `config_error`.
  [[nodiscard]] const std::string& address(int r) const {
    if (r < 0 || r >= size())
      throw config_error({"ring", rank()}, "address(" + std::to_string(r) + "): no such rank in a ring of " +
                                               std::to_string(size()));
    return ring_.job.ranks().address(r);
  }
  /// Which ring of the job this is (`ring_options::generation`).
  [[nodiscard]] std::uint64_t generation() const noexcept { return ring_.job.options().generation; }
  /// The options of the ring that replaces this one once it has lost a rank (in-memory recovery): the same ranks,
  /// addresses and checks, the next generation, and `timeout` for the new start-up (how long the survivors wait for
  /// a replacement). Destroy this ring before making that one: it listens on the same address.
  [[nodiscard]] ring_options next_generation(std::chrono::milliseconds timeout) const {
    ring_options o = ring_.job.options();
    o.generation = o.generation + 1;
    o.connect_timeout = timeout;
    o.join_desk = desk_;
    return o;
  }

  /// The options of the smaller ring the survivors build when ranks `lost` are gone for good (elastic training,
  /// train/in_memory_recovery.hpp): the other ranks' addresses in their order, so rank r becomes r minus the lost
  /// ranks below it (the lowest survivor is the new rank 0, the chief), the next generation, the new membership
  /// folded into the cluster fingerprint, and `timeout` for the start-up. A rank of the old ring that is not in the
  /// new one (a stopped worker that wakes up), or one with another view of who is left, is refused by its handshake.
  /// Throws `config_error` when `lost` names this rank, a rank out of range, or none. Destroy this ring before making
  /// that one: it listens on the same address.
  [[nodiscard]] ring_options without_ranks(std::span<const int> lost, std::chrono::milliseconds timeout) const {
    ring_options o = without_ranks(ring_.job.options(), lost, timeout);
    o.join_desk = desk_;
    return o;
  }

  /// On a ring that failed with a lost peer (elastic training): the survivors' one agreed membership for the smaller
  /// ring, as this ring's ranks, ascending, this rank among them (collective/ring/detail/regroup.hpp). `culprit`: the
  /// rank this rank's verdict names. Every survivor calls it; two or more workers lost at once still leave one group,
  /// and a group that is not a strict majority of the ranks not known to be dead (its neighbours' connections ended
  /// with no verdict) stops rather than risk a second group training elsewhere. Throws `peer_lost_error` saying why
  /// when there is no such group, `removed_error` when the others found this rank lost. Bounded by `timeout`.
  [[nodiscard]] std::vector<int> agree_survivors(int culprit, std::chrono::milliseconds timeout) {
    detail::regroup_view view;
    if (ring_.liveness) {
      for (const int r : ring_.liveness->dead_neighbours()) view.dead.insert(r);
      view.more_dead = [this] { return ring_.liveness->dead_neighbours(); };
    }
    if (culprit >= 0 && culprit < size()) view.named.insert(culprit);
    const ring_options& o = ring_.job.options();
    const auto wait = std::clamp(o.liveness_timeout, std::chrono::milliseconds(1000), std::max(timeout,
                                 std::chrono::milliseconds(1000)));
    return detail::agree_survivors(o, std::move(view), wait, timeout);
  }

  /// `without_ranks` on the options of a ring (`o.rank` this rank) rather than on a connected one: what the members
  /// build when a ring they could not start (joiners that never came) must be given up.
  [[nodiscard]] static ring_options without_ranks(ring_options o, std::span<const int> lost,
                                                  std::chrono::milliseconds timeout) {
    const int n = static_cast<int>(o.addresses.size());
    std::vector<bool> gone(static_cast<std::size_t>(n), false);
    for (const int r : lost) {
      if (r < 0 || r >= n || r == o.rank) {
        throw config_error({"ring", o.rank}, "without_ranks: rank " + std::to_string(r) +
                                                 (r == o.rank ? " is this rank" : " is not a rank of this ring of " +
                                                                                      std::to_string(n)));
      }
      gone[static_cast<std::size_t>(r)] = true;
    }
    if (lost.empty()) throw config_error({"ring", o.rank}, "without_ranks: no rank named");
    const std::vector<std::string> before = std::move(o.addresses);
    const int me = o.rank;
    o.addresses.clear();
    for (int r = 0; r < n; ++r) {
      if (gone[static_cast<std::size_t>(r)]) continue;
      if (r == me) o.rank = static_cast<int>(o.addresses.size());
      o.addresses.push_back(before[static_cast<std::size_t>(r)]);
    }
    // The membership joins the cluster fingerprint (and so the handshake's digest): two groups that disagree on who
    // is left (a rank cut off that drew another verdict) can never connect into one ring, whatever their sizes.
    o.cluster_fingerprint += "|members";
    for (const auto& a : o.addresses) o.cluster_fingerprint += " " + a;
    o.generation = o.generation + 1;
    o.connect_timeout = timeout;
    return o;
  }

  // ---- Growing (elastic training; docs/fault-tolerance.md). Joiners ask the chief's join desk
  // (`ring_options::join_listen`) to be taken in; the members agree at a step boundary and build the next ring with
  // them (train/in_memory_recovery.hpp runs the protocol).

  /// Whether this ring was joined by a worker started after the job (`ring_options::join_via`).
  [[nodiscard]] bool joined() const noexcept { return joined_; }
  /// The joiners heard, checked and waiting at this rank's desk (0 on a rank that is not the chief or has none).
  [[nodiscard]] int pending_joiners() const { return desk_ ? desk_->pending() : 0; }
  /// Waits at most `wait` for a joiner to be pending at this rank's desk; how many are (0 without a desk, at once).
  int await_joiners(std::chrono::milliseconds wait) { return desk_ ? desk_->await(wait) : 0; }
  /// The first `count` pending joiners (fewer if fewer remain), set aside for `admit_joiners`: where each one's ring
  /// listens and its worker index.
  std::vector<detail::join_request> take_joiners(int count) {
    return desk_ ? desk_->take(count) : std::vector<detail::join_request>{};
  }
  /// Tells the joiners set aside by `take_joiners` the ring `grown` (`with_ranks`) they are in; they then build it
  /// with the members.
  void admit_joiners(const ring_options& grown) {
    if (desk_) desk_->admit(grown);
  }
  /// The options of the larger ring the members build with joiners at `added` (their ring addresses, in order): the
  /// same ranks, then the joiners after them, the next generation, the new membership folded into the cluster
  /// fingerprint (as `without_ranks` does), and `timeout` for the start-up. Destroy this ring before making that one.
  [[nodiscard]] ring_options with_ranks(std::span<const std::string> added, std::chrono::milliseconds timeout) const {
    if (added.empty()) throw config_error({"ring", rank()}, "with_ranks: no address named");
    ring_options o = ring_.job.options();
    for (const auto& a : added) {
      if (std::find(o.addresses.begin(), o.addresses.end(), a) != o.addresses.end()) {
        throw config_error({"ring", rank()}, "with_ranks: " + a + " is already a rank's address");
      }
      o.addresses.push_back(a);
    }
    o.cluster_fingerprint += "|members";
    for (const auto& a : o.addresses) o.cluster_fingerprint += " " + a;
    o.generation = o.generation + 1;
    o.connect_timeout = timeout;
    o.join_desk = desk_;
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

  // The operations, behind the front end's argument checks: on the job's flat ring, but for all-reduces large
  // enough for the hierarchical ring when there is one.
  [[nodiscard]] bool hierarchical_for(std::size_t bytes) const noexcept {
    return ring_.hierarchy && bytes >= ring_.job.options().hierarchical_min_bytes;
  }

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    if (hierarchical_for(data.size_bytes())) return ring_.hierarchy->all_reduce(ring_.job, data, op, options);
    ring_.job.all_reduce_now(data, op, options);
  }

  // The flat ring reports the final parts as they come; the hierarchical all-reduce, the whole buffer at its end.
  template <class T, class OnFinal>
  void all_reduce_streamed_now(std::span<T> data, reduce_op op, OnFinal& on_final, op_options options) {
    if (hierarchical_for(data.size_bytes())) {
      all_reduce_now(data, op, options);
      if (!data.empty()) on_final(std::size_t{0}, data.size());
      return;
    }
    ring_.job.all_reduce_streamed_now(data, op, on_final, options);
  }

  template <class T, class Update>
  void all_reduce_update_now(std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                             op_options options) {
    if (hierarchical_for(gradients.size_bytes()))
      return ring_.hierarchy->all_reduce_update(ring_.job, gradients, op, params, update, options);
    ring_.job.all_reduce_update_now(gradients, op, params, update, options);
  }

  template <class T>
  void broadcast_now(std::span<T> data, int root, op_options options) {
    ring_.job.broadcast_now(data, root, options);
  }

  template <class T>
  void all_gather_now(std::span<const T> mine, std::span<T> all, op_options options) {
    ring_.job.all_gather_now(mine, all, options);
  }

  void barrier_now(op_options options) { ring_.job.barrier_now(options); }

  // Rank 0 listens for joiners when its options name a join address (and no earlier ring of the job opened the
  // desk). A desk that cannot listen ends the job's first ring; a ring rebuilt in recovery goes on without joins.
  void open_join_desk() {
    const ring_options& o = ring_.job.options();
    if (rank() != 0 || desk_ || o.join_listen.empty()) return;
    ring_options logs;  // the desk outlives this ring: it keeps a copy of where to log, not these options
    logs.log = o.log;
    try {
      desk_ = std::make_shared<detail::join_desk>(o.join_listen, o.job_token.value_or(std::string()),
                                                  o.handshake_timeout,
                                                  [logs](const std::string& text) { detail::ring_log(logs, 0, text); });
    } catch (const error& e) {
      if (generation() == 0) throw;
      detail::ring_log(o, 0, std::string("no joins will be heard: ") + e.what());
    }
  }

  int uncaught_ = 0;
  bool joined_ = false;
  std::shared_ptr<detail::join_desk> desk_;  // the chief's (shared with the next ring of the job)
  detail::built_ring ring_;  // the job's flat ring, its liveness, and the hierarchical ring when there is one
};

static_assert(collective<ring_collective>);
// Where the ring is complete, before anything else is seen: the gradient synchroniser's choice of update path cannot
// depend on what a translation unit includes after this header.
static_assert(host_arena_collective<ring_collective>);

}  // namespace mwstrat
