#pragma once
/// \file
/// Keras's ReduceLROnPlateau: multiplies the learning rate by `factor` when a monitored quantity has not improved
/// for `patience` epochs, then waits `cooldown` epochs before counting again, never going below `min_lr`.
///
/// Every worker runs it on the same reduced logs and so changes its optimizer's rate identically at the same
/// epoch: the replicas stay identical.

#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

namespace mwstrat {

/// Options of `reduce_lr_on_plateau`, with Keras's names and defaults.
struct reduce_lr_on_plateau_options {
  std::string monitor = "val_loss";  ///< loss, accuracy, val_loss, val_accuracy
  double factor = 0.1;               ///< new rate = rate × factor; in (0, 1)
  int patience = 10;                 ///< epochs without improvement before reducing
  std::string mode = "auto";         ///< "min", "max" or "auto" (max for accuracies, else min)
  double min_delta = 1e-4;           ///< a change smaller than this is no improvement
  int cooldown = 0;                  ///< epochs to wait after a reduction before counting again
  double min_lr = 0;                 ///< the rate never goes below it
  std::ostream* log = &std::cerr;    ///< where the chief says that it reduced the rate (nullptr: nowhere)
};

/// Reduces the optimizer's learning rate on a plateau (see the file comment). Needs `has_learning_rate`.
class reduce_lr_on_plateau {
 public:
  /// Never stops training (fit.hpp: no agreement after its hooks).
  static constexpr bool stops_one_worker = false;

  explicit reduce_lr_on_plateau(reduce_lr_on_plateau_options options = {}) : options_(std::move(options)) {
    if (!(options_.factor > 0 && options_.factor < 1)) {
      throw config_error({"train.reduce_lr_on_plateau"},
                         "factor: " + std::to_string(options_.factor) + " is not in (0, 1): it would not reduce");
    }
    const std::optional<bool> up = monitor_maximises(options_.monitor, options_.mode);
    if (!up) {
      throw config_error({"train.reduce_lr_on_plateau"},
                         "mode: '" + options_.mode + "' is not 'auto', 'min' or 'max'");
    }
    if (options_.patience < 0 || options_.cooldown < 0) {
      throw config_error({"train.reduce_lr_on_plateau"}, "patience and cooldown must not be negative");
    }
    maximise_ = *up;
  }

  /// Epochs since the last improvement, and epochs of cooldown left.
  [[nodiscard]] int wait() const { return wait_; }
  [[nodiscard]] int cooldown_left() const { return cooldown_counter_; }

  template <class Ctx>
  void on_train_begin(Ctx&) {
    static_assert(has_learning_rate<std::remove_cvref_t<decltype(std::declval<Ctx&>().optimizer)>>,
                  "mwstrat: reduce_lr_on_plateau needs an optimizer with learning_rate() and set_learning_rate(x)");
    wait_ = 0;
    cooldown_counter_ = 0;
    best_ = maximise_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs& logs) {
    const std::optional<double> current = logged_value(logs, options_.monitor);
    if (!current) {
      // A val_* value is missing in an epoch that did not validate (validation_freq > 1): nothing to compare.
      if (options_.monitor.rfind("val_", 0) == 0) return;
      throw config_error({"train.reduce_lr_on_plateau", ctx.strategy.replica_id()},
                         "monitor: '" + options_.monitor + "' is not among the logs of epoch " +
                             std::to_string(epoch + 1) + " (loss, accuracy, val_loss, val_accuracy)");
    }
    if (cooldown_counter_ > 0) {
      --cooldown_counter_;
      wait_ = 0;
    }
    if (improves(*current)) {
      best_ = *current;
      wait_ = 0;
      return;
    }
    if (cooldown_counter_ > 0) return;
    if (++wait_ < options_.patience) return;
    const double old_lr = static_cast<double>(ctx.optimizer.learning_rate());
    // Keras compares with the float32 minimum: a rate already at it is left alone.
    if (old_lr > static_cast<double>(static_cast<float>(options_.min_lr))) {
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      ctx.optimizer.set_learning_rate(new_lr);
      if (ctx.strategy.is_chief() && options_.log) {
        *options_.log << "Epoch " << epoch + 1 << ": ReduceLROnPlateau reducing learning rate to " << new_lr << ".\n"
                      << std::flush;
      }
      cooldown_counter_ = options_.cooldown;
      wait_ = 0;
    }
  }

 private:
  [[nodiscard]] bool improves(double value) const {
    if (std::isnan(value)) return false;
    return maximise_ ? value > best_ + options_.min_delta : value < best_ - options_.min_delta;
  }

  reduce_lr_on_plateau_options options_;
  bool maximise_ = false;
  int wait_ = 0;
  int cooldown_counter_ = 0;
  double best_ = 0;
};

}  // namespace mwstrat
