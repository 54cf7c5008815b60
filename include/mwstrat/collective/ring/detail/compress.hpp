#pragma once
// 16-bit floats on the wire (ring_options::compression): float32 narrowed to bfloat16 (8 significant bits, float32's
// range) or IEEE binary16 (11 significant bits, range ±65504), rounding to nearest, ties to even, in plain integer
// code so that every rank of every build rounds alike. Sums stay in float32; only what crosses the wire is narrowed.

#include <mwstrat/collective/ring/options.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mwstrat::detail {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffU) > 0x7f800000U) return static_cast<std::uint16_t>((u >> 16) | 0x40U);  // NaN stays a NaN
  u += 0x7fffU + ((u >> 16) & 1U);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float from_bf16(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

inline std::uint16_t to_fp16(float f) {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000U);
  const std::uint32_t a = u & 0x7fffffffU;
  if (a > 0x7f800000U) return static_cast<std::uint16_t>(sign | 0x7e00U);     // NaN
  if (a >= 0x477ff000U) return static_cast<std::uint16_t>(sign | 0x7c00U);    // rounds past 65504: infinity
  if (a < 0x38800000U) {                                                      // below 2^-14: a subnormal half
    // |f| · 2^24 is exact in float32 and counts units of 2^-24; rounded to the nearest integer, ties to even.
    const float scaled = bits_float(a) * 16777216.0f;
    const auto whole = static_cast<std::uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(whole);
    const std::uint32_t m = whole + ((rest > 0.5f || (rest == 0.5f && (whole & 1U) != 0)) ? 1U : 0U);
    return static_cast<std::uint16_t>(sign | m);  // m = 1024 is the smallest normal half, as it should be
  }
  std::uint32_t r = a - 0x38000000U;  // exponent rebased from 127 to 15
  r += 0xfffU + ((r >> 13) & 1U);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}
inline float from_fp16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fU, m = h & 0x3ffU;
  if (e == 0) {
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);
    return sign != 0 ? -v : v;
  }
  if (e == 31) return bits_float(sign | 0x7f800000U | (m << 13));
  return bits_float(sign | ((e + 112U) << 23) | (m << 13));
}

inline std::uint16_t narrow(float f, wire_compression c) { return c == wire_compression::bf16 ? to_bf16(f) : to_fp16(f); }
inline float widen(std::uint16_t h, wire_compression c) { return c == wire_compression::bf16 ? from_bf16(h) : from_fp16(h); }

inline void narrow_into(std::uint16_t* __restrict out, const float* __restrict in, std::size_t n, wire_compression c) {
  if (c == wire_compression::bf16)
    for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = to_fp16(in[i]);
}
inline void widen_into(float* __restrict out, const std::uint16_t* __restrict in, std::size_t n, wire_compression c) {
  if (c == wire_compression::bf16)
    for (std::size_t i = 0; i < n; ++i) out[i] = from_bf16(in[i]);
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = from_fp16(in[i]);
}
// acc[i] += widen(in[i]), in float32.
inline void widen_add(float* __restrict acc, const std::uint16_t* __restrict in, std::size_t n, wire_compression c) {
  if (c == wire_compression::bf16)
    for (std::size_t i = 0; i < n; ++i) acc[i] += from_bf16(in[i]);
  else
    for (std::size_t i = 0; i < n; ++i) acc[i] += from_fp16(in[i]);
}
// Each value replaced by the one the wire would carry (what the owner of a part keeps, so that it and every rank
// that receives the part hold the same bits). One loop per format, not `widen(narrow(x, c), c)` per element, so
// that the bf16 loop vectorises: it runs on every reduced element of a step, on the critical path.
inline void round_to_wire(float* data, std::size_t n, wire_compression c) {
  if (c == wire_compression::bf16)
    for (std::size_t i = 0; i < n; ++i) data[i] = from_bf16(to_bf16(data[i]));
  else
    for (std::size_t i = 0; i < n; ++i) data[i] = from_fp16(to_fp16(data[i]));
}

}  // namespace mwstrat::detail
