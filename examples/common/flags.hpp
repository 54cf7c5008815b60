#pragma once
// The examples' command lines: every value checked before anything loads or connects.
//
// A refusal names the flag and the value ("--epochs: '3000000000' is not a whole number in [1, 2147483647]"),
// prints the usage to stderr and exits with status 2; --help (or -h) prints the usage to stdout and exits with 0.
// Numbers are read with std::from_chars, whatever the locale: whole numbers as integers of the flag's own type (a
// 64-bit seed keeps every digit, a count that does not fit is refused, never narrowed), real numbers only finite
// (no nan, no inf) and within the flag's range.
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace example_flags {

/// `text`, all of it, as a whole number of type T; nullopt when it is not one or T cannot hold it.
template <std::integral T>
[[nodiscard]] std::optional<T> to_integer(std::string_view text) {
  T v{};
  const char* const end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || stop != end) return std::nullopt;
  return v;
}

/// `text`, all of it, as a finite real number; nullopt otherwise.
[[nodiscard]] inline std::optional<double> to_real(std::string_view text) {
  double v = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || stop != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

/// A bound as a reader would write it: 0.001, 1000000 (not 1e-03, 1e+06).
[[nodiscard]] inline std::string bound_text(double v) {
  char buf[64];
  const auto [stop, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return ec == std::errc{} ? std::string(buf, stop) : std::to_string(v);
}

/// Walks a command line flag by flag:
///
///   example_flags::reader args(argc, argv, "my_program", usage_text);
///   while (args.next()) {
///     if (args.is("--epochs")) epochs = args.whole(1);                      // an int in [1, INT_MAX]
///     else if (args.is("--seed")) seed = args.whole<std::uint64_t>(0);
///     else if (args.is("--learning-rate")) rate = args.positive();         // finite, > 0
///     else args.unknown();
///   }
class reader {
 public:
  reader(int argc, char** argv, std::string program, std::string usage)
      : argc_(argc), argv_(argv), program_(std::move(program)), usage_(std::move(usage)) {}

  /// Moves to the next flag; false after the last one. --help and -h print the usage and end the program (status 0).
  bool next() {
    if (++at_ >= argc_) return false;
    flag_ = argv_[at_];
    if (flag_ == "--help" || flag_ == "-h") {
      std::cout << usage_;
      std::exit(0);
    }
    return true;
  }
  [[nodiscard]] const std::string& flag() const { return flag_; }
  [[nodiscard]] bool is(std::string_view name) const { return flag_ == name; }

  /// The flag's value: the next argument.
  std::string value() {
    if (at_ + 1 >= argc_) fail(flag_ + " needs a value");
    return argv_[++at_];
  }

  /// The value as a whole number of type T in [min, max].
  template <std::integral T>
  T whole(T min, T max = std::numeric_limits<T>::max()) {
    const std::string text = value();
    const std::optional<T> v = to_integer<T>(text);
    if (!v || *v < min || *v > max) {
      fail(flag_ + ": '" + text + "' is not a whole number in [" + std::to_string(min) + ", " + std::to_string(max) +
           "]");
    }
    return *v;
  }

  /// The value as a finite real number in [min, max].
  double real(double min, double max) {
    const std::string text = value();
    const std::optional<double> v = to_real(text);
    if (!v || *v < min || *v > max) {
      fail(flag_ + ": '" + text + "' is not a number in [" + bound_text(min) + ", " + bound_text(max) + "]");
    }
    return *v;
  }

  /// The value as a finite real number above 0 and at most `max` (none: any finite number).
  double positive(std::optional<double> max = std::nullopt) {
    const std::string text = value();
    const std::optional<double> v = to_real(text);
    if (!v || *v <= 0 || (max && *v > *max)) {
      fail(flag_ + ": '" + text + "' is not " +
           (max ? "a number in (0, " + bound_text(*max) + "]" : std::string("a finite number above 0")));
    }
    return *v;
  }

  /// The value as `epoch` or a whole number of steps above 0 (BackupAndRestore's save_freq), as given.
  std::string epoch_or_steps() {
    std::string text = value();
    if (text != "epoch" && to_integer<std::size_t>(text).value_or(0) == 0)
      fail(flag_ + ": '" + text + "' is neither 'epoch' nor a positive number of steps");
    return text;
  }

  /// Refuses the current flag as unknown.
  [[noreturn]] void unknown() const { fail("unknown flag '" + flag_ + "'"); }

  /// Ends the program with a usage error: `problem` (which names the flag and the value), the usage, status 2.
  [[noreturn]] void fail(const std::string& problem) const {
    std::cerr << program_ << ": " << problem << "\n" << usage_;
    std::exit(2);
  }

 private:
  int argc_;
  char** argv_;
  int at_ = 0;
  std::string flag_;
  std::string program_;
  std::string usage_;
};

}  // namespace example_flags
