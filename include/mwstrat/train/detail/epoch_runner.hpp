#pragma once
// An epoch of `fit` (fit.hpp), in the three parts a test can stand between: one step (`run_step`: this worker's part
// of the global batch through the gradient synchroniser, then one reduction of the step's metrics and preemption
// vote), the epoch's steps with their hooks and agreements (`run_epoch_steps`), and the epoch's end
// (`finish_epoch`: logs, validation, history, on_epoch_end and the agreement after it). The recovery retry loop
// around them is fit's (train/in_memory_recovery.hpp).

#include <mwstrat/data/cursor.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/batch_steps.hpp>
#include <mwstrat/strategy/after_backward.hpp>
#include <mwstrat/train/micro_batches.hpp>
#include <mwstrat/train/detail/step_agreement.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/fit_metrics.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// What a step's reduction carries before the metric states: loss_sum, correct, count, the preemption vote, and the
// joiners the chief offers (elastic training: every worker learns how many to take in at this boundary).
inline constexpr std::size_t step_fields = 5;

// The end of a step: one reduction of [loss_sum, correct, count, preemption vote, joiners, metric states...] over
// the workers, added to the epoch's sums; ctx.step moves past the step, `preempt` says whether any worker was, and
// ctx.joiners_agreed how many joiners the workers take in.
template <class Ctx, std::size_t N>
batch_stats reduce_step(Ctx& ctx, std::array<double, N>& reduced, std::size_t step, bool& preempt) {
  reduced[4] = ctx.join_offer;
  ctx.join_offer = 0;
  ctx.strategy.sum_metrics(std::span<double>(reduced));
  preempt = reduced[3] > 0;
  ctx.joiners_agreed = static_cast<int>(reduced[4]);
  const batch_stats global{reduced[0], reduced[1], reduced[2]};
  for (std::size_t i = step_fields; i < N; ++i) ctx.epoch_metric_sums[i - step_fields] += reduced[i];
  ctx.epoch_sums += global;
  ctx.step = step + 1;
  return global;
}

// This worker's weight in the mean of the step's gradients: 1 while the shares are even; when they are not (after an
// elastic job has shrunk, G over N workers can split unevenly), n·N/G for its n of the step's G examples, so that the
// mean over the workers of the weighted per-worker means is the mean over the step's examples (as one worker would
// compute it). Only data that says a step's global count (`reshardable_source`) can have uneven shares.
template <class Ctx, class Train, class Batch>
float gradient_share(const Ctx& ctx, const Train& train, const data::data_cursor& at, const Batch& batch) {
  if constexpr (reshardable_source<Train> && splittable_batch<Batch>) {
    const auto examples = examples_in(batch);
    const std::size_t total = train.global_count_at(static_cast<std::size_t>(at.epoch),
                                                    static_cast<std::size_t>(at.step));
    if (!examples || total == 0) return 1.0f;
    const auto workers = static_cast<std::size_t>(ctx.strategy.num_replicas_in_sync());
    if (*examples * workers == total) return 1.0f;
    return static_cast<float>(static_cast<double>(*examples * workers) / static_cast<double>(total));
  } else {
    (void)ctx;
    (void)train;
    (void)at;
    (void)batch;
    return 1.0f;
  }
}

// Runs `backward(on_ready)`; with a share other than 1, runs it without reports, weights the whole gradient by
// `share` and reports it at once (no overlap for such a step: a bucket must not leave before it is weighted).
template <class Model, class Backward, class OnReady>
auto weighted_backward(Model& model, float share, Backward&& backward, OnReady&& on_ready) {
  if (share == 1.0f) return std::forward<Backward>(backward)(std::forward<OnReady>(on_ready));
  auto result = std::forward<Backward>(backward)(after_backward{});
  const std::span<float> gradients = model.gradients();
  for (float& g : gradients) g *= share;
  on_ready(std::size_t{0}, gradients.size());
  return result;
}

// Step `step` of the epoch at ctx's position: trains, then one reduction of [loss_sum, correct, count, preemption
// vote, joiners, metric states...]. Adds the step to the epoch's sums, moves ctx.step past it, sets `preempt` to whether any
// worker was preempted, and returns the step's own stats over every worker.
template <class Ctx, class Sync, class Train, class... Callbacks>
batch_stats run_step(Ctx& ctx, Sync& sync, Train& train, std::size_t step, bool& preempt, preemption_watch& watch,
                     Callbacks&... callbacks) {
  constexpr std::size_t metric_doubles = metric_state_size<Callbacks...>();
  const data::data_cursor at = data::stream_position(ctx.global_step(), ctx.steps_per_pass);
  const auto& batch = train.batch_at(static_cast<std::size_t>(at.epoch), static_cast<std::size_t>(at.step));
  std::array<double, step_fields + metric_doubles> reduced{};
  using Batch = std::remove_cvref_t<decltype(batch)>;
  if constexpr (splittable_batch<Batch>) {
    const auto examples = examples_in(batch);
    if (ctx.max_micro_batch != 0 && !examples) {
      throw config_error({"train", ctx.strategy.replica_id()},
                         "max_micro_batch: the training batch does not say how many examples it has (a member "
                         "`size` or `count`, or `size()`), so it cannot be split");
    }
    if (ctx.max_micro_batch != 0 && *examples > ctx.max_micro_batch) {
      // Gradient accumulation (train/micro_batches.hpp): each micro-batch's metrics as it is trained.
      const batch_stats part = sync.step([&](auto&& on_ready) {
        return weighted_backward(ctx.model, gradient_share(ctx, train, at, batch), [&](auto&& report) {
          return train_micro_batches(ctx.model, train, batch, at, ctx.max_micro_batch, ctx.micro_batch_gradients,
                                     report, [&](const Batch& micro, const auto& r) {
                                       if constexpr (metric_doubles > 0) {
                                         update_metric_sets(std::span<double>(reduced).subspan(step_fields),
                                                            make_metric_input(ctx.model, micro, r), callbacks...);
                                       }
                                     });
        }, on_ready);
      });
      preempt = watch.requested();
      reduced[0] = part.loss_sum;
      reduced[1] = part.correct;
      reduced[2] = part.count;
      reduced[3] = preempt ? 1.0 : 0.0;
      return reduce_step(ctx, reduced, step, preempt);
    }
  }
  const auto result = sync.step([&](auto&& on_ready) {
    return weighted_backward(ctx.model, gradient_share(ctx, train, at, batch), [&](auto&& report) {
      return train_step(ctx.model, train, batch, at, std::forward<decltype(report)>(report));
    }, std::forward<decltype(on_ready)>(on_ready));
  });
  preempt = watch.requested();
  reduced[0] = static_cast<double>(result.loss_sum);
  reduced[1] = correct_of(result);
  reduced[2] = static_cast<double>(result.count);
  reduced[3] = preempt ? 1.0 : 0.0;
  if constexpr (metric_doubles > 0) {
    update_metric_sets(std::span<double>(reduced).subspan(step_fields), make_metric_input(ctx.model, batch, result),
                       callbacks...);
  }
  return reduce_step(ctx, reduced, step, preempt);
}

// The epoch's steps from ctx's position until its end or a stop: each with its batch hooks, the agreement after
// them (train/detail/step_agreement.hpp) and `at_boundary()` (recovery's snapshot; true: leave now, joiners are
// due). Counts the steps in `steps_run`.
template <class Ctx, class Sync, class Train, class AtBoundary, class... Callbacks>
void run_epoch_steps(Ctx& ctx, Sync& sync, Train& train, preemption_watch& watch, std::size_t& steps_run,
                     std::vector<named_value>& batch_metric_values, AtBoundary&& at_boundary, Callbacks&... callbacks) {
  constexpr bool batch_hooks = (has_batch_hooks<Callbacks, Ctx> || ...);
  constexpr bool agree_every_step = (needs_stop_agreement<Callbacks, Ctx> || ...);
  constexpr std::size_t metric_doubles = metric_state_size<Callbacks...>();
  while (ctx.step < ctx.steps_per_epoch && !ctx.stop_training) {
    const std::size_t step = ctx.step;
    fire_batch_begin(ctx, step, callbacks...);
    bool preempt = false;
    const batch_stats global = run_step(ctx, sync, train, step, preempt, watch, callbacks...);
    ++steps_run;
    if constexpr (metric_doubles > 0 && batch_hooks) {
      batch_metric_values.clear();
      metric_set_results(std::span<const double>(ctx.epoch_metric_sums), batch_metric_values, "", callbacks...);
    }
    constexpr bool classifies = classification_result<train_result_t<std::remove_cvref_t<decltype(ctx.model)>, Train>>;
    const batch_logs logs{step, ctx.epoch_sums.loss(), classifies ? ctx.epoch_sums.accuracy() : std::nan(""),
                          global.loss(), std::span<const named_value>(batch_metric_values), classifies};
    fire_batch_end(ctx, step, logs, callbacks...);
    agree_after_step<agree_every_step>(ctx, preempt, watch);
    if constexpr (std::is_void_v<decltype(at_boundary())>) {
      at_boundary();
    } else if (at_boundary()) {
      return;  // the membership changes here (fit takes joiners in, then comes back)
    }
  }
}

// Validation of `fit`: the data (or `no_validation`), how many steps, every how many epochs.
template <class Validation>
struct validation_plan {
  Validation& data;
  std::size_t steps = 0;
  int every = 1;
};

// The end of epoch `epoch` (begun at `started`, `steps_run` steps), unless it was left unfinished: its logs,
// validation when due (an epoch stopped part-way is validated too, as in Keras), the history, on_epoch_end and the
// agreement after it. A finished epoch moves ctx.step back to 0; a stopped one keeps its position.
template <class Ctx, class Validation, class... Callbacks>
void finish_epoch(Ctx& ctx, int epoch, std::chrono::steady_clock::time_point started, std::size_t steps_run,
                  const validation_plan<Validation>& validation, history& hist, preemption_watch& watch,
                  Callbacks&... callbacks) {
  using Optimizer = std::remove_cvref_t<decltype(ctx.optimizer)>;
  constexpr std::size_t metric_doubles = metric_state_size<Callbacks...>();
  epoch_logs logs;
  logs.epoch = epoch;
  logs.loss = ctx.epoch_sums.loss();
  // A model of another task than classification reports no accuracy (its results have no `correct`).
  logs.has_accuracy = ctx.reports_accuracy;
  logs.accuracy = logs.has_accuracy ? ctx.epoch_sums.accuracy() : std::nan("");
  logs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  logs.steps = steps_run;
  if constexpr (has_learning_rate<Optimizer>) logs.learning_rate = static_cast<double>(ctx.optimizer.learning_rate());
  if constexpr (metric_doubles > 0) {
    metric_set_results(std::span<const double>(ctx.epoch_metric_sums), logs.metrics, "", callbacks...);
  }
  const bool finished_epoch = ctx.step == ctx.steps_per_epoch;
  if constexpr (batch_source<Validation>) {
    if ((epoch + 1) % validation.every == 0) {
      fire_test_begin(ctx, callbacks...);
      const evaluation val = evaluate_with(ctx.strategy, ctx.model, validation.data, validation.steps, "val_",
                                           callbacks...);
      fire_test_end(ctx, val, callbacks...);
      logs.val_loss = val.loss;
      if (val.has_accuracy) logs.val_accuracy = val.accuracy;
      logs.metrics.insert(logs.metrics.end(), val.metrics.begin(), val.metrics.end());
    }
  }
  if (finished_epoch) ctx.step = 0;
  hist.epochs.push_back(logs);
  fire_epoch_end(ctx, epoch, logs, callbacks...);
  agree_after_epoch(ctx, watch);
}

}  // namespace mwstrat::detail
