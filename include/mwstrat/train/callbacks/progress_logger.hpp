#pragma once
/// \file
/// Keras-style progress on the chief:
///
///     Epoch 1/3
///     70/70 [==============================] - 3s 43ms/step - loss: 2.2140 - accuracy: 0.3101
///
/// On a terminal the bar is redrawn as steps complete; otherwise (a log file, a pipe) one line per epoch is
/// printed, so logs stay readable. Workers other than the chief print nothing unless `all_workers` is set.

#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/train/logs.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <ostream>
#include <string>

namespace mwstrat {

/// Options of `progress_logger`.
struct progress_options {
  std::ostream* out = &std::cout;  ///< where to print
  bool all_workers = false;        ///< print on every worker, prefixed by its rank (default: the chief only)
  int live = -1;                   ///< redraw a live bar: 1 yes, 0 no, -1 when `out` is std::cout on a terminal
  std::chrono::milliseconds redraw_every{100};
};

/// Prints Keras's progress bar and epoch summaries.
class progress_logger {
 public:
  /// Never stops training: fit need not agree on a stop after each step because of it (fit.hpp).
  static constexpr bool stops_one_worker = false;

  explicit progress_logger(progress_options options = {}) : options_(options) {}

  template <class Ctx>
  void on_train_begin(Ctx& ctx) {
    enabled_ = ctx.strategy.is_chief() || options_.all_workers;
    prefix_ = options_.all_workers ? "[rank " + std::to_string(ctx.strategy.replica_id()) + "] " : "";
    live_ = options_.live == 1 ||
            (options_.live == -1 && options_.out == &std::cout && ::isatty(STDOUT_FILENO) == 1);
  }

  template <class Ctx>
  void on_epoch_begin(Ctx& ctx, int epoch) {
    if (!enabled_) return;
    // Numbers as text of their own: the stream's locale would group them ("Epoch 1.001").
    *options_.out << prefix_ << "Epoch " << std::to_string(epoch + 1) << '/' << std::to_string(ctx.epochs) << '\n'
                  << std::flush;
    started_ = clock::now();
    last_draw_ = started_;
    first_step_ = ctx.step;
  }

  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t step, const batch_logs& logs) {
    if (!enabled_ || !live_) return;
    const auto now = clock::now();
    if (step + 1 < ctx.steps_per_epoch && now - last_draw_ < options_.redraw_every) return;
    last_draw_ = now;
    std::string text = line(step + 1, ctx.steps_per_epoch, now, logs.loss);
    if (logs.has_accuracy) text += " - accuracy: " + fixed4(logs.accuracy);
    for (const named_value& m : logs.metrics) text += " - " + m.name + ": " + fixed4(m.value);
    *options_.out << '\r' << prefix_ << text << std::flush;
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int, const epoch_logs& logs) {
    if (!enabled_) return;
    // A stopped epoch keeps its position (ctx.step); a finished one is back at 0: the bar shows where it ended.
    const std::size_t reached = ctx.step != 0 ? ctx.step : ctx.steps_per_epoch;
    std::string text = line(reached, ctx.steps_per_epoch, clock::now(), logs.loss);
    if (logs.has_accuracy) text += " - accuracy: " + fixed4(logs.accuracy);
    // Keras's order: the training metrics, then the validation loss, accuracy and metrics.
    for (const named_value& m : logs.metrics) {
      if (m.name.rfind("val_", 0) != 0) text += " - " + m.name + ": " + fixed4(m.value);
    }
    if (logs.val_loss) text += " - val_loss: " + fixed4(*logs.val_loss);
    if (logs.val_accuracy) text += " - val_accuracy: " + fixed4(*logs.val_accuracy);
    for (const named_value& m : logs.metrics) {
      if (m.name.rfind("val_", 0) == 0) text += " - " + m.name + ": " + fixed4(m.value);
    }
    *options_.out << (live_ ? "\r" : "") << prefix_ << text << '\n' << std::flush;
  }

 private:
  using clock = std::chrono::steady_clock;

  static std::string fixed4(double v) { return detail::fixed_text(v, 4); }

  std::string line(std::size_t done, std::size_t total, clock::time_point now, double loss) const {
    constexpr std::size_t width = 30;
    const std::size_t filled = total == 0 ? width : done * width / total;
    std::string bar(filled, '=');
    if (filled < width) {
      bar += '>';
      bar.append(width - filled - 1, '.');
    }
    const double seconds = std::chrono::duration<double>(now - started_).count();
    const std::size_t run = done > first_step_ ? done - first_step_ : 0;
    const double ms_per_step = run == 0 ? 0.0 : 1000.0 * seconds / static_cast<double>(run);
    const std::string digits = std::to_string(total);
    std::string count = std::to_string(done);
    count.insert(0, digits.size() > count.size() ? digits.size() - count.size() : 0, ' ');
    return count + '/' + digits + " [" + bar + "] - " + std::to_string(static_cast<long long>(std::lround(seconds))) +
           "s " + std::to_string(static_cast<long long>(std::lround(ms_per_step))) +
           "ms/step - loss: " + fixed4(loss);
  }

  progress_options options_;
  bool enabled_ = false;
  bool live_ = false;
  std::string prefix_;
  clock::time_point started_{};
  clock::time_point last_draw_{};
  std::size_t first_step_ = 0;
};

}  // namespace mwstrat
