#pragma once
/// \file
/// Keras-style `fit` and `evaluate` for synchronous data parallelism over any `strategy`.
///
/// Every worker runs the same `fit`. Each step, each worker trains on its part of the global batch (global batch =
/// per-worker batch × `num_replicas_in_sync()`, the dataset's job), the gradients are mean-reduced and every
/// replica applies the identical update: one call into the strategy's gradient synchroniser
/// (`make_gradient_sync`, strategy/gradient_sync.hpp), which decides buckets, overlap and where the update runs
/// from the strategy's `gradient_sync_options`. Metrics are reduced weighted by examples. Before the first step
/// the workers compare model fingerprints and the chief's parameters are broadcast.

#include <mwstrat/error.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/train_context.hpp>

#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace mwstrat {

/// Options of `fit`, with Keras's names and meanings. (How gradients are synchronised is the strategy's business:
/// `gradient_sync_options`.)
struct fit_options {
  int epochs = 1;                     ///< train until this epoch (exclusive; counts from 0 across resumes)
  std::size_t steps_per_epoch = 0;    ///< 0: the dataset's steps per epoch
  int initial_epoch = 0;              ///< the epoch to start from
  std::size_t validation_steps = 0;   ///< 0: the whole validation set
  int validation_freq = 1;            ///< validate after every n-th epoch
};

/// A validation set for `fit` that is never used: the default.
struct no_validation {};

namespace detail {

// Reduces [loss_sum, correct, count] over the workers.
template <class Strategy, class R>
batch_stats reduce_stats(Strategy& strategy, const R& r) {
  std::array<double, 3> v{static_cast<double>(r.loss_sum), static_cast<double>(r.correct),
                          static_cast<double>(r.count)};
  strategy.sum_metrics(std::span<double>(v));
  return {v[0], v[1], v[2]};
}

template <class Strategy>
[[noreturn]] void throw_fit_error(Strategy& s, const std::string& what) {
  throw config_error({"train", s.replica_id()}, what);
}

}  // namespace detail

/// Evaluates `model` on `data` across all workers: every worker runs the same number of steps on its shard and the
/// loss and accuracy are weighted by the examples each saw. `steps` = 0 runs the whole dataset.
template <strategy Strategy, batch_source Data, class Model>
  requires trainable_model<Model, batch_of<Data>>
evaluation evaluate(Strategy& strategy, Model& model, Data& data, std::size_t steps = 0) {
  const std::size_t n = steps == 0 ? static_cast<std::size_t>(data.steps_per_epoch()) : steps;
  batch_stats local;
  for (std::size_t s = 0; s < n; ++s) {
    const auto& batch = data.batch_at(0, s);
    local += evaluate_on_batch(model, batch);
  }
  const batch_stats all = detail::reduce_stats(strategy, local);
  return {all.loss(), all.accuracy(), all.count};
}

/// Trains `model` with `optimizer` on `train` for `options.epochs`, validating on `validation` (when it is not
/// `no_validation`) every `validation_freq` epochs; calls `callbacks` in Keras's order. Returns the history.
template <strategy Strategy, class Model, optimizer_for Optimizer, batch_source Train, class Validation,
          class... Callbacks>
  requires trainable_model<Model, batch_of<Train>> &&
           (callback_for<Callbacks, train_context<Strategy, Model, Optimizer>> && ...)
history fit(Strategy& strategy, Model& model, Optimizer& optimizer, Train& train, Validation& validation,
            const fit_options& options, Callbacks&... callbacks) {
  using clock = std::chrono::steady_clock;
  train_context<Strategy, Model, Optimizer> ctx(strategy, model, optimizer);
  ctx.epochs = options.epochs;
  ctx.steps_per_epoch = options.steps_per_epoch != 0 ? options.steps_per_epoch
                                                     : static_cast<std::size_t>(train.steps_per_epoch());
  if (ctx.steps_per_epoch == 0) detail::throw_fit_error(strategy, "the training dataset has no full global batch");
  if (options.validation_freq < 1) {
    detail::throw_fit_error(strategy, "validation_freq: " + std::to_string(options.validation_freq) + " is not >= 1");
  }
  if (model.gradients().size() != model.parameters().size()) {
    detail::throw_fit_error(strategy, "the model's gradient arena (" + std::to_string(model.gradients().size()) +
                                          ") and parameter arena (" + std::to_string(model.parameters().size()) +
                                          ") differ in size");
  }
  ctx.epoch = options.initial_epoch;

  // Same architecture everywhere, then the chief's initial weights everywhere.
  strategy.verify_same("model fingerprint", model.fingerprint());
  strategy.mirror(model.parameters());
  if constexpr (stateful_model<Model>) strategy.mirror(model.model_state());

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
  auto sync = make_gradient_sync(strategy, model, optimizer);  // after mirroring: it may exchange facts
  history hist;
  detail::fire_train_begin(ctx, callbacks...);  // BackupAndRestore may move ctx to where a backup left off

  for (; ctx.epoch < options.epochs && !ctx.stop_training; ++ctx.epoch) {
    const int epoch = ctx.epoch;
    if (ctx.step == 0) ctx.epoch_sums = {};
    detail::fire_epoch_begin(ctx, epoch, callbacks...);
    const auto started = clock::now();
    std::size_t steps_run = 0;
    while (ctx.step < ctx.steps_per_epoch && !ctx.stop_training) {
      const std::size_t step = ctx.step;
      detail::fire_batch_begin(ctx, step, callbacks...);
      const auto& batch = train.batch_at(static_cast<std::size_t>(epoch), step);
      const auto result = sync.step([&](auto&& on_ready) {
        return train_on_batch(model, batch, std::forward<decltype(on_ready)>(on_ready));
      });
      const batch_stats global = detail::reduce_stats(strategy, result);
      ctx.epoch_sums += global;
      ctx.step = step + 1;
      ++steps_run;
      const batch_logs logs{step, ctx.epoch_sums.loss(), ctx.epoch_sums.accuracy(), global.loss()};
      detail::fire_batch_end(ctx, step, logs, callbacks...);
    }
    epoch_logs logs;
    logs.epoch = epoch;
    logs.loss = ctx.epoch_sums.loss();
    logs.accuracy = ctx.epoch_sums.accuracy();
    logs.seconds = std::chrono::duration<double>(clock::now() - started).count();
    logs.steps = steps_run;
    if constexpr (has_learning_rate<Optimizer>) logs.learning_rate = static_cast<double>(optimizer.learning_rate());
    if constexpr (batch_source<Validation>) {
      if ((epoch + 1) % options.validation_freq == 0 && !ctx.stop_training) {
        detail::fire_test_begin(ctx, callbacks...);
        const evaluation val = evaluate(strategy, model, validation, options.validation_steps);
        detail::fire_test_end(ctx, val, callbacks...);
        logs.val_loss = val.loss;
        logs.val_accuracy = val.accuracy;
      }
    }
    if (ctx.step == ctx.steps_per_epoch) ctx.step = 0;  // a stopped epoch keeps its position
    hist.epochs.push_back(logs);
    detail::fire_epoch_end(ctx, epoch, logs, callbacks...);
    if (ctx.step != 0) break;  // stopped mid-epoch
  }
  hist.stopped_early = ctx.stop_training;
  detail::fire_train_end(ctx, hist, callbacks...);
  return hist;
}

/// `fit` without validation data.
template <strategy Strategy, class Model, optimizer_for Optimizer, batch_source Train, class... Callbacks>
  requires trainable_model<Model, batch_of<Train>> &&
           (callback_for<Callbacks, train_context<Strategy, Model, Optimizer>> && ...)
history fit(Strategy& strategy, Model& model, Optimizer& optimizer, Train& train, const fit_options& options,
            Callbacks&... callbacks) {
  no_validation none;
  return fit(strategy, model, optimizer, train, none, options, callbacks...);
}

}  // namespace mwstrat
