#pragma once
// Shared by the tests of mwstrat-launch over ssh: three simulated hosts, of which h1 and h2 are the nodes, each
// running a real sshd (scripts/simhosts sshd, keys and configurations in the test's own folder), and h3 the machine
// the user types the command on. The launcher runs inside h3, so the nodes' addresses are not its own and it reaches
// them over ssh, as it would reach two other machines.
#include "mnist_hosts.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat::test {

/// Skips a test where there is no OpenSSH (scripts/test installs openssh-server).
#define MWSTRAT_REQUIRE_SSHD()                                                                       \
  do {                                                                                               \
    MWSTRAT_REQUIRE_SIMULATED_HOSTS();                                                               \
    if (::access("/usr/sbin/sshd", X_OK) != 0 || ::mwstrat::test::run("command -v ssh", 10).exit_code != 0) { \
      GTEST_SKIP() << "no OpenSSH here (/usr/sbin/sshd and ssh; apt-get install openssh-server)";   \
    }                                                                                                \
  } while (false)

class ssh_nodes {
 public:
  ssh_nodes() : hosts_(3, "1gbit") {
    for (int k = 1; k <= 2; ++k) {
      const auto r = run(hosts_.script() + " sshd " + simulated_hosts::host(k) + " " + (keys_ / "ssh"), 60);
      if (r.exit_code != 0) throw std::runtime_error("simhosts sshd h" + std::to_string(k) + " failed: " + r.output);
      config_ = r.output.substr(0, r.output.find('\n'));
    }
    for (int k = 1; k <= 2; ++k) {
      sshd_pids_.push_back(read_pid((keys_ / "ssh") + "/sshd.h" + std::to_string(k) + ".pid"));
    }
  }

  [[nodiscard]] const simulated_hosts& hosts() const { return hosts_; }
  [[nodiscard]] const scratch_dir& keys() const { return keys_; }
  /// The ssh client configuration that reaches the nodes (the test's key and known hosts only).
  [[nodiscard]] const std::string& ssh_config() const { return config_; }
  /// An ssh client configuration like ssh_config() but with a fresh key the nodes do not accept (made on the first
  /// call, in the test's folder): for the "refused key" failures. Its path.
  [[nodiscard]] std::string stranger_config() const {
    const std::string ssh = keys_ / "ssh";
    const std::string config = ssh + "/stranger_config";
    if (!std::filesystem::exists(config)) {
      const auto r = run("ssh-keygen -q -t ed25519 -N '' -f " + ssh + "/stranger && sed 's|IdentityFile .*|"
                         "IdentityFile " + ssh + "/stranger|' " + config_ + " > " + config, 30);
      if (r.exit_code != 0) throw std::runtime_error("cannot make the stranger's key: " + r.output);
    }
    return config;
  }
  /// A shell command line: `launcher_args` to mwstrat-launch, run on h3 (the user's machine).
  [[nodiscard]] std::string launch(const std::string& launcher_args) const {
    return hosts_.script() + " exec h3 -- " + launcher + " --ssh-config " + config_ + " " + launcher_args;
  }
  /// "--hosts 10.77.0.1:N,10.77.0.2:N".
  [[nodiscard]] std::string two_nodes(int workers_each) const {
    const std::string n = std::to_string(workers_each);
    return "--hosts " + hosts_.address(1) + ":" + n + "," + hosts_.address(2) + ":" + n;
  }
  /// The processes on node k (1 or 2) but sshd's own (the daemon, and a session whose connection is cut waits
  /// for TCP to time out): what the launcher started there.
  [[nodiscard]] std::vector<pid_t> processes_on(int k) const {
    const auto r = run(hosts_.script() + " pids " + simulated_hosts::host(k), 30);
    std::vector<pid_t> pids;
    std::istringstream in(r.output);
    for (pid_t pid = 0; in >> pid;) {
      if (pid == sshd_pids_.at(static_cast<std::size_t>(k - 1))) continue;
      std::string comm;
      std::ifstream("/proc/" + std::to_string(pid) + "/comm") >> comm;
      if (comm == "sshd" || comm.empty()) continue;  // sshd's, or gone already
      pids.push_back(pid);
    }
    return pids;
  }
  /// Waits (at most `limit`) until no process but sshd runs on either node; true when none is left.
  [[nodiscard]] bool nodes_empty_within(std::chrono::milliseconds limit) const {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (processes_on(1).empty() && processes_on(2).empty()) return true;
      if (std::chrono::steady_clock::now() >= give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  static pid_t read_pid(const std::string& path) {
    pid_t pid = 0;
    std::ifstream(path) >> pid;
    if (pid <= 0) throw std::runtime_error("no sshd pid in " + path);
    return pid;
  }
  simulated_hosts hosts_;
  scratch_dir keys_;
  std::string config_;
  std::vector<pid_t> sshd_pids_;
};

/// The text of file `path`, once `marker` appears in it (at most `seconds`); nullopt when it never does.
inline std::optional<std::string> wait_for_text(const std::filesystem::path& path, const std::string& marker,
                                                int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    const std::string text = read_file(path);
    if (text.find(marker) != std::string::npos) return text;
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// The pid the launcher reports for worker `index` on a node ("mwstrat-launch: worker I: pid P on HOST"), -1: none.
inline pid_t remote_worker_pid(const std::string& output, int index) {
  const std::string marker = "mwstrat-launch: worker " + std::to_string(index) + ": pid ";
  const std::size_t at = output.rfind(marker);
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::strtol(output.c_str() + at + marker.size(), nullptr, 10));
}

/// Trains the MNIST example with `flags` on 4 local workers of one flat ring (into DIR/local) and expects `model`, what
/// a job placed across hosts saved, to be the same bytes. `what` names that job in the messages.
inline void expect_model_of_four_local_workers(const scratch_dir& dir, const std::string& flags,
                                               const std::filesystem::path& model, const std::string& what) {
  const auto local = run("MWSTRAT_RING_TOPOLOGY=flat " + launcher + " -n 4 -- " + example + flags + " --model-dir " +
                             (dir / "local"),
                         600);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const std::string placed = read_file(model);
  ASSERT_FALSE(placed.empty()) << "no model saved by " << what;
  EXPECT_EQ(placed, read_file(dir.path() / "local" / "model.safetensors"))
      << what << " and 4 local workers give different models";
}

}  // namespace mwstrat::test
