#pragma once
/// \file
/// Keras-style streaming metrics: the mean of a value (the loss) and sparse categorical accuracy.

#include <mwstrat/nn/losses.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace mwstrat::nn {

/// Weighted running mean (`keras.metrics.Mean`), accumulated in double.
class mean_metric {
 public:
  /// Adds `value` with `weight` (a batch's mean loss with weight = batch size, say).
  void update_state(double value, double weight = 1.0) noexcept {
    total_ += value * weight;
    count_ += weight;
  }
  /// Adds a pre-summed total over `count` samples (a step's loss_sum).
  void update_sum(double total, double count) noexcept {
    total_ += total;
    count_ += count;
  }
  /// The mean so far (0 before any update).
  [[nodiscard]] double result() const noexcept { return count_ > 0 ? total_ / count_ : 0.0; }
  /// The weighted sum so far.
  [[nodiscard]] double total() const noexcept { return total_; }
  /// The total weight so far.
  [[nodiscard]] double count() const noexcept { return count_; }
  /// Forgets everything.
  void reset_state() noexcept { total_ = count_ = 0.0; }

 private:
  double total_ = 0;
  double count_ = 0;
};

/// Fraction of samples whose arg-max prediction is the integer label
/// (`keras.metrics.SparseCategoricalAccuracy`).
class sparse_categorical_accuracy {
 public:
  /// Adds a batch: `predictions` holds `labels.size()` rows of `classes` scores.
  template <class T>
  void update_state(std::span<const std::int64_t> labels, std::span<const T> predictions, std::size_t classes) {
    for (std::size_t s = 0; s < labels.size(); ++s) {
      const auto predicted = arg_max(predictions.subspan(s * classes, classes));
      correct_ += static_cast<std::int64_t>(predicted) == labels[s] ? 1 : 0;
    }
    count_ += labels.size();
  }
  /// Adds pre-counted results (a step's correct / count).
  void update_counts(std::size_t correct, std::size_t count) noexcept {
    correct_ += correct;
    count_ += count;
  }
  /// The accuracy so far (0 before any update).
  [[nodiscard]] double result() const noexcept {
    return count_ > 0 ? static_cast<double>(correct_) / static_cast<double>(count_) : 0.0;
  }
  /// Correct samples so far.
  [[nodiscard]] std::size_t correct() const noexcept { return correct_; }
  /// Samples so far.
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  /// Forgets everything.
  void reset_state() noexcept { correct_ = count_ = 0; }

 private:
  std::size_t correct_ = 0;
  std::size_t count_ = 0;
};

}  // namespace mwstrat::nn
