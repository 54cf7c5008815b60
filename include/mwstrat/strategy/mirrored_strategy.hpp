#pragma once
/// \file
/// `mirrored_strategy<Collective>`: synchronous data parallelism over any `collective`.
///
/// Every replica holds a full copy of the parameters. At start the chief's copy is broadcast (`mirror`) after the
/// replicas have checked that they build the same model (`verify_same`); every step the gradients are
/// mean-reduced so every replica applies the identical update and the copies stay bit-identical. How the gradients
/// become that update (buckets overlapping backward, where the update runs) is the strategy's
/// `gradient_sync_options`, carried out by the synchroniser it makes for `fit` (`collective_gradient_sync`).
/// Over `ring_collective` (processes, TCP) this is TensorFlow's MultiWorkerMirroredStrategy; over
/// `local_collective` (threads in one process) it is MirroredStrategy.

#include <mwstrat/cluster/task_info.hpp>
#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/detail/hash.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

namespace detail {
// How a strategy holds its collective: by value, by reference (`C&`) or owned on the heap (`std::unique_ptr<C>`,
// for collectives that cannot move, such as a connected ring).
template <class Held>
struct collective_holder {
  using type = std::remove_cvref_t<Held>;
  static type& get(std::remove_reference_t<Held>& held) { return held; }
  static const type& get(const std::remove_reference_t<Held>& held) { return held; }
};
template <class C>
struct collective_holder<std::unique_ptr<C>> {
  using type = C;
  static C& get(std::unique_ptr<C>& held) { return *checked(held.get()); }
  static const C& get(const std::unique_ptr<C>& held) { return *checked(held.get()); }
  // Null when the strategy was given none, or after a rejoin_collective that threw.
  template <class P>
  static P* checked(P* p) {
    if (p == nullptr)
      throw config_error({"strategy"}, "the strategy holds no collective (it was given a null one, or "
                                       "rejoin_collective failed and the strategy cannot run collectives any more)");
    return p;
  }
};
}  // namespace detail

/// Synchronous data parallelism over a `collective`, held by value (`C`), by reference (`C&`, e.g.
/// `local_collective&` from `spawn_ranks`) or owned on the heap (`std::unique_ptr<C>`, e.g. a connected ring).
template <class Collective>
  requires collective<typename detail::collective_holder<Collective>::type>
class mirrored_strategy {
 public:
  using collective_type = typename detail::collective_holder<Collective>::type;

  /// Takes (or refers to) a connected collective; `task` names this replica in logs and file paths; `sync` says how
  /// gradients are synchronised (throws `config_error` for options that contradict themselves).
  mirrored_strategy(Collective c, task_info task, gradient_sync_options sync = {})
      : held_(std::forward<Collective>(c)), task_(std::move(task)), sync_(sync),
        rank_(collective().rank()), size_(collective().size()) {
    detail::validate(sync_, rank_);
  }

  /// As above, with the task `worker:<rank>`.
  explicit mirrored_strategy(Collective c, gradient_sync_options sync = {})
      : held_(std::forward<Collective>(c)), sync_(sync), rank_(collective().rank()), size_(collective().size()) {
    task_.index = rank_;
    detail::validate(sync_, rank_);
  }

  // The rank and size are the collective's at construction, and after a shrink the smaller one's: a rejoined
  // collective has the same ranks, and a strategy whose rejoin failed still answers them (its error paths log as
  // the chief, or not).

  /// Number of replicas that take part in every step.
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return size_; }
  /// This replica's rank; 0 is the chief.
  [[nodiscard]] int replica_id() const noexcept { return rank_; }
  /// Whether this replica is the chief: the one that logs and writes files.
  [[nodiscard]] bool is_chief() const noexcept { return rank_ == 0; }
  /// TF_CONFIG's task type of this replica ("chief" or "worker").
  [[nodiscard]] const std::string& task_type() const { return task_.type; }
  /// TF_CONFIG's task index of this replica.
  [[nodiscard]] int task_id() const { return task_.index; }

  /// Throws `config_error` naming every replica whose `value` differs from the chief's; `what` names the value
  /// ("model fingerprint"). Only a digest and the length cross the wire.
  void verify_same(std::string_view what, std::string_view value) {
    const std::array<std::int64_t, 2> mine{static_cast<std::int64_t>(detail::fnv1a64(value)),
                                           static_cast<std::int64_t>(value.size())};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(num_replicas_in_sync()));
    collective().all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
    std::string differing;
    for (int r = 1; r < num_replicas_in_sync(); ++r) {
      const auto at = 2 * static_cast<std::size_t>(r);
      if (all[at] != all[0] || all[at + 1] != all[1]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (differing.empty()) return;
    std::string detail = std::string(what) + " differs from the chief's (rank 0) on rank(s) " + differing;
    if (all[2 * static_cast<std::size_t>(replica_id())] != all[0]) {
      detail += "; this replica's is '" + std::string(value) + "'";
    }
    detail += ": every worker must build the same model";
    throw config_error({"strategy", replica_id()}, detail);
  }

  /// Makes `values` equal to the chief's on every replica.
  template <class T>
  void mirror(std::span<T> values) {
    collective().broadcast(values, 0);
  }

  /// Replaces `gradients` by their mean over all replicas, in place.
  void mean_gradients(std::span<float> gradients) { collective().all_reduce(gradients, reduce_op::mean); }

  /// How this strategy synchronises gradients.
  [[nodiscard]] const gradient_sync_options& sync_options() const noexcept { return sync_; }

  /// Collective call: the gradient synchroniser `fit` uses for `model` and `optimizer` (`gradient_sync_strategy`),
  /// following `sync_options()`. Made once per `fit`, on every replica at the same point.
  template <class Model, class Optimizer>
  [[nodiscard]] collective_gradient_sync<collective_type, Model, Optimizer> make_gradient_sync(Model& model,
                                                                                              Optimizer& optimizer) {
    return collective_gradient_sync<collective_type, Model, Optimizer>(collective(), model, optimizer, sync_);
  }

  /// Replaces `values` by their sum over all replicas (metric sums and counts).
  void sum_metrics(std::span<double> values) { collective().all_reduce(values, reduce_op::sum); }

  /// Returns once every replica has reached it.
  void barrier() { collective().barrier(); }

  /// In-memory recovery (train/in_memory_recovery.hpp), for a collective that can be rebuilt in place of
  /// one that lost a peer (`next_generation`, held by `std::unique_ptr`): which ring of the job this is (0 first).
  [[nodiscard]] std::uint64_t collective_generation() const
    requires requires(const collective_type& c) { { c.generation() } -> std::convertible_to<std::uint64_t>; }
  {
    return collective().generation();
  }

  /// Collective call, on every surviving replica after a lost peer, with a replacement joining the new ring: drops
  /// the failed collective and blocks until a new one of the same ranks and addresses, the next generation, is
  /// connected (at most `timeout`). Throws what the collective's constructor throws (a `timeout_error` when no
  /// replacement came); the strategy must not be used for collectives after that.
  void rejoin_collective(std::chrono::milliseconds timeout)
    requires std::same_as<Collective, std::unique_ptr<collective_type>> &&
             requires(const collective_type& c, std::chrono::milliseconds t) { collective_type(c.next_generation(t)); }
  {
    auto options = collective().next_generation(timeout);
    held_.reset();  // its sockets and threads go first: the new one listens on the same address
    held_ = std::make_unique<collective_type>(std::move(options));
  }

  /// Collective call, on every surviving replica after a lost peer (elastic training): the survivors' one agreed
  /// membership, as ranks of the failed collective (`ring_collective::agree_survivors`; `culprit`: the rank this
  /// replica's error names). Throws when no majority is left, `removed_error` when this replica was found lost.
  [[nodiscard]] std::vector<int> agree_survivors(int culprit, std::chrono::milliseconds timeout)
    requires requires(collective_type& c, std::chrono::milliseconds t) {
      { c.agree_survivors(0, t) } -> std::convertible_to<std::vector<int>>;
    }
  {
    return collective().agree_survivors(culprit, timeout);
  }

  /// Collective call, on every surviving replica once ranks `lost` are gone for good (elastic training,
  /// train/in_memory_recovery.hpp): drops the failed collective and blocks until the smaller one of the other ranks
  /// is connected (at most `timeout`; `without_ranks` numbers them). From then on `replica_id()`,
  /// `num_replicas_in_sync()` and `is_chief()` are the new ring's: the lowest survivor is the chief. Throws what the
  /// collective's constructor throws; the strategy must not be used for collectives after that.
  void shrink_collective(std::span<const int> lost, std::chrono::milliseconds timeout)
    requires std::same_as<Collective, std::unique_ptr<collective_type>> &&
             requires(const collective_type& c, std::span<const int> l, std::chrono::milliseconds t) {
               collective_type(c.without_ranks(l, t));
             }
  {
    auto options = collective().without_ranks(lost, timeout);
    held_.reset();  // its sockets and threads go first: the new one listens on the same address
    held_ = std::make_unique<collective_type>(std::move(options));
    rank_ = collective().rank();
    size_ = collective().size();
  }

  /// Growing (elastic training, train/in_memory_recovery.hpp), for a collective that takes joiners in
  /// (`ring_collective`): whether this replica joined a running job, and how many joiners wait at its desk (the
  /// chief's; 0 elsewhere).
  [[nodiscard]] bool joined_collective() const
    requires requires(const collective_type& c) { { c.joined() } -> std::convertible_to<bool>; }
  {
    return collective().joined();
  }
  [[nodiscard]] int pending_joiners() const
    requires requires(const collective_type& c) { { c.pending_joiners() } -> std::convertible_to<int>; }
  {
    return collective().pending_joiners();
  }

  /// Collective call: the chief waits at most `wait` for a joiner (returning at once when one is pending), and every
  /// replica learns how many are pending there.
  int await_joiners(std::chrono::milliseconds wait)
    requires requires(collective_type& c, std::chrono::milliseconds t) {
      { c.await_joiners(t) } -> std::convertible_to<int>;
    }
  {
    std::array<double, 1> count{is_chief() ? static_cast<double>(collective().await_joiners(wait)) : 0.0};
    // The others wait in the broadcast for the chief: its wait, and a minute for the broadcast itself.
    collective().broadcast(std::span<double>(count), 0, op_options{wait + std::chrono::milliseconds(60000)});
    return static_cast<int>(count[0]);
  }

  /// Collective call, on every replica once they have agreed to take `count` joiners in: the chief takes them from its
  /// desk and says who they are, every replica drops this collective and builds the larger one with them (the
  /// joiners hold the last ranks; at most `timeout`), and the chief tells the joiners where they stand. Returns the
  /// joiners' worker indices, in rank order (fewer than `count` when some went away). None: nothing was rebuilt, or
  /// the larger ring could not start and the members rebuilt theirs without the joiners. Throws what the
  /// collective's constructor throws for that one.
  std::vector<int> grow_collective(int count, std::chrono::milliseconds timeout)
    requires std::same_as<Collective, std::unique_ptr<collective_type>> &&
             requires(collective_type& c, std::span<const std::string> a, std::span<const int> l,
                      std::chrono::milliseconds t) {
               collective_type(c.with_ranks(a, t));
               collective_type(collective_type::without_ranks(c.with_ranks(a, t), l, t));
               c.take_joiners(1);
             }
  {
    // The joiners as numbers, so that a broadcast carries them: first how many the chief took and the longest
    // address, then per joiner its worker index, its address's length and the address's characters, in slots of
    // that size.
    decltype(collective().take_joiners(count)) taken;
    std::array<double, 2> sizes{0.0, 0.0};
    if (is_chief()) {
      taken = collective().take_joiners(count);
      sizes[0] = static_cast<double>(taken.size());
      for (const auto& j : taken) sizes[1] = std::max(sizes[1], static_cast<double>(j.address.size()));
    }
    collective().broadcast(std::span<double>(sizes), 0);
    const auto joined = static_cast<std::size_t>(sizes[0]);
    const std::size_t slot = 2 + static_cast<std::size_t>(sizes[1]);
    std::vector<double> wire(joined * slot, 0.0);
    for (std::size_t j = 0; j < taken.size(); ++j) {
      double* at = wire.data() + j * slot;
      at[0] = taken[j].worker;
      at[1] = static_cast<double>(taken[j].address.size());
      const std::string& a = taken[j].address;
      for (std::size_t c = 0; c < a.size(); ++c) at[2 + c] = static_cast<unsigned char>(a[c]);
    }
    if (!wire.empty()) collective().broadcast(std::span<double>(wire), 0);
    std::vector<int> workers;
    std::vector<std::string> addresses;
    for (std::size_t j = 0; j < joined; ++j) {
      const double* at = wire.data() + j * slot;
      workers.push_back(static_cast<int>(at[0]));
      std::string a;
      for (std::size_t c = 0; c < static_cast<std::size_t>(at[1]); ++c) a += static_cast<char>(at[2 + c]);
      addresses.push_back(std::move(a));
    }
    if (addresses.empty()) return workers;
    auto options = collective().with_ranks(std::span<const std::string>(addresses), timeout);
    if (is_chief()) collective().admit_joiners(options);
    held_.reset();  // its sockets and threads go first: the new one listens on the same address
    try {
      held_ = std::make_unique<collective_type>(options);
    } catch (const error&) {
      // The larger ring never started (a joiner died after its admission): no member's start-up completes without
      // every rank, so every member gives it up and the members go on among themselves, in the next generation. One
      // member may give up at once (its link to the joiner refused) while another waits out its whole start-up — the
      // connect timeout, then a handshake that began just before it — so the members' own ring waits twice that:
      // the first to give up is still there when the last arrives.
      std::vector<int> joiners;
      for (int r = size_; r < static_cast<int>(options.addresses.size()); ++r) joiners.push_back(r);
      const std::chrono::milliseconds longest_start = [&] {
        if constexpr (requires { options.handshake_timeout; }) return timeout + options.handshake_timeout;
        return timeout;
      }();
      held_ = std::make_unique<collective_type>(
          collective_type::without_ranks(options, std::span<const int>(joiners), 2 * longest_start));
      workers.clear();
    }
    rank_ = collective().rank();
    size_ = collective().size();
    return workers;
  }

  /// The collective underneath, for custom training loops that need more (all_gather, async all_reduce); `fit`
  /// goes through `make_gradient_sync` instead.
  [[nodiscard]] collective_type& collective() { return detail::collective_holder<Collective>::get(held_); }
  [[nodiscard]] const collective_type& collective() const { return detail::collective_holder<Collective>::get(held_); }

 private:
  Collective held_;
  task_info task_;
  gradient_sync_options sync_;
  int rank_ = 0, size_ = 1;
};

}  // namespace mwstrat
