#pragma once
/// \file
/// Slurm's compressed host lists and task counts: `node[01-03,07],gpu5` and `2(x3),1`.
///
/// A host list is a comma-separated list of items; an item is literal text with bracket groups, each group a
/// comma-separated list of numbers `7` or ranges `01-03`. A range is zero-padded to the width of its lower
/// bound (`[08-10]` gives 08, 09, 10; `[8-10]` gives 8, 9, 10). Several groups in one item expand as a cartesian
/// product, leftmost group outermost: `r[1-2]n[1-2]` gives r1n1, r1n2, r2n1, r2n2.

#include <mwstrat/cluster/detail/diagnostics.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat {

/// The most hosts one host list may expand to; more is a malformed list, not a cluster.
inline constexpr std::size_t max_hostlist_hosts = 65536;

namespace detail {

struct hostlist_range {
  std::uint64_t low = 0;
  std::uint64_t high = 0;
  std::size_t width = 0;
};

// One piece of an item: literal text, or a bracket group (literal empty, ranges not).
struct hostlist_piece {
  std::string literal;
  std::vector<hostlist_range> ranges;
  [[nodiscard]] std::uint64_t count() const {
    if (ranges.empty()) return 1;
    std::uint64_t n = 0;
    for (const auto& r : ranges) n += r.high - r.low + 1;
    return n;
  }
};

[[nodiscard]] inline bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_';
}

[[nodiscard]] inline std::uint64_t parse_hostlist_number(std::string_view digits, std::string_view source,
                                                         std::string_view path, std::string_view whole) {
  if (digits.empty() || digits.size() > 9) {
    throw_cluster_error(source, path,
                        quote(whole) + ": " + (digits.empty() ? "an empty number" : "a number longer than 9 digits") +
                            " in a [...] group; expected e.g. node[01-04,07]");
  }
  std::uint64_t value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') {
      throw_cluster_error(source, path,
                          quote(whole) + ": " + quote(digits, 16) +
                              " in a [...] group is not a number or range; expected e.g. node[01-04,07]");
    }
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

[[nodiscard]] inline std::vector<hostlist_range> parse_hostlist_group(std::string_view group, std::string_view source,
                                                                      std::string_view path, std::string_view whole) {
  std::vector<hostlist_range> ranges;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = group.find(',', start);
    const std::string_view part = group.substr(start, comma == std::string_view::npos ? group.npos : comma - start);
    hostlist_range range;
    const std::size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      range.low = range.high = parse_hostlist_number(part, source, path, whole);
      range.width = part.size();
    } else {
      range.low = parse_hostlist_number(part.substr(0, dash), source, path, whole);
      range.high = parse_hostlist_number(part.substr(dash + 1), source, path, whole);
      range.width = dash;
      if (range.high < range.low) {
        throw_cluster_error(source, path,
                            quote(whole) + ": the range " + quote(part, 24) + " runs backwards; write low-high");
      }
    }
    ranges.push_back(range);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

[[nodiscard]] inline std::vector<hostlist_piece> parse_hostlist_item(std::string_view item, std::string_view source,
                                                                     std::string_view path, std::string_view whole) {
  std::vector<hostlist_piece> pieces;
  std::size_t i = 0;
  while (i < item.size()) {
    if (item[i] == '[') {
      const std::size_t close = item.find(']', i + 1);
      const std::string_view group = item.substr(i + 1, close == std::string_view::npos ? 0 : close - i - 1);
      if (close == std::string_view::npos || group.find('[') != std::string_view::npos) {
        throw_cluster_error(source, path, quote(whole) + ": a '[' has no matching ']'");
      }
      hostlist_piece piece;
      piece.ranges = parse_hostlist_group(group, source, path, whole);
      pieces.push_back(std::move(piece));
      i = close + 1;
      continue;
    }
    if (item[i] == ']') throw_cluster_error(source, path, quote(whole) + ": a ']' has no matching '['");
    if (!is_host_char(item[i])) {
      throw_cluster_error(source, path,
                          quote(whole) + ": " + quote(item.substr(i, 1)) + " cannot appear in a host name");
    }
    if (pieces.empty() || !pieces.back().ranges.empty()) pieces.emplace_back();
    pieces.back().literal += item[i];
    ++i;
  }
  return pieces;
}

inline void append_number(std::string& out, std::uint64_t value, std::size_t width) {
  const std::string digits = std::to_string(value);
  if (digits.size() < width) out.append(width - digits.size(), '0');
  out += digits;
}

inline void expand_pieces(const std::vector<hostlist_piece>& pieces, std::size_t at, std::string& prefix,
                          std::vector<std::string>& out) {
  if (at == pieces.size()) {
    out.push_back(prefix);
    return;
  }
  const hostlist_piece& piece = pieces[at];
  const std::size_t mark = prefix.size();
  if (piece.ranges.empty()) {
    prefix += piece.literal;
    expand_pieces(pieces, at + 1, prefix, out);
  } else {
    for (const hostlist_range& range : piece.ranges) {
      for (std::uint64_t n = range.low;; ++n) {
        append_number(prefix, n, range.width);
        expand_pieces(pieces, at + 1, prefix, out);
        prefix.resize(mark);
        if (n == range.high) break;
      }
    }
  }
  prefix.resize(mark);
}

}  // namespace detail

/// Expands a Slurm host list into host names, in order (duplicates kept). Throws `config_error` naming `source`,
/// `path` and the list on unbalanced brackets, bad numbers or ranges, empty items, characters no host name has,
/// or more than `max_hostlist_hosts` hosts.
[[nodiscard]] inline std::vector<std::string> expand_hostlist(std::string_view text, std::string_view source = "Slurm",
                                                              std::string_view path = "SLURM_STEP_NODELIST") {
  if (text.empty()) detail::throw_cluster_error(source, path, "\"\" is empty; expected e.g. node[01-04],gpu5");
  // Split at the commas outside brackets.
  std::vector<std::string_view> items;
  std::size_t depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']' && depth > 0) --depth;
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      const std::string_view item = text.substr(start, i - start);
      if (item.empty()) {
        detail::throw_cluster_error(source, path, detail::quote(text) + ": an empty entry (two commas in a row, or "
                                                                        "a comma at an end)");
      }
      items.push_back(item);
      start = i + 1;
    }
  }
  std::vector<std::vector<detail::hostlist_piece>> parsed;
  std::uint64_t total = 0;
  for (const std::string_view item : items) {
    parsed.push_back(detail::parse_hostlist_item(item, source, path, text));
    std::uint64_t count = 1;
    for (const auto& piece : parsed.back()) {
      count *= piece.count();
      if (count > max_hostlist_hosts) break;
    }
    total += count;
    if (total > max_hostlist_hosts) {
      detail::throw_cluster_error(source, path,
                                  detail::quote(text) + ": expands to more than " +
                                      std::to_string(max_hostlist_hosts) + " hosts");
    }
  }
  std::vector<std::string> hosts;
  hosts.reserve(static_cast<std::size_t>(total));
  for (const auto& pieces : parsed) {
    std::string prefix;
    detail::expand_pieces(pieces, 0, prefix, hosts);
  }
  return hosts;
}

/// Expands Slurm's task counts per node, `2(x3),1` -> {2, 2, 2, 1}. Throws `config_error` naming `source`,
/// `path` and the text when an entry is not `N` or `N(xM)` with N, M >= 1, or the list is longer than
/// `max_hostlist_hosts` nodes.
[[nodiscard]] inline std::vector<int> expand_tasks_per_node(std::string_view text, std::string_view source = "Slurm",
                                                            std::string_view path = "SLURM_STEP_TASKS_PER_NODE") {
  const auto fail = [&](std::string_view why) {
    detail::throw_cluster_error(source, path, detail::quote(text) + ": " + std::string(why));
  };
  const auto number = [&](std::string_view digits) -> std::uint64_t {
    if (digits.empty() || digits.size() > 9) fail("expected entries like 2 or 2(x3)");
    std::uint64_t value = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') fail("expected entries like 2 or 2(x3)");
      value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (value == 0) fail("every count must be at least 1");
    return value;
  };
  std::vector<int> counts;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view entry = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    std::uint64_t tasks = 0;
    std::uint64_t repeat = 1;
    if (const std::size_t open = entry.find("(x"); open != std::string_view::npos) {
      if (entry.back() != ')') fail("expected entries like 2 or 2(x3)");
      tasks = number(entry.substr(0, open));
      repeat = number(entry.substr(open + 2, entry.size() - open - 3));
    } else {
      tasks = number(entry);
    }
    if (repeat > max_hostlist_hosts || counts.size() + repeat > max_hostlist_hosts) {
      fail("lists more than " + std::to_string(max_hostlist_hosts) + " nodes");
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(tasks));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return counts;
}

}  // namespace mwstrat
