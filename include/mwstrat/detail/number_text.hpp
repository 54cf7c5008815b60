#pragma once
// Numbers as text, always with a decimal point, whatever locale the program has set.
//
// printf's and strtod's decimal point is the C locale's (LC_NUMERIC): a program that calls setlocale(LC_ALL, "")
// under a German locale writes "0,5" and reads "0.5" as 0. Files the library writes (backup metadata, the
// architecture JSON, CSV logs) must read back under any locale, and its printed figures are Keras's, which never
// follow the locale. std::to_chars and std::from_chars are the locale-free forms of the same conversions.

#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace mwstrat::detail {

// to_chars into a string.
inline std::string number_chars(double v, std::chars_format format, int precision) {
  // Room for the longest: a sign, DBL_MAX's 309 digits, a point and the decimals.
  std::string text(static_cast<std::size_t>(precision) + 320, '\0');
  const auto [end, ec] = std::to_chars(text.data(), text.data() + text.size(), v, format, precision);
  text.resize(ec == std::errc{} ? static_cast<std::size_t>(end - text.data()) : 0);
  return text;
}

/// printf's "%.<precision>f" in the C locale: "0.5000".
inline std::string fixed_text(double v, int precision) {
  return number_chars(v, std::chars_format::fixed, precision < 0 ? 0 : precision);
}

/// printf's "%.<precision>g" in the C locale: "0.123456789".
inline std::string general_text(double v, int precision) {
  return number_chars(v, std::chars_format::general, precision < 1 ? 1 : precision);
}

/// printf's "%a" in the C locale: hexadecimal, from which `parse_number` gives back the same bits.
inline std::string exact_text(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::hex);
  if (ec != std::errc{}) return "?";
  std::string text(buf, end);
  const std::size_t digits = text.starts_with('-') ? 1 : 0;
  if (text.find_first_of("0123456789abcdef") == digits) text.insert(digits, "0x");  // not for inf and nan
  return text;
}

/// The whole of `text` as a number, as strtod reads it in the C locale: decimal ("0.25", "1e-3"), hexadecimal
/// ("0x1.8p+1", as `exact_text` writes it), "inf", "nan", each with an optional '-'. Nothing else, no spaces:
/// std::nullopt. Values beyond the range of a double are refused too.
inline std::optional<double> parse_number(std::string_view text) {
  const bool negative = text.starts_with('-');
  std::string_view digits = text.substr(negative ? 1 : 0);
  auto format = std::chars_format::general;
  if (digits.starts_with("0x") || digits.starts_with("0X")) {
    digits.remove_prefix(2);
    format = std::chars_format::hex;
  }
  // from_chars would take a second sign, and "inf" or "nan" after "0x".
  if (digits.empty() || digits.front() == '-' || digits.front() == '+') return std::nullopt;
  const char c = digits.front();
  const bool hex_digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  if (format == std::chars_format::hex && !hex_digit && c != '.') return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, format);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return negative ? -v : v;
}

}  // namespace mwstrat::detail
