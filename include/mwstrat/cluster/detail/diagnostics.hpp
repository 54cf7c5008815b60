#pragma once
// Message building for the cluster family: every config_error it throws reads
//   <source>: <json path>: <offending value and why>
// and every value is quoted so that control characters or binary junk never reach a terminal raw.

#include <mwstrat/error.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat::detail {

/// Values longer than this are cut in messages; a 4 MB TF_CONFIG must not become a 4 MB exception message.
inline constexpr std::size_t cluster_quote_limit = 80;

inline void append_escaped_byte(std::string& out, unsigned char c) {
  static constexpr char hex[] = "0123456789abcdef";
  switch (c) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    default: break;
  }
  if (c < 0x20 || c >= 0x7f) {
    out += (c < 0x20) ? "\\u00" : "\\x";
    out += hex[c >> 4];
    out += hex[c & 0xf];
    return;
  }
  out += static_cast<char>(c);
}

/// `text` with bytes outside printable ASCII as \xNN (and `"`/`\\` escaped), cut after the limit with "...".
[[nodiscard]] inline std::string escape(std::string_view text, std::size_t limit = cluster_quote_limit,
                                        bool escape_quotes = true) {
  std::string out;
  const std::size_t n = std::min(text.size(), limit);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!escape_quotes && (c == '"' || c == '\\')) {
      out += static_cast<char>(c);
    } else {
      append_escaped_byte(out, c);
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

/// `text` in double quotes, JSON-style escapes, bytes outside printable ASCII as \xNN, cut after the limit.
[[nodiscard]] inline std::string quote(std::string_view text, std::size_t limit = cluster_quote_limit) {
  std::string out = "\"";
  out += escape(text, limit);
  if (out.size() >= 3 && out.compare(out.size() - 3, 3, "...") == 0 && text.size() > limit) {
    out.insert(out.size() - 3, 1, '"');
  } else {
    out += '"';
  }
  return out;
}

/// A member step of a JSON path: `.key` for identifier-like keys, `["odd key"]` otherwise.
[[nodiscard]] inline std::string path_member(std::string_view parent, std::string_view key) {
  const bool plain = !key.empty() && key.size() <= 64 &&
                     std::all_of(key.begin(), key.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                              c == '_' || c == '-';
                     });
  std::string out(parent);
  if (plain) {
    if (!out.empty()) out += '.';
    out += key;
  } else {
    out += '[';
    out += quote(key, 40);
    out += ']';
  }
  return out;
}

/// An index step of a JSON path: `parent[i]`.
[[nodiscard]] inline std::string path_index(std::string_view parent, std::size_t index) {
  std::string out(parent);
  out += '[';
  out += std::to_string(index);
  out += ']';
  return out;
}

/// Builds "<source>: <path>: <what>" (the path left out when empty).
[[nodiscard]] inline std::string cluster_message(std::string_view source, std::string_view path,
                                                 std::string_view what) {
  std::string message(source);
  message += ": ";
  if (!path.empty()) {
    message += path;
    message += ": ";
  }
  message += what;
  return message;
}

/// The one throw site of the family's configuration errors (kept out of line in spirit: templates stay lean).
[[noreturn]] inline void throw_cluster_error(std::string_view source, std::string_view path, std::string_view what) {
  throw config_error({"cluster"}, cluster_message(source, path, what));
}

/// Levenshtein distance, bounded inputs only (keys and job names): used for "did you mean" hints.
[[nodiscard]] inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  if (a.size() > 64 || b.size() > 64) return 65;
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t cost = (a[i - 1] == b[j - 1]) ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// "; did you mean 'cluster'?" when `got` is a near miss of one of `known`, else "".
[[nodiscard]] inline std::string did_you_mean(std::string_view got, std::initializer_list<std::string_view> known) {
  std::string lowered(got);
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; });
  for (const std::string_view candidate : known) {
    if (lowered == candidate || edit_distance(lowered, candidate) <= 2) {
      return "; did you mean '" + std::string(candidate) + "'?";
    }
  }
  return {};
}

/// "a, b, c" from a list of names.
[[nodiscard]] inline std::string join_names(std::initializer_list<std::string_view> names) {
  std::string out;
  for (const std::string_view name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace mwstrat::detail
