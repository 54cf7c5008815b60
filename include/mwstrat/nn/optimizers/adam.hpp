#pragma once
/// \file
/// Adam and AdamW, `keras.optimizers.Adam` / `AdamW` (Keras 3's rule): at step t = iterations + 1,
/// alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), m += (g - m)(1 - beta_1), v += (g^2 - v)(1 - beta_2),
/// w -= alpha * m / (sqrt(v) + epsilon). AdamW is Adam with decoupled weight decay on by default (0.004), applied
/// before the rule as w -= w * weight_decay * lr (optimizer_base.hpp), as in Keras.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/elementwise.hpp>
#include <mwstrat/nn/optimizers/optimizer_base.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::nn {

/// Keras's Adam arguments (defaults as there).
struct adam_options {
  nn::learning_rate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0.0;     ///< decoupled: w -= w * weight_decay * lr before the update
  double clipnorm = 0.0;         ///< global norm clipping (optimizer_base.hpp)
  double global_clipnorm = 0.0;  ///< the same (Keras's name for it)
  double clipvalue = 0.0;        ///< clamp each gradient to [-clipvalue, clipvalue]
};

/// Keras's AdamW arguments: Adam's, with weight_decay 0.004 by default.
struct adamw_options {
  nn::learning_rate learning_rate = 0.001;
  double weight_decay = 0.004;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double clipnorm = 0.0;
  double global_clipnorm = 0.0;
  double clipvalue = 0.0;
};

/// Adam (see the file comment).
template <class T = float>
class basic_adam : public ::mwstrat::detail::optimizer_base<T> {
  using base = ::mwstrat::detail::optimizer_base<T>;

 public:
  /// Keras defaults: learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7.
  explicit basic_adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                      double epsilon = 1e-7)
      : basic_adam(adam_options{learning_rate, beta_1, beta_2, epsilon}) {}
  /// All of Keras's arguments.
  explicit basic_adam(const adam_options& o) : basic_adam("adam", o) {}

  /// Updates `params` in place from `grads` (same size).
  void apply(std::span<T> params, std::span<const T> grads) {
    resize(params.size());
    const double t = static_cast<double>(this->iterations() + 1);
    const double correction = std::sqrt(1.0 - std::pow(beta2_, t)) / (1.0 - std::pow(beta1_, t));
    const T one_minus_b1 = static_cast<T>(1.0 - beta1_);
    const T one_minus_b2 = static_cast<T>(1.0 - beta2_);
    const T eps = static_cast<T>(epsilon_);
    // The rate of this step (the schedule's at `iterations()`, as run() reads it) with the corrections folded in.
    const T alpha = static_cast<T>(this->learning_rate() * correction);
    const std::size_t n = params.size();
    T* w = params.data();
    T* m = slots_.data();
    T* v = slots_.data() + n;
    this->run(params, grads, [=](std::size_t i, auto g, T) {  // g: one gradient, or a vector of them from i on
      using V = decltype(g);
      V mi = detail::load_lanes<V>(m + i), vi = detail::load_lanes<V>(v + i), wi = detail::load_lanes<V>(w + i);
      mi += (g - mi) * one_minus_b1;
      vi += (g * g - vi) * one_minus_b2;
      wi -= (mi * alpha) / (detail::sqrt_lanes(vi) + eps);
      detail::store_lanes(m + i, mi);
      detail::store_lanes(v + i, vi);
      detail::store_lanes(w + i, wi);
    });
  }

  /// `apply` over elements [first, first + count) of the whole arena only (optimizer_base::elementwise() says what
  /// that promises and needs).
  void apply_range(std::span<T> params, std::span<const T> grads, std::size_t first, std::size_t count) {
    this->within_range(params.size(), first, count, [&] { apply(params, grads); });
  }

  /// beta_1, beta_2 and epsilon.
  [[nodiscard]] double beta_1() const noexcept { return beta1_; }
  [[nodiscard]] double beta_2() const noexcept { return beta2_; }
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }
  /// The slot variables in one span: first moments m[0..n), then second moments v[0..n).
  [[nodiscard]] std::span<T> slots() noexcept { return slots_; }
  /// The slot variables.
  [[nodiscard]] std::span<const T> slots() const noexcept { return slots_; }
  /// Sizes the slots for `n` parameters (2n values, zeroed if the size changes).
  void resize(std::size_t n) {
    if (slots_.size() != 2 * n) slots_.assign(2 * n, T{});
  }
  /// Zeroes the slots and the iteration count.
  void reset() {
    for (auto& s : slots_) s = T{};
    this->set_iterations(0);
  }

 protected:
  template <class Options>
  basic_adam(const char* name, const Options& o)
      : base(name, o.learning_rate, {o.weight_decay, o.clipnorm, o.global_clipnorm, o.clipvalue}),
        beta1_(o.beta_1), beta2_(o.beta_2), epsilon_(o.epsilon) {
    if (!(o.beta_1 >= 0.0 && o.beta_1 < 1.0 && o.beta_2 >= 0.0 && o.beta_2 < 1.0))
      throw config_error({"nn"}, std::string(name) + ": betas must lie in [0, 1), got " + std::to_string(o.beta_1) +
                                     ", " + std::to_string(o.beta_2));
  }

 private:
  double beta1_;
  double beta2_;
  double epsilon_;
  std::vector<T> slots_;
};

/// AdamW: Adam with decoupled weight decay (0.004 by default, as Keras's).
template <class T = float>
class basic_adamw : public basic_adam<T> {
 public:
  /// Keras defaults: learning_rate 0.001, weight_decay 0.004, beta_1 0.9, beta_2 0.999, epsilon 1e-7.
  explicit basic_adamw(double learning_rate = 0.001, double weight_decay = 0.004)
      : basic_adamw(adamw_options{learning_rate, weight_decay}) {}
  /// All of Keras's arguments.
  explicit basic_adamw(const adamw_options& o) : basic_adam<T>("adamw", o) {}
};

/// Adam on floats.
using adam = basic_adam<float>;
/// AdamW on floats.
using adamw = basic_adamw<float>;

}  // namespace mwstrat::nn
