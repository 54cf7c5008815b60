#pragma once
// The workers' agreement at a step or epoch boundary (fit.hpp): every worker learns whether any of them asked to stop
// (a callback's `stop_training`) or was preempted (train/preemption.hpp), so that every worker stops after the same
// step. One all-reduce of two numbers, made after a step only when a callback may stop one worker alone.

#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/preemption.hpp>

#include <algorithm>
#include <array>
#include <span>
#include <type_traits>

namespace mwstrat::detail {

struct stop_decision {
  bool stop = false;
  bool preempt = false;
};

// One all-reduce: does any worker stop, is any preempted.
template <class Strategy>
stop_decision agree_to_stop(Strategy& strategy, bool stop, bool preempt) {
  std::array<double, 2> v{stop ? 1.0 : 0.0, preempt ? 1.0 : 0.0};
  strategy.sum_metrics(std::span<double>(v));
  return {v[0] > 0, v[1] > 0};
}

// A callback that can set stop_training between steps: then fit agrees on it after every step.
template <class C, class Ctx>
concept has_batch_hooks = has_on_train_batch_begin<C, Ctx> || has_on_train_batch_end<C, Ctx>;

// A callback with batch hooks that never sets stop_training on one worker alone (it only observes, or decides
// from values already reduced, the same on every worker) says `static constexpr bool stops_one_worker = false;`
// and spares every step the agreement's extra all-reduce. Any other callback with batch hooks is agreed on.
template <class C>
constexpr bool may_stop_one_worker() {
  if constexpr (requires { C::stops_one_worker; }) {
    return C::stops_one_worker;
  } else {
    return true;
  }
}
template <class C, class Ctx>
concept needs_stop_agreement = has_batch_hooks<C, Ctx> && may_stop_one_worker<std::remove_cvref_t<C>>();

// A callback whose on_train_begin or on_epoch_begin may set stop_training on one worker alone: then fit agrees on
// it after those hooks too, or that worker would skip the epoch's steps while the others ran them.
template <class C, class Ctx>
concept needs_begin_agreement =
    (has_on_train_begin<C, Ctx> || has_on_epoch_begin<C, Ctx>) && may_stop_one_worker<std::remove_cvref_t<C>>();

// This worker's preemption request (a signal, or `request_preemption`), and the first signal's number for the
// `preempted` message.
struct preemption_watch {
  int signal_number = 0;
  [[nodiscard]] bool requested() {
    const bool asked = preemption_requested();
    if (asked && signal_number == 0) signal_number = std::max(preemption_signal_number(), 0);
    return asked;
  }
};

// After a step's batch hooks: `preempt` is the step's reduced preemption vote. With `Agree` (a callback may stop
// one worker alone) the workers agree on the hooks' stop and on a signal that came during them; a preemption stops
// every worker.
template <bool Agree, class Ctx>
void agree_after_step(Ctx& ctx, bool preempt, preemption_watch& watch) {
  if constexpr (Agree) {
    const bool late = !preempt && watch.requested();
    const stop_decision d = agree_to_stop(ctx.strategy, ctx.stop_training, preempt || late);
    ctx.stop_training = d.stop;
    preempt = d.preempt;
  }
  if (preempt) {
    ctx.preempted = true;
    ctx.stop_training = true;
  }
}

// After on_epoch_end: a callback's decision there (EarlyStopping on the chief, say), or a signal during validation,
// reaches every worker before the next epoch.
template <class Ctx>
void agree_after_epoch(Ctx& ctx, preemption_watch& watch) {
  const bool late = !ctx.preempted && watch.requested();
  const stop_decision d = agree_to_stop(ctx.strategy, ctx.stop_training, ctx.preempted || late);
  ctx.stop_training = d.stop || d.preempt;
  ctx.preempted = d.preempt;
}

}  // namespace mwstrat::detail
