#pragma once
// Running real programs from tests: a shell command with a hard time limit, its output and exit status; free
// loopback ports for TF_CONFIG. Every wait is bounded by `timeout -s KILL`.

#include <mwstrat/cluster/free_ports.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace mwstrat::test {

struct process_result {
  int exit_code = -1;  ///< the command's status; 128 + n when killed by signal n; 137 also for the time limit
  std::string output;  ///< stdout and stderr together
  double seconds = 0;
};

/// A started command; `finish()` reads all its output and waits for it.
class process {
 public:
  process(const std::string& command, int limit_seconds) {
    const std::string line = "timeout -s KILL " + std::to_string(limit_seconds) + " sh -c '" + escape(command) + "' 2>&1";
    started_ = std::chrono::steady_clock::now();
    pipe_ = ::popen(line.c_str(), "r");
    if (!pipe_) throw std::runtime_error("popen failed: " + command);
  }
  process(const process&) = delete;
  process& operator=(const process&) = delete;
  ~process() {
    if (pipe_) ::pclose(pipe_);
  }

  process_result finish() {
    process_result r;
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe_)) r.output += buf.data();
    const int status = ::pclose(pipe_);
    pipe_ = nullptr;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    return r;
  }

 private:
  static std::string escape(const std::string& s) {
    std::string out;
    for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out;
  }
  FILE* pipe_ = nullptr;
  std::chrono::steady_clock::time_point started_;
};

/// Runs `command` (through sh) for at most `limit_seconds`.
inline process_result run(const std::string& command, int limit_seconds = 300) {
  process p(command, limit_seconds);
  return p.finish();
}

/// `n` distinct loopback ports, free now and outside the ephemeral range (mwstrat/cluster/free_ports.hpp: a port
/// from bind(0) was once taken by another test's outgoing connection before a worker could listen on it).
inline std::vector<int> free_ports(int n) { return ::mwstrat::free_listen_ports("127.0.0.1", n); }

/// TF_CONFIG for worker `index` of a cluster of loopback `ports`.
inline std::string tf_config(const std::vector<int>& ports, int index) {
  std::string workers;
  for (std::size_t k = 0; k < ports.size(); ++k) {
    workers += (k ? ",\"" : "\"") + std::string("127.0.0.1:") + std::to_string(ports[k]) + '"';
  }
  return "{\"cluster\":{\"worker\":[" + workers + "]},\"task\":{\"type\":\"worker\",\"index\":" +
         std::to_string(index) + "}}";
}

}  // namespace mwstrat::test
