#pragma once
// SplitMix64, the one source of pseudo-random bits in mwstrat: shuffles, augmentation and initialisers derive
// their numbers from it, so a value depends only on seeds and counters, never on the standard library (whose
// engines and distributions differ between libstdc++, libc++ and MSVC) or on which thread drew it.

#include <cstdint>

namespace mwstrat::detail {

inline constexpr std::uint64_t splitmix64_increment = 0x9e3779b97f4a7c15ULL;

/// SplitMix64's output function applied to `x` + the increment: a bijective mix, used to derive independent
/// streams from (seed, epoch, index, ...).
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += splitmix64_increment;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

/// SplitMix64 as a generator: tiny state, passes BigCrush, and its output is the same everywhere.
class splitmix64 {
 public:
  explicit constexpr splitmix64(std::uint64_t seed) noexcept : state_(seed) {}
  constexpr std::uint64_t operator()() noexcept {
    const std::uint64_t before = state_;
    state_ += splitmix64_increment;
    return mix64(before);  // mixes the advanced state
  }

 private:
  std::uint64_t state_;
};

}  // namespace mwstrat::detail
