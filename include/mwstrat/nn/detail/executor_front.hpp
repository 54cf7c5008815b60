#pragma once
/// \file
/// `detail::executor_front<Derived, T>`: the public front end that `nn::basic_sequential` and
/// `nn::basic_graph_model` share over their one executor (nn/detail/graph_executor.hpp): the arena accessors, the
/// thread arena, the training and evaluation steps with the checks of what callers pass. Each model keeps what is
/// its own (building, layer info, fingerprint, architecture, Keras names, summary, `predict`).
///
/// A CRTP base, so the step path stays as direct as it was: no virtual call, the derived model's executor reached
/// through an inlined `engine()` (the sequential model holds it by pointer to move cheaply, the graph model by
/// value). Messages that name the model take `Derived::kind`.

#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/graph_executor.hpp>
#include <mwstrat/nn/kernels/isa.hpp>
#include <mwstrat/nn/model_options.hpp>
#include <mwstrat/nn/step_stats.hpp>
#include <mwstrat/strategy/after_backward.hpp>

#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace mwstrat::detail {

/// The front end both models share; `Derived` provides `engine()` (its `graph_executor<T>`), `kind` (its name in
/// messages) and `default_on_ready` (what `train_batch` without `on_ready` passes).
template <class Derived, class T>
class executor_front {
 public:
  // ------------------------------------------------------------------------------------------ arena
  /// All parameters, layer by layer (kernel then bias).
  [[nodiscard]] std::span<T> parameters() noexcept { return {exec().parameters(), parameter_count()}; }
  /// All parameters, layer by layer (kernel then bias).
  [[nodiscard]] std::span<const T> parameters() const noexcept { return {exec().parameters(), parameter_count()}; }
  /// The gradients, same layout as `parameters()`.
  [[nodiscard]] std::span<T> gradients() noexcept { return {exec().gradients(), parameter_count()}; }
  /// The gradients, same layout as `parameters()`.
  [[nodiscard]] std::span<const T> gradients() const noexcept { return {exec().gradients(), parameter_count()}; }
  /// Number of trainable parameters.
  [[nodiscard]] std::size_t parameter_count() const noexcept { return exec().parameter_count(); }

  /// Makes `parameters()` and `gradients()` the caller's storage (`parameter_count()` elements each), e.g. memory
  /// that the replicas of one host share: `params` must already hold the parameter values (the model copies
  /// nothing) and must stay valid until `use_own_storage()`; both 64-byte aligned, like the model's own arena.
  /// A trainer's way to let replicas read one copy. A graph model's state stays the replica's own.
  void adopt_storage(std::span<T> params, std::span<T> grads) { exec().adopt_storage(params, grads); }
  /// Copies the current parameters and gradients back into the model's own arena and uses it again.
  void use_own_storage() { exec().use_own_storage(); }
  /// False while the model works in adopted storage.
  [[nodiscard]] bool uses_own_storage() const noexcept { return exec().uses_own_storage(); }

  /// Re-initialises every parameter (a sequential model's: glorot_uniform kernels, zero biases) and a graph
  /// model's state from `seed`; gradients to zero, step to 0.
  void initialize(std::uint64_t seed) { exec().initialize(seed); }

  /// Shape of one input sample.
  [[nodiscard]] const nn::shape_t& input_shape() const noexcept { return exec().input_shape(); }
  /// Shape of one output sample (the logits, or a graph model's probabilities before its output softmax).
  [[nodiscard]] const nn::shape_t& output_shape() const noexcept { return exec().layers().back()->output_shape(); }
  /// Elements of one input sample.
  [[nodiscard]] std::size_t input_size() const { return exec().input_size(); }
  /// Elements of one output sample.
  [[nodiscard]] std::size_t output_size() const { return exec().output_size(); }

  // ------------------------------------------------------------------------------------------ threads
  /// Which kernels the layers run, as the chief's job line says it: "kernels: avx2+fma (AMD EPYC 7B13)"
  /// (nn/kernels/isa.hpp); `fit` writes it once.
  [[nodiscard]] std::string kernel_report() const { return nn::kernel_isa_in_use().line(); }
  /// Number of threads the kernels use.
  [[nodiscard]] int threads() const noexcept { return threads_; }
  /// Sets the number of threads the kernels use (results do not change).
  void set_threads(int threads) {
    if (threads < 1)
      mwstrat::detail::nn_config_error(std::string(Derived::kind) + ": threads must be at least 1, got " +
                                       std::to_string(threads));
    threads_ = threads;
    arena_threads_ = std::make_unique<tbb::task_arena>(threads);
  }
  /// Runs `f()` inside the model's thread arena (e.g. an optimizer's update), returning its result.
  template <class F>
  decltype(auto) execute(F&& f) {
    return arena_threads_->execute(std::forward<F>(f));
  }

  // ------------------------------------------------------------------------------------------ steps
  /// Allocates every buffer a batch of up to `batch` samples needs, so that later steps allocate nothing.
  void reserve(std::size_t batch) { exec().reserve(batch); }

  /// The training step counter that keys dropout masks (saved and restored with a checkpoint).
  [[nodiscard]] std::uint64_t step() const noexcept { return exec().step(); }
  /// Sets the training step counter.
  void set_step(std::uint64_t step) noexcept { exec().set_step(step); }

  /// Forward, loss (with a graph model's regularisation terms) and backward on one batch. Overwrites `gradients()`
  /// with d(mean loss over the batch)/d(params) and calls `on_ready(offset, count)` for each layer's gradient slice
  /// once it is final, last layer first.
  template <class OnReady>
  nn::step_stats train_batch(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch,
                             OnReady&& on_ready) {
    return train_batch(inputs, labels, std::span<const float>{}, batch, std::forward<OnReady>(on_ready));
  }
  /// `train_batch` with a weight per example (`weights` empty: every example weighs 1). Keras's
  /// `sum_over_batch_size` reduction: the loss is sum(w_i * loss_i) / batch (the regularisation terms unweighted)
  /// and the gradients are its derivative; `loss_sum` is sum(w_i * loss_i); `correct` and `count` stay unweighted
  /// (Keras's `metrics=`).
  template <class OnReady>
  nn::step_stats train_batch(std::span<const T> inputs, std::span<const std::int64_t> labels,
                             std::span<const float> weights, std::size_t batch, OnReady&& on_ready) {
    check(inputs, labels, batch, "train_batch");
    check_weights(weights, batch, "train_batch");
    auto& e = exec();
    nn::step_stats stats;
    arena_threads_->execute([&] {
      e.forward_pass(inputs.data(), batch, true, true);
      stats = e.loss_pass(labels, weights, batch, true, options_.label_smoothing);
      e.backward_pass(batch, on_ready);
    });
    e.advance_step();
    return stats;
  }
  /// Forward, loss and backward on one batch (gradients overwritten, no readiness callback).
  nn::step_stats train_batch(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch) {
    return train_batch(inputs, labels, batch, typename Derived::default_on_ready{});
  }

  /// `train_batch` on a batch of the library's image pipelines (what `fit` calls: `trainable_model`).
  template <class OnReady>
    requires std::same_as<T, float>
  nn::step_stats train_batch(const data::image_batch& batch, OnReady&& on_ready) {
    return train_batch(batch.inputs, batch.labels, batch.size, std::forward<OnReady>(on_ready));
  }
  /// `train_batch` on an image batch with a weight per example (what `fit` calls with `sample_weight` or
  /// `class_weight`: `sample_weighted_model`).
  template <class OnReady>
    requires std::same_as<T, float>
  nn::step_stats train_batch(const data::image_batch& batch, std::span<const float> weights, OnReady&& on_ready) {
    return train_batch(batch.inputs, batch.labels, weights, batch.size, std::forward<OnReady>(on_ready));
  }
  /// `evaluate_batch` on a batch of the library's image pipelines (what `evaluate` calls: `trainable_model`).
  nn::step_stats evaluate_batch(const data::image_batch& batch)
    requires std::same_as<T, float>
  {
    return evaluate_batch(batch.inputs, batch.labels, batch.size);
  }
  /// `evaluate_batch` on an image batch with a weight per example (`sample_weighted_model`).
  nn::step_stats evaluate_batch(const data::image_batch& batch, std::span<const float> weights)
    requires std::same_as<T, float>
  {
    return evaluate_batch(batch.inputs, batch.labels, weights, batch.size);
  }

  /// Forward and loss on one batch in inference mode (batch norm on its moving statistics, dropout off); gradients
  /// untouched.
  nn::step_stats evaluate_batch(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch) {
    return evaluate_batch(inputs, labels, std::span<const float>{}, batch);
  }
  /// `evaluate_batch` with a weight per example (`loss_sum` is sum(w_i * loss_i), as `train_batch`'s).
  nn::step_stats evaluate_batch(std::span<const T> inputs, std::span<const std::int64_t> labels,
                                std::span<const float> weights, std::size_t batch) {
    check(inputs, labels, batch, "evaluate_batch");
    check_weights(weights, batch, "evaluate_batch");
    auto& e = exec();
    nn::step_stats stats;
    arena_threads_->execute([&] {
      e.forward_pass(inputs.data(), batch, false, false);
      stats = e.loss_pass(labels, weights, batch, false, options_.label_smoothing);
    });
    return stats;
  }

  /// Loss and counts of one batch with batch norm and dropout as in training at the current step, without
  /// gradients, without advancing the step and without moving the batch-norm statistics (for finite-difference
  /// checks).
  nn::step_stats training_loss(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch) {
    check(inputs, labels, batch, "training_loss");
    auto& e = exec();
    nn::step_stats stats;
    arena_threads_->execute([&] {
      e.forward_pass(inputs.data(), batch, true, false);
      stats = e.loss_pass(labels, {}, batch, false, options_.label_smoothing);
    });
    return stats;
  }

  /// The outputs (logits, before a graph model's output softmax) of the last forward pass (training, evaluation or
  /// `predict`): rows × `output_size()`, valid until the next step. What metrics that need the outputs read
  /// (`model_with_outputs`, top-k accuracy).
  [[nodiscard]] std::span<const T> outputs() const { return exec().outputs(); }

 protected:
  // Only a model derives from it; the model sets the threads itself, where its own checks put them.
  explicit executor_front(nn::model_options options) noexcept : options_(options) {}
  executor_front(executor_front&&) noexcept = default;
  executor_front& operator=(executor_front&&) noexcept = default;
  ~executor_front() = default;

 private:
  graph_executor<T>& exec() noexcept { return static_cast<Derived&>(*this).engine(); }
  const graph_executor<T>& exec() const noexcept { return static_cast<const Derived&>(*this).engine(); }

  void check(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch, const char* what) {
    namespace d = mwstrat::detail;
    if (batch == 0) d::nn_config_error(std::string(what) + ": empty batch");
    if (inputs.size() != batch * input_size())
      d::nn_config_error(std::string(what) + ": " + std::to_string(inputs.size()) + " input values for a batch of " +
                         std::to_string(batch) + " samples of " + std::to_string(input_size()));
    if (labels.size() != batch)
      d::nn_config_error(std::string(what) + ": " + std::to_string(labels.size()) + " labels for a batch of " +
                         std::to_string(batch));
    const auto classes = static_cast<std::int64_t>(output_size());
    for (std::size_t i = 0; i < batch; ++i)
      if (labels[i] < 0 || labels[i] >= classes)
        throw data_error({"nn"}, "", std::string(what) + ": label " + std::to_string(labels[i]) + " of sample " +
                                         std::to_string(i) + " outside [0, " + std::to_string(classes) + ")");
    reserve(batch);
  }

  void check_weights(std::span<const float> weights, std::size_t batch, const char* what) const {
    if (weights.empty()) return;
    if (weights.size() != batch)
      mwstrat::detail::nn_config_error(std::string(what) + ": sample_weight has " + std::to_string(weights.size()) +
                                       " weights for a batch of " + std::to_string(batch));
    for (std::size_t i = 0; i < batch; ++i)
      if (!(weights[i] >= 0.0f) || !std::isfinite(weights[i]))
        mwstrat::detail::nn_config_error(std::string(what) + ": sample_weight " + std::to_string(weights[i]) +
                                         " of sample " + std::to_string(i) + " is not a finite weight >= 0");
  }

  nn::model_options options_;
  int threads_ = 1;
  std::unique_ptr<tbb::task_arena> arena_threads_;  // the kernels' threads (a base: set before the model's executor)
};

}  // namespace mwstrat::detail
