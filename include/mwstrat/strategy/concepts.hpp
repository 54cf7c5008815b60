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
/// Gradient synchronisation (`strategy/gradient_sync.hpp`) asks for no more than the above: its replicated path
/// is `s.mean_gradients(gradients)` then the optimizer's whole update. A strategy that can do better offers its own
/// synchroniser (`gradient_sync_strategy`, as `mirrored_strategy` does), and that synchroniser may use the optional
/// capabilities of the model and the optimizer named below:
///   - `gradient_synchronizer<G>`: `g.step(backward)` runs one step — `backward(on_ready)` does forward and backward
///     and calls `on_ready(offset, count)` as gradient slices become final, last first — reduces the gradients,
///     applies the update and returns what `backward` returned;
///   - `gradient_sync_strategy<S, M, O>`: `s.make_gradient_sync(m, o)` returns a `gradient_synchronizer` for
///     model `m` and optimizer `o` (made once per `fit`, after the initial parameters are mirrored);
///   - `part_update_optimizer<O>`: `o.elementwise_stateless()` (the update of an element depends only on its
///     parameter and gradient: no slots), `o.apply_part(params, gradients)` (updates one part, serially, without
///     counting a step) and `o.count_step()` (counts the step the parts made up): a sharded update;
///   - `range_update_optimizer<O>`: `o.elementwise()` (the update of an element depends only on its parameter,
///     gradient and slots: no norm clipping), `o.apply_range(params, gradients, first, count)` (updates elements
///     [first, first + count) of the whole arena, slots included, serially, without counting a step) and
///     `o.count_step()`: the replicated update streamed part by part as the ring reports each mean final (every
///     optimizer of `nn/optimizers.hpp` has it);
///   - `storage_adopting_model<M>`: `m.adopt_storage(params, grads)` and `m.use_own_storage()`: the replicas of one
///     host share one parameter copy;
///   - `model_with_threads<M>`: `m.threads()`, the compute threads the model uses (the overlap decision);
///   - `model_with_executor<M>`: `m.execute(f)` runs `f` inside the model's own threads (where the update runs).
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
#include <cstddef>
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

namespace detail {
// What a synchroniser's `step` is checked with: a backward pass that reports nothing and returns a marker.
struct backward_probe_result {};
struct backward_probe {
  template <class OnReady>
  backward_probe_result operator()(OnReady&&) const {
    return {};
  }
};
}  // namespace detail

/// Runs one training step's gradient reduction and update around a backward pass (see the file comment).
template <class G>
concept gradient_synchronizer = requires(G& g, detail::backward_probe backward) {
  { g.step(backward) } -> std::same_as<detail::backward_probe_result>;
};

/// Optional capability: a strategy that makes its own `gradient_synchronizer` for a model and an optimizer.
template <class S, class Model, class Optimizer>
concept gradient_sync_strategy = strategy<S> && requires(S& s, Model& m, Optimizer& o) {
  { s.make_gradient_sync(m, o) } -> gradient_synchronizer;
};

/// Optional capability: an optimizer that can update one part of the arena on its own (a sharded update). While
/// `o.elementwise_stateless()`, `o.apply_part(params, gradients)` updates a part serially without counting a step
/// and `o.count_step()` counts the step those parts made up.
template <class O>
concept part_update_optimizer = requires(O& o, std::span<float> p, std::span<const float> g) {
  { o.elementwise_stateless() } -> std::convertible_to<bool>;
  o.apply_part(p, g);
  o.count_step();
};

/// Optional capability: an optimizer that can update any range of the arena on its own, slots included, with the
/// whole update's bits (the streamed replicated update). While `o.elementwise()`, `o.apply_range(params, gradients,
/// first, count)` updates elements [first, first + count) of the whole arena serially without counting a step, and
/// `o.count_step()` counts the step the ranges made up.
template <class O>
concept range_update_optimizer = requires(O& o, std::span<float> p, std::span<const float> g, std::size_t i) {
  { o.elementwise() } -> std::convertible_to<bool>;
  o.apply_range(p, g, i, i);
  o.count_step();
};

/// Optional capability: a model whose parameters and gradients can live in storage the trainer provides:
/// `adopt_storage(params, grads)` (the storage already holds the parameter values; 64-byte aligned) and
/// `use_own_storage()` (copy back and use the model's own again; it must not throw: it runs while unwinding too).
/// It lets the replicas of one host share one copy of the parameters (`update_placement::shared_host_copy`);
/// `nn::sequential` has it.
template <class M>
concept storage_adopting_model = requires(M& m, std::span<float> s) {
  m.adopt_storage(s, s);
  m.use_own_storage();
};

/// Optional capability: a model that says how many compute threads it uses (`reduction_overlap::automatic`).
template <class M>
concept model_with_threads = requires(const M& m) {
  { m.threads() } -> std::convertible_to<int>;
};

namespace detail {
struct task_probe {
  void operator()() const {}
};
}  // namespace detail

/// Optional capability: a model that runs a task inside its own threads (its oneTBB arena), so the update uses no
/// more cores than the model was given.
template <class M>
concept model_with_executor = requires(M& m, detail::task_probe f) { m.execute(f); };

}  // namespace mwstrat
