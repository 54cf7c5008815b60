#pragma once
// The resume engine of `fit` (train/resume.hpp): the chief restores the newest good checkpoint of a resume source's
// target and every worker takes it — one broadcast of a header (status, the run's state), then the weights, the
// model's state, every replica's own state (when the backup has them) and the optimizer's slots. Whatever fails on
// the chief, even in a user's checkpointer, still reaches the header's broadcast, so the other workers fail at once
// with it instead of waiting out the operation timeout.

#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/run_state.hpp>
#include <mwstrat/train/checkpoint_tensors.hpp>
#include <mwstrat/train/resume.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// Restores `target` onto every worker of `ctx`'s job (called on every worker at once); nullopt when there is
// nothing to restore. Throws `checkpoint_error` on every worker when the chief could not restore.
template <class Ctx, class Checkpointer>
std::optional<resume_point> resume_from(Ctx& ctx, const resume_target<Checkpointer>& target) {
  using Model = std::remove_cvref_t<decltype(ctx.model)>;
  using Optimizer = std::remove_cvref_t<decltype(ctx.optimizer)>;
  static_assert(check_resume_hooks<Model, Optimizer>());
  const int rank = ctx.strategy.replica_id();
  const std::size_t world = static_cast<std::size_t>(ctx.strategy.num_replicas_in_sync());
  // [status, replica states follow (1) or not (0), the run's state (run_state)]; status: 1 restored, 0 nothing to
  // restore, -1 the chief failed.
  std::vector<double> head(2 + run_state::wire_size(ctx.epoch_metric_sums.size()), 0.0);
  std::vector<double> replica_states;  // every replica's model state (replica_states_from_file)
  std::optional<training_state> state;
  std::string source;
  std::string failure;
  if (ctx.strategy.is_chief()) {
    try {
      if (auto restored = target.checkpointer->restore_latest_checkpoint()) {
        source = restored->path.string();
        state = std::move(restored->state);
        run_state::from_file(*state, ctx, source, target.where).to_wire(std::span<double>(head).subspan(2));
        if constexpr (stateful_model<Model>) {
          head[1] = replica_states_from_file(*state, ctx.model.model_state().size(), world, source, replica_states)
                        ? 1.0
                        : 0.0;
        }
      }
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "the checkpointer failed without a message";
    }
    head[0] = !failure.empty() ? -1.0 : state ? 1.0 : 0.0;
  }
  ctx.strategy.mirror(std::span<double>(head));
  if (head[0] < 0) {
    if (!failure.empty()) throw checkpoint_error({"train.backup", rank}, target.where, failure);
    throw checkpoint_error({"train.backup", rank}, target.where,
                           "the chief could not restore the backup in " + target.where + " (its log says why)");
  }
  if (head[0] == 0) return std::nullopt;

  // Weights and optimizer slots: the chief copies them in, then one broadcast each.
  if (state) {
    copy_weights_into(state->weights, ctx.model, "the backup's weights", source, rank);
    if constexpr (checkpointable_optimizer<Optimizer>) {
      copy_tensors_into(state->optimizer_slots, optimizer_slots(ctx.optimizer, ctx.model.parameters().size()),
                        "the backup's optimizer slots", source, rank);
    }
  }
  ctx.strategy.mirror(ctx.model.parameters());
  if constexpr (stateful_model<Model>) {
    ctx.strategy.mirror(ctx.model.model_state());
    if (head[1] == 1.0) {
      // Every replica's own state (the chief's is the weights'): from the chief, then each takes its part.
      const std::span<float> st = ctx.model.model_state();
      replica_states.resize(world * st.size());
      ctx.strategy.mirror(std::span<double>(replica_states));
      const std::size_t at = static_cast<std::size_t>(rank) * st.size();
      for (std::size_t i = 0; rank != 0 && i < st.size(); ++i) {
        st[i] = std::bit_cast<float>(static_cast<std::uint32_t>(replica_states[at + i]));
      }
    }
  }
  if constexpr (checkpointable_optimizer<Optimizer>) {
    ctx.strategy.mirror(optimizer_slots(ctx.optimizer, ctx.model.parameters().size()));
  }
  run_state resumed;
  resumed.from_wire(std::span<const double>(head).subspan(2), ctx.epoch_metric_sums.size());
  resumed.apply(ctx);
  if (ctx.strategy.is_chief() && target.log) {
    *target.log << "[mwstrat.train.backup] rank " << rank << ": restored " << source << ": resuming at epoch "
                << ctx.epoch + 1 << ", step " << ctx.step << " (global step " << ctx.global_step() << ")\n"
                << std::flush;
  }
  return resume_point{source, ctx.global_step()};
}

// The resume before `on_train_begin`: asks the callbacks' resume source (at most one) for its target, restores from
// it unless this worker rejoined under in-memory recovery, and tells the source.
template <class Ctx, class... Callbacks>
void resume(Ctx& ctx, Callbacks&... callbacks) {
  static_assert((0 + ... + (resume_source<Callbacks, Ctx> ? 1 : 0)) <= 1,
                "mwstrat: fit takes at most one callback that a run resumes from (resume_source, train/resume.hpp)");
  ([&] {
    if constexpr (resume_source<Callbacks, Ctx>) {
      const auto target = callbacks.resume_target(ctx);
      // A replacement worker: its state came from a survivor's memory; nothing to read or send.
      callbacks.resumed(ctx.rejoined ? std::nullopt : resume_from(ctx, target));
    }
  }(), ...);
}

}  // namespace mwstrat::detail
