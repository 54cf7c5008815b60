#pragma once
/// \file
/// SGD (momentum, Nesterov) and Adam, with Keras's update rules and defaults. Each updates a flat span of
/// parameters from a span of gradients (a model's whole arena in one call), elementwise in parallel in the
/// calling oneTBB arena (`model.execute([&] { opt.apply(...); })`); elementwise updates give the same bits for
/// any number of threads. Slot variables are exposed as one span, with the iteration count, for checkpoints.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/parallel.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::nn {

namespace detail_opt {
inline void check_sizes(const char* who, std::size_t params, std::size_t grads) {
  if (params != grads)
    throw config_error({"nn"}, std::string(who) + ": " + std::to_string(params) + " parameters but " +
                                   std::to_string(grads) + " gradients");
}
inline constexpr std::size_t grain = 1 << 15;
}  // namespace detail_opt

/// Stochastic gradient descent (`keras.optimizers.SGD`): with momentum m, velocity = m * velocity - lr * g and
/// w += velocity (Nesterov: w += m * velocity - lr * g); without momentum, w -= lr * g.
template <class T = float>
class basic_sgd {
 public:
  /// Keras defaults: learning_rate 0.01, momentum 0, nesterov false.
  explicit basic_sgd(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false)
      : lr_(learning_rate), momentum_(momentum), nesterov_(nesterov) {
    if (!(momentum >= 0.0 && momentum <= 1.0))
      throw config_error({"nn"}, "sgd: momentum " + std::to_string(momentum) + " outside [0, 1]");
  }

  /// Updates `params` in place from `grads` (same size).
  void apply(std::span<T> params, std::span<const T> grads) {
    detail_opt::check_sizes("sgd", params.size(), grads.size());
    const T lr = static_cast<T>(lr_);
    if (momentum_ == 0.0) {
      detail::parallel_chunks(params.size(), detail_opt::grain, [&](std::size_t b, std::size_t e) {
        descend(params.data(), grads.data(), lr, b, e);
      });
    } else {
      resize(params.size());
      const T m = static_cast<T>(momentum_);
      T* vel = velocity_.data();
      detail::parallel_chunks(params.size(), detail_opt::grain, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
          vel[i] = m * vel[i] - lr * grads[i];
          params[i] += nesterov_ ? m * vel[i] - lr * grads[i] : vel[i];
        }
      });
    }
    ++iterations_;
  }

  /// True without momentum: the update of an element then depends only on its parameter and gradient (no slots),
  /// so any part of the arena can be updated on its own with `apply_part` — which lets `fit` have each replica update
  /// only the part of the parameters it reduced (`update_placement::sharded`, strategy/gradient_sync.hpp).
  [[nodiscard]] bool elementwise_stateless() const noexcept { return momentum_ == 0.0; }

  /// The update of one part of the arena, serially, without counting a step; requires elementwise_stateless().
  /// The same operation per element as `apply`, so the same bits.
  void apply_part(std::span<T> params, std::span<const T> grads) const {
    detail_opt::check_sizes("sgd", params.size(), grads.size());
    if (!elementwise_stateless()) throw config_error({"nn"}, "sgd: apply_part needs momentum 0 (no velocity slots)");
    descend(params.data(), grads.data(), static_cast<T>(lr_), 0, params.size());
  }

  /// Counts one step applied part by part with `apply_part`.
  void count_step() noexcept { ++iterations_; }

  /// The learning rate.
  [[nodiscard]] double learning_rate() const noexcept { return lr_; }
  /// Sets the learning rate (schedules, warm-up).
  void set_learning_rate(double lr) noexcept { lr_ = lr; }
  /// The momentum.
  [[nodiscard]] double momentum() const noexcept { return momentum_; }
  /// Whether the update is Nesterov's.
  [[nodiscard]] bool nesterov() const noexcept { return nesterov_; }
  /// Number of updates applied.
  [[nodiscard]] std::uint64_t iterations() const noexcept { return iterations_; }
  /// Sets the number of updates applied (restoring a checkpoint).
  void set_iterations(std::uint64_t n) noexcept { iterations_ = n; }
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
    iterations_ = 0;
  }

 private:
  // w -= lr * g over [b, e): the one loop both `apply` and `apply_part` run, so a sharded update rounds exactly as
  // the whole one (the compiler contracts the same expression the same way).
  static void descend(T* params, const T* grads, T lr, std::size_t b, std::size_t e) noexcept {
    for (std::size_t i = b; i < e; ++i) params[i] -= lr * grads[i];
  }

  double lr_;
  double momentum_;
  bool nesterov_;
  std::uint64_t iterations_ = 0;
  std::vector<T> velocity_;
};

/// Adam (`keras.optimizers.Adam`): at step t, alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t),
/// m += (g - m)(1 - beta1), v += (g^2 - v)(1 - beta2), w -= alpha * m / (sqrt(v) + epsilon).
template <class T = float>
class basic_adam {
 public:
  /// Keras defaults: learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7.
  explicit basic_adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                      double epsilon = 1e-7)
      : lr_(learning_rate), beta1_(beta_1), beta2_(beta_2), epsilon_(epsilon) {
    if (!(beta_1 >= 0.0 && beta_1 < 1.0 && beta_2 >= 0.0 && beta_2 < 1.0))
      throw config_error({"nn"}, "adam: betas must lie in [0, 1), got " + std::to_string(beta_1) + ", " +
                                     std::to_string(beta_2));
  }

  /// Updates `params` in place from `grads` (same size).
  void apply(std::span<T> params, std::span<const T> grads) {
    detail_opt::check_sizes("adam", params.size(), grads.size());
    resize(params.size());
    const double t = static_cast<double>(iterations_ + 1);
    const T alpha = static_cast<T>(lr_ * std::sqrt(1.0 - std::pow(beta2_, t)) / (1.0 - std::pow(beta1_, t)));
    const T one_minus_b1 = static_cast<T>(1.0 - beta1_);
    const T one_minus_b2 = static_cast<T>(1.0 - beta2_);
    const T eps = static_cast<T>(epsilon_);
    const std::size_t n = params.size();
    T* m = slots_.data();
    T* v = slots_.data() + n;
    detail::parallel_chunks(n, detail_opt::grain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const T g = grads[i];
        m[i] += (g - m[i]) * one_minus_b1;
        v[i] += (g * g - v[i]) * one_minus_b2;
        params[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + eps);
      }
    });
    ++iterations_;
  }

  /// The learning rate.
  [[nodiscard]] double learning_rate() const noexcept { return lr_; }
  /// Sets the learning rate.
  void set_learning_rate(double lr) noexcept { lr_ = lr; }
  /// beta_1, beta_2 and epsilon.
  [[nodiscard]] double beta_1() const noexcept { return beta1_; }
  [[nodiscard]] double beta_2() const noexcept { return beta2_; }
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }
  /// Number of updates applied (Keras's `iterations`; the bias correction uses it).
  [[nodiscard]] std::uint64_t iterations() const noexcept { return iterations_; }
  /// Sets the number of updates applied (restoring a checkpoint).
  void set_iterations(std::uint64_t n) noexcept { iterations_ = n; }
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
    iterations_ = 0;
  }

 private:
  double lr_;
  double beta1_;
  double beta2_;
  double epsilon_;
  std::uint64_t iterations_ = 0;
  std::vector<T> slots_;
};

/// SGD on floats.
using sgd = basic_sgd<float>;
/// Adam on floats.
using adam = basic_adam<float>;

}  // namespace mwstrat::nn
