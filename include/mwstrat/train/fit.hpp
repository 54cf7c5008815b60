#pragma once
/// \file
/// Keras-style `fit` and `evaluate` for synchronous data parallelism over any `strategy`.
///
/// Every worker runs the same `fit`. Each step, each worker trains on its part of the global batch (global batch =
/// per-worker batch × `num_replicas_in_sync()`, the dataset's job), the gradients are mean-reduced — in buckets
/// that overlap backward when the strategy's collective offers an asynchronous all-reduce and the CPUs leave room
/// for it (`reduction_overlap`) — and every replica applies the identical update. Metrics are reduced weighted by
/// examples. Before the first step the workers compare model fingerprints and the chief's parameters are
/// broadcast.

#include <mwstrat/error.hpp>
#include <mwstrat/strategy/bucketed_reduction.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/reduction_overlap.hpp>
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
#include <type_traits>
#include <utility>

namespace mwstrat {

/// Options of `fit`, with Keras's names and meanings.
struct fit_options {
  int epochs = 1;                     ///< train until this epoch (exclusive; counts from 0 across resumes)
  std::size_t steps_per_epoch = 0;    ///< 0: the dataset's steps per epoch
  int initial_epoch = 0;              ///< the epoch to start from
  std::size_t validation_steps = 0;   ///< 0: the whole validation set
  int validation_freq = 1;            ///< validate after every n-th epoch
  std::size_t bucket_bytes = 4u << 20;  ///< gradient bucket size for overlapping reduction (0: one bucket, at the end)
  reduction_overlap overlap = reduction_overlap::automatic;  ///< whether reduction overlaps backward (see its header)
  /// When the reduction does not overlap backward and the optimizer's update is elementwise without slots (plain
  /// SGD; `part_update_optimizer`), each replica updates only the part of the parameters it finished reducing and
  /// the updated parameters are all-gathered instead of the gradients (`mean_gradients_and_update`): the same bits,
  /// 1/N of the update's work and memory traffic on each of N replicas. False: every replica updates everything.
  bool shard_update = true;
  /// With `shard_update`, and when the replicas are processes on one host (every ring link through shared memory)
  /// and the model can adopt storage (`storage_adopting_model`): the replicas keep one copy of the parameters and
  /// their gradients in one shared region (`host_arena`) for the length of `fit`, and each step means its part of
  /// the gradients straight from the others' and updates its part of the one copy — no copies, two barriers. The
  /// same bits as the other paths. After `fit` (or an exception) the model has its own storage again.
  bool share_parameters = true;
};

/// A validation set for `fit` that is never used: the default.
struct no_validation {};

namespace detail {

// Reduces [loss_sum, correct, count] over the workers.
template <class Strategy, class R>
metric_sums reduce_stats(Strategy& strategy, const R& r) {
  std::array<double, 3> v{static_cast<double>(r.loss_sum), static_cast<double>(r.correct),
                          static_cast<double>(r.count)};
  strategy.sum_metrics(std::span<double>(v));
  return {v[0], v[1], v[2]};
}

template <class Strategy>
constexpr bool has_async_collective = requires(Strategy& s, std::span<float> g) {
  s.collective().all_reduce_async(g, reduce_op::mean);
};

// The optimizer's update, inside the model's own threads where the model has them (its oneTBB arena), so a
// worker never uses more cores than it was given.
template <class Model, class Optimizer>
void apply_update(Model& model, Optimizer& optimizer) {
  auto update = [&] { optimizer.apply(model.parameters(), std::span<const float>(model.gradients())); };
  if constexpr (requires { model.execute(update); }) {
    model.execute(update);
  } else {
    update();
  }
}

template <class Strategy>
constexpr bool has_fused_update = requires(Strategy& s, std::span<float> g, std::span<float> p) {
  { s.fuses_update() } -> std::convertible_to<bool>;
  s.mean_gradients_and_update(g, p, [](std::size_t, std::size_t) {});
};

template <class Strategy>
constexpr bool has_host_arena = requires(Strategy& s, std::size_t n, std::string* why) {
  s.open_host_arena(n, why)->parameters();
};

// One step's backward, gradient mean and update: the mean overlapped with backward in buckets when possible; else
// after backward: through one shared parameter copy when the replicas share a host (fit_options::share_parameters),
// or fused with a sharded update when the optimizer allows it (fit_options::shard_update); else the mean, then the
// whole update.
template <class Strategy, class Model, class Optimizer>
class gradient_sync {
 public:
  gradient_sync(Strategy& s, Model& m, Optimizer& o, const fit_options& options)
      : strategy_(s), model_(m), optimizer_(o), shard_(options.shard_update), share_(options.share_parameters) {
    if constexpr (has_async_collective<Strategy>) {
      if (options.bucket_bytes > 0 && s.num_replicas_in_sync() > 1 && overlap_reduction(s, m, options.overlap)) {
        buckets_ = std::make_unique<bucketed_t<Strategy>>(s.collective(), m.gradients(),
                                                          options.bucket_bytes / sizeof(float));
      }
    }
  }

  // The model leaves the shared region (copying its values back) before the region goes, however fit ends.
  ~gradient_sync() {
    if constexpr (shares_storage) {
      if (adopted_) model_.use_own_storage();
    }
  }
  gradient_sync(const gradient_sync&) = delete;
  gradient_sync& operator=(const gradient_sync&) = delete;

  template <class Batch>
  auto train_and_update(const Batch& batch) {
    if constexpr (has_async_collective<Strategy>) {
      if (buckets_) {
        buckets_->begin();
        auto result = train_on_batch(model_, batch, [this](std::size_t o, std::size_t n) { buckets_->on_ready(o, n); });
        buckets_->finish();
        apply_update(model_, optimizer_);
        return result;
      }
    }
    if constexpr (shares_storage) {
      if (!arena_checked_) open_arena();
      if (arena_) {
        auto result = train_on_batch(model_, batch, [](std::size_t, std::size_t) {});
        const std::span<float> params = model_.parameters(), grads = model_.gradients();
        arena_->mean_and_update([&](std::size_t first, std::size_t count) {
          optimizer_.apply_part(params.subspan(first, count), std::span<const float>(grads.subspan(first, count)));
        });
        optimizer_.count_step();
        return result;
      }
    }
    auto result = train_on_batch(model_, batch, [](std::size_t, std::size_t) {});
    if constexpr (part_update_optimizer<Optimizer> && has_fused_update<Strategy>) {
      if (shard_ && optimizer_.elementwise_stateless() && strategy_.fuses_update()) {
        const std::span<float> params = model_.parameters(), grads = model_.gradients();
        strategy_.mean_gradients_and_update(grads, params, [&](std::size_t first, std::size_t count) {
          optimizer_.apply_part(params.subspan(first, count), std::span<const float>(grads.subspan(first, count)));
        });
        optimizer_.count_step();
        return result;
      }
    }
    strategy_.mean_gradients(model_.gradients());
    apply_update(model_, optimizer_);
    return result;
  }

 private:
  template <class S, bool Async = has_async_collective<S>>
  struct buckets_for {
    using type = int;  // never made: the strategy has no asynchronous all-reduce
  };
  template <class S>
  struct buckets_for<S, true> {
    using type = bucketed_reduction<std::remove_reference_t<decltype(std::declval<S&>().collective())>>;
  };
  template <class S>
  using bucketed_t = typename buckets_for<S>::type;

  static constexpr bool shares_storage =
      has_host_arena<Strategy> && storage_adopting_model<Model> && part_update_optimizer<Optimizer>;
  template <class S, bool Has = has_host_arena<S>>
  struct arena_for {
    using type = int;  // never made: the strategy cannot share memory between its replicas
  };
  template <class S>
  struct arena_for<S, true> {
    using type = typename decltype(std::declval<S&>().open_host_arena(std::size_t{}, nullptr))::value_type;
  };

  // At the first step (after mirroring and any restore, so only the chief's values are copied in): a collective
  // decision, the same on every replica — the options, the optimizer and the overlap choice are.
  void open_arena() {
    arena_checked_ = true;
    if constexpr (shares_storage) {
      if (!shard_ || !share_ || buckets_ || strategy_.num_replicas_in_sync() < 2 || !optimizer_.elementwise_stateless())
        return;
      arena_ = strategy_.open_host_arena(model_.parameters().size(), nullptr);
      if (!arena_) return;  // not one host (or no room in /dev/shm): the fused ring path below
      if (strategy_.is_chief()) std::ranges::copy(model_.parameters(), arena_->parameters().begin());
      strategy_.barrier();  // the chief's copy is in before anyone reads it
      model_.adopt_storage(arena_->parameters(), arena_->gradients());
      adopted_ = true;
    }
  }

  Strategy& strategy_;
  Model& model_;
  Optimizer& optimizer_;
  bool shard_;
  bool share_;
  bool arena_checked_ = false;
  bool adopted_ = false;  // the model works in arena_ (and must leave it before arena_ goes)
  std::unique_ptr<bucketed_t<Strategy>> buckets_;  // on the heap: made once per fit, empty when not overlapping
  std::optional<typename arena_for<Strategy>::type> arena_;  // the shared region, while the model lives in it
};

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
    const auto r = evaluate_on_batch(model, batch);
    local.loss_sum += static_cast<double>(r.loss_sum);
    local.correct += static_cast<double>(r.correct);
    local.count += static_cast<double>(r.count);
  }
  const metric_sums all = detail::reduce_stats(strategy, local);
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

  detail::gradient_sync<Strategy, Model, Optimizer> sync(strategy, model, optimizer, options);
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
      const auto result = sync.train_and_update(batch);
      const metric_sums global = detail::reduce_stats(strategy, result);
      ctx.epoch_sums.loss_sum += global.loss_sum;
      ctx.epoch_sums.correct += global.correct;
      ctx.epoch_sums.count += global.count;
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
