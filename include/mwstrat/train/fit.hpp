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

#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/batch_steps.hpp>
#include <mwstrat/train/detail/epoch_runner.hpp>
#include <mwstrat/train/detail/resume.hpp>
#include <mwstrat/train/detail/step_agreement.hpp>
#include <mwstrat/train/in_memory_recovery.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/micro_batches.hpp>
#include <mwstrat/train/fit_metrics.hpp>
#include <mwstrat/train/preemption.hpp>
#include <mwstrat/train/train_context.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
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
  /// Gradient accumulation: a worker's part of a step with more examples than this is trained as several
  /// micro-batches (the fewest, of sizes within one of each other) whose gradients are summed, weighted by their
  /// examples, before the step's one reduction — the same step as one big batch, up to the order of the additions,
  /// in less memory. The global batch, the data order and resume are unchanged. 0: whole parts. Needs a batch type
  /// `fit` can split (`splittable_batch`, train/micro_batches.hpp: `data::image_batch` is one). A model
  /// with per-batch statistics (batch normalization) sees the smaller batches there.
  std::size_t max_micro_batch = 0;
};

/// A validation set for `fit` that is never used: the default.
struct no_validation {};

namespace detail {

template <class Strategy>
[[noreturn]] void throw_fit_error(Strategy& s, const std::string& what) {
  throw config_error({"train", s.replica_id()}, what);
}

// A model that keeps the user's tensors beside its arena (tensor_model) gets the final values into them however fit
// ends: normally, preempted or failing.
template <class Model>
struct publish_parameters_at_end {
  Model& model;
  ~publish_parameters_at_end() {
    if constexpr (requires { model.publish_parameters(); }) model.publish_parameters();
  }
};

// Writes the line that names the kernels to standard error, at the first fit of this process only.
inline void announce_kernels_once(const std::string& line) {
  static std::once_flag said;
  std::call_once(said, [&] {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  });
}

}  // namespace detail

/// Evaluates `model` on `data` across all workers: every worker runs the same number of steps on its shard and the
/// loss and accuracy are weighted by the examples each saw. `steps` = 0 (or more than the data has) runs the whole
/// dataset once. Any number of workers evaluates any data-set size: a worker whose share of a step is empty (the
/// last, partial batch of a set not divisible by the workers, or a set smaller than they are) skips the model for
/// that step and adds nothing, so the result is the one-worker result. `metric_sets` (`metrics<...>`, train/fit_metrics.hpp) are
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
  using context = train_context<Strategy, Model, Optimizer>;
  static_assert(detail::check_sample_weights<Model, Train>());
  const detail::publish_parameters_at_end<Model> publish{model};
  static_assert(detail::check_sample_weights<Model, Validation>());
  constexpr bool agree_after_begin = (detail::needs_begin_agreement<Callbacks, context> || ...);
  // The metric sets among the callbacks (train/fit_metrics.hpp): their states ride the step's reduction.
  std::array<double, detail::metric_state_size<Callbacks...>()> epoch_metrics{};  // over workers and the epoch
  std::vector<named_value> batch_metric_values;  // what on_train_batch_end sees
  context ctx(strategy, model, optimizer);
  ctx.epoch_metric_sums = std::span<double>(epoch_metrics);
  ctx.reports_accuracy = classification_result<detail::train_result_t<Model, Train>>;
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
  if (options.max_micro_batch != 0) {
    if constexpr (!splittable_batch<batch_of<Train>>) {
      detail::throw_fit_error(strategy, "max_micro_batch: the training data's batch type cannot be split into "
                                        "micro-batches (it needs the hook mwstrat_micro_batch(batch, first, count): "
                                        "concept splittable_batch, train/micro_batches.hpp)");
    } else {
      ctx.max_micro_batch = options.max_micro_batch;
      ctx.micro_batch_gradients.assign(model.gradients().size(), 0.0f);
    }
  }
  ctx.epoch = options.initial_epoch;
  // The chief says once per process which kernels run, for a model that can tell (nn's: nn/kernels/isa.hpp).
  if constexpr (requires { { model.kernel_report() } -> std::convertible_to<std::string>; }) {
    if (strategy.is_chief()) detail::announce_kernels_once("[mwstrat] " + std::string(model.kernel_report()));
  }

  // In-memory recovery (train/in_memory_recovery.hpp): a replacement takes the state from a survivor; every other
  // worker starts from the chief's weights.
  detail::recovery_session<Strategy> recovery(strategy, options.recovery);
  if (recovery.elastic()) {
    // Checked before anything runs: a job that shrank with data it cannot reshard would train on the wrong examples.
    if constexpr (!reshardable_source<Train>) {
      detail::throw_fit_error(strategy, "min_workers: an elastic job needs training data that can be resharded "
                                        "when it shrinks (concept reshardable_source: distributed_input over an "
                                        "in-memory set under data sharding)");
    }
    if constexpr (batch_source<Validation> && !reshardable_source<Validation>) {
      detail::throw_fit_error(strategy, "min_workers: an elastic job needs validation data that can be resharded "
                                        "when it shrinks (concept reshardable_source), or none");
    }
    if constexpr (requires { { train.can_reshard() } -> std::convertible_to<bool>; }) {
      if (!train.can_reshard()) {
        detail::throw_fit_error(strategy, "min_workers: this training data cannot be resharded when the job shrinks "
                                          "(a distributed_input reshards an in-memory set under data sharding, not "
                                          "records streamed from files nor file or no sharding)");
      }
    }
    if constexpr (requires { { validation.can_reshard() } -> std::convertible_to<bool>; }) {
      if (!validation.can_reshard()) {
        detail::throw_fit_error(strategy, "min_workers: this validation data cannot be resharded when the job "
                                          "shrinks (an in-memory set under data sharding can)");
      }
    }
  }
  ctx.relaunched = recovery.relaunched();
  const detail::job_identity identity =
      recovery.checks_joiners() ? detail::identity_of(model, train, ctx.steps_per_pass) : detail::job_identity{};
  history hist;
  // After a loss: the survivors' recovery (an elastic job shrinks, then takes a spare in that came within
  // spare_wait). A worker lost while a spare joins — the spare or a member — shrinks the job again; each round
  // drops a worker, and below min_workers `recover` throws.
  const auto recover_from = [&](const peer_lost_error& first) {
    std::optional<peer_lost_error> lost(first);
    while (lost) {
      const peer_lost_error now = *std::exchange(lost, std::nullopt);
      recovery.recover(ctx, now, hist);
      if (!recovery.elastic()) break;
      try {
        recovery.grow(ctx, identity);
      } catch (const peer_lost_error& again) {
        lost.emplace(again);
      }
    }
  };
  try {
    recovery.start(ctx, identity);
  } catch (const peer_lost_error& lost) {
    // A member lost while this joiner took the state in: the job shrinks around it with this worker in, and a
    // member that holds the state sends it again.
    if (!recovery.joiner()) throw;
    recover_from(lost);
  }
  if (recovery.joiner()) {
    // A joiner reads the job's global batches from where the members are, as one of the larger group.
    if constexpr (reshardable_source<Train>) train.reshard(strategy.num_replicas_in_sync(), strategy.replica_id());
    if constexpr (reshardable_source<Validation>) {
      validation.reshard(strategy.num_replicas_in_sync(), strategy.replica_id());
    }
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
  // After the membership changed (a recovery, a shrink, joiners taken in, `seen` when it began): an elastic job
  // reshards its data for the new group, and the synchroniser is made again over the new ring.
  const auto regroup = [&](std::chrono::steady_clock::time_point seen, bool after_loss) {
    if (recovery.elastic()) {
      if constexpr (reshardable_source<Train>) train.reshard(strategy.num_replicas_in_sync(), strategy.replica_id());
      if constexpr (reshardable_source<Validation>) {
        validation.reshard(strategy.num_replicas_in_sync(), strategy.replica_id());
      }
    }
    sync_holder.reset(new auto(make_gradient_sync(strategy, model, optimizer)));
    if (recovery.elastic() && strategy.is_chief()) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - seen).count();
      detail::recovery_log(0, "training again on " + std::to_string(strategy.num_replicas_in_sync()) +
                                  " workers from global step " + std::to_string(ctx.global_step()) + ", " +
                                  detail::fixed_text(ms, 1) + " ms after the " +
                                  (after_loss ? "loss was seen" : "joiners were due"));
    }
  };
  const preemption_signal_guard signals(options.catch_preemption_signals);
  detail::preemption_watch watch;  // this worker's signal, for the `preempted` message
  // Resuming is the trainer's: from the resume source's newest backup (BackupAndRestore's), before any callback
  // sees the run, so that every on_train_begin sees where it starts.
  detail::resume(ctx, callbacks...);
  detail::fire_train_begin(ctx, callbacks...);
  // Not under in-memory recovery: a replacement runs these hooks again where the survivors do not, so an agreement
  // here would meet their next collective (a stop set in a begin hook must then be set on every worker).
  const bool agree_begin = agree_after_begin && !recovery.on();
  if (agree_begin) ctx.stop_training = detail::agree_to_stop(strategy, ctx.stop_training, false).stop;
  const detail::validation_plan<Validation> plan{validation, options.validation_steps, options.validation_freq};

  for (; ctx.epoch < options.epochs && !ctx.stop_training; ++ctx.epoch) {
    const int epoch = ctx.epoch;
    if (ctx.step == 0) {  // (a mid-epoch resume keeps the sums its backup restored)
      ctx.epoch_sums = {};
      epoch_metrics = {};
    }
    recovery.at_epoch_top(ctx, hist.epochs.size());
    const auto started = std::chrono::steady_clock::now();
    std::size_t steps_run = 0;
    bool begin_fired = false;  // on_epoch_begin once per epoch, not again after a recovery inside it
    bool leave = false;        // the epoch ended training (stopped or preempted mid-epoch)
    // The recovery retry loop: a lost peer inside the epoch, with recovery on, rebuilds the ring with a
    // replacement, takes the state of the latest step boundary and goes on from there. Anything else propagates.
    for (;;) {
      try {
        if (!begin_fired) {
          detail::fire_epoch_begin(ctx, epoch, callbacks...);
          begin_fired = true;
          if (agree_begin) ctx.stop_training = detail::agree_to_stop(strategy, ctx.stop_training, false).stop;
        }
        bool joiners_due = false;
        detail::run_epoch_steps(
            ctx, *sync_holder, train, watch, steps_run, batch_metric_values,
            [&] {
              recovery.at_step_boundary(ctx, hist.epochs.size());
              return joiners_due = recovery.joiners_due(ctx);
            },
            callbacks...);
        if (joiners_due) {
          // Elastic, growing: the same global batches over the larger group, from this boundary.
          const auto seen = std::chrono::steady_clock::now();
          sync_holder.reset();  // it refers to the ring being replaced
          recovery.grow(ctx, identity);
          regroup(seen, false);
          continue;
        }
        // Preempted before the epoch's last step: leave it unfinished, so that the resumed run finishes it exactly as
        // the uninterrupted run would (validation, on_epoch_end and what callbacks decide there).
        if (ctx.preempted && ctx.step < ctx.steps_per_epoch) {
          leave = true;
          break;
        }
        detail::finish_epoch(ctx, epoch, started, steps_run, plan, hist, watch, callbacks...);
        if (ctx.step != 0) leave = true;  // stopped mid-epoch
        break;
      } catch (const peer_lost_error& lost) {
        if (!recovery.on()) throw;
        const auto seen = std::chrono::steady_clock::now();
        sync_holder.reset();  // it refers to the failed ring (its model leaves any shared region first)
        recover_from(lost);
        regroup(seen, true);
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
    throw preempted(watch.signal_number, ctx.epoch, ctx.global_step());
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
