#pragma once
/// \file
/// Keras's LearningRateScheduler: at the start of each epoch the optimizer's learning rate becomes
/// `schedule(epoch, current_rate)`. Every worker applies the same schedule, so replicas stay identical.

#include <mwstrat/train/concepts.hpp>

#include <functional>
#include <utility>

namespace mwstrat {

/// Sets the learning rate at every epoch from a function of (epoch, current learning rate).
class learning_rate_scheduler {
 public:
  /// Never stops training (fit.hpp: no agreement after its hooks).
  static constexpr bool stops_one_worker = false;

  explicit learning_rate_scheduler(std::function<double(int epoch, double learning_rate)> schedule)
      : schedule_(std::move(schedule)) {}

  template <class Ctx>
    requires has_learning_rate<std::remove_cvref_t<decltype(std::declval<Ctx&>().optimizer)>>
  void on_epoch_begin(Ctx& ctx, int epoch) {
    ctx.optimizer.set_learning_rate(schedule_(epoch, static_cast<double>(ctx.optimizer.learning_rate())));
  }

 private:
  std::function<double(int, double)> schedule_;
};

}  // namespace mwstrat
