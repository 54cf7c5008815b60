#pragma once
/// \file
/// Keras's EarlyStopping: stops `fit` when a monitored quantity has stopped improving for `patience` epochs, and
/// optionally puts back the weights of the best epoch.
///
/// Every worker runs it on the same logs (reduced over all workers before any callback sees them), so every
/// worker decides the same at the same epoch; `fit` also agrees on `stop_training` after `on_epoch_end`, so even
/// a callback that only the chief runs stops everyone. The best weights are restored on every replica, which
/// therefore stay identical.

#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>

#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

namespace mwstrat {

/// Options of `early_stopping`, with Keras's names and defaults.
struct early_stopping_options {
  std::string monitor = "val_loss";  ///< loss, accuracy, val_loss, val_accuracy (train/logs.hpp `logged_value`)
  double min_delta = 0;              ///< a change smaller than this is no improvement
  int patience = 0;                  ///< epochs without improvement before stopping
  std::string mode = "auto";         ///< "min", "max" or "auto" (max for accuracies, else min)
  std::optional<double> baseline = std::nullopt;  ///< stop unless the monitored value beats it within `patience` epochs
  bool restore_best_weights = false; ///< at the stop, put back the weights of the best epoch
  int start_from_epoch = 0;          ///< epochs to wait before counting (a warm-up)
  std::ostream* log = &std::cerr;    ///< where the chief says that it stopped (nullptr: nowhere)
};

/// Stops training when `monitor` stops improving (see the file comment).
class early_stopping {
 public:
  /// Stops every worker alike: it decides at an epoch's end from the reduced logs, the same on every worker.
  static constexpr bool stops_one_worker = false;

  explicit early_stopping(early_stopping_options options = {}) : options_(std::move(options)) {
    const std::optional<bool> up = monitor_maximises(options_.monitor, options_.mode);
    if (!up) {
      throw config_error({"train.early_stopping"}, "mode: '" + options_.mode + "' is not 'auto', 'min' or 'max'");
    }
    if (options_.patience < 0) {
      throw config_error({"train.early_stopping"}, "patience: " + std::to_string(options_.patience) + " is negative");
    }
    maximise_ = *up;
  }

  /// The epoch (0-based) at which it stopped training in the last `fit`, if it did.
  [[nodiscard]] std::optional<int> stopped_epoch() const { return stopped_epoch_; }
  /// The epoch with the best monitored value so far, and that value.
  [[nodiscard]] std::optional<int> best_epoch() const { return best_epoch_; }
  [[nodiscard]] double best() const { return best_; }
  /// Epochs since the last improvement.
  [[nodiscard]] int wait() const { return wait_; }

  template <class Ctx>
  void on_train_begin(Ctx&) {
    wait_ = 0;
    stopped_epoch_.reset();
    best_epoch_.reset();
    best_ = maximise_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    best_weights_.clear();
    best_state_.clear();
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs& logs) {
    const std::optional<double> current = logged_value(logs, options_.monitor);
    if (!current) {
      // A val_* value is missing in an epoch that did not validate (validation_freq > 1): nothing to compare.
      if (options_.monitor.rfind("val_", 0) == 0) return;
      throw config_error({"train.early_stopping", ctx.strategy.replica_id()},
                         "monitor: '" + options_.monitor + "' is not among the logs of epoch " +
                             std::to_string(epoch + 1) + " (loss, accuracy, val_loss, val_accuracy)");
    }
    if (epoch < options_.start_from_epoch) return;
    auto params = ctx.model.parameters();
    if (options_.restore_best_weights && best_weights_.empty()) remember_best(ctx.model);
    ++wait_;
    if (improves(*current, best_)) {
      best_ = *current;
      best_epoch_ = epoch;
      if (options_.restore_best_weights) remember_best(ctx.model);
      // Only a value that also beats the baseline restarts the count.
      if (!options_.baseline || improves(*current, *options_.baseline)) wait_ = 0;
      return;
    }
    if (wait_ >= options_.patience && epoch > 0) {
      stopped_epoch_ = epoch;
      ctx.stop_training = true;
      if (options_.restore_best_weights && !best_weights_.empty()) {
        std::copy(best_weights_.begin(), best_weights_.end(), params.begin());
        // Keras restores every weight: batch norm's moving statistics belong to the best epoch too.
        if constexpr (stateful_model<std::remove_cvref_t<decltype(ctx.model)>>) {
          auto state = ctx.model.model_state();
          std::copy(best_state_.begin(), best_state_.end(), state.begin());
        }
      }
      if (ctx.strategy.is_chief() && options_.log) {
        *options_.log << "Epoch " << epoch + 1 << ": early stopping (" << options_.monitor << " did not improve for "
                      << wait_ << " epoch" << (wait_ == 1 ? "" : "s") << ")"
                      << (options_.restore_best_weights && best_epoch_
                              ? "; restoring the weights of epoch " + std::to_string(*best_epoch_ + 1)
                              : std::string())
                      << "\n"
                      << std::flush;
      }
    }
  }

 private:
  template <class Model>
  void remember_best(Model& model) {
    auto params = model.parameters();
    best_weights_.assign(params.begin(), params.end());
    if constexpr (stateful_model<Model>) {
      auto state = model.model_state();
      best_state_.assign(state.begin(), state.end());
    }
  }

  // Keras: an improvement beats the reference by more than min_delta in the monitored direction.
  [[nodiscard]] bool improves(double value, double reference) const {
    if (std::isnan(value)) return false;
    const double delta = std::abs(options_.min_delta);
    return maximise_ ? value - delta > reference : value + delta < reference;
  }

  early_stopping_options options_;
  bool maximise_ = false;
  int wait_ = 0;
  double best_ = 0;
  std::optional<int> best_epoch_;
  std::optional<int> stopped_epoch_;
  std::vector<float> best_weights_;
  std::vector<float> best_state_;  // the model's non-trained state (moving statistics) at the best epoch
};

}  // namespace mwstrat
