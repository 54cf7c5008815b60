#pragma once
// One batch's work in `fit` and `evaluate` (fit.hpp): a training step and an evaluation step, with the examples'
// weights when the data carries them, and the evaluation loop whose metrics are reduced once at its end.

#include <mwstrat/data/cursor.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/fit_metrics.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

namespace mwstrat::detail {

// The number of examples in a batch, when its type says (`size`, `count` or `size()`), so that an evaluation
// step that gives a worker nothing skips the model instead of handing it an empty batch.
template <class B>
std::optional<std::size_t> examples_in(const B& b) {
  if constexpr (requires { { b.size } -> std::convertible_to<std::size_t>; }) {
    return static_cast<std::size_t>(b.size);
  } else if constexpr (requires { { b.count } -> std::convertible_to<std::size_t>; }) {
    return static_cast<std::size_t>(b.count);
  } else if constexpr (requires { { b.size() } -> std::convertible_to<std::size_t>; }) {
    return static_cast<std::size_t>(b.size());
  } else {
    return std::nullopt;
  }
}

// A dataset with sample weights (sample_weight / class_weight) needs a model that weights its losses: refused at
// compile time, with this message, instead of training as if every example weighed 1.
template <class Model, class Data>
constexpr bool check_sample_weights() {
  if constexpr (weighted_batch_source<Data>) {
    static_assert(sample_weighted_model<Model, batch_of<Data>>,
                  "mwstrat: the data carries sample weights (sample_weight or class_weight: a weighted_batch_source) "
                  "but the model cannot weight its per-example losses; it needs train_batch(batch, weights, on_ready) "
                  "and evaluate_batch(batch, weights) (concept sample_weighted_model, train/concepts.hpp)");
  }
  return true;
}

// One training step on `batch` (global step `at`), with its examples' weights when the data has them.
template <class Model, class Data, class Batch, class OnReady>
decltype(auto) train_step(Model& m, Data& d, const Batch& batch, const data::data_cursor& at, OnReady&& on_ready) {
  if constexpr (weighted_batch_source<Data> && sample_weighted_model<Model, Batch>) {
    const std::span<const float> w = d.weights_at(static_cast<std::size_t>(at.epoch), static_cast<std::size_t>(at.step));
    return m.train_batch(batch, w, std::forward<OnReady>(on_ready));
  } else {
    return train_on_batch(m, batch, std::forward<OnReady>(on_ready));
  }
}

// One evaluation step on `batch` (step `step` of pass 0), with its examples' weights when the data has them.
template <class Model, class Data, class Batch>
decltype(auto) evaluate_step(Model& m, Data& d, const Batch& batch, std::size_t step) {
  if constexpr (weighted_batch_source<Data> && sample_weighted_model<Model, Batch>) {
    return m.evaluate_batch(batch, d.weights_at(0, step));
  } else {
    return evaluate_on_batch(m, batch);
  }
}

// What `train_step` and `evaluate_step` return for this model and data: whether it has `correct` (a classifier)
// decides, at compile time, whether the logs show an accuracy.
template <class Model, class Data>
using train_result_t = std::remove_cvref_t<decltype(train_step(
    std::declval<Model&>(), std::declval<Data&>(), std::declval<const batch_of<Data>&>(),
    std::declval<const data::data_cursor&>(), ready_probe{}))>;
template <class Model, class Data>
using evaluation_result_t = std::remove_cvref_t<decltype(evaluate_step(
    std::declval<Model&>(), std::declval<Data&>(), std::declval<const batch_of<Data>&>(), std::size_t{}))>;

// What the metrics see of one batch: the result's sums, and its predictions and targets where it carries them
// (`result_with_targets`), else the model's outputs where it exposes them (`model_with_outputs`).
template <class Model, class Batch, class Result>
metric_input<Batch> make_metric_input(const Model& model, const Batch& batch, const Result& r) {
  metric_input<Batch> in{batch, static_cast<double>(r.loss_sum), correct_of(r), static_cast<double>(r.count)};
  if constexpr (result_with_targets<Result>) {
    in.outputs = std::span<const float>(r.predictions);
    in.targets = std::span<const float>(r.targets);
    const auto rows = static_cast<std::size_t>(r.count);
    in.classes = rows > 0 ? in.outputs.size() / rows : 0;
  } else {
    const auto [outputs, classes] = model_outputs(model);
    in.outputs = outputs;
    in.classes = classes;
  }
  return in;
}

// evaluate, with the metric sets found among `sets` (fit passes its callbacks; the others are skipped).
template <class Strategy, class Data, class Model, class... Sets>
evaluation evaluate_with(Strategy& strategy, Model& model, Data& data, std::size_t steps, const char* prefix,
                         Sets&... sets) {
  static_assert(check_sample_weights<Model, Data>());
  constexpr std::size_t metric_doubles = metric_state_size<Sets...>();
  // One pass at most: a step past the data's end would read the next pass and count its examples twice (Keras
  // stops where its input runs out).
  const auto pass = static_cast<std::size_t>(data.steps_per_epoch());
  const std::size_t n = steps == 0 ? pass : std::min(steps, pass);
  // [loss_sum, correct, count, metric states...]: one reduction at the end.
  std::array<double, 3 + metric_doubles> local{};
  for (std::size_t s = 0; s < n; ++s) {
    const auto& batch = data.batch_at(0, s);
    if (const auto n_examples = examples_in(batch); n_examples && *n_examples == 0) continue;
    const auto r = evaluate_step(model, data, batch, s);
    local[0] += static_cast<double>(r.loss_sum);
    local[1] += correct_of(r);
    local[2] += static_cast<double>(r.count);
    if constexpr (metric_doubles > 0) {
      update_metric_sets(std::span<double>(local).subspan(3), make_metric_input(model, batch, r), sets...);
    }
  }
  strategy.sum_metrics(std::span<double>(local));
  const batch_stats all{local[0], local[1], local[2]};
  constexpr bool classifies = classification_result<evaluation_result_t<Model, Data>>;
  evaluation e{all.loss(), classifies ? all.accuracy() : std::nan(""), all.count, {}, classifies};
  if constexpr (metric_doubles > 0) {
    metric_set_results(std::span<const double>(local).subspan(3), e.metrics, prefix, sets...);
  }
  return e;
}

}  // namespace mwstrat::detail
