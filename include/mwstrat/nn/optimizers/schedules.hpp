#pragma once
/// \file
/// Learning-rate schedules with Keras's names and formulas (`keras.optimizers.schedules`), as functions of the
/// optimizer's step count (Keras's `iterations`: the updates applied before this one), and the type-erased
/// `learning_rate` every optimizer takes: a number or any schedule.
///
/// By step: give the schedule to the optimizer (`nn::sgd({.learning_rate = nn::cosine_decay(0.1, 10000)})`); its
/// `learning_rate()` is then the rate of the next update. By epoch: wrap it with `per_epoch` for the
/// LearningRateScheduler callback, which then calls it with the epoch's index (0 for the first) instead of the step.
/// The tutorial's 0.1 for epochs 1-30, 0.01 for 31-45 and 0.001 after (a boundary is the last index at its value):
///
///     mwstrat::learning_rate_scheduler lr(nn::per_epoch(nn::piecewise_constant_decay({29, 44}, {0.1, 0.01, 0.001})));
///
/// Schedules compute in double; Keras computes in float32, so they agree to float32 rounding.

#include <mwstrat/error.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <numbers>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::nn {

/// A learning-rate schedule: anything callable with a step count that returns the rate.
template <class S>
concept learning_rate_schedule_fn = std::copy_constructible<S> && requires(const S& s, std::int64_t step) {
  { s(step) } -> std::convertible_to<double>;
};

/// `PiecewiseConstantDecay(boundaries, values)`: values[0] while step <= boundaries[0], values[i] while
/// boundaries[i-1] < step <= boundaries[i], the last value after the last boundary.
class piecewise_constant_decay {
 public:
  piecewise_constant_decay(std::vector<std::int64_t> boundaries, std::vector<double> values)
      : boundaries_(std::move(boundaries)), values_(std::move(values)) {
    if (values_.size() != boundaries_.size() + 1)
      throw config_error({"nn"}, "piecewise_constant_decay: " + std::to_string(boundaries_.size()) +
                                     " boundaries need " + std::to_string(boundaries_.size() + 1) + " values, got " +
                                     std::to_string(values_.size()));
    for (std::size_t i = 1; i < boundaries_.size(); ++i)
      if (boundaries_[i] <= boundaries_[i - 1])
        throw config_error({"nn"}, "piecewise_constant_decay: boundaries must increase (" +
                                       std::to_string(boundaries_[i - 1]) + " then " + std::to_string(boundaries_[i]) +
                                       ")");
  }
  [[nodiscard]] double operator()(std::int64_t step) const {
    for (std::size_t i = 0; i < boundaries_.size(); ++i)
      if (step <= boundaries_[i]) return values_[i];
    return values_.back();
  }

 private:
  std::vector<std::int64_t> boundaries_;
  std::vector<double> values_;
};

/// `CosineDecay(initial_learning_rate, decay_steps, alpha, warmup_target, warmup_steps)`. Without a warm-up target
/// (Keras's None; warmup_steps is then unused, as in Keras): initial * ((1 - alpha) * 0.5 * (1 + cos(pi *
/// min(step, decay_steps) / decay_steps)) + alpha). With one: the rate rises linearly from `initial_learning_rate`
/// to `warmup_target` over warmup_steps (none: it starts there), then decays from `warmup_target` as above over
/// the next decay_steps.
class cosine_decay {
 public:
  cosine_decay(double initial_learning_rate, std::int64_t decay_steps, double alpha = 0.0,
               std::optional<double> warmup_target = std::nullopt, std::int64_t warmup_steps = 0)
      : initial_(initial_learning_rate), decay_steps_(decay_steps), alpha_(alpha), target_(warmup_target),
        warmup_steps_(warmup_steps) {
    if (decay_steps <= 0)
      throw config_error({"nn"}, "cosine_decay: decay_steps must be positive, got " + std::to_string(decay_steps));
    if (warmup_steps < 0)
      throw config_error({"nn"}, "cosine_decay: warmup_steps must not be negative, got " + std::to_string(warmup_steps));
  }
  [[nodiscard]] double operator()(std::int64_t step) const {
    const double s = static_cast<double>(step);
    if (!target_) return decay(std::min(s, static_cast<double>(decay_steps_)), initial_);
    const double w = static_cast<double>(warmup_steps_);
    const double clamped = std::min(s, static_cast<double>(decay_steps_) + w);
    if (clamped < w) return (*target_ - initial_) * (clamped / w) + initial_;
    return decay(clamped - w, *target_);
  }

 private:
  [[nodiscard]] double decay(double step, double from) const {
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * step / static_cast<double>(decay_steps_)));
    return from * ((1.0 - alpha_) * cosine + alpha_);
  }
  double initial_;
  std::int64_t decay_steps_;
  double alpha_;
  std::optional<double> target_;
  std::int64_t warmup_steps_;
};

/// A linear warm-up in front of any schedule (TensorFlow's official ResNet recipe: warm-up, then piecewise): for
/// step < warmup_steps the rate is initial + (after(warmup_steps) - initial) * step / warmup_steps, from then on
/// after(step) — `after` keeps its own step numbers (its boundaries are not shifted by the warm-up).
template <learning_rate_schedule_fn After>
class linear_warmup {
 public:
  linear_warmup(After after, std::int64_t warmup_steps, double initial_learning_rate = 0.0)
      : after_(std::move(after)), warmup_steps_(warmup_steps), initial_(initial_learning_rate) {
    if (warmup_steps < 0)
      throw config_error({"nn"}, "linear_warmup: warmup_steps must not be negative, got " + std::to_string(warmup_steps));
  }
  [[nodiscard]] double operator()(std::int64_t step) const {
    if (step >= warmup_steps_) return static_cast<double>(after_(step));
    const double target = static_cast<double>(after_(warmup_steps_));
    return initial_ + (target - initial_) * static_cast<double>(step) / static_cast<double>(warmup_steps_);
  }

 private:
  After after_;
  std::int64_t warmup_steps_;
  double initial_;
};

/// A learning rate as an optimizer takes it: a constant (implicitly from a number) or a schedule of the step.
class learning_rate {
 public:
  /// A constant rate.
  learning_rate(double value) : constant_(value) {}  // NOLINT(google-explicit-constructor): reads like Keras
  /// A schedule of the step count. (`learning_rate` itself is excluded first: checking the schedule concept on it
  /// would ask whether it is copy-constructible, which asks this constructor again — clang refuses the recursion.)
  template <class S>
    requires(!std::same_as<std::remove_cvref_t<S>, learning_rate> && !std::convertible_to<S, double> &&
             learning_rate_schedule_fn<S>)
  learning_rate(S schedule)  // NOLINT(google-explicit-constructor)
      : schedule_([s = std::move(schedule)](std::int64_t step) { return static_cast<double>(s(step)); }) {}

  /// Whether the rate follows a schedule.
  [[nodiscard]] bool scheduled() const noexcept { return static_cast<bool>(schedule_); }
  /// The rate at `step` (updates applied before this one).
  [[nodiscard]] double at(std::int64_t step) const { return schedule_ ? schedule_(step) : constant_; }

 private:
  double constant_ = 0.0;
  std::function<double(std::int64_t)> schedule_;
};

/// A step schedule used by epoch: the function of (epoch, current rate) that `learning_rate_scheduler` takes.
template <learning_rate_schedule_fn S>
[[nodiscard]] std::function<double(int, double)> per_epoch(S schedule) {
  return [s = std::move(schedule)](int epoch, double) { return static_cast<double>(s(epoch)); };
}

}  // namespace mwstrat::nn
