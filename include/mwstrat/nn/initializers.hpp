#pragma once
/// \file
/// Keras's default initialisers, seeded and reproducible on any platform and thread count.

#include <mwstrat/nn/detail/random.hpp>

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

/// Fills `values` with zeros (`zeros`, Keras's bias initialiser).
template <class T>
void zeros(std::span<T> values) {
  for (auto& v : values) v = T{};
}

}  // namespace mwstrat::nn
