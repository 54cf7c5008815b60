#pragma once
// The training loop's state at a step boundary, besides the tensors, as one value: where the run is (epoch, step),
// what the epoch has summed so far, the optimizer's step count and rate, the model's RNG position. Every user of
// that fact goes through it: BackupAndRestore writes it to a backup and reads it back (`to_file`, `from_file`: the
// `train.*` keys of `training_state::extra`, unchanged since the first backups), in-memory recovery broadcasts it
// from a survivor's memory (`wire_size`, `to_wire`, `from_wire`), and ModelCheckpoint saves under its global step.
// The tensors (weights, model state, optimizer slots) stay in the model's and the optimizer's own memory.
//
// Adding a field: its member, its line in `each_scalar` (the wire follows), its lines in `capture` and `apply`,
// and its key in `to_file` / `from_file` if a backup keeps it — all in this file.

#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/checkpoint_tensors.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mwstrat::detail {

// A rate that is a schedule of the step count is a function, not state: it is neither saved nor set.
template <class Optimizer>
bool learning_rate_is_scheduled(const Optimizer& o) {
  if constexpr (requires { { o.scheduled() } -> std::convertible_to<bool>; }) {
    return o.scheduled();
  } else {
    return false;
  }
}

struct run_state {
  static constexpr double none = std::numeric_limits<double>::quiet_NaN();

  int epoch = 0;
  std::size_t step = 0;                   // the next step within the epoch
  batch_stats sums;                       // the epoch so far, all workers
  std::vector<double> metric_sums;        // the metrics' state over the epoch so far (train/fit_metrics.hpp)
  std::uint64_t optimizer_iterations = 0;  // 0 for an optimizer without a step count
  double model_step = none;               // the model's RNG position (dropout); NaN: a model without one
  double learning_rate = none;            // NaN: not state (no rate, or a scheduled one)

  [[nodiscard]] std::uint64_t global_step(std::size_t steps_per_epoch) const {
    return static_cast<std::uint64_t>(epoch) * steps_per_epoch + step;
  }

  // Moves the position to `e`, `s` (at an epoch's end: the next epoch's top, whose sums `to_file` writes as 0).
  void move_to(int e, std::size_t s) {
    epoch = e;
    step = s;
  }

  // Takes the state of the running job (reusing this value's memory: no allocation once sized).
  template <class Ctx>
  void capture(const Ctx& ctx) {
    using Model = std::remove_cvref_t<decltype(ctx.model)>;
    using Optimizer = std::remove_cvref_t<decltype(ctx.optimizer)>;
    epoch = ctx.epoch;
    step = ctx.step;
    sums = ctx.epoch_sums;
    metric_sums.assign(ctx.epoch_metric_sums.begin(), ctx.epoch_metric_sums.end());
    optimizer_iterations = 0;
    model_step = none;
    learning_rate = none;
    if constexpr (checkpointable_optimizer<Optimizer>) {
      optimizer_iterations = static_cast<std::uint64_t>(ctx.optimizer.iterations());
    }
    if constexpr (model_with_step<Model>) model_step = static_cast<double>(ctx.model.step());
    if constexpr (has_learning_rate<Optimizer>) {
      if (!learning_rate_is_scheduled(ctx.optimizer)) learning_rate = static_cast<double>(ctx.optimizer.learning_rate());
    }
  }

  // Puts it into the running job (what the job can hold: a model without a step count ignores `model_step`).
  template <class Ctx>
  void apply(Ctx& ctx) const {
    using Model = std::remove_cvref_t<decltype(ctx.model)>;
    using Optimizer = std::remove_cvref_t<decltype(ctx.optimizer)>;
    if constexpr (checkpointable_optimizer<Optimizer>) {
      ctx.optimizer.set_iterations(static_cast<decltype(ctx.optimizer.iterations())>(optimizer_iterations));
    }
    if constexpr (model_with_step<Model>) {
      if (!std::isnan(model_step)) ctx.model.set_step(static_cast<std::uint64_t>(model_step));
    }
    // A rate changed during training (ReduceLROnPlateau) comes back too, as Keras restores the optimizer's rate.
    if constexpr (has_learning_rate<Optimizer>) {
      if (!std::isnan(learning_rate) && !learning_rate_is_scheduled(ctx.optimizer)) {
        ctx.optimizer.set_learning_rate(static_cast<decltype(ctx.optimizer.learning_rate())>(learning_rate));
      }
    }
    ctx.epoch = epoch;
    ctx.step = step;
    ctx.epoch_sums = sums;
    std::copy_n(metric_sums.begin(), std::min(metric_sums.size(), ctx.epoch_metric_sums.size()),
                ctx.epoch_metric_sums.begin());
  }

  // The scalars in the order they travel (every value fits a double exactly), then the metric sums.
  template <class Self, class F>
  static void each_scalar(Self& s, F&& f) {
    f(s.epoch);
    f(s.step);
    f(s.sums.loss_sum);
    f(s.sums.correct);
    f(s.sums.count);
    f(s.optimizer_iterations);
    f(s.model_step);
    f(s.learning_rate);
  }
  static constexpr std::size_t scalars = 8;

  [[nodiscard]] static std::size_t wire_size(std::size_t metric_count) { return scalars + metric_count; }

  // Into `out` (`wire_size(metric_sums.size())` doubles), for a broadcast.
  void to_wire(std::span<double> out) const {
    std::size_t at = 0;
    each_scalar(*this, [&](const auto& v) { out[at++] = static_cast<double>(v); });
    std::copy(metric_sums.begin(), metric_sums.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
  }
  // From `in` (as `to_wire` wrote it), with `metric_count` metric sums.
  void from_wire(std::span<const double> in, std::size_t metric_count) {
    std::size_t at = 0;
    each_scalar(*this, [&](auto& v) { v = static_cast<std::remove_cvref_t<decltype(v)>>(in[at++]); });
    metric_sums.assign(in.begin() + static_cast<std::ptrdiff_t>(at),
                       in.begin() + static_cast<std::ptrdiff_t>(at + metric_count));
  }

  // A backup of `ctx`'s job at this value's position: its weights and slots as views, the data's position, the
  // world size and this value under its keys. The replicas' own states are the caller's.
  template <class Ctx>
  [[nodiscard]] training_state_view to_file(Ctx& ctx) const {
    training_state_view s;
    s.epoch = epoch;
    s.step = static_cast<std::int64_t>(global_step(ctx.steps_per_epoch));
    // The data's position: the pass and step of a repeated pipeline (a fit epoch may be longer or shorter).
    s.cursor = data::stream_position(static_cast<std::uint64_t>(s.step), ctx.steps_per_pass);
    s.world_size = ctx.strategy.num_replicas_in_sync();
    s.model_fingerprint = std::string(ctx.model.fingerprint());
    s.weights = weight_views(ctx.model);
    s.optimizer_slots = slot_views(ctx.optimizer, ctx.model.parameters().size());
    s.optimizer_iterations = static_cast<std::int64_t>(optimizer_iterations);
    const bool fresh_epoch = step == 0;
    s.extra["train.epoch_loss_sum"] = exact(fresh_epoch ? 0.0 : sums.loss_sum);
    s.extra["train.epoch_correct"] = exact(fresh_epoch ? 0.0 : sums.correct);
    s.extra["train.epoch_count"] = exact(fresh_epoch ? 0.0 : sums.count);
    // The metrics' state over the epoch so far, so a resumed epoch reports what the uninterrupted one would, and
    // callbacks monitoring a metric decide the same.
    for (std::size_t i = 0; i < metric_sums.size(); ++i) {
      s.extra["train.epoch_metric." + std::to_string(i)] = exact(fresh_epoch ? 0.0 : metric_sums[i]);
    }
    s.extra["train.steps_per_epoch"] = std::to_string(ctx.steps_per_epoch);
    s.extra["train.steps_per_pass"] = std::to_string(ctx.steps_per_pass);
    if (!std::isnan(model_step)) s.extra["train.model_step"] = exact(model_step);
    if (!std::isnan(learning_rate)) s.extra["train.learning_rate"] = exact(learning_rate);
    return s;
  }

  // From a restored backup (`source` names it in errors), for `ctx`'s job: refused when it is of another model or
  // another epoch length; what an older backup lacks is the epoch's start (no sums, model step 0, the rate not saved).
  template <class Ctx>
  [[nodiscard]] static run_state from_file(const training_state& state, const Ctx& ctx, const std::string& source,
                                           const std::string& backup_dir) {
    check_fits(state, ctx, source, backup_dir);
    run_state r;
    r.epoch = static_cast<int>(state.epoch);
    // The step within the epoch, from the global step (the cursor is the data's pass and step, which differ from
    // the epoch's when steps_per_epoch is not one pass).
    r.step = static_cast<std::size_t>(state.step - state.epoch * static_cast<std::int64_t>(ctx.steps_per_epoch));
    r.optimizer_iterations = static_cast<std::uint64_t>(state.optimizer_iterations);
    r.sums = {number(state, "train.epoch_loss_sum", source), number(state, "train.epoch_correct", source),
              number(state, "train.epoch_count", source)};
    r.model_step = number(state, "train.model_step", source);
    r.learning_rate =
        state.extra.contains("train.learning_rate") ? number(state, "train.learning_rate", source) : none;
    r.metric_sums.assign(ctx.epoch_metric_sums.size(), 0.0);
    for (std::size_t i = 0; i < r.metric_sums.size(); ++i) {
      r.metric_sums[i] = number(state, "train.epoch_metric." + std::to_string(i), source);
    }
    return r;
  }

 private:
  template <class Ctx>
  static void check_fits(const training_state& state, const Ctx& ctx, const std::string& source,
                         const std::string& backup_dir) {
    const int rank = ctx.strategy.replica_id();
    const std::string fingerprint(ctx.model.fingerprint());
    if (state.model_fingerprint != fingerprint) {
      throw checkpoint_error({"train.backup", rank}, source,
                             source + ": the backup is of another model ('" + state.model_fingerprint +
                                 "', this one is '" + fingerprint + "'); remove " + backup_dir + " to start afresh");
    }
    const auto check = [&](const char* key, std::size_t here, const char* what) {
      const auto it = state.extra.find(key);
      if (it != state.extra.end() && it->second != std::to_string(here)) {
        throw checkpoint_error({"train.backup", rank}, source,
                               source + ": the backup was written with " + it->second + what + ", this run has " +
                                   std::to_string(here) + " (the global batch or the data set changed)");
      }
    };
    check("train.steps_per_epoch", ctx.steps_per_epoch, " steps per epoch");
    check("train.steps_per_pass", ctx.steps_per_pass, " steps per pass over the data");
  }

  static std::string exact(double v) { return exact_text(v); }  // hexadecimal: the same bits come back

  // The number under `key`; 0 when absent.
  static double number(const training_state& state, const std::string& key, const std::string& source) {
    const auto it = state.extra.find(key);
    if (it == state.extra.end()) return 0.0;
    const std::optional<double> v = parse_number(it->second);
    if (!v) {
      throw checkpoint_error({"train.backup"}, source,
                             source + ": metadata " + key + ": '" + it->second + "' is not a number");
    }
    return *v;
  }
};

// A model's per-replica state in a backup (batch normalization's moving statistics, which replicas average over
// their own batches): rank r's (r >= 1; the chief's is the weights') under `train.replica_state.<r>`, 8 hex digits
// a float. `states` holds every replica's, rank r's at r × its size, each float's bits as a whole number in a double
// (how they are gathered: summed with the other replicas' zeros they come back exactly).
inline void replica_states_to_file(training_state_view& s, std::span<const double> states, std::size_t world) {
  if (states.empty() || world < 2) return;
  const std::size_t n = states.size() / world;
  static constexpr char digits[] = "0123456789abcdef";
  for (std::size_t r = 1; r < world; ++r) {
    std::string text(8 * n, '0');
    for (std::size_t i = 0; i < n; ++i) {
      auto bits = static_cast<std::uint32_t>(states[r * n + i]);
      for (std::size_t d = 8; d-- > 0; bits >>= 4) text[8 * i + d] = digits[bits & 0xfu];
    }
    s.extra["train.replica_state." + std::to_string(r)] = std::move(text);
  }
}

// The backup's replica states of `n` floats each into `states` (rank 0's part left zero: the chief has its own);
// false when the backup has none (one replica, no state, or an older backup) or is of another world size.
inline bool replica_states_from_file(const training_state& state, std::size_t n, std::size_t world,
                                     const std::string& source, std::vector<double>& states) {
  if (n == 0 || world < 2 || state.world_size != static_cast<std::int64_t>(world)) return false;
  states.assign(world * n, 0.0);
  for (std::size_t r = 1; r < world; ++r) {
    const std::string key = "train.replica_state." + std::to_string(r);
    const auto it = state.extra.find(key);
    if (it == state.extra.end()) return false;
    const std::string& text = it->second;
    if (text.size() != 8 * n || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
      throw checkpoint_error({"train.backup"}, source,
                             source + ": metadata " + key + " is not " + std::to_string(n) +
                                 " floats in hexadecimal (" + std::to_string(text.size()) + " characters)");
    }
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t bits = 0;
      for (std::size_t d = 0; d < 8; ++d) {
        const char c = text[8 * i + d];
        bits = (bits << 4) | static_cast<std::uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
      }
      states[r * n + i] = static_cast<double>(bits);
    }
  }
  return true;
}

}  // namespace mwstrat::detail
