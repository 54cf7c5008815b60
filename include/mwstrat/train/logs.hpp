#pragma once
/// \file
/// The metrics `fit` reports: per batch (running means over the epoch so far, over all workers), per epoch, and
/// the history of a whole run.

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat {

/// Loss sum, examples classified right and examples: of one batch (what a model returns; any type with these three
/// fields is a `batch_result`), or summed over batches and workers. Means are taken only when reported, so metrics
/// weigh every example equally.
struct batch_stats {
  double loss_sum = 0;
  double correct = 0;
  double count = 0;

  /// Adds another batch's (or worker's) sums; any `batch_result`-shaped value (one without `correct` adds none).
  template <class R>
  batch_stats& operator+=(const R& r) {
    loss_sum += static_cast<double>(r.loss_sum);
    if constexpr (requires { r.correct; }) correct += static_cast<double>(r.correct);
    count += static_cast<double>(r.count);
    return *this;
  }
  /// Mean loss per example (NaN before any example).
  [[nodiscard]] double loss() const { return count > 0 ? loss_sum / count : std::nan(""); }
  /// Fraction classified right (NaN before any example).
  [[nodiscard]] double accuracy() const { return count > 0 ? correct / count : std::nan(""); }
};

/// A value reported by name: a metric (train/fit_metrics.hpp), or `val_` + a metric.
struct named_value {
  std::string name;
  double value = 0;
  friend bool operator==(const named_value&, const named_value&) = default;
};

/// What a callback sees after each training batch.
struct batch_logs {
  std::size_t step = 0;        ///< the step just done, within the epoch (0-based)
  double loss = 0;             ///< mean loss over the epoch so far, all workers
  double accuracy = 0;         ///< accuracy over the epoch so far, all workers (NaN when !has_accuracy)
  double batch_loss = 0;       ///< mean loss of this global batch alone
  std::span<const named_value> metrics = {};  ///< the `metrics<...>` given to fit, over the epoch so far
  bool has_accuracy = true;    ///< the model is a classifier (its results have `correct`)
};

/// The result of `evaluate`, reduced over all workers.
struct evaluation {
  double loss = 0;
  double accuracy = 0;  ///< NaN when !has_accuracy
  double count = 0;  ///< examples evaluated, all workers together
  std::vector<named_value> metrics = {};  ///< the `metrics<...>` given to evaluate, by name
  bool has_accuracy = true;  ///< the model is a classifier (its results have `correct`)
};

/// What a callback sees at the end of an epoch.
struct epoch_logs {
  int epoch = 0;               ///< 0-based
  double loss = 0;
  double accuracy = 0;         ///< NaN when !has_accuracy
  std::optional<double> val_loss;
  std::optional<double> val_accuracy;  ///< also empty when !has_accuracy
  std::optional<double> learning_rate;
  double seconds = 0;          ///< wall time of the epoch's training steps
  std::size_t steps = 0;       ///< steps run in this epoch by this process (fewer after a mid-epoch resume)
  /// The `metrics<...>` given to fit, by name, then their validation values as `val_` + name.
  std::vector<named_value> metrics = {};
  /// The model is a classifier (its results have `correct`): `accuracy` and `val_accuracy` mean something. A model
  /// of another task reports its loss and the `metrics<...>` it was given, nothing else.
  bool has_accuracy = true;
};

/// The value named `name` in `logs`, with Keras's names: `loss`, `accuracy`, `val_loss`, `val_accuracy`,
/// `learning_rate` (also `lr`); nullopt when the logs do not have it (val_* without validation that epoch, accuracy
/// of a model that is not a classifier).
[[nodiscard]] inline std::optional<double> logged_value(const epoch_logs& logs, std::string_view name) {
  if (name == "loss") return logs.loss;
  if (name == "accuracy" || name == "acc") return logs.has_accuracy ? std::optional<double>(logs.accuracy) : std::nullopt;
  if (name == "val_loss") return logs.val_loss;
  if (name == "val_accuracy" || name == "val_acc") return logs.has_accuracy ? logs.val_accuracy : std::nullopt;
  if (name == "learning_rate" || name == "lr") return logs.learning_rate;
  for (const named_value& m : logs.metrics) {
    if (m.name == name) return m.value;
  }
  return std::nullopt;
}

/// Whether a monitored quantity improves upward, from Keras's `mode` ("min", "max", or "auto": up for names with
/// "acc" in them, down otherwise). Returns nullopt for any other mode string.
[[nodiscard]] inline std::optional<bool> monitor_maximises(std::string_view monitor, std::string_view mode) {
  if (mode == "min") return false;
  if (mode == "max") return true;
  if (mode == "auto") return monitor.find("acc") != std::string_view::npos;
  return std::nullopt;
}

/// Everything `fit` reports, one entry per finished epoch.
struct history {
  std::vector<epoch_logs> epochs;
  bool stopped_early = false;  ///< a callback set `stop_training`
};

}  // namespace mwstrat
