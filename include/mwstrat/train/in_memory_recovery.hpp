#pragma once
/// \file
/// In-memory recovery: when a worker is lost, the survivors do not exit. They rebuild the ring with a replacement
/// (started by the launcher: `mwstrat-launch --replace-lost`), one of them sends it the full training state from
/// memory, and `fit` goes on from the last step every rank can agree on. No backup is read and no file system is
/// shared. See docs/fault_campaign.md ("In-memory recovery").
///
/// The protocol (every rank, survivors and the replacement alike, once the new ring is up):
///   1. the model fingerprints are compared (`verify_same`);
///   2. every rank says which step boundary its snapshot holds (a replacement: none), in one all-reduce; the source
///      is the lowest rank with the latest one. Ranks can be one boundary apart (a rank that finished the last
///      reduction of step k before the peer died is at k; one that had not is at k − 1): the latest is correct;
///   3. the source's snapshot is broadcast (a header of numbers, then the floats) and every rank loads it.
///
/// The snapshot (detail/training_snapshot.hpp): `fit` copies the training state at every step boundary — after the
/// step's reductions and its stop agreement — into memory it reuses: the parameters, the model's state, the
/// optimizer's slots, step count and learning rate, the model's RNG position, the epoch, step and the epoch's metric
/// sums: what BackupAndRestore saves, in memory. A fault strikes while parameters may be half-updated (the sharded
/// update's all-gather, the shared host copy, buckets overlapping backward), so a rank's live parameters are never
/// sent: only its snapshot, which is a complete boundary. The cost is one copy of that state per step (a memcpy; none
/// unless recovery is on).
///
/// Shrinking (elastic training, `min_workers`): the survivors do not wait for a replacement. They agree on who is left
/// (`agree_survivors`: one membership even when several workers were lost at once and the verdicts differ, and only a
/// majority of the ranks not known dead goes on), build the ring of the others at once (`shrink_collective`: the
/// next generation, ranks renumbered in order, the lowest survivor the new chief) and run steps 1–3 on it; `fit` then
/// reshards the data for the smaller group (the same global batches, uneven shares weighted by examples). A worker
/// the verdict names that runs again (it was stopped) throws `removed_error`. See docs/fault-tolerance.md.
///
/// Growing (`max_workers`): a worker started later waits at the chief's join desk (collective/ring/detail/
/// join_desk.hpp). At a step boundary the chief offers the joiners pending there in the step's own reduction (or
/// every worker waits for one where a callback set `train_context::await_joiners`, or for `spare_wait` after a
/// shrink); the members then build the next ring with them behind (`grow_collective`), every rank compares the job's
/// identity (detail/job_identity.hpp: a joiner with another model or other data is refused, and the ring shrinks
/// back around it), the chief's map of ranks to workers is shared, and steps 2–3 hand the joiners the boundary's
/// state; `fit` reshards.
///
/// Limits: a model's per-replica state (plain batch normalization's moving statistics) cannot come from another
/// replica's memory: every rank takes the source's. Callbacks' own state (EarlyStopping's best epoch, a progress
/// bar) is not sent: a replacement's callbacks start afresh, as after a restart; its history lacks the epochs before
/// it joined. Recovery covers the training loop (steps, epoch ends, validation), not the start of `fit` (before its
/// first step boundary), `on_train_end` or what runs after `fit`. One `fit` per process: a replacement joins the
/// first `fit` it runs.

#include <mwstrat/cluster/launcher_environment.hpp>
#include <mwstrat/detail/hash.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/job_identity.hpp>
#include <mwstrat/train/detail/run_state.hpp>
#include <mwstrat/train/detail/training_snapshot.hpp>
#include <mwstrat/train/logs.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// Options of in-memory recovery (`fit_options::recovery`). Under a launcher (`mwstrat-launch --replace-lost`) `fit`
/// takes what the launcher says (cluster/launcher_environment.hpp) wherever these are left at their defaults, so a
/// program needs no code of its own for it.
struct in_memory_recovery_options {
  /// Off by default: a lost peer ends `fit` with `peer_lost_error` (and the job restarts from its backup). On also
  /// when the launcher replaces lost workers (MWSTRAT_REPLACE_LOST=1) and the strategy can recover.
  bool enabled = false;
  /// How long the survivors wait for the replacement to join the new ring; after that `fit` throws the
  /// `peer_lost_error` that started it (naming the lost rank) and the worker exits as without recovery. Unset: the
  /// launcher's MWSTRAT_RECOVERY_TIMEOUT_MS, else 60 s.
  std::optional<std::chrono::milliseconds> timeout;
  /// Called on every survivor when a peer is lost, before it waits: the lost rank and the ring generation that lost
  /// it. A launcher that must end the lost worker itself (a stopped process never exits) learns it here. Unset: the
  /// report goes to the launcher's channel when there is one (MWSTRAT_LAUNCH_REPORT_FD). Must not throw.
  std::function<void(int lost_rank, std::uint64_t generation)> on_peer_lost;
  /// Called on a joiner once it is a member (elastic growing): its worker index in the job and the ring generation
  /// it joined. Unset: the report goes to the launcher's channel when there is one. Must not throw.
  std::function<void(int worker, std::uint64_t generation)> on_joined;
  /// Elastic training ("Shrinking" in the file comment): 0, the default, waits for a replacement as above. At
  /// least 1: the job shrinks instead — the survivors of a lost worker build a smaller ring among themselves at once
  /// (no replacement is awaited; `timeout` bounds its start-up) and go on from the last step boundary with the same
  /// global batch, as long as at least `min_workers` remain; fewer, and they give up as without a replacement.
  /// Turns recovery on. The training data must be reshardable (`distributed_input` over an in-memory set under data
  /// sharding; fit refuses other data at its start). 0 here: the launcher's MWSTRAT_MIN_WORKERS, if any.
  int min_workers = 0;
  /// Elastic training, growing ("Growing" in the file comment): at least 1, and the job takes in workers started
  /// after it (a joiner: `ring_options::join_via`) as long as it has fewer than this many; 0: the launcher's
  /// MWSTRAT_MAX_WORKERS, else no joins. Needs `min_workers` (an elastic job) and, on the chief, a join address
  /// (`ring_options::join_listen`; the launcher gives every worker one).
  int max_workers = 0;
  /// After a shrink, how long the survivors wait for a joiner before they train on the smaller group (a spare the
  /// scheduler starts at once takes the lost worker's place without a step on fewer workers). Unset: the launcher's
  /// MWSTRAT_SPARE_WAIT_MS, else 0.
  std::optional<std::chrono::milliseconds> spare_wait;
  /// Where joiners are taken in: at any step boundary after the chief has heard them (the default), or only where a
  /// callback holds the job for them (`train_context::await_joiners`) and after a shrink (`spare_wait`).
  enum class join_admission { every_step, when_awaited } admission = join_admission::every_step;
  /// false: the launcher's variables are ignored; these options alone decide.
  bool from_launcher = true;
  /// What the launcher said; unset: read from the process environment when `fit` starts.
  std::optional<launcher_environment> launcher;
};

/// A strategy whose collective can be rebuilt after a lost peer (`mirrored_strategy` over `ring_collective`).
template <class S>
concept recoverable_strategy = requires(S& s, const S& cs, std::chrono::milliseconds t, std::span<float> f,
                                        std::span<double> d) {
  s.rejoin_collective(t);
  { cs.collective_generation() } -> std::convertible_to<std::uint64_t>;
  s.collective().broadcast(f, 0);
  s.collective().broadcast(d, 0);
};

/// A strategy whose job can go on with fewer workers after a loss (`mirrored_strategy` over `ring_collective`).
template <class S>
concept shrinkable_strategy = recoverable_strategy<S> && requires(S& s, std::span<const int> lost,
                                                                  std::chrono::milliseconds t) {
  s.shrink_collective(lost, t);
  { s.agree_survivors(0, t) } -> std::convertible_to<std::vector<int>>;
};

/// A strategy whose job can take workers in while it trains (`mirrored_strategy` over `ring_collective`).
template <class S>
concept growable_strategy = shrinkable_strategy<S> && requires(S& s, const S& cs, std::chrono::milliseconds t) {
  { cs.joined_collective() } -> std::convertible_to<bool>;
  { cs.pending_joiners() } -> std::convertible_to<int>;
  { s.await_joiners(t) } -> std::convertible_to<int>;
  { s.grow_collective(1, t) } -> std::convertible_to<std::vector<int>>;
};

namespace detail {

inline constexpr std::chrono::milliseconds default_recovery_timeout{60'000};

// The options `fit` runs with: the program's, and the launcher's where the program left the defaults (never turning
// recovery on for a strategy that cannot recover). The timeout is always set.
template <bool Recoverable>
in_memory_recovery_options with_launcher(const in_memory_recovery_options& options) {
  in_memory_recovery_options r = options;
  if (options.from_launcher) {
    const launcher_environment l = options.launcher ? *options.launcher : launcher_environment::read();
    if (Recoverable && l.replace_lost) r.enabled = true;
    if (r.min_workers == 0 && l.min_workers) r.min_workers = *l.min_workers;
    if (r.max_workers == 0 && l.max_workers) r.max_workers = *l.max_workers;
    if (!r.spare_wait) r.spare_wait = l.spare_wait;
    if (!r.timeout) r.timeout = l.recovery_timeout;
    if (!r.on_peer_lost && l.report_fd) {
      r.on_peer_lost = [l](int lost_rank, std::uint64_t generation) { l.report_lost(lost_rank, generation); };
    }
    if (!r.on_joined && l.report_fd) {
      r.on_joined = [l](int worker, std::uint64_t generation) { l.report_joined(worker, generation); };
    }
  }
  if (!r.timeout) r.timeout = default_recovery_timeout;
  if (r.min_workers > 0) r.enabled = true;
  return r;
}

inline void recovery_log(int rank, const std::string& text) {
  std::fprintf(stderr, "[mwstrat.recovery] rank %d: %s\n", rank, text.c_str());
  std::fflush(stderr);
}

// Steps 1–3 of the protocol (file comment), on a connected ring: every rank ends holding the source's snapshot,
// loaded into `ctx`. `have` is false on a replacement and a joiner; a snapshot that holds nothing (a joiner whose
// first receipt broke off) counts as none either way.
template <class Strategy, class Ctx>
void exchange_state(Strategy& strategy, Ctx& ctx, training_snapshot& snap, bool have) {
  using clock = std::chrono::steady_clock;
  const auto began = clock::now();
  have = have && snap.at() > 0;
  strategy.verify_same("model fingerprint", ctx.model.fingerprint());
  const int n = strategy.num_replicas_in_sync();
  const int me = strategy.replica_id();
  std::vector<double> positions(static_cast<std::size_t>(n), 0.0);
  positions[static_cast<std::size_t>(me)] = have ? static_cast<double>(snap.at()) + 1 : 0.0;  // 0: nothing
  strategy.sum_metrics(std::span<double>(positions));
  const auto best = std::max_element(positions.begin(), positions.end());  // the first: the lowest rank
  if (*best == 0) {
    throw config_error({"train.recovery", me}, "no rank holds a training state to recover from (every rank joined "
                                               "as a replacement)");
  }
  const int source = static_cast<int>(best - positions.begin());
  if (!have) snap.make_room(ctx);
  if (!have) {
    // Before the bytes: a state of many MB takes seconds on a slow link, and an operator (or a test that faults
    // the transfer) sees from here that it is under way.
    recovery_log(me, "receiving the training state from rank " + std::to_string(source) + "'s memory: " +
                         detail::fixed_text(static_cast<double>(snap.floats().size_bytes()) / 1e6, 1) + " MB");
  }
  try {
    strategy.collective().broadcast(snap.header(), source);
    strategy.collective().broadcast(snap.floats(), source);
  } catch (...) {
    // A receiver whose own snapshot was of another boundary now holds a mix of two (one of the same boundary held
    // the same bytes): the next exchange must not take that for a state.
    if (me != source && positions[static_cast<std::size_t>(me)] != *best) snap.forget();
    throw;
  }
  snap.restore(ctx);
  if (me == source || me == 0 || !have) {
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - began).count();
    recovery_log(me, "training state of global step " + std::to_string(ctx.global_step()) + " (epoch " +
                         std::to_string(ctx.epoch + 1) + ", step " + std::to_string(ctx.step) + ") " +
                         (me == source ? "sent from" : "received from") + " rank " + std::to_string(source) +
                         "'s memory: " + detail::fixed_text(static_cast<double>(snap.floats().size_bytes()) / 1e6, 1) +
                         " MB in " + detail::fixed_text(ms, 0) + " ms");
  }
}

// A survivor after `lost`: says so, rebuilds the ring with the replacement (bounded), and takes part in the
// exchange. Throws `lost` (with the reason added) when no replacement comes in time.
template <class Strategy, class Ctx>
void recover_survivor(Strategy& strategy, Ctx& ctx, training_snapshot& snap, const peer_lost_error& lost,
                      const in_memory_recovery_options& options) {
  const int me = strategy.replica_id();
  const std::uint64_t generation = strategy.collective_generation();
  const std::chrono::milliseconds timeout = options.timeout.value_or(default_recovery_timeout);
  recovery_log(me, "rank " + std::to_string(lost.peer_rank()) + " (" + lost.peer_address() + ") lost; waiting up to " +
                       std::to_string(timeout.count()) + " ms for its replacement (ring generation " +
                       std::to_string(generation + 1) + ")");
  if (options.on_peer_lost) options.on_peer_lost(lost.peer_rank(), generation);
  try {
    strategy.rejoin_collective(timeout);
  } catch (const error& why) {
    throw peer_lost_error({"train.recovery", me}, lost.peer_rank(), lost.peer_address(),
                          std::string(lost.detail()) + "; no replacement joined within " +
                              std::to_string(timeout.count()) + " ms (" + why.what() + ")");
  }
  exchange_state(strategy, ctx, snap, true);
}

// An elastic survivor after `lost`: agrees with the other survivors on who is left (`agree_survivors`: with two or
// more workers lost at once the verdicts may differ), then, unless fewer than `min_workers` remain, builds the smaller
// ring (bounded) and takes part in the exchange; the caller reshards the data. `members` maps this ring's ranks to
// the job's first ring's (what the launcher and the logs name), and loses the lost ones. Throws `lost` (with the
// reason added) when the job cannot shrink, `removed_error` when the others found this worker lost.
template <class Strategy, class Ctx>
void shrink_survivor(Strategy& strategy, Ctx& ctx, training_snapshot& snap, const peer_lost_error& lost,
                     const in_memory_recovery_options& options, std::vector<int>& members) {
  const int me = strategy.replica_id();
  const int n = strategy.num_replicas_in_sync();
  const std::uint64_t generation = strategy.collective_generation();
  const std::chrono::milliseconds timeout = options.timeout.value_or(default_recovery_timeout);
  const int lost_rank = lost.peer_rank();
  const auto worker_of = [&](int rank) {
    const auto at = static_cast<std::size_t>(rank);
    return rank >= 0 && at < members.size() ? members[at] : rank;
  };
  const std::string removed_text = "; the other workers go on without this one (it was removed from the elastic job "
                                   "and must not rejoin with its state)";
  if (lost_rank == me) {
    throw removed_error({"train.recovery", me}, lost_rank, lost.peer_address(),
                        std::string(lost.detail()) + removed_text);
  }
  if (options.on_peer_lost) options.on_peer_lost(worker_of(lost_rank), generation);
  if (lost_rank < 0 || lost_rank >= n) {
    throw peer_lost_error({"train.recovery", me}, lost_rank, lost.peer_address(),
                          std::string(lost.detail()) + "; the verdict names no other rank of this ring of " +
                              std::to_string(n) + ", so the job cannot shrink around it");
  }
  const auto began = std::chrono::steady_clock::now();
  std::vector<int> keep;
  try {
    keep = strategy.agree_survivors(lost_rank, timeout);
  } catch (const removed_error& why) {
    throw removed_error({"train.recovery", me}, me, "",
                        std::string(lost.detail()) + "; " + why.detail() + removed_text);
  } catch (const error& why) {
    throw peer_lost_error({"train.recovery", me}, lost_rank, lost.peer_address(),
                          std::string(lost.detail()) + "; " + why.detail());
  }
  std::vector<int> gone;
  std::string named;
  for (int r = 0; r < n; ++r) {
    if (std::find(keep.begin(), keep.end(), r) != keep.end()) continue;
    gone.push_back(r);
    named += std::string(named.empty() ? "" : ", ") + "rank " + std::to_string(r) + " (" +
             (r == lost_rank ? lost.peer_address() + ", " : std::string()) + "worker " + std::to_string(worker_of(r)) +
             ")";
    if (r != lost_rank && options.on_peer_lost) options.on_peer_lost(worker_of(r), generation);
  }
  const int left = static_cast<int>(keep.size());
  if (left < options.min_workers) {
    throw peer_lost_error({"train.recovery", me}, lost_rank, lost.peer_address(),
                          std::string(lost.detail()) + "; " + std::to_string(left) +
                              " worker(s) would remain, fewer than min_workers " + std::to_string(options.min_workers));
  }
  recovery_log(me, named + " lost; going on without " + (gone.size() == 1 ? "it" : "them") + ": " +
                       std::to_string(left) + (left == 1 ? " worker" : " workers") + ", ring generation " +
                       std::to_string(generation + 1));
  try {
    strategy.shrink_collective(std::span<const int>(gone), timeout);
  } catch (const error& why) {
    throw peer_lost_error({"train.recovery", me}, lost_rank, lost.peer_address(),
                          std::string(lost.detail()) + "; the " + std::to_string(left) +
                              " survivors did not form their ring within " + std::to_string(timeout.count()) +
                              " ms (" + why.what() + ")");
  }
  for (auto r = gone.rbegin(); r != gone.rend(); ++r) members.erase(members.begin() + *r);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  if (strategy.replica_id() == 0) {
    recovery_log(strategy.replica_id(), "the " + std::to_string(left) + " survivors' ring is up in " +
                                            detail::fixed_text(ms, 0) + " ms; this rank is the chief" +
                                            (me == 0 ? "" : " now (it was rank " + std::to_string(me) + ")"));
  }
  exchange_state(strategy, ctx, snap, true);
}

// In-memory recovery over one `fit`: whether it is on, whether this process replaces a lost worker (its ring is a
// later generation than the job's first), the snapshot at the last step boundary, and the recovery of a survivor.
template <class Strategy>
class recovery_session {
 public:
  static constexpr bool recoverable = recoverable_strategy<Strategy>;
  static constexpr bool shrinkable = shrinkable_strategy<Strategy>;
  static constexpr bool growable = growable_strategy<Strategy>;

  // Refuses recovery on a strategy that cannot rebuild its collective.
  // `options` as the program gave them: the launcher's are applied here (with_launcher).
  recovery_session(Strategy& strategy, const in_memory_recovery_options& options)
      : strategy_(strategy), options_(with_launcher<recoverable>(options)) {
    if (options_.enabled && !recoverable) {
      throw config_error({"train", strategy.replica_id()},
                         "fit_options::recovery is enabled, but this strategy cannot rebuild its collective after a "
                         "lost peer (in-memory recovery needs a recoverable_strategy: the multi-worker strategy over "
                         "the TCP ring)");
    }
    if (options_.min_workers > 0 && !shrinkable) {
      throw config_error({"train", strategy.replica_id()},
                         "in_memory_recovery_options::min_workers is " + std::to_string(options_.min_workers) +
                             ", but this strategy cannot go on with fewer workers (an elastic job needs a "
                             "shrinkable_strategy: the multi-worker strategy over the TCP ring)");
    }
    if (options_.min_workers > strategy.num_replicas_in_sync()) {
      throw config_error({"train", strategy.replica_id()},
                         "in_memory_recovery_options::min_workers " + std::to_string(options_.min_workers) +
                             " is more than the job's " + std::to_string(strategy.num_replicas_in_sync()) + " workers");
    }
    if (options.from_launcher) {
      relaunched_ = (options.launcher ? *options.launcher : launcher_environment::read()).restarted();
    }
    if (options_.max_workers > 0 && options_.min_workers == 0) {
      throw config_error({"train", strategy.replica_id()},
                         "in_memory_recovery_options::max_workers is " + std::to_string(options_.max_workers) +
                             ", but min_workers is not set: only an elastic job takes joiners in");
    }
    if (options_.max_workers > 0 && !growable) {
      throw config_error({"train", strategy.replica_id()},
                         "in_memory_recovery_options::max_workers is set, but this strategy cannot take workers in "
                         "(a growable_strategy: the multi-worker strategy over the TCP ring)");
    }
    on_ = recoverable && options_.enabled;
    elastic_ = on_ && options_.min_workers > 0;
    if constexpr (growable) {
      // Its members wait in the joiner's protocol: leaving here ends its ring, and they shrink around it.
      if (strategy.joined_collective() && !elastic_) {
        throw config_error({"train", strategy.replica_id()},
                           "this worker joined a running elastic job (ring_options::join_via, MWSTRAT_JOIN), but its "
                           "fit is not elastic: give it the job's in_memory_recovery_options::min_workers and "
                           "max_workers (MWSTRAT_MIN_WORKERS, MWSTRAT_MAX_WORKERS) too");
      }
    }
    grows_ = elastic_ && options_.max_workers > 0;
    if constexpr (recoverable) replacement_ = on_ && !elastic_ && strategy.collective_generation() > 0;
    if constexpr (growable) joiner_ = elastic_ && strategy.joined_collective();
    for (int r = 0; r < strategy.num_replicas_in_sync(); ++r) members_.push_back(r);
  }

  [[nodiscard]] bool on() const { return on_; }
  /// Whether the launcher started this process again (a restarted group, a replacement): train_context::relaunched.
  [[nodiscard]] bool relaunched() const { return relaunched_; }
  /// Whether a lost worker shrinks the job (min_workers) rather than waiting for a replacement.
  [[nodiscard]] bool elastic() const { return elastic_; }
  [[nodiscard]] const training_snapshot& snapshot() const { return snapshot_; }
  /// Whether this worker joined the job while it trained (its state came from a member's memory at the start).
  [[nodiscard]] bool joiner() const { return joiner_; }
  /// Whether the job's identity is compared with joiners' (the job takes them in, or this worker is one).
  [[nodiscard]] bool checks_joiners() const { return grows_ || joiner_; }

  // The state the job starts from: a replacement's and a joiner's come from a member's memory (then ctx.rejoined);
  // otherwise the same architecture everywhere is checked and the chief's initial weights go everywhere. `identity`:
  // what a joiner must share with the job (a joiner with another throws config_error, and the job goes on).
  template <class Ctx>
  void start(Ctx& ctx, const job_identity& identity = {}) {
    if (joiner_) {
      if constexpr (growable) {
        // A joiner does not know where the members end: it compares every rank after the chief, and the members,
        // which all match the chief, are never among those it finds.
        const auto bad = mismatched_joiners(strategy_, identity, 1);
        refuse_mismatched(bad);
        share_members();
        if (options_.on_joined) {
          options_.on_joined(members_[static_cast<std::size_t>(strategy_.replica_id())],
                             strategy_.collective_generation());
        }
        exchange_state(strategy_, ctx, snapshot_, false);
      }
      ctx.rejoined = true;
      just_restored_ = true;
      return;
    }
    if (replacement_) {
      if constexpr (recoverable) exchange_state(strategy_, ctx, snapshot_, false);
      ctx.rejoined = true;
      just_restored_ = true;
      return;
    }
    strategy_.verify_same("model fingerprint", ctx.model.fingerprint());
    strategy_.mirror(ctx.model.parameters());
    if constexpr (stateful_model<std::remove_cvref_t<decltype(ctx.model)>>) strategy_.mirror(ctx.model.model_state());
  }

  // At the top of an epoch (after the previous one's end), unless the snapshot already holds this position.
  template <class Ctx>
  void at_epoch_top(Ctx& ctx, std::size_t history_epochs) {
    if (on_ && !just_restored_) snapshot_.take(ctx, true, history_epochs);
    just_restored_ = false;
  }
  // After a step's reductions and its stop agreement.
  template <class Ctx>
  void at_step_boundary(Ctx& ctx, std::size_t history_epochs) {
    if (on_) snapshot_.take(ctx, false, history_epochs);
  }

  // At a step boundary, after the snapshot: whether joiners are due here (every worker answers the same: from the
  // step's reduction, or from a wait a callback asked for). When none are, the chief offers those pending at its
  // desk to the next step's reduction.
  template <class Ctx>
  bool joiners_due(Ctx& ctx) {
    const int agreed = std::exchange(ctx.joiners_agreed, 0);
    const auto wait = std::exchange(ctx.await_joiners, std::chrono::milliseconds(0));
    if constexpr (growable) {
      if (!grows_) return false;
      due_ = std::min(agreed, room());
      if (due_ == 0 && wait.count() > 0 && room() > 0) due_ = std::min(strategy_.await_joiners(wait), room());
      if (due_ > 0) return true;
      if (options_.admission == in_memory_recovery_options::join_admission::every_step && strategy_.is_chief()) {
        ctx.join_offer = std::min(strategy_.pending_joiners(), room());
      }
    } else {
      (void)agreed;
      (void)wait;
      (void)ctx;
    }
    return false;
  }

  // Every member, once `joiners_due`: takes the due joiners in (the next ring), refuses those whose identity
  // differs from the job's (the ring shrinks back around them), and hands the state of this boundary to the others.
  // Returns whether the membership changed.
  template <class Ctx>
  bool grow(Ctx& ctx, const job_identity& identity) {
    if constexpr (growable) {
      const int count = std::exchange(due_, 0);
      if (count <= 0) return false;
      const int before = strategy_.num_replicas_in_sync();
      const auto timeout = options_.timeout.value_or(default_recovery_timeout);
      const auto began = std::chrono::steady_clock::now();
      std::vector<int> workers = strategy_.grow_collective(count, timeout);
      if (workers.empty()) return false;
      // The ring holds the joiners from here on: a loss while they are checked or handed the state (a joiner that
      // dies, or refuses the job itself) is a rank of this ring, and is named and shrunk around as such.
      members_.insert(members_.end(), workers.begin(), workers.end());
      const auto bad = mismatched_joiners(strategy_, identity, before);
      refuse_mismatched(bad);
      for (auto it = bad.rbegin(); it != bad.rend(); ++it) {
        workers.erase(workers.begin() + (it->first - before));
        members_.erase(members_.begin() + it->first);
      }
      if (!workers.empty()) {
        share_members();
        exchange_state(strategy_, ctx, snapshot_, true);
      }
      if (strategy_.is_chief()) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
        std::string who;
        for (const int w : workers) who += (who.empty() ? "worker " : ", worker ") + std::to_string(w);
        recovery_log(0, workers.empty() ? "no joiner taken in" :
                                          who + " joined: " + std::to_string(strategy_.num_replicas_in_sync()) +
                                              " workers from global step " + std::to_string(ctx.global_step()) +
                                              ", ring generation " + std::to_string(strategy_.collective_generation()) +
                                              ", in " + detail::fixed_text(ms, 0) + " ms with the state");
      }
      return true;
    } else {
      (void)ctx;
      (void)identity;
      return false;
    }
  }

  // A survivor after `lost`: rebuilds the ring with a replacement and takes the latest boundary's state; the
  // history is cut back to it. Throws `lost` (with the reason) when no replacement comes in time. An elastic job
  // shrinks instead, then waits `spare_wait` for a joiner (the caller takes it in: `joiners_pending_after_shrink`).
  template <class Ctx>
  void recover(Ctx& ctx, const peer_lost_error& lost, history& hist) {
    if constexpr (recoverable) {
      if constexpr (shrinkable) {
        if (elastic_) {
          shrink_survivor(strategy_, ctx, snapshot_, lost, options_, members_);
          if constexpr (growable) {
            const auto wait = options_.spare_wait.value_or(std::chrono::milliseconds(0));
            if (grows_ && wait.count() > 0 && room() > 0) due_ = std::min(strategy_.await_joiners(wait), room());
          }
        } else {
          recover_survivor(strategy_, ctx, snapshot_, lost, options_);
        }
      } else {
        recover_survivor(strategy_, ctx, snapshot_, lost, options_);
      }
      hist.epochs.resize(std::min(hist.epochs.size(), snapshot_.history_size()));
      just_restored_ = true;
    } else {
      (void)ctx;
      (void)lost;
      (void)hist;
    }
  }

 private:
  // Room for joiners below max_workers.
  [[nodiscard]] int room() const { return std::max(0, options_.max_workers - strategy_.num_replicas_in_sync()); }

  // Collective, on a ring that has just taken joiners in: every rank takes the chief's map of ranks to the job's
  // workers (a joiner knows only its own), so that a later loss is reported under the right worker.
  void share_members() {
    if constexpr (growable) {
      std::vector<double> wire(static_cast<std::size_t>(strategy_.num_replicas_in_sync()), 0.0);
      for (std::size_t r = 0; r < wire.size() && r < members_.size(); ++r) wire[r] = members_[r];
      strategy_.collective().broadcast(std::span<double>(wire), 0);
      members_.clear();
      for (const double w : wire) members_.push_back(static_cast<int>(w));
    }
  }

  // Those of `bad` (the same on every rank) are refused: a refused joiner throws with the reason, the others shrink
  // the ring back around them.
  void refuse_mismatched(const std::vector<std::pair<int, std::string>>& bad) {
    if constexpr (growable) {
      if (bad.empty()) return;
      const int me = strategy_.replica_id();
      std::vector<int> ranks;
      for (const auto& [rank, why] : bad) {
        if (rank == me) {
          throw config_error({"train.recovery", me}, "the job refused this worker as it joined: its " + why +
                                                         " (every worker must train the same model on the same data)");
        }
        ranks.push_back(rank);
        if (strategy_.is_chief()) {
          recovery_log(0, "refused the joiner at rank " + std::to_string(rank) + ": its " + why);
        }
      }
      strategy_.shrink_collective(std::span<const int>(ranks), options_.timeout.value_or(default_recovery_timeout));
    } else {
      (void)bad;
    }
  }

  Strategy& strategy_;
  in_memory_recovery_options options_;
  training_snapshot snapshot_;
  std::vector<int> members_;  // the job's first ring's rank of each rank of the current ring
  bool on_ = false;
  bool elastic_ = false;
  bool relaunched_ = false;
  bool replacement_ = false;
  bool grows_ = false;   // an elastic job that takes joiners in (max_workers)
  bool joiner_ = false;  // this worker joined the job while it trained
  int due_ = 0;          // joiners the workers agreed to take in at this boundary
  bool just_restored_ = false;  // the snapshot already holds this position (not taken again at the epoch's top)
};

}  // namespace detail
}  // namespace mwstrat
