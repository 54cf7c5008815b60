#pragma once
/// \file
/// Stochastic gradient descent, `keras.optimizers.SGD` (Keras 3's rule, the same as Keras 2's): with momentum m,
/// velocity = m * velocity - lr * g, then w += velocity, or with Nesterov w += m * velocity - lr * g; without
/// momentum w -= lr * g. Clipping and decoupled weight decay as every optimizer (optimizer_base.hpp).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/optimizers/optimizer_base.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::nn {

/// Keras's SGD arguments (defaults as there), for designated initialisers:
/// `nn::sgd({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4})`.
struct sgd_options {
  nn::learning_rate learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;     ///< decoupled: w -= w * weight_decay * lr before the update
  double clipnorm = 0.0;         ///< global norm clipping (optimizer_base.hpp)
  double global_clipnorm = 0.0;  ///< the same (Keras's name for it)
  double clipvalue = 0.0;        ///< clamp each gradient to [-clipvalue, clipvalue]
};

/// SGD (see the file comment). Updates a flat span of parameters in the calling oneTBB arena.
template <class T = float>
class basic_sgd : public ::mwstrat::detail::optimizer_base<T> {
  using base = ::mwstrat::detail::optimizer_base<T>;

 public:
  /// Keras defaults: learning_rate 0.01, momentum 0, nesterov false.
  explicit basic_sgd(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false)
      : basic_sgd(sgd_options{learning_rate, momentum, nesterov}) {}
  /// All of Keras's arguments.
  explicit basic_sgd(const sgd_options& o)
      : base("sgd", o.learning_rate, {o.weight_decay, o.clipnorm, o.global_clipnorm, o.clipvalue}),
        momentum_(o.momentum), nesterov_(o.nesterov) {
    if (!(o.momentum >= 0.0 && o.momentum <= 1.0))
      throw config_error({"nn"}, "sgd: momentum " + std::to_string(o.momentum) + " outside [0, 1]");
  }

  /// Updates `params` in place from `grads` (same size).
  void apply(std::span<T> params, std::span<const T> grads) {
    T* w = params.data();
    if (momentum_ == 0.0) {
      this->run(params, grads, [w](std::size_t i, T g, T lr) { w[i] -= lr * g; });
      return;
    }
    resize(params.size());
    const T m = static_cast<T>(momentum_);
    T* vel = velocity_.data();
    if (nesterov_) {
      this->run(params, grads, [=](std::size_t i, T g, T lr) {
        vel[i] = m * vel[i] - lr * g;
        w[i] += m * vel[i] - lr * g;
      });
    } else {
      this->run(params, grads, [=](std::size_t i, T g, T lr) {
        vel[i] = m * vel[i] - lr * g;
        w[i] += vel[i];
      });
    }
  }

  /// `apply` over elements [first, first + count) of the whole arena only (optimizer_base::elementwise() says what
  /// that promises and needs).
  void apply_range(std::span<T> params, std::span<const T> grads, std::size_t first, std::size_t count) {
    this->within_range(params.size(), first, count, [&] { apply(params, grads); });
  }

  /// True without momentum and without norm clipping: the update of an element then depends only on its
  /// parameter and gradient, so any part of the arena can be updated on its own with `apply_part` — which lets
  /// `fit` have each replica update only the part it reduced (`update_placement::sharded`,
  /// strategy/gradient_sync.hpp).
  [[nodiscard]] bool elementwise_stateless() const noexcept { return momentum_ == 0.0 && this->clipnorm() == 0; }

  /// The update of one part of the arena, serially, without counting a step (`count_step` does); requires
  /// elementwise_stateless(). The same operations per element as `apply`, so the same bits.
  void apply_part(std::span<T> params, std::span<const T> grads) const {
    if (!elementwise_stateless())
      throw config_error({"nn"}, "sgd: apply_part needs momentum 0 and no norm clipping");
    T* w = params.data();
    this->run_part(params, grads, [w](std::size_t i, T g, T lr) { w[i] -= lr * g; });
  }

  /// The momentum.
  [[nodiscard]] double momentum() const noexcept { return momentum_; }
  /// Whether the update is Nesterov's.
  [[nodiscard]] bool nesterov() const noexcept { return nesterov_; }
  /// The slot variables: the velocity (one per parameter; empty without momentum).
  [[nodiscard]] std::span<T> slots() noexcept { return velocity_; }
  /// The slot variables.
  [[nodiscard]] std::span<const T> slots() const noexcept { return velocity_; }
  /// Sizes the slots for `n` parameters (zeroed if the size changes); nothing to do without momentum.
  void resize(std::size_t n) {
    if (momentum_ != 0.0 && velocity_.size() != n) velocity_.assign(n, T{});
  }
  /// Zeroes the slots and the iteration count.
  void reset() {
    for (auto& v : velocity_) v = T{};
    this->set_iterations(0);
  }

 private:
  double momentum_;
  bool nesterov_;
  std::vector<T> velocity_;
};

/// SGD on floats.
using sgd = basic_sgd<float>;

}  // namespace mwstrat::nn
