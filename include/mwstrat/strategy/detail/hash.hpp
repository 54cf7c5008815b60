#pragma once
// FNV-1a 64 (fingerprint_hash): a stable, platform-independent digest of fingerprints that replicas compare.

#include <cstdint>
#include <string_view>

namespace mwstrat::detail {

[[nodiscard]] constexpr std::uint64_t fingerprint_hash(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace mwstrat::detail
