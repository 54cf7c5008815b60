#pragma once
// Ring ranks as real processes: the test binary re-executes itself (`--ring-worker ...`, see main.cpp) with
// stdout and stderr in files under a temporary folder. Every wait is bounded; whatever is still running at the
// end is SIGKILLed.

#include <support/process.hpp>  // free_ports
#include <support/temp_dir.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat::test {

inline std::string join_ports(const std::vector<int>& ports) {
  std::string s;
  for (auto p : ports) {
    if (!s.empty()) s += ',';
    s += std::to_string(p);
  }
  return s;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct worker {
  pid_t pid = -1;
  int exit_code = -1;  // -1 while running or when killed by a signal
  int signal = 0;
  bool done = false;
  std::filesystem::path out, err;

  [[nodiscard]] std::string stdout_text() const { return read_text(out); }
  [[nodiscard]] std::string stderr_text() const { return read_text(err); }
};

inline std::string& self_exe() {
  static std::string exe;
  return exe;
}

// Starts `self --ring-worker args...` with its output in `dir/<name>.{out,err}`.
// `prefix`, when given, is a command (absolute path first) that runs the worker as its last arguments, e.g. a
// wrapper that moves it to another mount namespace.
inline worker spawn_worker(const std::filesystem::path& dir, const std::string& name, const std::vector<std::string>& args,
                           const std::vector<std::string>& env = {}, const std::vector<std::string>& prefix = {}) {
  worker w;
  w.out = dir / (name + ".out");
  w.err = dir / (name + ".err");
  std::vector<std::string> argv_s = prefix;
  argv_s.push_back(self_exe());
  argv_s.push_back("--ring-worker");
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int o = ::open(w.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(w.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  w.pid = pid;
  return w;
}

// Reaps `w` if it has exited; true when it is done.
inline bool poll_worker(worker& w) {
  if (w.done) return true;
  int status = 0;
  if (::waitpid(w.pid, &status, WNOHANG) != w.pid) return false;
  w.done = true;
  if (WIFEXITED(status)) w.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) w.signal = WTERMSIG(status);
  return true;
}

// Waits (bounded) for every worker in `ws`; false on timeout, after SIGKILLing the stragglers.
inline bool wait_workers(std::vector<worker*> ws, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool all = true;
    for (auto* w : ws) all = poll_worker(*w) && all;
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto* w : ws) {
    if (!w->done) {
      ::kill(w->pid, SIGCONT);
      ::kill(w->pid, SIGKILL);
      int status = 0;
      ::waitpid(w->pid, &status, 0);
      w->done = true;
      w->signal = SIGKILL;
    }
  }
  return false;
}

// Waits (bounded) until `w`'s stdout contains `marker`.
inline bool wait_for_output(const worker& w, const std::string& marker, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_text(w.out).find(marker) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Shared-memory objects that processes `pids` created (named mwstrat-ring-<pid>-...) and that are still in
// /dev/shm: the ring must leave none behind, whether it ended normally or through errors.
inline std::vector<std::string> shm_leftovers(const std::vector<pid_t>& pids) {
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const auto name = entry.path().filename().string();
    for (auto pid : pids)
      if (name.starts_with("mwstrat-ring-" + std::to_string(pid) + "-")) left.push_back(name);
  }
  return left;
}

// Whether this machine has a usable /dev/shm (where the ring's shared-memory transport lives).
inline bool have_dev_shm() { return ::access("/dev/shm", W_OK | X_OK) == 0; }

// A whole ring of workers running `scenario`, each told its rank and everyone's ports.
struct ring_run {
  temp_dir dir{"mwstrat-collective"};
  std::vector<worker> workers;

  std::vector<int> port_numbers;

  ring_run(int n, const std::string& scenario, const std::vector<std::string>& extra = {},
           const std::vector<std::string>& env = {}) {
    port_numbers = free_ports(n);
    const auto ports = join_ports(port_numbers);
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> args = {scenario, std::to_string(r), ports};
      args.insert(args.end(), extra.begin(), extra.end());
      workers.push_back(spawn_worker(dir.path(), "rank" + std::to_string(r), args, env));
    }
  }
  ~ring_run() { wait_all(std::chrono::milliseconds(0)); }

  bool wait_all(std::chrono::milliseconds limit) {
    std::vector<worker*> ws;
    for (auto& w : workers) ws.push_back(&w);
    return wait_workers(ws, limit);
  }

  // Rank r's address, as the workers know it.
  [[nodiscard]] std::string address(int r) const {
    return "127.0.0.1:" + std::to_string(port_numbers.at(static_cast<std::size_t>(r)));
  }

  // True when every worker has exited (reaps them; kills nothing).
  bool all_exited() {
    bool all = true;
    for (auto& w : workers) all = poll_worker(w) && all;
    return all;
  }

  [[nodiscard]] std::vector<pid_t> pids() const {
    std::vector<pid_t> v;
    for (const auto& w : workers) v.push_back(w.pid);
    return v;
  }

  [[nodiscard]] std::string report() const {
    std::string s;
    for (std::size_t r = 0; r < workers.size(); ++r)
      s += "--- rank " + std::to_string(r) + " exit " + std::to_string(workers[r].exit_code) + " signal " +
           std::to_string(workers[r].signal) + "\n" + workers[r].stdout_text() + workers[r].stderr_text();
    return s;
  }
};

}  // namespace mwstrat::test
