#pragma once
/// \file
/// The launcher's protocol: what `mwstrat-launch` (tools/mwstrat_launch.cpp) tells each worker it starts, read once
/// at the edge from an `environment` (cluster/environment.hpp: the process's, or a fixed map in tests). `fit` applies
/// it to its in-memory recovery options where the program left them at their defaults (train/in_memory_recovery.hpp),
/// so that any program calling `fit` under `mwstrat-launch --replace-lost` survives a lost worker with no code of its
/// own.
///
///   | variable                      | field              | meaning                                                  |
///   |-------------------------------|--------------------|----------------------------------------------------------|
///   | `MWSTRAT_LAUNCH_ATTEMPT`      | `attempt`          | the group's restart count (0: the first start)           |
///   | `MWSTRAT_REPLACE_LOST`        | `replace_lost`     | `1`: a lost worker is replaced (in-memory recovery on)   |
///   | `MWSTRAT_RECOVERY_GENERATION` | `generation`       | the ring generation this worker joins (more than 0: a replacement) |
///   | `MWSTRAT_LAUNCH_REPORT_FD`    | `report_fd`        | where a survivor reports `lost RANK GENERATION`          |
///   | `MWSTRAT_RECOVERY_TIMEOUT_MS` | `recovery_timeout` | how long the survivors wait for a replacement            |
///   | `MWSTRAT_MIN_WORKERS`         | `min_workers`      | an elastic job: survivors shrink, down to this many      |
///   | `MWSTRAT_MAX_WORKERS`         | `max_workers`      | an elastic job grows with joiners, up to this many       |
///   | `MWSTRAT_SPARE_WAIT_MS`       | `spare_wait`       | after a shrink, how long to wait for a joiner first      |
///   | `MWSTRAT_JOIN_LISTEN`         | `join_listen`      | where this worker hears joiners while it is the chief    |
///   | `MWSTRAT_JOIN`                | `join_via`         | a joiner: the chiefs' join addresses, comma-separated    |
///
/// A value that is set but malformed is an `environment_error` (a `config_error`) naming the variable and what it expected.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mwstrat {

/// What the launcher told this worker (see the file comment); every field is its default outside a launcher.
struct launcher_environment {
  std::uint64_t attempt = 0;        ///< MWSTRAT_LAUNCH_ATTEMPT: the group's restart count
  bool replace_lost = false;        ///< MWSTRAT_REPLACE_LOST=1: lost workers are replaced
  std::uint64_t generation = 0;     ///< MWSTRAT_RECOVERY_GENERATION: the ring generation joined
  std::optional<int> report_fd;     ///< MWSTRAT_LAUNCH_REPORT_FD: the survivors' report channel
  std::optional<int> min_workers;   ///< MWSTRAT_MIN_WORKERS: an elastic job, going on down to this many workers
  std::optional<int> max_workers;   ///< MWSTRAT_MAX_WORKERS: an elastic job, taking joiners in up to this many
  /// MWSTRAT_SPARE_WAIT_MS: after a shrink, how long the survivors wait for a joiner before training smaller.
  std::optional<std::chrono::milliseconds> spare_wait;
  std::string join_listen;             ///< MWSTRAT_JOIN_LISTEN: host:port heard while this worker is the chief
  std::vector<std::string> join_via;   ///< MWSTRAT_JOIN: this worker joins a running job through these addresses
  /// MWSTRAT_RECOVERY_TIMEOUT_MS (milliseconds in (0, 10⁹], rounded up to whole milliseconds).
  std::optional<std::chrono::milliseconds> recovery_timeout;

  /// The most MWSTRAT_RECOVERY_TIMEOUT_MS may say (a million seconds, the examples' bound on every timeout).
  static constexpr double max_recovery_timeout_ms = 1e9;

  /// Reads the variables from `env` (the process environment by default).
  [[nodiscard]] static launcher_environment read(const environment& env = {}) {
    launcher_environment l;
    if (const auto v = env.get("MWSTRAT_LAUNCH_ATTEMPT"); v && !v->empty()) {
      l.attempt = whole(*v, "MWSTRAT_LAUNCH_ATTEMPT", "a non-negative whole number");
    }
    if (const auto v = env.get("MWSTRAT_REPLACE_LOST"); v && !v->empty()) {
      if (*v != "0" && *v != "1") fail("MWSTRAT_REPLACE_LOST", *v, "1 or 0");
      l.replace_lost = *v == "1";
    }
    if (const auto v = env.get("MWSTRAT_RECOVERY_GENERATION"); v && !v->empty()) {
      l.generation = whole(*v, "MWSTRAT_RECOVERY_GENERATION", "a non-negative whole number");
    }
    if (const auto v = env.get("MWSTRAT_LAUNCH_REPORT_FD"); v && !v->empty()) {
      const std::uint64_t fd = whole(*v, "MWSTRAT_LAUNCH_REPORT_FD", "a file descriptor");
      if (fd > 1'000'000) fail("MWSTRAT_LAUNCH_REPORT_FD", *v, "a file descriptor");
      l.report_fd = static_cast<int>(fd);
    }
    if (const auto v = env.get("MWSTRAT_MIN_WORKERS"); v && !v->empty()) {
      const std::uint64_t k = whole(*v, "MWSTRAT_MIN_WORKERS", "a whole number of workers from 1");
      if (k < 1 || k > 1'000'000) fail("MWSTRAT_MIN_WORKERS", *v, "a whole number of workers from 1");
      l.min_workers = static_cast<int>(k);
    }
    if (const auto v = env.get("MWSTRAT_MAX_WORKERS"); v && !v->empty()) {
      const std::uint64_t k = whole(*v, "MWSTRAT_MAX_WORKERS", "a whole number of workers from 1");
      if (k < 1 || k > 1'000'000) fail("MWSTRAT_MAX_WORKERS", *v, "a whole number of workers from 1");
      l.max_workers = static_cast<int>(k);
    }
    if (const auto v = env.get("MWSTRAT_SPARE_WAIT_MS"); v && !v->empty()) {
      const std::uint64_t ms = whole(*v, "MWSTRAT_SPARE_WAIT_MS", "whole milliseconds in [0, 3600000]");
      if (ms > 3'600'000) fail("MWSTRAT_SPARE_WAIT_MS", *v, "whole milliseconds in [0, 3600000]");
      l.spare_wait = std::chrono::milliseconds(static_cast<long long>(ms));
    }
    if (const auto v = env.get("MWSTRAT_JOIN_LISTEN"); v && !v->empty()) {
      if (!detail::parse_address_nothrow(*v).reason.empty()) fail("MWSTRAT_JOIN_LISTEN", *v, "host:port");
      l.join_listen = *v;
    }
    if (const auto v = env.get("MWSTRAT_JOIN"); v && !v->empty()) {
      for (std::size_t at = 0; at <= v->size();) {
        const std::size_t comma = std::min(v->find(',', at), v->size());
        const std::string one = v->substr(at, comma - at);
        if (one.empty() || !detail::parse_address_nothrow(one).reason.empty()) {
          fail("MWSTRAT_JOIN", *v, "comma-separated host:port join addresses");
        }
        l.join_via.push_back(one);
        at = comma + 1;
      }
    }
    if (const auto v = env.get("MWSTRAT_RECOVERY_TIMEOUT_MS"); v && !v->empty()) {
      const std::optional<double> ms = detail::parse_number(*v);
      if (!ms || !(*ms > 0) || *ms > max_recovery_timeout_ms) {
        throw environment_error({"cluster"}, "MWSTRAT_RECOVERY_TIMEOUT_MS: '" + *v +
                                            "' is not milliseconds in (0, 1000000000]");
      }
      // Through seconds, as the examples' --recovery-timeout flag is taken: the same value gives the same bound.
      l.recovery_timeout = std::chrono::milliseconds(static_cast<long long>(std::ceil(*ms / 1000 * 1000)));
    }
    return l;
  }

  /// A restarted group or a replacement worker (what a program's one-off fault injection should not repeat).
  [[nodiscard]] bool restarted() const { return attempt != 0 || generation != 0 || !join_via.empty(); }

  /// Tells the launcher that `lost_rank` of ring `generation` is lost: one line "lost RANK GENERATION" in one write
  /// (shorter than PIPE_BUF, so survivors' reports never interleave). Nothing without a report channel; never throws.
  void report_lost(int lost_rank, std::uint64_t lost_generation) const noexcept {
    report("lost ", lost_rank, lost_generation);
  }

  /// Tells the launcher that this worker, worker `worker` of the job, joined ring `generation` (elastic growing):
  /// "joined WORKER GENERATION". The launcher then takes a report of that worker's loss from an earlier ring for the
  /// worker it replaced, not for this one. Nothing without a report channel; never throws.
  void report_joined(int worker, std::uint64_t joined_generation) const noexcept {
    report("joined ", worker, joined_generation);
  }

 private:
  void report(std::string_view what, int worker, std::uint64_t ring) const noexcept {
    if (!report_fd) return;
    char line[64];
    std::size_t n = 0;
    // Bounded copies: GCC 12 at -O3 takes a pointer walk after to_chars for an overflow (-Wstringop-overflow).
    const auto put = [&](std::string_view s) { n += s.copy(line + n, sizeof line - n); };
    const auto put_number = [&](auto v) {
      n = static_cast<std::size_t>(std::to_chars(line + n, line + sizeof line, v).ptr - line);
    };
    put(what);
    put_number(worker);
    put(" ");
    put_number(ring);
    put("\n");
    const ssize_t written = ::write(*report_fd, line, n);
    (void)written;
  }

  [[noreturn]] static void fail(const char* name, const std::string& value, const char* expected) {
    throw environment_error({"cluster"}, std::string(name) + " is '" + value + "', expected " + expected);
  }
  static std::uint64_t whole(const std::string& v, const char* name, const char* expected) {
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc{} || end != v.data() + v.size()) fail(name, v, expected);
    return n;
  }
};

}  // namespace mwstrat
