#pragma once
/// \file
/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum every checkpoint carries over its data.
///
/// Paths, picked once at run time by what the CPU has (all give the standard CRC32C,
/// `crc32c("123456789") == 0xE3069283`):
///   - x86-64 with AVX-512 and VPCLMULQDQ: carry-less multiplication folding, 256 bytes a round;
///   - x86-64 with SSE4.2: the `crc32` instruction on three independent streams, stitched together with
///     precomputed "shift by a block" tables, which hides the instruction's 3-cycle latency;
///   - anything else: a portable slice-by-8 table loop.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
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

/// x^k mod P for the CRC32C polynomial in its normal (unreflected) form.
constexpr std::uint32_t crc32c_xpow(unsigned k) noexcept {
  std::uint64_t r = 1;
  for (unsigned i = 0; i < k; ++i) {
    r <<= 1;
    if (r & (std::uint64_t{1} << 32)) r ^= 0x11EDC6F41ull;
  }
  return static_cast<std::uint32_t>(r);
}
constexpr std::uint64_t crc32c_reflect32(std::uint32_t v) noexcept {
  std::uint64_t r = 0;
  for (int i = 0; i < 32; ++i)
    if ((v >> i) & 1u) r |= std::uint64_t{1} << (31 - i);
  return r;
}
/// Folding constants: a 16-byte chunk v moved forward by `distance` bytes becomes clmul(v.lo, lo) ^ clmul(v.hi, hi),
/// with lo = reflect(x^(8d+31) mod P) and hi = reflect(x^(8d-33) mod P) (the reflected operands' product carries an
/// extra factor x, and each half sits 64 degrees apart).
struct crc32c_fold {
  std::uint64_t lo;
  std::uint64_t hi;
};
constexpr crc32c_fold crc32c_fold_by(unsigned distance) noexcept {
  return {crc32c_reflect32(crc32c_xpow(8 * distance + 31)), crc32c_reflect32(crc32c_xpow(8 * distance - 33))};
}

#define MWSTRAT_CRC32C_VPCLMUL_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

MWSTRAT_CRC32C_VPCLMUL_TARGET inline __m512i crc32c_k512(crc32c_fold f) noexcept {
  const auto lo = static_cast<long long>(f.lo);
  const auto hi = static_cast<long long>(f.hi);
  return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

/// Four chunks moved forward by the distance `k` was built for, xored into `next`.
MWSTRAT_CRC32C_VPCLMUL_TARGET inline __m512i crc32c_fold512(__m512i x, __m512i k, __m512i next) noexcept {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                   0x96);
}

MWSTRAT_CRC32C_VPCLMUL_TARGET inline __m128i crc32c_fold128(__m128i x, __m128i k, __m128i next) noexcept {
  return _mm_xor_si128(next, _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)));
}

/// Carry-less multiplication folding on 512-bit registers (AVX-512 VPCLMULQDQ): four registers, 256 bytes a
/// round, folded down to 16 bytes that the crc32 instruction finishes.
MWSTRAT_CRC32C_VPCLMUL_TARGET inline std::uint32_t crc32c_update_vpclmul(std::uint32_t crc, const std::byte* p,
                                                                         std::size_t n) noexcept {
  if (n < 1024) return crc32c_update_sse42(crc, p, n);
  static constexpr crc32c_fold f256 = crc32c_fold_by(256);
  static constexpr crc32c_fold f64 = crc32c_fold_by(64);
  static constexpr crc32c_fold f16 = crc32c_fold_by(16);
  const __m512i k256 = crc32c_k512(f256);
  const __m512i k64 = crc32c_k512(f64);
  // The register's start value enters as data: crc32(c, M) == crc32(0, M with c xored into its first 4 bytes).
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, static_cast<long long>(crc)));
  __m512i x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128);
  __m512i x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  while (n >= 256) {
    x0 = crc32c_fold512(x0, k256, _mm512_loadu_si512(p));
    x1 = crc32c_fold512(x1, k256, _mm512_loadu_si512(p + 64));
    x2 = crc32c_fold512(x2, k256, _mm512_loadu_si512(p + 128));
    x3 = crc32c_fold512(x3, k256, _mm512_loadu_si512(p + 192));
    p += 256;
    n -= 256;
  }
  x1 = crc32c_fold512(x0, k64, x1);
  x2 = crc32c_fold512(x1, k64, x2);
  x3 = crc32c_fold512(x2, k64, x3);
  const __m128i k16 = _mm_set_epi64x(static_cast<long long>(f16.hi), static_cast<long long>(f16.lo));
  alignas(64) std::byte lanes[64];  // (a store, not extract intrinsics, which GCC 12 warns about)
  _mm512_store_si512(lanes, x3);
  __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(lanes));
  v = crc32c_fold128(v, k16, _mm_load_si128(reinterpret_cast<const __m128i*>(lanes + 16)));
  v = crc32c_fold128(v, k16, _mm_load_si128(reinterpret_cast<const __m128i*>(lanes + 32)));
  v = crc32c_fold128(v, k16, _mm_load_si128(reinterpret_cast<const __m128i*>(lanes + 48)));
  std::uint64_t c = _mm_crc32_u64(0, static_cast<std::uint64_t>(_mm_cvtsi128_si64(v)));
  c = _mm_crc32_u64(c, static_cast<std::uint64_t>(_mm_extract_epi64(v, 1)));
  return crc32c_update_sse42(static_cast<std::uint32_t>(c), p, n);
}

#undef MWSTRAT_CRC32C_VPCLMUL_TARGET

inline bool cpu_has_vpclmul() noexcept {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
                          __builtin_cpu_supports("sse4.2");
  return has;
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
  if (cpu_has_vpclmul()) return crc32c_update_vpclmul(crc, p, n);
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

#undef MWSTRAT_CRC32C_X86
