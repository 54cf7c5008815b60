#pragma once
/// \file
/// What every optimizer shares, with Keras 3's meanings (`keras.optimizers.Optimizer`): the learning rate (a
/// number or a schedule of `iterations`), the step count, gradient clipping and decoupled weight decay, applied in
/// Keras's order within one update: clip the gradients, decay the weights (w -= w * weight_decay * lr), then the
/// optimizer's own rule. Everything runs elementwise over the flat arena in fixed chunks, so the bits do not depend
/// on the number of threads (the global norm is summed per fixed chunk, then over chunks in order).
///
/// Clipping: `clipvalue` clamps each gradient to [-v, v]; `global_clipnorm` scales all gradients by
/// clip * min(1 / norm, 1 / clip) where norm is the L2 norm of the whole gradient (Keras's `clip_by_global_norm`).
/// `clipnorm` is the same global clipping here: the optimizer sees the model as one flat arena, i.e. one variable —
/// Keras clips each variable separately under that name. At most one of the three may be set (Keras would silently
/// ignore all but one).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/elementwise.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/optimizers/schedules.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::detail {

inline void check_sizes(const char* who, std::size_t params, std::size_t grads) {
  if (params != grads)
    throw config_error({"nn"}, std::string(who) + ": " + std::to_string(params) + " parameters but " +
                                   std::to_string(grads) + " gradients");
}
inline constexpr std::size_t optimizer_grain = 1 << 15;

/// Clipping and weight decay, as every options struct spells them.
struct common_options {
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double global_clipnorm = 0.0;
  double clipvalue = 0.0;
};

/// The part of an optimizer that is not its rule: rate, step count, clipping, weight decay.
template <class T>
class optimizer_base {
 public:
  optimizer_base(const char* name, nn::learning_rate lr, const common_options& c)
      : name_(name), lr_(std::move(lr)), weight_decay_(c.weight_decay),
        clipnorm_(c.clipnorm > 0 ? c.clipnorm : c.global_clipnorm), clipvalue_(c.clipvalue) {
    auto bad = [&](const std::string& what) { throw config_error({"nn"}, std::string(name) + ": " + what); };
    if (c.weight_decay < 0) bad("weight_decay " + std::to_string(c.weight_decay) + " is negative");
    if (c.clipnorm < 0 || c.global_clipnorm < 0 || c.clipvalue < 0) bad("clipping thresholds must not be negative");
    if (c.clipnorm > 0 && c.global_clipnorm > 0) bad("set clipnorm or global_clipnorm, not both");
    if (clipnorm_ > 0 && c.clipvalue > 0) bad("set a norm clipping or clipvalue, not both (Keras ignores clipvalue)");
  }

  /// The learning rate of the next update (the schedule's value at `iterations()` when there is one).
  [[nodiscard]] double learning_rate() const { return lr_.at(static_cast<std::int64_t>(iterations_)); }
  /// Sets a constant learning rate (callbacks such as ReduceLROnPlateau). Refused when a schedule sets it, as in
  /// Keras.
  void set_learning_rate(double lr) {
    if (lr_.scheduled())
      throw config_error({"nn"}, std::string(name_) + ": the learning rate follows a schedule and cannot be set");
    lr_ = nn::learning_rate(lr);
  }
  /// Whether a schedule sets the learning rate.
  [[nodiscard]] bool scheduled() const noexcept { return lr_.scheduled(); }
  /// Decoupled weight decay (0: none).
  [[nodiscard]] double weight_decay() const noexcept { return weight_decay_; }
  /// The global norm gradients are clipped to (0: none).
  [[nodiscard]] double clipnorm() const noexcept { return clipnorm_; }
  /// The value gradients are clamped to (0: none).
  [[nodiscard]] double clipvalue() const noexcept { return clipvalue_; }
  /// Number of updates applied (Keras's `iterations`; schedules and bias corrections use it).
  [[nodiscard]] std::uint64_t iterations() const noexcept { return iterations_; }
  /// Sets the number of updates applied (restoring a checkpoint).
  void set_iterations(std::uint64_t n) noexcept { iterations_ = n; }
  /// Counts one step applied part by part (`apply_part`, or each optimizer's `apply_range`).
  void count_step() noexcept { ++iterations_; }
  /// True without norm clipping: the update of an element then depends only on its parameter, its gradient and its
  /// own slots, so the arena can be updated a range at a time. Each optimizer's `apply_range(params, grads, first,
  /// count)` (params and grads the whole arena) updates elements [first, first + count) and their slots on the
  /// calling thread without counting a step (`count_step` does, once the ranges make up the step); ranges in any
  /// order give `apply`'s bits. It refuses norm clipping and a range outside the arena, changing nothing.
  [[nodiscard]] bool elementwise() const noexcept { return clipnorm_ == 0; }

 protected:
  // Runs rule(i, g, lr) for every element, g being the clipped gradient, after the weight decay of params[i]; then
  // counts the step. A rule generic in g's type (a lambda taking `auto g`) is run a whole vector at a time, g then
  // being a vec_t<T> of the gradients from i on (detail/elementwise.hpp): rules with a square root need that to
  // vectorise. Other rules run element by element (the compiler vectorises those that can be).
  // Inside `within_range`, only the elements of that range, on the calling thread, and no step counted.
  template <class Rule>
  void run(std::span<T> params, std::span<const T> grads, Rule&& rule) {
    check_sizes(name_, params.size(), grads.size());
    constexpr bool vectors = std::is_invocable_v<Rule&, std::size_t, detail::vec_t<T>, T>;
    const T* g = grads.data();
    T* w = params.data();
    if (range_count_ != no_range) {
      const elementwise_prelude prelude = prelude_for(grads, false);
      detail::for_each_lane_block<T, vectors>(range_first_, range_first_ + range_count_, [&]<class V>(std::size_t i) {
        rule(i, prelude.template gradient<V>(w, g, i), prelude.lr);
      });
      return;
    }
    const elementwise_prelude prelude = prelude_for(grads, true);
    if (prelude.plain()) {  // a loop of its own, free of the per-element tests
      detail::parallel_chunks(params.size(), optimizer_grain, [&](std::size_t b, std::size_t e) {
        detail::for_each_lane_block<T, vectors>(
            b, e, [&]<class V>(std::size_t i) { rule(i, detail::load_lanes<V>(g + i), prelude.lr); });
      });
    } else {
      detail::parallel_chunks(params.size(), optimizer_grain, [&](std::size_t b, std::size_t e) {
        detail::for_each_lane_block<T, vectors>(
            b, e, [&]<class V>(std::size_t i) { rule(i, prelude.template gradient<V>(w, g, i), prelude.lr); });
      });
    }
    ++iterations_;
  }

  // One part, serially, without counting a step: the same per-element operations as `run`, element by element.
  // Only for elementwise options (no norm clipping: the norm would be the part's).
  template <class Rule>
  void run_part(std::span<T> params, std::span<const T> grads, Rule&& rule) const {
    check_sizes(name_, params.size(), grads.size());
    if (clipnorm_ > 0)
      throw config_error({"nn"}, std::string(name_) + ": apply_part cannot clip by the global norm of a part");
    const elementwise_prelude prelude = prelude_for(grads, false);
    for (std::size_t i = 0; i < params.size(); ++i)
      rule(i, prelude.template gradient<T>(params.data(), grads.data(), i), prelude.lr);
  }

  // Runs `apply()` (the derived optimizer's whole update, which calls `run`) over elements [first, first + count)
  // of the arena only: the optimizer's `apply_range`. The same rule and the same per-element operations as the
  // whole update (detail/elementwise.hpp: the bits do not depend on where a vector starts), so the same bits.
  template <class Apply>
  void within_range(std::size_t arena, std::size_t first, std::size_t count, Apply&& apply) {
    if (clipnorm_ > 0)
      throw config_error({"nn"}, std::string(name_) + ": apply_range cannot clip by the global norm of a range");
    if (first > arena || count > arena - first)
      throw config_error({"nn"}, std::string(name_) + ": apply_range [" + std::to_string(first) + ", " +
                                     std::to_string(first + count) + ") lies outside the " + std::to_string(arena) +
                                     " parameters");
    range_first_ = first;
    range_count_ = count;
    struct restore {
      std::size_t& count;
      ~restore() { count = no_range; }
    } whole_again{range_count_};
    apply();
  }

  [[nodiscard]] const char* name() const noexcept { return name_; }

 private:
  static constexpr std::size_t no_range = static_cast<std::size_t>(-1);
  // What comes before an optimizer's rule for each element, in Keras's order: clip the gradient (by the global
  // norm's factor, or by value), then decay the weight. One definition for `run` and `run_part`, scalar or vector
  // (V is T or vec_t<T>), so they cannot drift apart in their bits.
  struct elementwise_prelude {
    bool by_norm, by_value, decay;
    T scale, clip, wd, lr;
    [[nodiscard]] bool plain() const noexcept { return !by_norm && !by_value && !decay; }
    // The gradient the rule gets at i (decaying params[i] on the way).
    template <class V>
    V gradient(T* w, const T* g, std::size_t i) const noexcept {
      V gi = detail::load_lanes<V>(g + i);
      if (by_norm) gi *= scale;
      if (by_value) gi = detail::clamp_lanes(gi, -clip, clip);
      if (decay) {
        const V wi = detail::load_lanes<V>(w + i);
        detail::store_lanes(w + i, V(wi - wi * wd * lr));
      }
      return gi;
    }
  };

  // The prelude of this step; `with_norm`: take the global norm (`run`), or not (`run_part` refuses it).
  elementwise_prelude prelude_for(std::span<const T> grads, bool with_norm) const {
    const bool by_norm = with_norm && clipnorm_ > 0;
    return {by_norm,
            clipvalue_ > 0,
            weight_decay_ > 0,
            by_norm ? norm_scale(grads) : T{1},
            static_cast<T>(clipvalue_),
            static_cast<T>(weight_decay_),
            static_cast<T>(learning_rate())};
  }

  // Keras's clip_by_global_norm factor, clip * min(1 / norm, 1 / clip) (NaN for a non-finite norm, as there).
  T norm_scale(std::span<const T> grads) const {
    const std::size_t chunks = detail::ceil_div(grads.size(), optimizer_grain);
    if (partial_.size() < chunks) partial_.resize(chunks);  // once per arena size: no allocation once warm
    detail::parallel_chunks(grads.size(), optimizer_grain, [&](std::size_t b, std::size_t e) {
      double s = 0;
      for (std::size_t i = b; i < e; ++i) s += static_cast<double>(grads[i]) * static_cast<double>(grads[i]);
      partial_[b / optimizer_grain] = s;
    });
    double sum = 0;
    for (std::size_t c = 0; c < chunks; ++c) sum += partial_[c];
    const T norm = static_cast<T>(std::sqrt(sum));
    const T clip = static_cast<T>(clipnorm_);
    const T scale = clip * std::min(T{1} / norm, T{1} / clip);
    return scale + (norm - norm);
  }

  const char* name_;
  nn::learning_rate lr_;
  double weight_decay_;
  double clipnorm_;
  double clipvalue_;
  std::uint64_t iterations_ = 0;
  std::size_t range_first_ = 0;
  std::size_t range_count_ = no_range;  // within_range: the range `run` updates
  mutable std::vector<double> partial_;  // the norm's per-chunk sums: scratch, kept to avoid allocating
};

}  // namespace mwstrat::detail
