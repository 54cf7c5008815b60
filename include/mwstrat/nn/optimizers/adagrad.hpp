#pragma once
/// \file
/// Adagrad, `keras.optimizers.Adagrad` (Keras 3's rule): accumulator += g^2, w -= lr * g / sqrt(accumulator +
/// epsilon), the accumulators starting at `initial_accumulator_value`. (Keras 2 divided by sqrt(accumulator) +
/// epsilon instead; with the default epsilon 1e-7 the two differ in the last bits only.)

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/elementwise.hpp>
#include <mwstrat/nn/optimizers/optimizer_base.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::nn {

/// Keras's Adagrad arguments (defaults as there).
struct adagrad_options {
  nn::learning_rate learning_rate = 0.001;
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double global_clipnorm = 0.0;
  double clipvalue = 0.0;
};

/// Adagrad (see the file comment).
template <class T = float>
class basic_adagrad : public ::mwstrat::detail::optimizer_base<T> {
  using base = ::mwstrat::detail::optimizer_base<T>;

 public:
  /// Keras defaults: learning_rate 0.001, initial_accumulator_value 0.1, epsilon 1e-7.
  explicit basic_adagrad(const adagrad_options& o = {})
      : base("adagrad", o.learning_rate, {o.weight_decay, o.clipnorm, o.global_clipnorm, o.clipvalue}),
        initial_(o.initial_accumulator_value), epsilon_(o.epsilon) {
    if (!(o.initial_accumulator_value >= 0.0))
      throw config_error({"nn"}, "adagrad: initial_accumulator_value " + std::to_string(o.initial_accumulator_value) +
                                     " is negative");
  }

  /// Updates `params` in place from `grads` (same size).
  void apply(std::span<T> params, std::span<const T> grads) {
    resize(params.size());
    const T eps = static_cast<T>(epsilon_);
    T* w = params.data();
    T* acc = accumulators_.data();
    this->run(params, grads, [=](std::size_t i, auto g, T lr) {  // g: one gradient, or a vector of them from i on
      using V = decltype(g);
      V ai = detail::load_lanes<V>(acc + i), wi = detail::load_lanes<V>(w + i);
      ai += g * g;
      wi -= (lr * g) / detail::sqrt_lanes(V(ai + eps));
      detail::store_lanes(acc + i, ai);
      detail::store_lanes(w + i, wi);
    });
  }

  /// `apply` over elements [first, first + count) of the whole arena only (optimizer_base::elementwise() says what
  /// that promises and needs).
  void apply_range(std::span<T> params, std::span<const T> grads, std::size_t first, std::size_t count) {
    this->within_range(params.size(), first, count, [&] { apply(params, grads); });
  }

  [[nodiscard]] double initial_accumulator_value() const noexcept { return initial_; }
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }
  /// The slot variables: the accumulators, one per parameter.
  [[nodiscard]] std::span<T> slots() noexcept { return accumulators_; }
  [[nodiscard]] std::span<const T> slots() const noexcept { return accumulators_; }
  /// Sizes the slots for `n` parameters (set to initial_accumulator_value if the size changes).
  void resize(std::size_t n) {
    if (accumulators_.size() != n) accumulators_.assign(n, static_cast<T>(initial_));
  }
  /// Resets the accumulators to initial_accumulator_value and the iteration count to zero.
  void reset() {
    for (auto& a : accumulators_) a = static_cast<T>(initial_);
    this->set_iterations(0);
  }

 private:
  double initial_;
  double epsilon_;
  std::vector<T> accumulators_;
};

/// Adagrad on floats.
using adagrad = basic_adagrad<float>;

}  // namespace mwstrat::nn
