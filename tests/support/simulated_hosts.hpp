#pragma once
// Simulated hosts in a test (scripts/simhosts): H network namespaces joined through a bridge, each with its own
// address, shaped link and /dev/shm. The object makes them and its destructor removes them, also when an
// assertion ends the test early; sets left by a killed test run are removed by the next one (`simhosts gc`).
// Tests start with MWSTRAT_REQUIRE_SIMULATED_HOSTS(), which skips them, saying why, where namespaces cannot be
// made (not root, no `ip`, no tbf).

#include <support/process.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mwstrat::test {

inline const std::string simhosts_script = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/scripts/simhosts";

/// Why simulated hosts cannot be made here, or nothing when they can (asked once per process).
inline const std::optional<std::string>& simulated_hosts_unavailable() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    const auto r = run("'" + simhosts_script + "' check", 60);
    if (r.exit_code == 0) return std::nullopt;
    std::string why = r.output;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return why.empty() ? "scripts/simhosts check failed with status " + std::to_string(r.exit_code) : why;
  }();
  return reason;
}

#define MWSTRAT_REQUIRE_SIMULATED_HOSTS()                                                         \
  do {                                                                                            \
    if (const auto& why_not = ::mwstrat::test::simulated_hosts_unavailable()) {                   \
      GTEST_SKIP() << "simulated hosts cannot be made here: " << *why_not;                        \
    }                                                                                             \
  } while (false)

class simulated_hosts {
 public:
  /// `hosts` hosts h1..hH; `rate`: one tc rate for every link ("10gbit") or one per host ("1gbit,10gbit").
  explicit simulated_hosts(int hosts, const std::string& rate = "10gbit") : hosts_(hosts) {
    static std::atomic<int> counter{0};
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, falsely) on "literal" + std::to_string(...).
    name_ = "t";
    name_ += std::to_string(::getpid());
    name_ += '_';
    name_ += std::to_string(counter++);
    // And the time: a set left by an earlier process with the same (reused) id would otherwise block this name,
    // since its "owner" is alive again.
    name_ += '_';
    name_ += std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1'000'000'000);
    run("'" + simhosts_script + "' gc", 60);  // sets of test runs that were killed
    const auto r = run("'" + simhosts_script + "' --name " + name_ + " up " + std::to_string(hosts) + " --rate " +
                           rate + " --owner " + std::to_string(::getpid()),
                       120);
    if (r.exit_code != 0) throw std::runtime_error("simhosts up " + std::to_string(hosts) + " failed: " + r.output);
    for (int k = 1; k <= hosts; ++k) {
      auto a = run(script() + " addr " + host(k), 30);
      while (!a.output.empty() && a.output.back() == '\n') a.output.pop_back();
      if (a.exit_code != 0) {
        run(script() + " down", 120);  // the destructor will not run
        throw std::runtime_error("simhosts addr " + host(k) + " failed: " + a.output);
      }
      addresses_.push_back(a.output);
    }
  }
  simulated_hosts(const simulated_hosts&) = delete;
  simulated_hosts& operator=(const simulated_hosts&) = delete;
  ~simulated_hosts() { run(script() + " down", 120); }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] int size() const noexcept { return hosts_; }
  /// "h1".."hH".
  [[nodiscard]] static std::string host(int k) {
    std::string name = "h";
    name += std::to_string(k);
    return name;
  }
  /// Host k's address (1-based), e.g. 10.77.0.2.
  [[nodiscard]] const std::string& address(int k) const { return addresses_.at(static_cast<std::size_t>(k - 1)); }
  /// `simhosts --name NAME`, to build command lines with (e.g. for mwstrat-launch --simhosts).
  [[nodiscard]] std::string script() const { return "'" + simhosts_script + "' --name " + name_; }
  /// A shell command line that runs `command` (itself a shell command) on host k.
  [[nodiscard]] std::string on(int k, const std::string& command) const {
    return script() + " exec " + host(k) + " -- sh -c '" + quote(command) + "'";
  }
  /// Cuts host k's link (nothing gets through, silently) or restores it.
  void cut(int k) const { checked(script() + " cut " + host(k)); }
  void restore(int k) const { checked(script() + " restore " + host(k)); }
  /// SIGKILLs every process on host k at once, like a host that dies.
  void kill_all(int k) const { checked(script() + " kill " + host(k)); }

 private:
  static std::string quote(const std::string& s) {
    std::string out;
    for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out;
  }
  static void checked(const std::string& command) {
    const auto r = run(command, 60);
    if (r.exit_code != 0) throw std::runtime_error(command + " failed: " + r.output);
  }
  int hosts_;
  std::string name_;
  std::vector<std::string> addresses_;
};

}  // namespace mwstrat::test
