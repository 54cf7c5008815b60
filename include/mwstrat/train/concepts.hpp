#pragma once
/// \file
/// What `fit`, `evaluate`, BackupAndRestore, ModelCheckpoint and `save_model` ask of a model, an optimizer and a
/// dataset — and nothing more, so a model built on the user's own tensor type trains without including
/// `mwstrat/nn`.
///
/// Opt-in scheme (the same for every mwstrat concept): structural — a type models a concept when it has the
/// members listed, with no tag to declare. What the library can use but does not need is an optional
/// capability, a named concept below, tested by name wherever it is used. Capabilities a resume depends on come
/// in complete groups (`model_with_step`, `checkpointable_optimizer`): a type that has any member of a group
/// must have all of them, or BackupAndRestore / `save_model` / `load_model` fail to compile with a message that
/// names the missing member (`check_resume_hooks`), so a misspelt hook can never make a resume silently inexact.
///
/// `batch_source<D>` — a dataset as this worker sees it:
///   1. `d.steps_per_epoch()`: the number of global steps in an epoch, the same on every worker;
///   2. `d.batch_at(epoch, step)`: this worker's part of global step `step` of epoch `epoch`, a pure function of
///      its arguments (so a restored job sees exactly the data it would have seen); the result may refer to a
///      buffer of `d` that stays valid until the next call.
///
/// `trainable_model<M, Batch>` — a replica:
///   1. `m.parameters()` and `m.gradients()`: the whole parameter and gradient arenas as `std::span<float>`, in
///      the same layout (one broadcast mirrors the model, one all-reduce averages the gradients);
///   2. `m.fingerprint()` on a const `M`: text naming the architecture (layer kinds and shapes), equal on every
///      replica;
///   3. `m.train_batch(batch, on_ready)`: forward, loss, backward; overwrites the gradients with d(mean loss of the
///      batch)/d(params) and calls `on_ready(offset, count)` for each layer's gradient slice as soon as it is
///      final, last layer first, so that the reduction overlaps the rest of backward; returns a `batch_result`;
///   4. `m.evaluate_batch(batch)`: forward and loss only; returns a `batch_result`.
/// The batch is whatever the `batch_source` yields (`data::image_batch` for the library's image pipelines).
/// A model whose parameters are many tensors of its own type instead of one arena is trained through
/// `tensor_model` (train/tensor_model.hpp), which owns the arena for it.
///
/// `batch_result<R>`: `r.loss_sum` (sum of the per-example losses) and `r.count` (examples), so that the loss
/// reduces over workers weighted by examples. Any task has these. A classifier's result also has `r.correct`
/// (examples classified right: `classification_result`), and only then do the logs, the progress line and the
/// history show an accuracy. A result may carry `r.predictions` and `r.targets` (`std::span<const float>`, count ×
/// outputs each: `result_with_targets`) for metrics that compare them (`mean_squared_error`, train/fit_metrics.hpp).
///
/// `optimizer_for<O>`: `o.apply(params, gradients)` updates `params` in place.
///
/// Optional capabilities (each a named concept below; near-miss tests in tests/train/concepts_test.cpp):
///   - model: `model_with_step` (`step()` / `set_step(n)`: the RNG position BackupAndRestore saves — a resume
///     group), `named_parameters_model` (`named_parameters()`: checkpoints name the tensors),
///     `sample_weighted_model` (`train_batch(b, weights, on_ready)`, `evaluate_batch(b, weights)`: required, at
///     compile time, when the dataset is a `weighted_batch_source` — Keras's sample_weight / class_weight);
///   - optimizer: `checkpointable_optimizer` (`state()` or `slots()`, `iterations()`, `set_iterations(n)` — a
///     resume group), `resizable_optimizer` (`resize(n)`: slots sized before the first update),
///     `has_learning_rate` (`learning_rate()` / `set_learning_rate(x)`: schedules).
/// What gradient synchronisation may use — `model_with_threads`, `model_with_executor`, `storage_adopting_model`,
/// `part_update_optimizer` — is named in strategy/concepts.hpp, beside the component that uses it.
///
/// Example (a linear model on the user's own batch type):
/// \code
///   struct my_batch { const double* x; const int* y; std::size_t n; };
///   struct my_model {
///     std::span<float> parameters(); std::span<float> gradients(); std::string fingerprint() const;
///     mwstrat::batch_stats train_batch(const my_batch&, auto&& on_ready);
///     mwstrat::batch_stats evaluate_batch(const my_batch&);
///   };
///   static_assert(mwstrat::trainable_model<my_model, my_batch>);
/// \endcode

#include <mwstrat/tensor/concepts.hpp>
#include <mwstrat/train/logs.hpp>

#include <concepts>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

namespace mwstrat {

/// The result of training or evaluating one batch, for any task (requirements in the file comment).
template <class R>
concept batch_result = requires(const R& r) {
  { r.loss_sum } -> std::convertible_to<double>;
  { r.count } -> std::convertible_to<double>;
};

/// A classifier's result: a `batch_result` with `r.correct`, the examples classified right. Accuracy is reported
/// for such results only.
template <class R>
concept classification_result = batch_result<R> && requires(const R& r) {
  { r.correct } -> std::convertible_to<double>;
};

/// A result that carries what the model predicted and what it should have (`r.predictions`, `r.targets`: count ×
/// outputs floats each, valid until the model's next batch), for metrics that compare them.
template <class R>
concept result_with_targets = batch_result<R> && requires(const R& r) {
  { r.predictions } -> std::convertible_to<std::span<const float>>;
  { r.targets } -> std::convertible_to<std::span<const float>>;
};

namespace detail {
// The examples a result classified right; 0 for a result of another task (which reports no accuracy).
template <class R>
double correct_of(const R& r) {
  if constexpr (classification_result<R>) {
    return static_cast<double>(r.correct);
  } else {
    return 0.0;
  }
}
}  // namespace detail

/// A dataset as this worker sees it (requirements in the file comment).
template <class D>
concept batch_source = requires(D& d, std::size_t epoch, std::size_t step) {
  { d.steps_per_epoch() } -> std::convertible_to<std::size_t>;
  d.batch_at(epoch, step);
};

/// The batch type a `batch_source` yields.
template <batch_source D>
using batch_of = std::remove_cvref_t<decltype(std::declval<D&>().batch_at(std::size_t{}, std::size_t{}))>;

namespace detail {
/// The callback `fit` passes to a model's backward pass (any callable of (offset, count) works for a model).
struct ready_probe {
  void operator()(std::size_t, std::size_t) const {}
};
}  // namespace detail

/// A model replica that `fit` can train on batches of type `Batch` (requirements in the file comment).
template <class M, class Batch>
concept trainable_model = requires(M& m, const M& cm, const Batch& b, detail::ready_probe on_ready) {
  { m.parameters() } -> std::convertible_to<std::span<float>>;
  { m.gradients() } -> std::convertible_to<std::span<float>>;
  { cm.fingerprint() } -> std::convertible_to<std::string_view>;
  { m.train_batch(b, on_ready) } -> batch_result;
  { m.evaluate_batch(b) } -> batch_result;
};

/// Capability: a dataset whose examples carry weights (Keras's `sample_weight` / `class_weight`):
/// `d.weights_at(epoch, step)`, a `std::span<const float>` with one weight per example of `d.batch_at(epoch, step)`
/// (in the same order; valid until the next call). `fit` and `evaluate` then need a `sample_weighted_model`, and
/// refuse at compile time a model that is not one (`sample_weighted_input`, train/sample_weights.hpp, is one).
template <class D>
concept weighted_batch_source = batch_source<D> && requires(D& d, std::size_t epoch, std::size_t step) {
  { d.weights_at(epoch, step) } -> std::convertible_to<std::span<const float>>;
};

/// Capability: a model that weights its per-example losses — `m.train_batch(b, weights, on_ready)` and
/// `m.evaluate_batch(b, weights)`, `weights` one `float` per example, with Keras's `sum_over_batch_size` meaning:
/// the loss is sum(w_i * loss_i) / examples and the gradients are its derivative (so equal per-worker batches
/// mean-reduce to the one-worker result); `loss_sum` is sum(w_i * loss_i); `correct` and `count` stay
/// unweighted (Keras's `metrics=`).
template <class M, class Batch>
concept sample_weighted_model =
    trainable_model<M, Batch> &&
    requires(M& m, const Batch& b, std::span<const float> weights, detail::ready_probe on_ready) {
      { m.train_batch(b, weights, on_ready) } -> batch_result;
      { m.evaluate_batch(b, weights) } -> batch_result;
    };

/// Trains `m` on `b` (requirement 3 of `trainable_model`), calling `on_ready` for each final gradient slice.
template <class M, class B, class OnReady>
decltype(auto) train_on_batch(M& m, const B& b, OnReady&& on_ready) {
  return m.train_batch(b, std::forward<OnReady>(on_ready));
}

/// Evaluates `m` on `b` (requirement 4 of `trainable_model`): forward and loss only.
template <class M, class B>
decltype(auto) evaluate_on_batch(M& m, const B& b) {
  return m.evaluate_batch(b);
}

/// An optimizer that updates parameters in place from their gradients.
template <class O>
concept optimizer_for = requires(O& o, std::span<float> p, std::span<const float> g) { o.apply(p, g); };

// ------------------------------------------------------------------------------------------------ model capabilities

/// Resume group: `m.step()` on a const model (convertible to `std::uint64_t`) and `m.set_step(n)`: the position of
/// the model's own RNG (dropout masks), which BackupAndRestore saves and restores. Both or neither.
template <class M>
concept model_with_step = requires(M& m, const M& cm, std::uint64_t n) {
  { cm.step() } -> std::convertible_to<std::uint64_t>;
  m.set_step(n);
};

/// One element of `named_parameters()`: `p.name` (convertible to `std::string_view`) and either a `tensor_like`
/// of `const float` (the user's own tensor type, viewing the arena) or the fields `shape` (a range of integers)
/// and `values` (a span of floats into the arena).
template <class P>
concept named_parameter =
    requires(const P& p) {
      { p.name } -> std::convertible_to<std::string_view>;
    } &&
    ((tensor_like<const P> && std::same_as<std::remove_cv_t<tensor_element_t<const P>>, float>) ||
     requires(const P& p) {
       requires std::ranges::input_range<decltype(p.shape)>;
       { p.values } -> std::convertible_to<std::span<const float>>;
     });

/// Capability: `m.named_parameters()`, a range of `named_parameter`s covering the arena in order, so checkpoints
/// name each tensor (`dense/kernel`, ...) and read well from Python; without it the arena is one tensor
/// `parameters`.
template <class M>
concept named_parameters_model = requires(M& m) {
  requires std::ranges::input_range<decltype(m.named_parameters())>;
  requires named_parameter<std::ranges::range_value_t<decltype(m.named_parameters())>>;
};

/// Capability: `m.model_state()`, a `std::span<float>` of values the model keeps beside its parameters but does not
/// train (batch norm's moving statistics). Checkpoints and saved models store it after the weights (inside
/// `named_parameters()` when the model names its tensors, else as one tensor `model_state`); a restore broadcasts
/// the chief's.
template <class M>
concept stateful_model = requires(M& m) {
  { m.model_state() } -> std::convertible_to<std::span<float>>;
};

/// Capability: `m.set_cross_replica_sum(f)`, `f` a `std::function<void(std::span<double>)>` that sums values
/// across the replicas in sync, in place. `fit` hands the model its strategy's for the length of the training, so
/// a layer can reduce inside the step (SyncBatchNormalization's batch statistics).
template <class M>
concept cross_replica_model = requires(M& m, std::function<void(std::span<double>)> f) {
  m.set_cross_replica_sum(std::move(f));
};

// -------------------------------------------------------------------------------------------- optimizer capabilities

/// Resume group: an optimizer whose slots and step count can be saved and restored exactly — `o.state()` or
/// `o.slots()` (a `std::span<float>` of every slot), `o.iterations()` and `o.set_iterations(n)`. All or none.
template <class O>
concept checkpointable_optimizer =
    (requires(O& o) {
      { o.state() } -> std::convertible_to<std::span<float>>;
    } || requires(O& o) {
      { o.slots() } -> std::convertible_to<std::span<float>>;
    }) && requires(O& o, std::int64_t n) {
      { o.iterations() } -> std::convertible_to<std::int64_t>;
      o.set_iterations(n);
    };

/// Capability: `o.resize(n)` sizes the slots for `n` parameters (an optimizer that creates them at its first
/// update can then be restored before it).
template <class O>
concept resizable_optimizer = requires(O& o, std::size_t n) { o.resize(n); };

/// Capability: an optimizer whose learning rate can be read and changed (for schedules).
template <class O>
concept has_learning_rate = requires(O& o, double lr) {
  { o.learning_rate() } -> std::convertible_to<double>;
  o.set_learning_rate(lr);
};

// ------------------------------------------------------------------------------------------- complete resume groups

namespace detail {
template <class M>
concept has_any_step_hook = requires(const M& m) { m.step(); } || requires(M& m, std::uint64_t n) { m.set_step(n); };
template <class O>
concept has_any_checkpoint_hook = requires(O& o) { o.state(); } || requires(O& o) { o.slots(); } ||
                                  requires(O& o) { o.iterations(); } ||
                                  requires(O& o, std::int64_t n) { o.set_iterations(n); };
}  // namespace detail

/// Fails to compile, naming the missing member, when `Model` or `Optimizer` has part of a resume group
/// (`model_with_step`, `checkpointable_optimizer`) but not all of it: a resume would otherwise silently skip the
/// group and be inexact. BackupAndRestore, ModelCheckpoint, `save_model` and `load_model` call it.
template <class Model, class Optimizer>
constexpr bool check_resume_hooks() {
  if constexpr (detail::has_any_step_hook<Model>) {
    static_assert(requires(const Model& m) {
      { m.step() } -> std::convertible_to<std::uint64_t>;
    }, "mwstrat: the model has set_step(n) but no `step() const` returning its step as an integer (resume group "
       "model_with_step: both or neither), so BackupAndRestore cannot save its RNG position");
    static_assert(requires(Model& m, std::uint64_t n) { m.set_step(n); },
                  "mwstrat: the model has step() but no `set_step(n)` (resume group model_with_step: both or "
                  "neither), so BackupAndRestore cannot restore its RNG position");
  }
  if constexpr (detail::has_any_checkpoint_hook<Optimizer>) {
    static_assert(requires(Optimizer& o) {
      { o.state() } -> std::convertible_to<std::span<float>>;
    } || requires(Optimizer& o) {
      { o.slots() } -> std::convertible_to<std::span<float>>;
    }, "mwstrat: the optimizer has some of the checkpoint hooks but no `state()` or `slots()` returning its slots as "
       "a std::span<float> (resume group checkpointable_optimizer: all or none)");
    static_assert(requires(Optimizer& o) {
      { o.iterations() } -> std::convertible_to<std::int64_t>;
    }, "mwstrat: the optimizer has some of the checkpoint hooks but no `iterations()` returning its step count "
       "(resume group checkpointable_optimizer: all or none)");
    static_assert(requires(Optimizer& o, std::int64_t n) { o.set_iterations(n); },
                  "mwstrat: the optimizer has some of the checkpoint hooks but no `set_iterations(n)` (resume group "
                  "checkpointable_optimizer: all or none), so a resume would restart its step count");
  }
  return true;
}

/// Training data an elastic job can split over another number of workers from any step on, keeping every global
/// batch (`distributed_input`): `reshard(workers, index)`, and `global_count_at(epoch, step)`, the examples of a
/// step over all workers, by which `fit` weights uneven shares.
template <class D>
concept reshardable_source = requires(D& d, const D& cd, int n, std::size_t i) {
  d.reshard(n, n);
  { cd.global_count_at(i, i) } -> std::convertible_to<std::size_t>;
};

}  // namespace mwstrat
