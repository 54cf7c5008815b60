#pragma once
/// \file
/// Keras's TerminateOnNaN: stops training after a step whose loss is NaN or infinite. The loss it reads is already
/// reduced over all workers, so every worker stops at the same step.

#include <mwstrat/train/logs.hpp>

#include <cmath>
#include <cstddef>
#include <iostream>
#include <ostream>

namespace mwstrat {

/// Stops `fit` at the first non-finite loss.
class terminate_on_nan {
 public:
  /// Decides from the reduced loss, the same on every worker: fit need not agree on it (fit.hpp).
  static constexpr bool stops_one_worker = false;

  explicit terminate_on_nan(std::ostream& out = std::cerr) : out_(&out) {}

  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t step, const batch_logs& logs) {
    if (std::isfinite(logs.batch_loss)) return;
    ctx.stop_training = true;
    if (ctx.strategy.is_chief()) *out_ << "Batch " << step << ": invalid loss, terminating training\n";
  }

 private:
  std::ostream* out_;
};

}  // namespace mwstrat
