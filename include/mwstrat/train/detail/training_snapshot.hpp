#pragma once
// The training state of one step boundary, kept in memory by in-memory recovery (train/in_memory_recovery.hpp) and
// broadcast from it to a replacement or a joiner.

#include <mwstrat/train/checkpoint_tensors.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/run_state.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace mwstrat::detail {

// The training state at one step boundary, in memory reused from boundary to boundary: the loop's flags, then the
// run's state (train/detail/run_state.hpp) as doubles, and the float state.
class training_snapshot {
 public:
  // The header's fields before the run's state.
  enum field : std::size_t {
    position,  // 0: no snapshot; else 2 × global step + (1 at the top of an epoch), increasing through the run
    stop_training,
    preempted,
    epochs_in_history,
    fields
  };

  [[nodiscard]] std::uint64_t at() const { return static_cast<std::uint64_t>(header_[position]); }
  [[nodiscard]] std::size_t history_size() const { return static_cast<std::size_t>(header_[epochs_in_history]); }
  [[nodiscard]] std::span<double> header() { return header_; }
  [[nodiscard]] std::span<float> floats() { return floats_; }

  // Copies `ctx`'s state; `top` at the top of an epoch (after the previous epoch's end).
  template <class Ctx>
  void take(Ctx& ctx, bool top, std::size_t history_epochs) {
    state_.capture(ctx);
    header_.resize(fields + run_state::wire_size(state_.metric_sums.size()));
    header_[position] = static_cast<double>(2 * ctx.global_step() + (top ? 1 : 0));
    header_[stop_training] = ctx.stop_training ? 1 : 0;
    header_[preempted] = ctx.preempted ? 1 : 0;
    header_[epochs_in_history] = static_cast<double>(history_epochs);
    state_.to_wire(std::span<double>(header_).subspan(fields));
    const auto parts = state_parts(ctx);
    std::size_t total = 0;
    for (const auto& p : parts) total += p.size();
    floats_.resize(total);
    std::size_t at = 0;
    for (const auto& p : parts) {
      std::copy(p.begin(), p.end(), floats_.begin() + static_cast<std::ptrdiff_t>(at));
      at += p.size();
    }
  }

  // Puts the snapshot back into `ctx` (after a broadcast has made it the source's).
  template <class Ctx>
  void restore(Ctx& ctx) {
    std::size_t at = 0;
    for (const auto& p : state_parts(ctx)) {
      std::copy_n(floats_.begin() + static_cast<std::ptrdiff_t>(at), p.size(), p.begin());
      at += p.size();
    }
    state_.from_wire(std::span<const double>(header_).subspan(fields), ctx.epoch_metric_sums.size());
    state_.apply(ctx);
    ctx.stop_training = header_[stop_training] != 0;
    ctx.preempted = header_[preempted] != 0;
  }

  // Holds nothing again (a receipt that broke off midway left a part of the source's state in it).
  void forget() { header_[position] = 0; }

  // Sized for `ctx` with nothing in it (a replacement before it receives the state).
  template <class Ctx>
  void make_room(Ctx& ctx) {
    header_.assign(fields + run_state::wire_size(ctx.epoch_metric_sums.size()), 0.0);
    std::size_t total = 0;
    for (const auto& p : state_parts(ctx)) total += p.size();
    floats_.assign(total, 0.0f);
  }

 private:
  // The float state, in a fixed order: parameters, model state, optimizer slots.
  template <class Ctx>
  static std::array<std::span<float>, 3> state_parts(Ctx& ctx) {
    using Model = std::remove_cvref_t<decltype(ctx.model)>;
    using Optimizer = std::remove_cvref_t<decltype(ctx.optimizer)>;
    std::array<std::span<float>, 3> parts{ctx.model.parameters(), std::span<float>(), std::span<float>()};
    if constexpr (stateful_model<Model>) parts[1] = ctx.model.model_state();
    if constexpr (checkpointable_optimizer<Optimizer>) parts[2] = optimizer_slots(ctx.optimizer, parts[0].size());
    return parts;
  }

  std::vector<double> header_ = std::vector<double>(fields, 0.0);
  std::vector<float> floats_;
  run_state state_;
};

}  // namespace mwstrat::detail
