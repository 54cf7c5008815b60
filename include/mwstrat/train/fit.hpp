#pragma once
/// \file
/// Keras-style `fit` and `evaluate` for synchronous data parallelism over any `strategy`.
///
/// Every worker runs the same `fit`. Each step, each worker trains on its part of the global batch (global batch =
/// per-worker batch × `num_replicas_in_sync()`, the dataset's job), the gradients are mean-reduced and every
/// replica applies the identical update: one call into the strategy's gradient synchroniser
/// (`make_gradient_sync`, strategy/gradient_sync.hpp), which decides buckets, overlap and where the update runs
/// from the strategy's `gradient_sync_options`. Metrics are reduced weighted by examples. A dataset whose examples
/// carry weights (`weighted_batch_source`: sample_weight / class_weight, train/sample_weights.hpp) is trained and
/// evaluated with them (Keras's `sum_over_batch_size`: sum(w·loss) / examples), on a `sample_weighted_model` only. Before the first step
/// the workers compare model fingerprints and the chief's parameters are broadcast.

#include <mwstrat/data/cursor.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/resume.hpp>
#include <mwstrat/train/in_memory_recovery.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/metrics.hpp>
#include <mwstrat/train/preemption.hpp>
#include <mwstrat/train/train_context.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

namespace mwstrat {

/// Options of `fit`, with Keras's names and meanings. (How gradients are synchronised is the strategy's business:
/// `gradient_sync_options`.)
struct fit_options {
  int epochs = 1;                     ///< train until this epoch (exclusive; counts from 0 across resumes)
  std::size_t steps_per_epoch = 0;    ///< 0: the dataset's steps per epoch
  int initial_epoch = 0;              ///< the epoch to start from
  std::size_t validation_steps = 0;   ///< 0: the whole validation set
  int validation_freq = 1;            ///< validate after every n-th epoch
  /// Catch SIGTERM and SIGINT while training: the job stops at the next step boundary on every worker and `fit`
  /// throws `preempted` (train/preemption.hpp). false: the signals keep their dispositions.
  bool catch_preemption_signals = true;
  /// Survive a lost worker without restarting the survivors (train/in_memory_recovery.hpp): they wait for a
  /// replacement, which receives the training state from one of them, and training goes on from the last step
  /// boundary. Needs a `recoverable_strategy` (the multi-worker strategy); off by default.
  in_memory_recovery_options recovery = {};
};

/// A validation set for `fit` that is never used: the default.
struct no_validation {};

namespace detail {

// The workers' agreement at a step or epoch boundary: every worker learns whether any of them asked to stop
// (a callback's `stop_training`) or was preempted. One all-reduce of two numbers.
struct stop_decision {
  bool stop = false;
  bool preempt = false;
};
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

// The number of examples in a batch, when its type says (`size`, `count` or `size()`), so that an evaluation
// step that gives a worker nothing skips the model instead of handing it an empty batch.
template <class B>
std::optional<std::size_t> examples_in(const B& b) {
  if constexpr (requires { { b.size } -> std::convertible_to<std::size_t>; }) {
    return static_cast<std::size_t>(b.size);
  } else if constexpr (requires { { b.count } -> std::convertible_to<std::size_t>; }) {
    return static_cast<std::size_t>(b.count);
  } else if constexpr (requires { { b.size() } -> std::convertible_to<std::size_t>; }) {
    return static_cast<std::size_t>(b.size());
  } else {
    return std::nullopt;
  }
}

// A dataset with sample weights (sample_weight / class_weight) needs a model that weights its losses: refused at
// compile time, with this message, instead of training as if every example weighed 1.
template <class Model, class Data>
constexpr bool check_sample_weights() {
  if constexpr (weighted_batch_source<Data>) {
    static_assert(sample_weighted_model<Model, batch_of<Data>>,
                  "mwstrat: the data carries sample weights (sample_weight or class_weight: a weighted_batch_source) "
                  "but the model cannot weight its per-example losses; it needs train_batch(batch, weights, on_ready) "
                  "and evaluate_batch(batch, weights) (concept sample_weighted_model, train/concepts.hpp)");
  }
  return true;
}

// One training step on `batch` (global step `at`), with its examples' weights when the data has them.
template <class Model, class Data, class Batch, class OnReady>
decltype(auto) train_step(Model& m, Data& d, const Batch& batch, const data::data_cursor& at, OnReady&& on_ready) {
  if constexpr (weighted_batch_source<Data> && sample_weighted_model<Model, Batch>) {
    const std::span<const float> w = d.weights_at(static_cast<std::size_t>(at.epoch), static_cast<std::size_t>(at.step));
    return m.train_batch(batch, w, std::forward<OnReady>(on_ready));
  } else {
    return train_on_batch(m, batch, std::forward<OnReady>(on_ready));
  }
}

// One evaluation step on `batch` (step `step` of pass 0), with its examples' weights when the data has them.
template <class Model, class Data, class Batch>
decltype(auto) evaluate_step(Model& m, Data& d, const Batch& batch, std::size_t step) {
  if constexpr (weighted_batch_source<Data> && sample_weighted_model<Model, Batch>) {
    return m.evaluate_batch(batch, d.weights_at(0, step));
  } else {
    return evaluate_on_batch(m, batch);
  }
}

template <class Strategy>
[[noreturn]] void throw_fit_error(Strategy& s, const std::string& what) {
  throw config_error({"train", s.replica_id()}, what);
}

}  // namespace detail

/// Evaluates `model` on `data` across all workers: every worker runs the same number of steps on its shard and the
/// loss and accuracy are weighted by the examples each saw. `steps` = 0 (or more than the data has) runs the whole
/// dataset once. Any number of workers evaluates any data-set size: a worker whose share of a step is empty (the
/// last, partial batch of a set not divisible by the workers, or a set smaller than they are) skips the model for
/// that step and adds nothing, so the result is the one-worker result.
namespace detail {

// evaluate, with the metric sets found among `sets` (fit passes its callbacks; the others are skipped).
template <class Strategy, class Data, class Model, class... Sets>
evaluation evaluate_with(Strategy& strategy, Model& model, Data& data, std::size_t steps, const char* prefix,
                         Sets&... sets) {
  static_assert(check_sample_weights<Model, Data>());
  constexpr std::size_t metric_doubles = metric_state_size<Sets...>();
  // One pass at most: a step past the data's end would read the next pass and count its examples twice (Keras
  // stops where its input runs out).
  const auto pass = static_cast<std::size_t>(data.steps_per_epoch());
  const std::size_t n = steps == 0 ? pass : std::min(steps, pass);
  // [loss_sum, correct, count, metric states...]: one reduction at the end.
  std::array<double, 3 + metric_doubles> local{};
  for (std::size_t s = 0; s < n; ++s) {
    const auto& batch = data.batch_at(0, s);
    if (const auto n_examples = examples_in(batch); n_examples && *n_examples == 0) continue;
    const auto r = evaluate_step(model, data, batch, s);
    local[0] += static_cast<double>(r.loss_sum);
    local[1] += static_cast<double>(r.correct);
    local[2] += static_cast<double>(r.count);
    if constexpr (metric_doubles > 0) {
      const auto [outputs, classes] = model_outputs(model);
      using batch_type = std::remove_cvref_t<decltype(batch)>;
      const metric_input<batch_type> in{batch, static_cast<double>(r.loss_sum), static_cast<double>(r.correct),
                                        static_cast<double>(r.count), outputs, classes};
      update_metric_sets(std::span<double>(local).subspan(3), in, sets...);
    }
  }
  strategy.sum_metrics(std::span<double>(local));
  const batch_stats all{local[0], local[1], local[2]};
  evaluation e{all.loss(), all.accuracy(), all.count, {}};
  if constexpr (metric_doubles > 0) {
    metric_set_results(std::span<const double>(local).subspan(3), e.metrics, prefix, sets...);
  }
  return e;
}

}  // namespace detail

/// Evaluates `model` on `data` across all workers: every worker runs the same number of steps on its shard and the
/// loss and accuracy are weighted by the examples each saw. `steps` = 0 (or more than the data has) runs the whole
/// dataset once. Any number of workers evaluates any data-set size: a worker whose share of a step is empty (the
/// last, partial batch of a set not divisible by the workers, or a set smaller than they are) skips the model for
/// that step and adds nothing, so the result is the one-worker result. `metric_sets` (`metrics<...>`, train/metrics.hpp) are
/// reduced in the same all-reduce and reported in `evaluation::metrics`.
template <strategy Strategy, batch_source Data, class Model, class... MetricSets>
  requires trainable_model<Model, batch_of<Data>> && (metric_set<MetricSets> && ...)
evaluation evaluate(Strategy& strategy, Model& model, Data& data, std::size_t steps = 0,
                    MetricSets&... metric_sets) {
  return detail::evaluate_with(strategy, model, data, steps, "", metric_sets...);
}

/// Trains `model` with `optimizer` on `train` for `options.epochs`, validating on `validation` (when it is not
/// `no_validation`) every `validation_freq` epochs; calls `callbacks` in Keras's order. Returns the history.
///
/// The training data is read as a repeated pipeline (tf.data's `.repeat()`): global step g of the run reads step
/// g mod P of pass ⌊g / P⌋ (P = `train.steps_per_epoch()`, one pass; `data::stream_position`), so a
/// `steps_per_epoch` longer than a pass continues into the next, reshuffled, pass, a shorter one continues where
/// the last epoch stopped, and a resumed run reads exactly what the uninterrupted run would have read.
///
/// Stopping: a callback may set `ctx.stop_training` on any worker (the chief alone, say); the workers agree at the
/// step boundary (one all-reduce of two numbers after the batch hooks, only when some callback has them; once per
/// epoch after `on_epoch_end`; after `on_train_begin` and `on_epoch_begin` when a callback with those hooks may stop
/// one worker alone, except under in-memory recovery), so every worker stops after the same step. A SIGTERM or
/// SIGINT to any worker (train/preemption.hpp) rides the same agreement and the step's metric reduction: every
/// worker stops after the same step, the epoch is left unfinished (no validation, no `on_epoch_end`: a resume
/// finishes it), `on_train_end` runs (BackupAndRestore writes its backup there) and `fit` throws `preempted`.
template <strategy Strategy, class Model, optimizer_for Optimizer, batch_source Train, class Validation,
          class... Callbacks>
  requires trainable_model<Model, batch_of<Train>> &&
           ((callback_for<Callbacks, train_context<Strategy, Model, Optimizer>> || metric_set<Callbacks>) && ...)
history fit(Strategy& strategy, Model& model, Optimizer& optimizer, Train& train, Validation& validation,
            const fit_options& options, Callbacks&... callbacks) {
  using clock = std::chrono::steady_clock;
  using context = train_context<Strategy, Model, Optimizer>;
  static_assert(detail::check_sample_weights<Model, Train>());
  static_assert(detail::check_sample_weights<Model, Validation>());
  constexpr bool batch_hooks = (detail::has_batch_hooks<Callbacks, context> || ...);
  constexpr bool agree_every_step = (detail::needs_stop_agreement<Callbacks, context> || ...);
  constexpr bool agree_after_begin = (detail::needs_begin_agreement<Callbacks, context> || ...);
  // The metric sets among the callbacks (train/metrics.hpp): their states ride the step's reduction.
  constexpr std::size_t metric_doubles = detail::metric_state_size<Callbacks...>();
  std::array<double, metric_doubles> epoch_metrics{};  // summed over workers and the epoch's steps
  std::vector<named_value> batch_metric_values;       // what on_train_batch_end sees
  context ctx(strategy, model, optimizer);
  ctx.epoch_metric_sums = std::span<double>(epoch_metrics);
  ctx.epochs = options.epochs;
  ctx.steps_per_pass = static_cast<std::size_t>(train.steps_per_epoch());
  if (ctx.steps_per_pass == 0) detail::throw_fit_error(strategy, "the training dataset has no full global batch");
  ctx.steps_per_epoch = options.steps_per_epoch != 0 ? options.steps_per_epoch : ctx.steps_per_pass;
  if (options.validation_freq < 1) {
    detail::throw_fit_error(strategy, "validation_freq: " + std::to_string(options.validation_freq) + " is not >= 1");
  }
  if (model.gradients().size() != model.parameters().size()) {
    detail::throw_fit_error(strategy, "the model's gradient arena (" + std::to_string(model.gradients().size()) +
                                          ") and parameter arena (" + std::to_string(model.parameters().size()) +
                                          ") differ in size");
  }
  ctx.epoch = options.initial_epoch;

  // In-memory recovery: the state at the last step boundary, and whether this process replaces a lost worker (its
  // ring is a later generation than the job's first): then it takes the state from a survivor instead of starting.
  constexpr bool recoverable = recoverable_strategy<Strategy>;
  const bool recovering = recoverable && options.recovery.enabled;
  if (options.recovery.enabled && !recoverable) {
    detail::throw_fit_error(strategy, "fit_options::recovery is enabled, but this strategy cannot rebuild its collective "
                                      "after a lost peer (in-memory recovery needs a recoverable_strategy: the "
                                      "multi-worker strategy over the TCP ring)");
  }
  detail::training_snapshot snapshot;
  bool replacement = false;
  if constexpr (recoverable) replacement = recovering && strategy.collective_generation() > 0;
  bool just_restored = false;  // the snapshot already holds this position (do not take it again at the epoch's top)

  if (replacement) {
    if constexpr (recoverable) detail::exchange_state(strategy, ctx, snapshot, false);
    ctx.rejoined = true;
    just_restored = true;
  } else {
    // Same architecture everywhere, then the chief's initial weights everywhere.
    strategy.verify_same("model fingerprint", model.fingerprint());
    strategy.mirror(model.parameters());
    if constexpr (stateful_model<Model>) strategy.mirror(model.model_state());
  }

  // A model that reduces inside its step (SyncBatchNormalization) sums through the strategy while fit runs.
  struct cross_replica_scope {
    Model& m;
    explicit cross_replica_scope(Model& model, Strategy& s) : m(model) {
      if constexpr (cross_replica_model<Model>) m.set_cross_replica_sum([&s](std::span<double> v) { s.sum_metrics(v); });
    }
    ~cross_replica_scope() {
      if constexpr (cross_replica_model<Model>) m.set_cross_replica_sum({});
    }
    cross_replica_scope(const cross_replica_scope&) = delete;
    cross_replica_scope& operator=(const cross_replica_scope&) = delete;
  } cross_replica(model, strategy);
  // After mirroring: it may exchange facts. Held by pointer so that a recovery can make it again over the new ring.
  std::unique_ptr<decltype(make_gradient_sync(strategy, model, optimizer))> sync_holder(
      new auto(make_gradient_sync(strategy, model, optimizer)));
  history hist;
  const preemption_signal_guard signals(options.catch_preemption_signals);
  int signal_number = 0;  // the signal this worker received, for the `preempted` message
  // Resuming is the trainer's: from the resume source's newest backup (BackupAndRestore's), before any callback
  // sees the run, so that every on_train_begin sees where it starts.
  detail::resume(ctx, callbacks...);
  detail::fire_train_begin(ctx, callbacks...);
  // Not under in-memory recovery: a replacement runs these hooks again where the survivors do not, so an agreement
  // here would meet their next collective (a stop set in a begin hook must then be set on every worker).
  const bool agree_begin = agree_after_begin && !recovering;
  if (agree_begin) ctx.stop_training = detail::agree_to_stop(strategy, ctx.stop_training, false).stop;

  // A lost peer inside the loop, with recovery on: the survivors rebuild the ring with a replacement, take the
  // state of the latest step boundary (in_memory_recovery.hpp) and go on from there. Anything else propagates.
  const auto recover = [&](const peer_lost_error& lost) {
    if constexpr (recoverable) {
      sync_holder.reset();  // it refers to the failed ring (its model leaves any shared region first)
      detail::recover_survivor(strategy, ctx, snapshot, lost, options.recovery);
      hist.epochs.resize(std::min(hist.epochs.size(), snapshot.history_size()));
      sync_holder.reset(new auto(make_gradient_sync(strategy, model, optimizer)));
      just_restored = true;
    } else {
      (void)lost;
    }
  };

  for (; ctx.epoch < options.epochs && !ctx.stop_training; ++ctx.epoch) {
    const int epoch = ctx.epoch;
    if (ctx.step == 0) {  // (a mid-epoch resume keeps the sums its backup restored)
      ctx.epoch_sums = {};
      epoch_metrics = {};
    }
    if (recovering && !just_restored) snapshot.take(ctx, true, hist.epochs.size());
    just_restored = false;
    const auto started = clock::now();
    std::size_t steps_run = 0;
    bool begin_fired = false;  // on_epoch_begin once per epoch, not again after a recovery inside it
    bool leave = false;        // the epoch ended training (stopped or preempted mid-epoch)
    for (;;) {
      try {
        if (!begin_fired) {
          detail::fire_epoch_begin(ctx, epoch, callbacks...);
          begin_fired = true;
          if (agree_begin) ctx.stop_training = detail::agree_to_stop(strategy, ctx.stop_training, false).stop;
        }
        while (ctx.step < ctx.steps_per_epoch && !ctx.stop_training) {
          const std::size_t step = ctx.step;
          detail::fire_batch_begin(ctx, step, callbacks...);
          const data::data_cursor at = data::stream_position(ctx.global_step(), ctx.steps_per_pass);
          const auto& batch = train.batch_at(static_cast<std::size_t>(at.epoch), static_cast<std::size_t>(at.step));
          const auto result = sync_holder->step([&](auto&& on_ready) {
            return detail::train_step(model, train, batch, at, std::forward<decltype(on_ready)>(on_ready));
          });
          bool preempt = preemption_requested();
          if (preempt && signal_number == 0) signal_number = std::max(preemption_signal_number(), 0);
          // One reduction: [loss_sum, correct, count, preemption vote, metric states...].
          std::array<double, 4 + metric_doubles> reduced{static_cast<double>(result.loss_sum),
                                                         static_cast<double>(result.correct),
                                                         static_cast<double>(result.count), preempt ? 1.0 : 0.0};
          if constexpr (metric_doubles > 0) {
            const auto [outputs, classes] = detail::model_outputs(model);
            using batch_type = std::remove_cvref_t<decltype(batch)>;
            const metric_input<batch_type> in{batch, reduced[0], reduced[1], reduced[2], outputs, classes};
            detail::update_metric_sets(std::span<double>(reduced).subspan(4), in, callbacks...);
          }
          strategy.sum_metrics(std::span<double>(reduced));
          preempt = reduced[3] > 0;
          const batch_stats global{reduced[0], reduced[1], reduced[2]};
          for (std::size_t i = 0; i < metric_doubles; ++i) epoch_metrics[i] += reduced[4 + i];
          ctx.epoch_sums += global;
          ctx.step = step + 1;
          ++steps_run;
          if constexpr (metric_doubles > 0 && batch_hooks) {
            batch_metric_values.clear();
            detail::metric_set_results(std::span<const double>(epoch_metrics), batch_metric_values, "", callbacks...);
          }
          const batch_logs logs{step, ctx.epoch_sums.loss(), ctx.epoch_sums.accuracy(), global.loss(),
                                std::span<const named_value>(batch_metric_values)};
          detail::fire_batch_end(ctx, step, logs, callbacks...);
          if constexpr (agree_every_step) {
            const bool late = !preempt && preemption_requested();
            if (late && signal_number == 0) signal_number = std::max(preemption_signal_number(), 0);
            const detail::stop_decision d = detail::agree_to_stop(strategy, ctx.stop_training, preempt || late);
            ctx.stop_training = d.stop;
            preempt = d.preempt;
          }
          if (preempt) {
            ctx.preempted = true;
            ctx.stop_training = true;
          }
          if (recovering) snapshot.take(ctx, false, hist.epochs.size());
        }
        // Preempted before the epoch's last step: leave it unfinished, so that the resumed run finishes it exactly as
        // the uninterrupted run would (validation, on_epoch_end and what callbacks decide there).
        if (ctx.preempted && ctx.step < ctx.steps_per_epoch) {
          leave = true;
          break;
        }
        epoch_logs logs;
        logs.epoch = epoch;
        logs.loss = ctx.epoch_sums.loss();
        logs.accuracy = ctx.epoch_sums.accuracy();
        logs.seconds = std::chrono::duration<double>(clock::now() - started).count();
        logs.steps = steps_run;
        if constexpr (has_learning_rate<Optimizer>) logs.learning_rate = static_cast<double>(optimizer.learning_rate());
        if constexpr (metric_doubles > 0) {
          detail::metric_set_results(std::span<const double>(epoch_metrics), logs.metrics, "", callbacks...);
        }
        const bool finished_epoch = ctx.step == ctx.steps_per_epoch;
        if constexpr (batch_source<Validation>) {
          // An epoch stopped part-way (not preempted: that one was left above) is validated too, as in Keras.
          if ((epoch + 1) % options.validation_freq == 0) {
            detail::fire_test_begin(ctx, callbacks...);
            const evaluation val =
                detail::evaluate_with(strategy, model, validation, options.validation_steps, "val_", callbacks...);
            detail::fire_test_end(ctx, val, callbacks...);
            logs.val_loss = val.loss;
            logs.val_accuracy = val.accuracy;
            logs.metrics.insert(logs.metrics.end(), val.metrics.begin(), val.metrics.end());
          }
        }
        if (finished_epoch) ctx.step = 0;  // a stopped epoch keeps its position
        hist.epochs.push_back(logs);
        detail::fire_epoch_end(ctx, epoch, logs, callbacks...);
        // A callback's decision in on_epoch_end (EarlyStopping on the chief, say), or a signal during validation,
        // reaches every worker before the next epoch.
        const bool late = !ctx.preempted && preemption_requested();
        if (late && signal_number == 0) signal_number = std::max(preemption_signal_number(), 0);
        const detail::stop_decision d = detail::agree_to_stop(strategy, ctx.stop_training, ctx.preempted || late);
        ctx.stop_training = d.stop || d.preempt;
        ctx.preempted = d.preempt;
        if (ctx.step != 0) leave = true;  // stopped mid-epoch
        break;
      } catch (const peer_lost_error& lost) {
        if (!recovering) throw;
        recover(lost);
        // Ranks can be one boundary apart: the state taken may be the top of the next epoch (this one's end was done
        // elsewhere). Then this epoch is over here too: the loop's increment brings ctx.epoch back to it.
        if (ctx.epoch != epoch) {
          --ctx.epoch;
          break;
        }
      }
    }
    if (leave) break;
  }
  // A preemption agreed after the last epoch came too late to stop anything: the run is complete.
  if (ctx.preempted && ctx.epoch >= options.epochs) {
    ctx.preempted = false;
    ctx.stop_training = false;
    clear_preemption_request();  // else the next fit in this process would stop at its first step
  }
  hist.stopped_early = ctx.stop_training && !ctx.preempted;
  detail::fire_train_end(ctx, hist, callbacks...);
  if (ctx.preempted) {
    clear_preemption_request();
    throw preempted(signal_number, ctx.epoch, ctx.global_step());
  }
  return hist;
}

/// `fit` without validation data.
template <strategy Strategy, class Model, optimizer_for Optimizer, batch_source Train, class... Callbacks>
  requires trainable_model<Model, batch_of<Train>> &&
           ((callback_for<Callbacks, train_context<Strategy, Model, Optimizer>> || metric_set<Callbacks>) && ...)
history fit(Strategy& strategy, Model& model, Optimizer& optimizer, Train& train, const fit_options& options,
            Callbacks&... callbacks) {
  no_validation none;
  return fit(strategy, model, optimizer, train, none, options, callbacks...);
}

}  // namespace mwstrat
