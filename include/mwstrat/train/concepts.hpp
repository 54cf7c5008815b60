#pragma once
/// \file
/// What `fit` and `evaluate` ask of a model, an optimizer, a dataset and a callback — and nothing more, so a
/// model built on the user's own tensor type trains without including `mwstrat/nn`.
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
///   2. `m.fingerprint()`: text naming the architecture (layer kinds and shapes), equal on every replica;
///   3. `m.train_batch(batch, on_ready)` (or, for batches of images, `m.train_batch(inputs, labels, size,
///      on_ready)`): forward, loss, backward; overwrites the gradients with d(mean loss of the batch)/d(params) and
///      calls `on_ready(offset, count)` for each layer's gradient slice as soon as it is final, last layer first,
///      so that the reduction overlaps the rest of backward; returns a `batch_result`;
///   4. `m.evaluate_batch(batch)` (or the images form): forward and loss only; returns a `batch_result`.
///
/// `batch_result<R>`: `r.loss_sum` (sum of the per-example losses), `r.correct` (examples classified right) and
/// `r.count` (examples), so that metrics reduce over workers weighted by examples.
///
/// `optimizer_for<O>`: `o.apply(params, gradients)` updates `params` in place. An optimizer may also offer
/// `learning_rate()` / `set_learning_rate(x)` (used by schedules), `state()` / `iterations()` /
/// `set_iterations(n)` (saved by BackupAndRestore) and the members of `part_update_optimizer` (sharded update).
///
/// Opt-in example (a linear model on the user's own batch type):
/// \code
///   struct my_batch { const double* x; const int* y; std::size_t n; };
///   struct my_model {
///     std::span<float> parameters(); std::span<float> gradients(); std::string fingerprint() const;
///     mwstrat::batch_stats train_batch(const my_batch&, auto&& on_ready);
///     mwstrat::batch_stats evaluate_batch(const my_batch&);
///   };
///   static_assert(mwstrat::trainable_model<my_model, my_batch>);
/// \endcode

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

namespace mwstrat {

/// The loss sum, the number classified right and the number of examples of one batch.
struct batch_stats {
  double loss_sum = 0;
  double correct = 0;
  double count = 0;
};

/// A batch of images (`size` × example floats, row-major) and their class labels: what the reference stack uses.
struct image_batch {
  std::span<const float> inputs;
  std::span<const std::int64_t> labels;
  std::size_t size = 0;
};

/// The result of training or evaluating one batch (requirements in the file comment).
template <class R>
concept batch_result = requires(const R& r) {
  { r.loss_sum } -> std::convertible_to<double>;
  { r.correct } -> std::convertible_to<double>;
  { r.count } -> std::convertible_to<double>;
};

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

/// Trains `m` on `b`, calling `on_ready` for each final gradient slice; picks the model's batch or images form.
template <class M, class B, class OnReady>
decltype(auto) train_on_batch(M& m, const B& b, OnReady&& on_ready) {
  if constexpr (requires { m.train_batch(b, on_ready); }) {
    return m.train_batch(b, std::forward<OnReady>(on_ready));
  } else {
    return m.train_batch(b.inputs, b.labels, b.size, std::forward<OnReady>(on_ready));
  }
}

/// Evaluates `m` on `b` (forward and loss only); picks the model's batch or images form.
template <class M, class B>
decltype(auto) evaluate_on_batch(M& m, const B& b) {
  if constexpr (requires { m.evaluate_batch(b); }) {
    return m.evaluate_batch(b);
  } else {
    return m.evaluate_batch(b.inputs, b.labels, b.size);
  }
}

/// A model replica that `fit` can train on batches of type `Batch` (requirements in the file comment).
template <class M, class Batch>
concept trainable_model = requires(M& m, const M& cm, const Batch& b, detail::ready_probe on_ready) {
  { m.parameters() } -> std::convertible_to<std::span<float>>;
  { m.gradients() } -> std::convertible_to<std::span<float>>;
  { cm.fingerprint() } -> std::convertible_to<std::string_view>;
  { mwstrat::train_on_batch(m, b, on_ready) } -> batch_result;
  { mwstrat::evaluate_on_batch(m, b) } -> batch_result;
};

/// An optimizer that updates parameters in place from their gradients.
template <class O>
concept optimizer_for = requires(O& o, std::span<float> p, std::span<const float> g) { o.apply(p, g); };

/// An optimizer whose learning rate can be read and changed (for schedules).
template <class O>
concept has_learning_rate = requires(O& o, double lr) {
  { o.learning_rate() } -> std::convertible_to<double>;
  o.set_learning_rate(lr);
};

}  // namespace mwstrat
