#pragma once
// What mwstrat-launch and its remote agent (`mwstrat-launch --remote-agent`, started on a node over ssh) say to each
// other. Everything secret travels on ssh's stdin, never on a command line: a command line is world-readable on the
// node (ps, /proc/PID/cmdline), a process's environment and stdin are not.
//
// launcher -> agent (the agent's stdin): one spec, then control lines until EOF.
//   spec:    "mwstrat-agent 1\n", then items "KEY LENGTH\nBYTES\n" (BYTES may hold anything, newlines too),
//            ended by "end 0\n\n". Keys: host, cwd, arg (repeated: the program and its arguments), env (repeated:
//            NAME=VALUE), grace_ms, liveness_ms, report (1: give the worker a report descriptor).
//   control: "ping\n" (the launcher is alive; see liveness_ms) and "signal N\n" (send N to the worker's group).
//   EOF, or no line for liveness_ms: the launcher or the connection is gone; the agent ends its worker.
// agent -> launcher (the agent's stderr, so the worker's own output on stdout stays untouched): lines
//   "mwstrat-agent: started PID", "mwstrat-agent: lost RANK GENERATION" (a survivor's report, relayed),
//   "mwstrat-agent: signal N" or "mwstrat-agent: exit N" (how the worker ended: ssh carries only exit codes, and
//   its own failures are 255 too), "mwstrat-agent: error WHY" (the worker could not be started).
//   The agent's exit status is the worker's (128 + N for signal N).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat_launch {

inline constexpr std::string_view agent_magic = "mwstrat-agent 1\n";
inline constexpr std::string_view agent_line_prefix = "mwstrat-agent: ";
// A spec larger than this is not one (a stranger on the agent's stdin must not make it allocate without bound).
inline constexpr std::size_t max_spec_bytes = std::size_t{4} << 20;

struct agent_spec {
  std::string host;  // the name the launcher knows the node by, for messages
  std::string cwd;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  int grace_ms = 5000;
  int liveness_ms = 10000;
  bool report = false;
};

inline void put_item(std::string& out, std::string_view key, std::string_view value) {
  out += key;
  out += ' ';
  out += std::to_string(value.size());
  out += '\n';
  out += value;
  out += '\n';
}

[[nodiscard]] inline std::string encode(const agent_spec& s) {
  std::string out(agent_magic);
  put_item(out, "host", s.host);
  put_item(out, "cwd", s.cwd);
  for (const auto& a : s.argv) put_item(out, "arg", a);
  for (const auto& [name, value] : s.env) put_item(out, "env", name + "=" + value);
  put_item(out, "grace_ms", std::to_string(s.grace_ms));
  put_item(out, "liveness_ms", std::to_string(s.liveness_ms));
  put_item(out, "report", s.report ? "1" : "0");
  put_item(out, "end", "");
  return out;
}

// Incremental decoding: feed bytes as they come; `done` once "end" is read (what follows it stays in `rest`).
class spec_decoder {
 public:
  // Appends bytes; returns an error text when the input is not a spec.
  std::optional<std::string> feed(std::string_view bytes) {
    buffer_.append(bytes);
    if (buffer_.size() > max_spec_bytes) return "the spec is larger than 4 MiB";
    if (!magic_seen_) {
      if (buffer_.size() < agent_magic.size()) {
        if (agent_magic.substr(0, buffer_.size()) != buffer_) return "stdin does not start with a launcher's spec";
        return std::nullopt;
      }
      if (buffer_.compare(0, agent_magic.size(), agent_magic) != 0) {
        return "stdin does not start with a launcher's spec";
      }
      buffer_.erase(0, agent_magic.size());
      magic_seen_ = true;
    }
    while (!done_) {
      const std::size_t nl = buffer_.find('\n');
      if (nl == std::string::npos) return std::nullopt;
      const std::size_t space = buffer_.find(' ');
      if (space == std::string::npos || space > nl) return "a spec item has no length";
      const std::string key = buffer_.substr(0, space);
      std::size_t length = 0;
      for (std::size_t i = space + 1; i < nl; ++i) {
        const char c = buffer_[i];
        if (c < '0' || c > '9' || length > max_spec_bytes) return "a spec item's length is not a number";
        length = length * 10 + static_cast<std::size_t>(c - '0');
      }
      if (buffer_.size() < nl + 1 + length + 1) return std::nullopt;
      if (buffer_[nl + 1 + length] != '\n') return "spec item '" + key + "' does not end where its length says";
      std::string value = buffer_.substr(nl + 1, length);
      buffer_.erase(0, nl + 1 + length + 1);
      if (auto problem = take(key, std::move(value))) return problem;
    }
    return std::nullopt;
  }
  [[nodiscard]] bool done() const { return done_; }
  [[nodiscard]] const agent_spec& spec() const { return spec_; }
  // What came after the spec (the first control lines).
  [[nodiscard]] std::string& rest() { return buffer_; }

 private:
  static std::optional<int> number(const std::string& v) {
    if (v.empty() || v.size() > 9) return std::nullopt;
    int n = 0;
    for (const char c : v) {
      if (c < '0' || c > '9') return std::nullopt;
      n = n * 10 + (c - '0');
    }
    return n;
  }
  std::optional<std::string> take(const std::string& key, std::string value) {
    if (key == "host") spec_.host = std::move(value);
    else if (key == "cwd") spec_.cwd = std::move(value);
    else if (key == "arg") spec_.argv.push_back(std::move(value));
    else if (key == "env") {
      const std::size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return "spec item env is not NAME=VALUE";
      spec_.env.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else if (key == "grace_ms" || key == "liveness_ms") {
      const auto n = number(value);
      if (!n) return "spec item " + key + " is not a number";
      (key == "grace_ms" ? spec_.grace_ms : spec_.liveness_ms) = *n;
    } else if (key == "report") spec_.report = value == "1";
    else if (key == "end") {
      if (spec_.argv.empty()) return "the spec names no program";
      done_ = true;
    } else return "unknown spec item '" + key + "'";
    return std::nullopt;
  }
  std::string buffer_;
  bool magic_seen_ = false;
  bool done_ = false;
  agent_spec spec_;
};

}  // namespace mwstrat_launch
