#pragma once
/// \file
/// Gradient accumulation (`fit_options::max_micro_batch`): a worker's part of a global step larger than the limit
/// is trained as several micro-batches, and their gradients are summed — each weighted by its examples, so the sum
/// is d(mean loss of the whole part)/d(params), what one big batch gives up to the order of the additions — before
/// the step's one reduction and update. Keras 3's `gradient_accumulation_steps` and DDP's `no_sync()` do the same
/// over several batches; here it is within one step, so the global batch, the learning rate, the data order and
/// resume are unchanged: only the memory a forward pass needs shrinks.
///
/// The last micro-batch's gradients reach the synchroniser as the model reports them (combined with the sum first),
/// so its reduction still overlaps its backward. Nothing allocates per step: the sum lives in the run state.
/// A model that keeps per-batch statistics (batch normalization) sees smaller batches: not the same numbers there.

#include <mwstrat/data/cursor.hpp>
#include <mwstrat/strategy/after_backward.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/batch_steps.hpp>
#include <mwstrat/train/logs.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// A batch type `fit` can split into micro-batches: the ADL hook `mwstrat_micro_batch(batch, first, count)` gives
/// examples [first, first + count) as a batch of the same type (a view; valid while `batch` is). `data::image_batch`
/// has it (data/image_batch.hpp).
template <class B>
concept splittable_batch = requires(const B& b, std::size_t i) {
  { mwstrat_micro_batch(b, i, i) } -> std::same_as<B>;
};

namespace detail {

// How a part of `examples` splits under a limit of `max` per micro-batch: the fewest micro-batches, of sizes that
// differ by at most one (43 under 16: 15, 14, 14), larger ones first.
struct micro_split {
  std::size_t parts = 1, base = 0, larger = 0;  // `larger` parts of base + 1, the rest of base
  micro_split(std::size_t examples, std::size_t max) {
    if (max == 0 || examples <= max) {
      base = examples;
      return;
    }
    parts = (examples + max - 1) / max;
    base = examples / parts;
    larger = examples % parts;
  }
  [[nodiscard]] std::size_t first(std::size_t i) const { return i * base + std::min(i, larger); }
  [[nodiscard]] std::size_t size(std::size_t i) const { return base + (i < larger ? 1 : 0); }
};

// Trains this worker's part `batch` of global step `at` as micro-batches of at most `max` examples into the
// model's gradient arena, with `sum` (the arena's size) as the accumulator; calls `metric_update(micro, result)`
// after each micro-batch's step (its predictions and the model's outputs are that micro-batch's) and reports the
// final gradients to `on_ready` during the last micro-batch's backward. Returns the part's sums.
template <class Model, class Data, class Batch, class OnReady, class MetricUpdate>
batch_stats train_micro_batches(Model& model, Data& data, const Batch& batch, const data::data_cursor& at,
                                std::size_t max, std::vector<float>& sum, OnReady& on_ready,
                                MetricUpdate&& metric_update) {
  const micro_split split(*examples_in(batch), max);
  const std::span<float> grads = model.gradients();
  std::span<const float> weights;
  if constexpr (weighted_batch_source<Data> && sample_weighted_model<Model, Batch>) {
    weights = data.weights_at(static_cast<std::size_t>(at.epoch), static_cast<std::size_t>(at.step));
  }
  batch_stats total;
  const auto train_one = [&](std::size_t i, auto&& ready) {
    const Batch micro = mwstrat_micro_batch(batch, split.first(i), split.size(i));
    auto r = [&]() -> decltype(auto) {
      if constexpr (weighted_batch_source<Data> && sample_weighted_model<Model, Batch>) {
        return model.train_batch(micro, weights.subspan(split.first(i), split.size(i)), ready);
      } else {
        return train_on_batch(model, micro, ready);
      }
    }();
    metric_update(micro, r);
    total.loss_sum += static_cast<double>(r.loss_sum);
    total.correct += correct_of(r);
    total.count += static_cast<double>(r.count);
    return static_cast<float>(split.size(i));
  };
  std::fill(sum.begin(), sum.end(), 0.0f);
  for (std::size_t i = 0; i + 1 < split.parts; ++i) {
    const float n = train_one(i, after_backward{});
    for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += n * grads[j];
  }
  // The last micro-batch: each slice it reports becomes the whole part's mean gradient, then goes on.
  const std::size_t last = split.parts - 1;
  const float n_last = static_cast<float>(split.size(last));
  const float inverse = 1.0f / static_cast<float>(*examples_in(batch));
  std::size_t combined_from = grads.size();  // [combined_from, end) is combined and reported
  const auto combine = [&](std::size_t offset, std::size_t count) {
    for (std::size_t j = offset; j < offset + count; ++j) grads[j] = (sum[j] + n_last * grads[j]) * inverse;
    combined_from = std::min(combined_from, offset);
  };
  if constexpr (reports_wanted<OnReady>) {
    train_one(last, [&](std::size_t offset, std::size_t count) {
      combine(offset, count);
      on_ready(offset, count);
    });
  } else {
    train_one(last, after_backward{});
  }
  // What the model did not report (or all of it, when nothing is reported) is final now.
  if (combined_from > 0) {
    combine(0, combined_from);
    if constexpr (reports_wanted<OnReady>) on_ready(0, combined_from);
  }
  return total;
}

}  // namespace detail
}  // namespace mwstrat
