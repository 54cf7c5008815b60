#pragma once
// FNV-1a 64: a small digest that is the same on every platform and release, for the fingerprints (cluster lists,
// model architectures) that processes compare with each other. Not for security: the job token has HMAC-SHA256.

#include <cstdint>
#include <string_view>

namespace mwstrat::detail {

inline constexpr std::uint64_t fnv1a64_offset = 0xcbf29ce484222325ULL;

/// Continues the digest `hash` over `bytes`; chain calls to hash several pieces.
[[nodiscard]] constexpr std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t hash = fnv1a64_offset) noexcept {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace mwstrat::detail
