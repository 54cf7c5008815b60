#pragma once
/// \file
/// Keras's `sample_weight` and `class_weight` for `fit` and `evaluate`: `sample_weighted_input` is a
/// `distributed_input` whose examples carry a weight each (a `weighted_batch_source`, train/concepts.hpp).
///
/// The weights belong to the examples of the data set, not to positions in a batch: the pipeline shuffles and shards
/// them with their examples (`weights_at` gathers the weights of exactly the examples `batch_at` read), so two
/// workers with B examples each see the weights one worker with 2B sees.
///
/// Meaning (Keras 3's default `sum_over_batch_size` reduction): a batch's loss is sum(w_i · loss_i) / examples —
/// divided by the number of examples, not by the sum of the weights — and so are its gradients; the reported loss
/// is sum(w_i · loss_i) over the epoch / examples. Dividing by the count keeps the cross-worker reduction the plain
/// mean of equal per-worker batches, and a weight of 2 means what two copies of the example would mean. Accuracy
/// and the other metrics stay unweighted, as Keras's `metrics=` are.
///
/// \code
///   auto train = mwstrat::sample_weighted_input::with_class_weight(
///       mwstrat::distributed_input(set, 64, strategy, seed), {{0, 1.0f}, {7, 3.0f}});   // class 7 weighs 3
///   auto h = mwstrat::fit(strategy, model, optimizer, train, options);
///   auto test = mwstrat::sample_weighted_input::with_sample_weight(
///       mwstrat::distributed_input::for_evaluation(test_set, 64, strategy), weights);  // one per example
///   auto e = mwstrat::evaluate(strategy, model, test);
/// \endcode

#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/distributed_input.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// A `distributed_input` whose examples weigh `sample_weight[i]` each (see the file comment).
class sample_weighted_input {
 public:
  /// Keras's `sample_weight`: one weight per example of `data`'s set, in the set's (file) order; each finite and
  /// >= 0. Throws config_error naming `sample_weight` otherwise.
  [[nodiscard]] static sample_weighted_input with_sample_weight(distributed_input data,
                                                                std::vector<float> sample_weight) {
    const std::size_t n = data.batches().images().count();
    if (sample_weight.size() != n) {
      throw config_error({"train"}, "sample_weight: " + std::to_string(sample_weight.size()) + " weights for " +
                                        std::to_string(n) + " examples (one weight per example)");
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(sample_weight[i]) || sample_weight[i] < 0.0f) {
        throw config_error({"train"}, "sample_weight: weight " + std::to_string(sample_weight[i]) + " of example " +
                                          std::to_string(i) + " is not a finite number >= 0");
      }
    }
    return sample_weighted_input(std::move(data), std::move(sample_weight));
  }

  /// Keras's `class_weight`: example i weighs `class_weight[label i]`; a class not in the map weighs 1. Every key
  /// must be a class of the set (0 ≤ key ≤ its largest label) and every weight finite and >= 0; throws
  /// config_error naming `class_weight` otherwise. (Keras refuses `class_weight` together with `sample_weight`:
  /// here one input is built from one or the other.)
  [[nodiscard]] static sample_weighted_input with_class_weight(distributed_input data,
                                                               const std::map<std::int64_t, float>& class_weight) {
    const auto labels = data.batches().images().labels();
    std::int64_t largest = -1;
    for (const std::int64_t l : labels) largest = l > largest ? l : largest;
    for (const auto& [cls, w] : class_weight) {
      if (cls < 0 || cls > largest) {
        throw config_error({"train"}, "class_weight: class " + std::to_string(cls) +
                                          " does not exist (the data set's labels are 0.." +
                                          std::to_string(largest) + ")");
      }
      if (!std::isfinite(w) || w < 0.0f) {
        throw config_error({"train"}, "class_weight: weight " + std::to_string(w) + " of class " +
                                          std::to_string(cls) + " is not a finite number >= 0");
      }
    }
    std::vector<float> weights(labels.size(), 1.0f);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (const auto it = class_weight.find(labels[i]); it != class_weight.end()) weights[i] = it->second;
    }
    return sample_weighted_input(std::move(data), std::move(weights));
  }

  /// Global steps per epoch (the wrapped input's).
  [[nodiscard]] std::size_t steps_per_epoch() const { return data_.steps_per_epoch(); }

  /// This worker's part of global step `step` of epoch `epoch` (the wrapped input's); valid until the next call.
  data::image_batch batch_at(std::size_t epoch, std::size_t step) { return data_.batch_at(epoch, step); }

  /// The weights of the examples of `batch_at(epoch, step)`, in the same order; valid until the next call.
  std::span<const float> weights_at(std::size_t epoch, std::size_t step) {
    const std::size_t n = data_.indices_at(epoch, step, indices_);
    for (std::size_t i = 0; i < n; ++i) weights_[i] = sample_weight_[indices_[i]];
    return std::span<const float>(weights_).first(n);
  }

  /// One weight per example of the set, in the set's order.
  [[nodiscard]] std::span<const float> sample_weight() const { return sample_weight_; }
  /// The wrapped input.
  [[nodiscard]] distributed_input& input() { return data_; }

 private:
  sample_weighted_input(distributed_input data, std::vector<float> weights)
      : data_(std::move(data)), sample_weight_(std::move(weights)) {
    const std::size_t b = data_.batches().per_worker_batch();
    indices_.resize(b);
    weights_.resize(b);
  }

  distributed_input data_;
  std::vector<float> sample_weight_;  // per example of the set
  std::vector<std::size_t> indices_;  // the examples of the last weights_at
  std::vector<float> weights_;        // their weights
};

static_assert(weighted_batch_source<sample_weighted_input>);

}  // namespace mwstrat
