#pragma once
// Counter-based random numbers: a value is a pure function of (seed, stream, index), so initialisation and
// dropout masks do not depend on the order or the thread that draws them, nor on the standard library.

#include <mwstrat/detail/splitmix64.hpp>

#include <cstdint>

namespace mwstrat::detail {

constexpr std::uint64_t random_bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

/// A double uniform in [0, 1), 53 random bits.
constexpr double random_unit(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  return static_cast<double>(random_bits(seed, stream, index) >> 11) * 0x1.0p-53;
}

}  // namespace mwstrat::detail
