#pragma once
/// \file
/// The random numbers behind every shuffle: a fixed generator and a fixed Fisher-Yates, so that an order depends
/// only on (seed, epoch) and never on the standard library (std::shuffle and the std distributions differ between
/// libstdc++, libc++ and MSVC, and workers of one job may be built with different ones).

#include <mwstrat/detail/splitmix64.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>

namespace mwstrat::detail {

/// The seed of one shuffle: a function of the user's seed and the iteration (epoch) number only.
[[nodiscard]] constexpr std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t iteration) noexcept {
  return mix64(mix64(seed) ^ mix64(iteration + 0x632be59bd9b4e019ULL));
}

__extension__ using uint128 = unsigned __int128;  // __extension__: -Wpedantic knows no 128-bit type

/// A uniform integer in [0, bound) without modulo bias (Lemire's multiply-and-reject); bound > 0.
[[nodiscard]] inline std::uint64_t uniform_below(splitmix64& gen, std::uint64_t bound) noexcept {
  uint128 m = static_cast<uint128>(gen()) * bound;
  auto low = static_cast<std::uint64_t>(m);
  if (low < bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<uint128>(gen()) * bound;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64U);
}

/// Shuffles `values` in place (Fisher-Yates, from the back).
template <class T>
void shuffle_in_place(std::span<T> values, std::uint64_t seed) noexcept {
  splitmix64 gen(seed);
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(gen, i));
    using std::swap;
    swap(values[i - 1], values[j]);
  }
}

/// Writes the permutation of [0, n) for `seed` into `out` (n = out.size()); no allocation.
inline void fill_permutation(std::span<std::size_t> out, std::uint64_t seed) noexcept {
  std::iota(out.begin(), out.end(), std::size_t{0});
  shuffle_in_place(out, seed);
}

}  // namespace mwstrat::detail
