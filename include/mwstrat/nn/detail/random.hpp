#pragma once
// Counter-based random numbers: a value is a pure function of (seed, stream, index), so initialisation and
// dropout masks do not depend on the order or the thread that draws them, nor on the standard library.

#include <cstdint>

namespace mwstrat::detail {

constexpr std::uint64_t nn_mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t random_bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  return nn_mix64(nn_mix64(nn_mix64(seed) ^ stream) ^ index);
}

/// A double uniform in [0, 1), 53 random bits.
constexpr double random_unit(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  return static_cast<double>(random_bits(seed, stream, index) >> 11) * 0x1.0p-53;
}

}  // namespace mwstrat::detail
