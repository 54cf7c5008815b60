#pragma once
/// \file
/// RMSprop, `keras.optimizers.RMSprop` (Keras 3's rule): velocity = rho * velocity + (1 - rho) * g^2; centered,
/// also average = rho * average + (1 - rho) * g and denominator = velocity - average^2 + epsilon, else
/// denominator = velocity + epsilon; increment = lr * g / sqrt(denominator); with momentum,
/// momentum_slot = momentum * momentum_slot + increment and w -= momentum_slot, else w -= increment.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/elementwise.hpp>
#include <mwstrat/nn/optimizers/optimizer_base.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::nn {

/// Keras's RMSprop arguments (defaults as there).
struct rmsprop_options {
  nn::learning_rate learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double global_clipnorm = 0.0;
  double clipvalue = 0.0;
};

/// RMSprop (see the file comment).
template <class T = float>
class basic_rmsprop : public ::mwstrat::detail::optimizer_base<T> {
  using base = ::mwstrat::detail::optimizer_base<T>;

 public:
  /// Keras defaults: learning_rate 0.001, rho 0.9, momentum 0, epsilon 1e-7, not centered.
  explicit basic_rmsprop(const rmsprop_options& o = {})
      : base("rmsprop", o.learning_rate, {o.weight_decay, o.clipnorm, o.global_clipnorm, o.clipvalue}),
        rho_(o.rho), momentum_(o.momentum), epsilon_(o.epsilon), centered_(o.centered) {
    if (!(o.rho >= 0.0 && o.rho <= 1.0))
      throw config_error({"nn"}, "rmsprop: rho " + std::to_string(o.rho) + " outside [0, 1]");
    if (!(o.momentum >= 0.0 && o.momentum <= 1.0))
      throw config_error({"nn"}, "rmsprop: momentum " + std::to_string(o.momentum) + " outside [0, 1]");
  }

  /// Updates `params` in place from `grads` (same size).
  void apply(std::span<T> params, std::span<const T> grads) {
    resize(params.size());
    const std::size_t n = params.size();
    const T rho = static_cast<T>(rho_), one_minus_rho = static_cast<T>(1.0 - rho_);
    const T eps = static_cast<T>(epsilon_), mom = static_cast<T>(momentum_);
    const bool centered = centered_, with_momentum = momentum_ > 0;
    T* w = params.data();
    T* vel = slots_.data();
    T* mslot = with_momentum ? vel + n : nullptr;
    T* avg = centered ? vel + (with_momentum ? 2 : 1) * n : nullptr;
    this->run(params, grads, [=](std::size_t i, auto g, T lr) {  // g: one gradient, or a vector of them from i on
      using V = decltype(g);
      V vi = detail::load_lanes<V>(vel + i), wi = detail::load_lanes<V>(w + i);
      vi = rho * vi + one_minus_rho * (g * g);
      detail::store_lanes(vel + i, vi);
      V denominator;
      if (centered) {
        V ai = detail::load_lanes<V>(avg + i);
        ai = rho * ai + one_minus_rho * g;
        detail::store_lanes(avg + i, ai);
        denominator = vi - ai * ai + eps;
      } else {
        denominator = vi + eps;
      }
      const V increment = (lr * g) / detail::sqrt_lanes(denominator);
      if (with_momentum) {
        V mi = detail::load_lanes<V>(mslot + i);
        mi = mom * mi + increment;
        detail::store_lanes(mslot + i, mi);
        wi -= mi;
      } else {
        wi -= increment;
      }
      detail::store_lanes(w + i, wi);
    });
  }

  /// `apply` over elements [first, first + count) of the whole arena only (optimizer_base::elementwise() says what
  /// that promises and needs).
  void apply_range(std::span<T> params, std::span<const T> grads, std::size_t first, std::size_t count) {
    this->within_range(params.size(), first, count, [&] { apply(params, grads); });
  }

  [[nodiscard]] double rho() const noexcept { return rho_; }
  [[nodiscard]] double momentum() const noexcept { return momentum_; }
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }
  [[nodiscard]] bool centered() const noexcept { return centered_; }
  /// The slot variables in one span: velocities [0..n), then momenta (with momentum), then average gradients
  /// (centered).
  [[nodiscard]] std::span<T> slots() noexcept { return slots_; }
  [[nodiscard]] std::span<const T> slots() const noexcept { return slots_; }
  /// Sizes the slots for `n` parameters (zeroed if the size changes).
  void resize(std::size_t n) {
    const std::size_t per = 1 + (momentum_ > 0 ? 1 : 0) + (centered_ ? 1 : 0);
    if (slots_.size() != per * n) slots_.assign(per * n, T{});
  }
  /// Zeroes the slots and the iteration count.
  void reset() {
    for (auto& s : slots_) s = T{};
    this->set_iterations(0);
  }

 private:
  double rho_;
  double momentum_;
  double epsilon_;
  bool centered_;
  std::vector<T> slots_;
};

/// RMSprop on floats.
using rmsprop = basic_rmsprop<float>;

}  // namespace mwstrat::nn
