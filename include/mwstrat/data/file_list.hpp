#pragma once
/// \file
/// The files of a data set, from a list of paths or glob patterns: what `tf.io.gfile.glob` and
/// `tf.data.Dataset.list_files(shuffle=False)` give a TFRecord pipeline.
///
/// Patterns: wildcards in the **file-name part only** (the folder part is a literal path):
///   `*` any run of characters, `?` one character, `[abc]`, `[a-z]`, `[!abc]` / `[^abc]` one of (not of) a set;
///   `\` makes the next character literal. As in a shell, a wildcard does not match a leading `.` (hidden files
///   are matched only by a pattern that starts with `.`), and no wildcard matches `/`. A pattern without
///   wildcards names one file. Not supported: `**`, `{a,b}`, wildcards in folder names.
///
/// The result is sorted by name (byte order), the same on every worker, which is what sharding by file needs.
/// Refused, each a `data_error` (component `data`) naming the pattern: a pattern that matches nothing, a folder
/// that does not exist, a pattern or a match that is a directory (a data set's files are regular files: a
/// directory named where a file was expected is almost always a missing `/*`).

#include <mwstrat/error.hpp>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mwstrat::detail {

/// True when `name` matches the glob `pattern` (both one path component; see file_list.hpp).
[[nodiscard]] inline bool glob_match(std::string_view pattern, std::string_view name) noexcept {
  if (!name.empty() && name[0] == '.' && (pattern.empty() || pattern[0] != '.')) return false;
  // Iterative matching with one backtrack point for the last '*' (linear in practice, never exponential).
  std::size_t p = 0, n = 0, star_p = std::string_view::npos, star_n = 0;
  const auto one = [&](std::size_t& pi, char c) -> bool {  // matches one non-'*' pattern element, advancing pi
    if (pattern[pi] == '?') return ++pi, true;
    if (pattern[pi] == '\\' && pi + 1 < pattern.size()) return pi += 2, pattern[pi - 1] == c;
    if (pattern[pi] == '[') {
      std::size_t i = pi + 1;
      const bool negate = i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^');
      if (negate) ++i;
      bool hit = false;
      const auto u = [](char ch) { return static_cast<unsigned char>(ch); };
      for (bool first = true; i < pattern.size() && (pattern[i] != ']' || first); first = false) {
        char lo = pattern[i];
        if (lo == '\\' && i + 1 < pattern.size()) lo = pattern[++i];
        ++i;
        char hi = lo;
        if (i + 1 < pattern.size() && pattern[i] == '-' && pattern[i + 1] != ']') {
          hi = pattern[i + 1];
          i += 2;
          if (hi == '\\' && i < pattern.size()) hi = pattern[i++];
        }
        if (u(lo) <= u(c) && u(c) <= u(hi)) hit = true;
      }
      if (i >= pattern.size()) return ++pi, c == '[';  // no closing ']': a literal '['
      pi = i + 1;
      return hit != negate;
    }
    return pattern[pi++] == c;
  };
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star_p = ++p;
      star_n = n;
      continue;
    }
    std::size_t q = p;
    if (p < pattern.size() && one(q, name[n])) {
      p = q;
      ++n;
      continue;
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p;
    n = ++star_n;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

[[nodiscard]] inline bool has_wildcard(std::string_view s) noexcept {
  return s.find_first_of("*?[") != std::string_view::npos;
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// The files `pattern` names, sorted (see the file comment); throws data_error when it names none.
[[nodiscard]] inline std::vector<std::filesystem::path> list_files(const std::string& pattern) {
  namespace fs = std::filesystem;
  const auto refuse = [&](const std::string& what) { return data_error({"data"}, pattern, pattern + ": " + what); };
  const fs::path p(pattern);
  const std::string name = p.filename().string();
  std::error_code ec;
  if (detail::has_wildcard(p.parent_path().string())) {
    throw refuse("wildcards in a folder name are not supported (only in the file name)");
  }
  if (!detail::has_wildcard(name)) {
    const auto status = fs::status(p, ec);
    if (name.empty() || fs::is_directory(status)) {
      throw refuse("a directory, not a file (to read the files in it, give \"" +
                   (fs::path(pattern) / "*").string() + "\")");
    }
    if (!fs::exists(status)) throw refuse("no such file (the pattern matches nothing)");
    if (!fs::is_regular_file(status)) throw refuse("not a regular file (a device, socket or pipe)");
    return {p};
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw refuse("the folder " + dir.string() + " does not exist");
  std::vector<fs::path> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (!detail::glob_match(name, entry)) continue;
    const fs::path match = p.has_parent_path() ? p.parent_path() / entry : fs::path(entry);
    if (it->is_directory(ec)) throw refuse("matches " + match.string() + ", a directory, not a file");
    found.push_back(match);
  }
  if (ec) throw data_error({"data"}, pattern, pattern + ": cannot list " + dir.string() + ": " + ec.message());
  if (found.empty()) throw refuse("the pattern matches no file");
  std::sort(found.begin(), found.end());
  return found;
}

/// The files of several patterns, in the order of the patterns (each pattern's files sorted, a file named by two
/// patterns listed once, where first named); throws data_error when any pattern names none, or none is given.
[[nodiscard]] inline std::vector<std::filesystem::path> list_files(std::span<const std::string> patterns) {
  if (patterns.empty()) throw data_error({"data"}, "", "list_files: no file pattern given");
  std::vector<std::filesystem::path> all;
  for (const std::string& pattern : patterns) {
    for (auto& f : list_files(pattern)) {
      if (std::find(all.begin(), all.end(), f) == all.end()) all.push_back(std::move(f));
    }
  }
  return all;
}

}  // namespace mwstrat::data
