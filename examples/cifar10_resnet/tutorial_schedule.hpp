#pragma once
// The learning rates of examples/cifar10_resnet, apart from main so that a test can check them
// (tests/examples/cifar10_resnet_test.cpp): the tutorial's piecewise schedule (the rate for epochs 1-30, a tenth for
// 31-45, a hundredth after), by epoch or by step, and the short recipe's warm-up + cosine.

#include <mwstrat/nn/optimizers/schedules.hpp>

#include <cstdint>
#include <functional>

namespace cifar10_resnet {

namespace nn = mwstrat::nn;

// By epoch, for Keras's LearningRateScheduler: it passes the epoch's index (0 for the first), and the decay keeps
// values[i] while the index is <= boundaries[i], so {29, 44} gives epochs 1-30 the rate, as the tutorial's
// `epoch >= 30`. ({30, 45} ran the rate one epoch too long at each drop.)
inline std::function<double(int, double)> tutorial_rate_by_epoch(double lr) {
  return nn::per_epoch(nn::piecewise_constant_decay({29, 44}, {lr, lr * 0.1, lr * 0.01}));
}

// The same by the optimizer's step count (updates before this one), after a linear warm-up of `warmup_steps` from 0:
// epoch e's first step (count e · steps_per_epoch) already takes its epoch's rate.
inline nn::learning_rate tutorial_rate_by_step(double lr, std::int64_t steps_per_epoch, std::int64_t warmup_steps) {
  return nn::linear_warmup(
      nn::piecewise_constant_decay({30 * steps_per_epoch - 1, 45 * steps_per_epoch - 1}, {lr, lr * 0.1, lr * 0.01}),
      warmup_steps);
}

// The short recipe's: a linear warm-up from 0 over `warmup_steps`, then a cosine decay to 0 by step over the rest of
// `epochs`.
inline nn::learning_rate cosine_rate(double lr, int epochs, std::int64_t steps_per_epoch, std::int64_t warmup_steps) {
  return nn::cosine_decay(0.0, epochs * steps_per_epoch - warmup_steps, 0.0, lr, warmup_steps);
}

}  // namespace cifar10_resnet
