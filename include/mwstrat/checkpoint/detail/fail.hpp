#pragma once
/// \file
/// Out-of-line throw helpers of the checkpoint family: one place builds every `checkpoint_error`.

#include <mwstrat/error.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace mwstrat::detail {

/// Throws `checkpoint_error` for `path`, with the message "<path>: <what>".
[[noreturn]] inline void checkpoint_fail(std::optional<int> rank, const std::filesystem::path& path,
                                         std::string_view what) {
  std::string message = path.string();
  message += ": ";
  message += what;
  throw checkpoint_error({"checkpoint", rank}, path.string(), message);
}

/// As `checkpoint_fail`, with the text of `errno_value` appended (for a failed system call).
[[noreturn]] inline void checkpoint_fail_errno(std::optional<int> rank, const std::filesystem::path& path,
                                               std::string_view what, int errno_value) {
  std::string message(what);
  message += ": ";
  message += std::strerror(errno_value);
  checkpoint_fail(rank, path, message);
}

}  // namespace mwstrat::detail
