#pragma once
/// \file
/// Element types of checkpoint tensors, with their safetensors names ("F32", "I64", ...).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace mwstrat {

/// The element type of a stored tensor. Names and sizes follow the safetensors format.
enum class dtype : std::uint8_t { f64, f32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, boolean };

namespace detail {
struct dtype_info {
  dtype type;
  std::string_view name;
  std::size_t size;
};
inline constexpr std::array<dtype_info, 13> dtype_table{{
    {dtype::f64, "F64", 8},
    {dtype::f32, "F32", 4},
    {dtype::f16, "F16", 2},
    {dtype::bf16, "BF16", 2},
    {dtype::i64, "I64", 8},
    {dtype::i32, "I32", 4},
    {dtype::i16, "I16", 2},
    {dtype::i8, "I8", 1},
    {dtype::u64, "U64", 8},
    {dtype::u32, "U32", 4},
    {dtype::u16, "U16", 2},
    {dtype::u8, "U8", 1},
    {dtype::boolean, "BOOL", 1},
}};
}  // namespace detail

/// The safetensors name of `type`, e.g. "F32".
[[nodiscard]] constexpr std::string_view to_string(dtype type) noexcept {
  return detail::dtype_table[static_cast<std::size_t>(type)].name;
}

/// Bytes per element of `type`.
[[nodiscard]] constexpr std::size_t size_of(dtype type) noexcept {
  return detail::dtype_table[static_cast<std::size_t>(type)].size;
}

/// The dtype whose safetensors name is `name`, if there is one (names are case-sensitive, as in the format).
[[nodiscard]] constexpr std::optional<dtype> parse_dtype(std::string_view name) noexcept {
  for (const auto& info : detail::dtype_table)
    if (info.name == name) return info.type;
  return std::nullopt;
}

/// The dtype that stores C++ type `T` (float, double, the fixed-width integers, std::byte as U8, bool as BOOL).
template <class T>
inline constexpr std::optional<dtype> dtype_of = std::nullopt;
template <> inline constexpr std::optional<dtype> dtype_of<double> = dtype::f64;
template <> inline constexpr std::optional<dtype> dtype_of<float> = dtype::f32;
template <> inline constexpr std::optional<dtype> dtype_of<std::int64_t> = dtype::i64;
template <> inline constexpr std::optional<dtype> dtype_of<std::int32_t> = dtype::i32;
template <> inline constexpr std::optional<dtype> dtype_of<std::int16_t> = dtype::i16;
template <> inline constexpr std::optional<dtype> dtype_of<std::int8_t> = dtype::i8;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint64_t> = dtype::u64;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint32_t> = dtype::u32;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint16_t> = dtype::u16;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint8_t> = dtype::u8;
template <> inline constexpr std::optional<dtype> dtype_of<std::byte> = dtype::u8;
template <> inline constexpr std::optional<dtype> dtype_of<bool> = dtype::boolean;

static_assert(sizeof(float) == 4 && sizeof(double) == 8 && sizeof(bool) == 1);

}  // namespace mwstrat
