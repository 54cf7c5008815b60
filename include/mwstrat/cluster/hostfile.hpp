#pragma once
/// \file
/// Which hosts a job runs on and how many workers each takes: `mwstrat-launch --hosts node1:2,node2:2` and
/// `--hostfile FILE`, the file in the form Open MPI, Horovod and DeepSpeed read:
///
///     # comments and blank lines are ignored
///     node1 slots=2
///     node2 slots=2   # a comment may end a line
///     node3           # slots=1 when not given
///
/// A host is a name (RFC 1123 labels, `_` allowed) or an IPv4 address. A host named twice, a count outside
/// [1, max_slots_per_host], or anything else on a line is refused: a `config_error` naming the file, the line and
/// what was wrong (`hosts.txt:3: "slots=x" is not slots=N with N a whole number in [1, 1024]`).

#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/hostlist.hpp>
#include <mwstrat/error.hpp>

#include <charconv>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mwstrat {

/// The most workers one host may take (the launcher's bound on a job).
inline constexpr int max_slots_per_host = 1024;

/// One host of a job and how many workers it runs.
struct host_slots {
  std::string host;
  int slots = 1;
  friend bool operator==(const host_slots&, const host_slots&) = default;
};

namespace detail {

[[noreturn]] inline void throw_hostfile_error(std::string_view where, const std::string& why) {
  throw config_error({"cluster"}, std::string(where) + ": " + why);
}

[[nodiscard]] inline bool is_host_name(std::string_view name) {
  if (name.empty() || name.size() > 253 || name.front() == '-' || name.front() == '.' || name.back() == '.') {
    return false;
  }
  for (const char c : name) {
    if (!is_host_char(c)) return false;
  }
  return name.find("..") == std::string_view::npos;
}

[[nodiscard]] inline int parse_slots(std::string_view digits, std::string_view where, std::string_view shown) {
  int n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || n < 1 ||
      n > max_slots_per_host) {
    throw_hostfile_error(where, quote(shown) + " is not slots=N with N a whole number in [1, " +
                                    std::to_string(max_slots_per_host) + "]");
  }
  return n;
}

inline void add_host(std::vector<host_slots>& hosts, std::vector<std::string>& seen_at, host_slots entry,
                     std::string where) {
  for (std::size_t k = 0; k < hosts.size(); ++k) {
    if (hosts[k].host == entry.host) {
      throw_hostfile_error(where, "host " + quote(entry.host) + " is named twice (first at " + seen_at[k] +
                                      "); give it one entry with all its slots");
    }
  }
  hosts.push_back(std::move(entry));
  seen_at.push_back(std::move(where));
}

}  // namespace detail

/// Parses a hostfile's text (see the file comment); `file` names it in errors. Throws `config_error` on a bad line
/// and when no host is listed.
[[nodiscard]] inline std::vector<host_slots> parse_hostfile(std::string_view text, std::string_view file) {
  std::vector<host_slots> hosts;
  std::vector<std::string> seen_at;
  std::size_t line_no = 0;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    const std::string where = std::string(file) + ":" + std::to_string(line_no);
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> words;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      const std::size_t from = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      if (i > from) words.push_back(line.substr(from, i - from));
    }
    if (words.empty()) continue;
    if (!detail::is_host_name(words[0])) {
      detail::throw_hostfile_error(where, detail::quote(words[0]) +
                                              " is not a host name or IPv4 address; expected a line like "
                                              "\"node1 slots=2\"");
    }
    host_slots entry{std::string(words[0]), 1};
    bool have_slots = false;
    for (std::size_t w = 1; w < words.size(); ++w) {
      const std::string_view word = words[w];
      if (word.substr(0, 6) == "slots=" && !have_slots) {
        entry.slots = detail::parse_slots(word.substr(6), where, word);
        have_slots = true;
        continue;
      }
      detail::throw_hostfile_error(
          where, detail::quote(word) +
                     (word.substr(0, 6) == "slots=" ? " gives the slots a second time"
                                                    : " is not understood; a line is \"HOST [slots=N]\" (N workers)"));
    }
    detail::add_host(hosts, seen_at, std::move(entry), where);
  }
  if (hosts.empty()) detail::throw_hostfile_error(file, "lists no host (only comments and blank lines)");
  return hosts;
}

/// Reads and parses the hostfile at `path`. Throws `config_error` when it cannot be read or is malformed.
[[nodiscard]] inline std::vector<host_slots> read_hostfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error({"cluster"}, "--hostfile " + detail::quote(path) + ": cannot be read");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return parse_hostfile(text, path);
}

/// Parses `--hosts NAME:N[,NAME:N...]`. Throws `config_error` naming the entry and what was wrong.
[[nodiscard]] inline std::vector<host_slots> parse_host_list(std::string_view text) {
  std::vector<host_slots> hosts;
  std::vector<std::string> seen_at;
  for (std::size_t from = 0; from <= text.size();) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string entry(text.substr(from, comma - from));
    from = comma + 1;
    const std::size_t colon = entry.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw config_error({"cluster"}, "--hosts: '" + detail::escape(entry) + "' is not NAME:WORKERS");
    }
    const std::string name = entry.substr(0, colon);
    if (!detail::is_host_name(name)) {
      throw config_error({"cluster"}, "--hosts: '" + detail::escape(name) +
                                          "' is not a host name or IPv4 address (in '" + detail::escape(entry) + "')");
    }
    const std::string digits = entry.substr(colon + 1);
    int n = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || n < 1 ||
        n > max_slots_per_host) {
      throw config_error({"cluster"}, "--hosts " + name + ": '" + detail::escape(digits) +
                                          "' is not a number in [1, " + std::to_string(max_slots_per_host) + "]");
    }
    detail::add_host(hosts, seen_at, host_slots{name, n}, "--hosts " + name);
  }
  return hosts;
}

}  // namespace mwstrat
