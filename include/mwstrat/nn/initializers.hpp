#pragma once
/// \file
/// Keras's default initialisers, seeded and reproducible on any platform and thread count.

#include <mwstrat/nn/detail/counter_random.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mwstrat::nn {

/// Fills `values` from U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)) (`glorot_uniform`). Element i is a
/// function of (seed, stream, i) only.
template <class T>
void glorot_uniform(std::span<T> values, std::size_t fan_in, std::size_t fan_out, std::uint64_t seed,
                    std::uint64_t stream = 0) {
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out == 0 ? 1 : fan_in + fan_out));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<T>((2.0 * detail::random_unit(seed, stream, i) - 1.0) * limit);
  }
}

/// Fills `values` from Keras's `he_normal`: a normal of stddev sqrt(2 / fan_in) truncated at two standard
/// deviations (redrawn beyond them, as TensorFlow's truncated normal; the stddev is divided by 0.8796… so that of
/// the truncated distribution is sqrt(2 / fan_in)). Element i is a function of (seed, stream, i) only.
template <class T>
void he_normal(std::span<T> values, std::size_t fan_in, std::uint64_t seed, std::uint64_t stream = 0) {
  const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in == 0 ? 1 : fan_in)) / 0.87962566103423978;
  constexpr double two_pi = 6.283185307179586476925286766559;
  for (std::size_t i = 0; i < values.size(); ++i) {
    double z = 0;
    for (std::uint64_t attempt = 0;; ++attempt) {  // P(|z| > 2) = 4.6%: a few attempts at most in practice
      const std::uint64_t k = (static_cast<std::uint64_t>(i) << 8) + 2 * attempt;
      const double u1 = 1.0 - detail::random_unit(seed ^ 0x68655f6e6f726dULL, stream, k);  // (0, 1]
      const double u2 = detail::random_unit(seed ^ 0x68655f6e6f726dULL, stream, k + 1);
      z = std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
      if (std::abs(z) <= 2.0 || attempt == 100) break;
    }
    values[i] = static_cast<T>(z * stddev);
  }
}

/// Fills `values` with ones (`ones`, batch norm's gamma and moving variance).
template <class T>
void ones(std::span<T> values) {
  for (auto& v : values) v = T{1};
}

/// Fills `values` with zeros (`zeros`, Keras's bias initialiser).
template <class T>
void zeros(std::span<T> values) {
  for (auto& v : values) v = T{};
}

}  // namespace mwstrat::nn
