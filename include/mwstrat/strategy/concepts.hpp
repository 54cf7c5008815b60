#pragma once
/// \file
/// The `strategy` concept: how a trainer keeps N replicas of a model in lock-step.
///
/// A type `S` models `strategy` when, for `s` an `S&`, `p` a `std::span<float>` and `m` a `std::span<double>`:
///   1. `s.num_replicas_in_sync()` is the number of replicas taking part in every step (an `int` ≥ 1);
///   2. `s.replica_id()` is this replica's rank in [0, num_replicas_in_sync()); rank 0 is the chief;
///   3. `s.is_chief()` says whether this replica logs and writes files;
///   4. `s.verify_same(what, value)` throws `mwstrat::config_error` naming the replicas whose `value` differs from
///      the chief's (used for the model fingerprint before anything else is exchanged);
///   5. `s.mirror(p)` and `s.mirror(m)` make `p` (`m`) equal to the chief's on every replica (initial parameters,
///      a restored training state);
///   6. `s.mean_gradients(p)` replaces `p` by its element-wise mean over the replicas, in place;
///   7. `s.sum_metrics(m)` replaces `m` by its element-wise sum over the replicas (weighted metrics: sums and
///      counts are reduced, then divided);
///   8. `s.barrier()` returns once every replica has called it.
/// Every operation is collective: all replicas call it, in the same order.
///
/// Opt-in example, a strategy for a single process with no peers:
/// \code
///   struct solo_strategy {
///     int num_replicas_in_sync() const { return 1; }
///     int replica_id() const { return 0; }
///     bool is_chief() const { return true; }
///     void verify_same(std::string_view, std::string_view) {}
///     void mirror(std::span<float>) {}
///     void mirror(std::span<double>) {}
///     void mean_gradients(std::span<float>) {}
///     void sum_metrics(std::span<double>) {}
///     void barrier() {}
///   };
///   static_assert(mwstrat::strategy<solo_strategy>);
/// \endcode

#include <concepts>
#include <span>
#include <string_view>

namespace mwstrat {

/// A way to run synchronous data-parallel replicas (see the file comment for the numbered requirements).
template <class S>
concept strategy = requires(S& s, const S& cs, std::span<float> p, std::span<double> m, std::string_view text) {
  { cs.num_replicas_in_sync() } -> std::convertible_to<int>;
  { cs.replica_id() } -> std::convertible_to<int>;
  { cs.is_chief() } -> std::convertible_to<bool>;
  s.verify_same(text, text);
  s.mirror(p);
  s.mirror(m);
  s.mean_gradients(p);
  s.sum_metrics(m);
  s.barrier();
};

}  // namespace mwstrat
