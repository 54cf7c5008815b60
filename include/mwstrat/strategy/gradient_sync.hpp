#pragma once
/// \file
/// Gradient synchronisation: one training step's backward, gradient mean and update, as one component.
///
/// `fit` makes one call per step, `sync.step(backward)`, where `backward(on_ready)` runs forward and backward and
/// calls `on_ready(offset, count)` as each layer's gradient slice becomes final, last layer first. The synchroniser
/// is made once per `fit` by `make_gradient_sync(strategy, model, optimizer)`:
///   - a strategy that offers its own (`gradient_sync_strategy`: `mirrored_strategy` does) makes it, following its
///     `gradient_sync_options`;
///   - any other `strategy` gets `replicated_gradient_sync`: after backward, `mean_gradients`, then the optimizer's
///     whole update — nothing but the `strategy` concept.
///
/// `collective_gradient_sync` is `mirrored_strategy`'s: over its collective it reduces in buckets that overlap
/// backward (`bucketed_reduction`, when the policy or the host topology says so), or after backward through one
/// shared parameter copy per host (`host_arena`), or fused with a sharded update (the collective's
/// `all_reduce_update`), or as a mean all-reduce then the whole update — streamed where the collective and the
/// optimizer allow it (`all_reduce_streamed`: each part updated, slots and all, as soon as its mean is final). Every
/// path gives the same bits. Every decision is collective and deterministic — taken from the options, the types
/// and facts gathered from every replica — so every replica issues the same operations in the same order. After
/// the first step nothing is allocated by the synchroniser.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/strategy/bucketed_reduction.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/detail/deferred_exception.hpp>
#include <mwstrat/strategy/detail/host_topology.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>
#include <mwstrat/strategy/after_backward.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace mwstrat {

namespace detail {

// A model whose regularisation gradients the synchroniser adds after the replicas' mean (the graph model): added
// by each replica before it, they would enter the mean R times and round differently from one replica over the
// whole batch. The synchroniser switches the model to this for its lifetime.
template <class Model>
concept model_with_deferred_regularization = requires(Model& m, std::size_t first, std::size_t count) {
  m.defer_regularization_gradients(true);
  m.add_regularization_gradients(first, count);
};

// Makes the model leave its regularisation gradients to the synchroniser while this lives.
template <class Model>
class regularization_after_mean {
 public:
  explicit regularization_after_mean(Model& m) : model_(m) {
    if constexpr (model_with_deferred_regularization<Model>) model_.defer_regularization_gradients(true);
  }
  ~regularization_after_mean() {
    if constexpr (model_with_deferred_regularization<Model>) model_.defer_regularization_gradients(false);
  }
  regularization_after_mean(const regularization_after_mean&) = delete;
  regularization_after_mean& operator=(const regularization_after_mean&) = delete;
  // Adds them to the mean gradients of the parameters [first, first + count).
  void add(std::size_t first, std::size_t count) {
    if constexpr (model_with_deferred_regularization<Model>) model_.add_regularization_gradients(first, count);
  }

 private:
  Model& model_;
};

// The optimizer's whole update, inside the model's own threads where the model has them (its oneTBB arena), so a
// worker never uses more cores than it was given.
template <class Model, class Optimizer>
void apply_update(Model& model, Optimizer& optimizer, regularization_after_mean<Model>& regularization) {
  auto update = [&] {
    regularization.add(0, model.parameters().size());
    optimizer.apply(model.parameters(), std::span<const float>(model.gradients()));
  };
  if constexpr (model_with_executor<Model>) {
    model.execute(update);
  } else {
    update();
  }
}

template <class C, bool Has = host_arena_collective<C>>
struct arena_for {
  using type = int;  // never made: the collective cannot share memory between its ranks
};
template <class C>
struct arena_for<C, true> {
  using type = typename decltype(make_host_arena(std::declval<C&>(), std::size_t{}, nullptr))::value_type;
};

}  // namespace detail

/// The synchroniser any `strategy` gets: after backward, `mean_gradients`, then the whole update.
template <strategy Strategy, class Model, class Optimizer>
class replicated_gradient_sync {
 public:
  replicated_gradient_sync(Strategy& s, Model& m, Optimizer& o)
      : strategy_(s), model_(m), optimizer_(o), regularization_(m) {}

  /// Runs `backward(on_ready)`, means the gradients and applies the update; returns what `backward` returned.
  template <class Backward>
  auto step(Backward&& backward) {
    auto result = std::forward<Backward>(backward)(after_backward{});
    strategy_.mean_gradients(model_.gradients());
    detail::apply_update(model_, optimizer_, regularization_);
    return result;
  }

  /// Always `replicated`.
  [[nodiscard]] update_placement placement() const noexcept { return update_placement::replicated; }

 private:
  Strategy& strategy_;
  Model& model_;
  Optimizer& optimizer_;
  detail::regularization_after_mean<Model> regularization_;
};

/// Gradient synchronisation over a collective, as `gradient_sync_options` asks (see the file comment). Made at the
/// start of `fit`, on every replica at the same point: it may exchange facts for the overlap decision. Not copyable
/// (the model may live in its shared region); it hands the model its own storage back when it goes, however `fit`
/// ends.
template <class Collective, class Model, class Optimizer>
  requires collective<Collective>
class collective_gradient_sync {
 public:
  /// Collective call (with `reduction_overlap::automatic`, one all-gather of every replica's host and threads).
  collective_gradient_sync(Collective& c, Model& m, Optimizer& o, const gradient_sync_options& options)
      : collective_(c), model_(m), optimizer_(o), regularization_(m), update_(options.update) {
    detail::validate(options, c.rank());  // also here: the synchroniser can be made without a strategy
    // An explicit sharded or shared update needs the whole gradient after backward: no automatic overlap then.
    reduction_overlap overlap = options.overlap;
    if (overlap == reduction_overlap::automatic &&
        (update_ == update_placement::sharded || update_ == update_placement::shared_host_copy)) {
      overlap = reduction_overlap::never;
    }
    if (c.size() > 1 && detail::overlap_reduction(c, m, overlap)) {
      buckets_.emplace(c, m.gradients(), options.bucket_bytes / sizeof(float));
      placement_ = update_placement::replicated;
    }
  }

  // The model leaves the shared region (copying its values back) before the region goes.
  ~collective_gradient_sync() {
    if constexpr (shares_storage) {
      if (adopted_) model_.use_own_storage();
    }
  }
  collective_gradient_sync(const collective_gradient_sync&) = delete;
  collective_gradient_sync& operator=(const collective_gradient_sync&) = delete;

  /// One step: runs `backward(on_ready)`, reduces the gradients (in buckets while backward runs, or after it) and
  /// applies the update where the placement says; returns what `backward` returned. Collective call.
  template <class Backward>
  auto step(Backward&& backward) {
    if (buckets_) {
      buckets_->begin();
      try {
        auto result =
            std::forward<Backward>(backward)([this](std::size_t o, std::size_t n) { buckets_->on_ready(o, n); });
        buckets_->finish();
        detail::apply_update(model_, optimizer_, regularization_);
        return result;
      } catch (...) {
        buckets_->abandon();  // no bucket may still write into the model's gradients once this unwinds
        throw;
      }
    }
    if (placement_ == update_placement::automatic) decide_placement();
    if constexpr (shares_storage) {
      if (placement_ == update_placement::shared_host_copy) {
        auto result = std::forward<Backward>(backward)(after_backward{});
        const std::span<float> params = model_.parameters(), grads = model_.gradients();
        update_by_parts([&](auto& on_part) { arena_->mean_and_update(on_part); }, apply_own_part(params, grads));
        return result;
      }
    }
    auto result = std::forward<Backward>(backward)(after_backward{});
    if constexpr (can_shard) {
      if (placement_ == update_placement::sharded) {
        const std::span<float> params = model_.parameters(), grads = model_.gradients();
        update_by_parts([&](auto& on_part) { collective_.all_reduce_update(grads, reduce_op::mean, params, on_part); },
                        apply_own_part(params, grads));
        return result;
      }
    }
    if constexpr (can_stream) {
      if (streams_update()) {
        // Each part's update as soon as its mean is final here, while it is still in cache and the rest still
        // travels: the same operations per element as the whole update after the all-reduce, one pass fewer over
        // the gradients.
        const std::span<float> params = model_.parameters(), grads = model_.gradients();
        update_by_parts([&](auto& on_part) { collective_.all_reduce_streamed(grads, reduce_op::mean, on_part); },
                        [&](std::size_t first, std::size_t count) {
                          optimizer_.apply_range(params, std::span<const float>(grads), first, count);
                        });
        return result;
      }
    }
    collective_.all_reduce(model_.gradients(), reduce_op::mean);
    detail::apply_update(model_, optimizer_, regularization_);
    return result;
  }

  /// The placement taken: `automatic` until the first step has decided it (`replicated` at once when overlapping).
  [[nodiscard]] update_placement placement() const noexcept { return placement_; }
  /// Whether the reduction overlaps backward in buckets.
  [[nodiscard]] bool overlaps() const noexcept {
    return buckets_.has_value();
  }

 private:
  // One update whose parts arrive from inside a collective: `reduce(on_part)` runs the collective, which calls
  // `on_part(first, count)` as each part of the mean is final here; each part is regularised and updated by
  // `update_part`. The collective calls back mid-operation, so an exception is kept until it has returned
  // (deferred_exception.hpp) and only then rethrown; the optimizer counts the step once every part is done.
  template <class Reduce, class UpdatePart>
  void update_by_parts(Reduce&& reduce, UpdatePart&& update_part) {
    detail::deferred_exception failed;
    auto on_part = [&](std::size_t first, std::size_t count) {
      failed.run([&] {
        regularization_.add(first, count);
        update_part(first, count);
      });
    };
    std::forward<Reduce>(reduce)(on_part);
    failed.rethrow_if_any();
    optimizer_.count_step();
  }

  // The update of one part of the parameters from the same part of the gradients (the shared and sharded
  // placements: the part is this worker's own).
  auto apply_own_part(std::span<float> params, std::span<float> grads) {
    return [this, params, grads](std::size_t first, std::size_t count) {
      optimizer_.apply_part(params.subspan(first, count), std::span<const float>(grads.subspan(first, count)));
    };
  }

  static constexpr bool can_shard = part_update_optimizer<Optimizer> && fused_update_collective<Collective>;
  static constexpr bool can_stream = range_update_optimizer<Optimizer> && streamed_reduce_collective<Collective>;
  static constexpr bool shares_storage =
      host_arena_collective<Collective> && storage_adopting_model<Model> && part_update_optimizer<Optimizer>;

  // Whether the replicated update goes part by part as the ring reports each mean final: only an elementwise update
  // can (slots are fine: every replica updates every element, each once per step; a global norm is not), and only a
  // model that computes on one thread gains — the parts are updated one after another on the thread that drives the
  // ring, where the whole update runs in all of the model's threads.
  bool streams_update() const {
    if (!optimizer_.elementwise()) return false;
    if constexpr (model_with_threads<Model>) return model_.threads() <= 1;
    return true;
  }

  // At the first step (after mirroring and any restore, so only the chief's values are copied in): the first of the
  // placements the options allow (shared_host_copy, sharded, replicated) that this job can run. A collective
  // decision, the same on every replica: the options, the types, the optimizer and the arena's outcome are.
  void decide_placement() {
    placement_ = update_placement::replicated;
    if (update_ == update_placement::replicated || collective_.size() < 2) return;
    if constexpr (part_update_optimizer<Optimizer>) {
      if (!optimizer_.elementwise_stateless()) return;
      if constexpr (shares_storage) {
        if (update_ != update_placement::sharded && open_arena()) {
          placement_ = update_placement::shared_host_copy;
          return;
        }
      }
      if constexpr (can_shard) placement_ = update_placement::sharded;
    }
  }

  // Not one host (or no room in /dev/shm): false on every replica, and the next placement is tried.
  bool open_arena() {
    if constexpr (shares_storage) {
      arena_ = make_host_arena(collective_, model_.parameters().size(), nullptr);
      if (!arena_) return false;
      if (collective_.rank() == 0) std::ranges::copy(model_.parameters(), arena_->parameters().begin());
      collective_.barrier();  // the chief's copy is in before anyone reads it
      model_.adopt_storage(arena_->parameters(), arena_->gradients());
      adopted_ = true;
      return true;
    }
    return false;
  }

  Collective& collective_;
  Model& model_;
  Optimizer& optimizer_;
  detail::regularization_after_mean<Model> regularization_;
  update_placement update_;                                   // as asked
  update_placement placement_ = update_placement::automatic;  // as taken (automatic: not decided yet)
  bool adopted_ = false;  // the model works in arena_ (and must leave it before arena_ goes)
  std::optional<bucketed_reduction<Collective>> buckets_;  // set when overlapping
  std::optional<typename detail::arena_for<Collective>::type> arena_;      // the shared region, while in use
};

/// The synchroniser `fit` uses for `strategy` (see the file comment): the strategy's own when it offers one
/// (`gradient_sync_strategy`), else `replicated_gradient_sync`. Collective call: every replica makes it at the same
/// point, after the initial parameters are mirrored.
template <strategy Strategy, class Model, class Optimizer>
auto make_gradient_sync(Strategy& strategy, Model& model, Optimizer& optimizer) {
  if constexpr (gradient_sync_strategy<Strategy, Model, Optimizer>) {
    return strategy.make_gradient_sync(model, optimizer);
  } else {
    return replicated_gradient_sync<Strategy, Model, Optimizer>(strategy, model, optimizer);
  }
}

}  // namespace mwstrat
