#pragma once
/// \file
/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum every checkpoint carries over its data.
///
/// On x86-64 with SSE4.2 (checked at compile time, else once at run time) it uses the `crc32` instruction on three
/// independent streams at once and stitches them together with precomputed "shift by a block" tables, which keeps
/// the instruction's 3-cycle latency hidden; elsewhere it falls back to a portable slice-by-8 table loop. Both give
/// the standard CRC32C: `crc32c("123456789") == 0xE3069283`.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define MWSTRAT_CRC32C_X86 1
#else
#define MWSTRAT_CRC32C_X86 0
#endif

namespace mwstrat::detail {

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;

/// Slice-by-8 tables: row 0 is the classic byte table, row k advances a byte that sits k bytes further back.
inline constexpr std::array<std::array<std::uint32_t, 256>, 8> crc32c_tables = [] {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? crc32c_polynomial : 0u);
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}();

inline std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

/// The raw register update (no pre/post inversion), portable.
inline std::uint32_t crc32c_update_portable(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  const auto& t = crc32c_tables;
  while (n >= 8) {
    const std::uint64_t v = load_le64(p) ^ crc;
    crc = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
          t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ static_cast<std::uint8_t>(*p++)) & 0xFFu];
  return crc;
}

#if MWSTRAT_CRC32C_X86

/// Bytes per stream in one round of the three-stream loop; the shift tables are built for exactly this length.
inline constexpr std::size_t crc32c_block = 4096;

__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_sse42_serial(std::uint32_t crc,
                                                                                    const std::byte* p,
                                                                                    std::size_t n) noexcept {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, static_cast<std::uint8_t>(*p++));
  return c32;
}

/// Tables for the linear map "feed `crc32c_block` zero bytes", split by input byte, so that applying it costs four
/// look-ups. Built once, from the 32 basis vectors, with the instruction itself.
struct crc32c_shift_tables {
  std::array<std::array<std::uint32_t, 256>, 4> t{};

  [[nodiscard]] std::uint32_t shift(std::uint32_t crc) const noexcept {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
  }
};

__attribute__((target("sse4.2"))) inline crc32c_shift_tables build_crc32c_shift_tables() noexcept {
  static constexpr std::array<std::byte, crc32c_block> zeros{};
  std::array<std::uint32_t, 32> basis{};
  for (std::size_t bit = 0; bit < 32; ++bit)
    basis[bit] = crc32c_update_sse42_serial(std::uint32_t{1} << bit, zeros.data(), zeros.size());
  crc32c_shift_tables tables;
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t b = 0; b < 256; ++b) {
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < 8; ++i)
        if ((b >> i) & 1u) v ^= basis[8 * k + i];
      tables.t[k][b] = v;
    }
  return tables;
}

inline const crc32c_shift_tables& crc32c_shifts() noexcept {
  static const crc32c_shift_tables tables = build_crc32c_shift_tables();
  return tables;
}

/// Three streams over consecutive blocks A, B, C: crc(A‖B‖C) = shift(shift(crc(A)) ^ crc0(B)) ^ crc0(C), where
/// crc0 starts from zero; the register update is linear, which is what makes the stitching exact.
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_sse42(std::uint32_t crc, const std::byte* p,
                                                                            std::size_t n) noexcept {
  constexpr std::size_t b = crc32c_block;
  if (n >= 3 * b) {
    const crc32c_shift_tables& shifts = crc32c_shifts();
    while (n >= 3 * b) {
      std::uint64_t c0 = crc;
      std::uint64_t c1 = 0;
      std::uint64_t c2 = 0;
      for (std::size_t i = 0; i < b; i += 8) {
        std::uint64_t v0, v1, v2;
        std::memcpy(&v0, p + i, 8);
        std::memcpy(&v1, p + b + i, 8);
        std::memcpy(&v2, p + 2 * b + i, 8);
        c0 = _mm_crc32_u64(c0, v0);
        c1 = _mm_crc32_u64(c1, v1);
        c2 = _mm_crc32_u64(c2, v2);
      }
      crc = shifts.shift(shifts.shift(static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c1)) ^
            static_cast<std::uint32_t>(c2);
      p += 3 * b;
      n -= 3 * b;
    }
  }
  return crc32c_update_sse42_serial(crc, p, n);
}

inline bool cpu_has_sse42() noexcept {
#if defined(__SSE4_2__)
  return true;
#else
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#endif
}

#endif  // MWSTRAT_CRC32C_X86

/// The raw register update, on the fastest path this CPU has.
inline std::uint32_t crc32c_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
#if MWSTRAT_CRC32C_X86
  if (cpu_has_sse42()) return crc32c_update_sse42(crc, p, n);
#endif
  return crc32c_update_portable(crc, p, n);
}

}  // namespace mwstrat::detail

namespace mwstrat {

/// Extends a CRC32C: `crc32c_extend(crc32c(a), b) == crc32c(a‖b)`; `crc32c_extend(0, a) == crc32c(a)`.
[[nodiscard]] inline std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> bytes) noexcept {
  return ~detail::crc32c_update(~crc, bytes.data(), bytes.size());
}

/// The CRC32C of `bytes`.
[[nodiscard]] inline std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept { return crc32c_extend(0, bytes); }

/// The CRC32C of the characters of `text`.
[[nodiscard]] inline std::uint32_t crc32c(std::string_view text) noexcept {
  return crc32c(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

}  // namespace mwstrat
