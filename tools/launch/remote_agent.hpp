#pragma once
// `mwstrat-launch --remote-agent`: the launcher's hands on a node, started there over ssh with nothing on its
// command line. It reads its worker's spec from stdin (agent_protocol.hpp), starts the worker in its own process
// group with the spec's environment and directory, and supervises it: control lines from the launcher become
// signals to the group; the launcher's silence (EOF: it died or its ssh did; or no ping for liveness_ms: the
// connection hangs) ends the worker (SIGTERM, SIGKILL after grace_ms), so no worker outlives its launcher. Whatever
// the worker left in its group is ended before the agent exits, since it would hold the ssh session open.
#include "agent_protocol.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat_launch {

namespace agent_detail {

inline volatile sig_atomic_t agent_signalled = 0;
inline void on_agent_signal(int sig) { agent_signalled = sig; }

// One line to the launcher (stderr), in one write so that it never interleaves with ssh's own messages.
inline void tell(const std::string& text) {
  const std::string line = std::string(agent_line_prefix) + text + "\n";
  const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n;
}

inline bool group_gone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

}  // namespace agent_detail

inline int run_remote_agent() {
  using namespace agent_detail;
  using clock = std::chrono::steady_clock;
  ::signal(SIGPIPE, SIG_IGN);  // a dropped connection shows as EOF and failed writes, not as the agent's death
  struct sigaction sa{};
  sa.sa_handler = on_agent_signal;
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) ::sigaction(sig, &sa, nullptr);

  // The spec, within 30 s: a launcher that connected but never wrote one is gone.
  spec_decoder decoder;
  const auto spec_deadline = clock::now() + std::chrono::seconds(30);
  char buf[65536];
  while (!decoder.done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(spec_deadline - clock::now()).count();
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) == 0) {
      tell("error no spec from the launcher within 30 s");
      return 2;
    }
    const ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      tell("error the launcher closed stdin before sending a spec");
      return 2;
    }
    if (auto problem = decoder.feed(std::string_view(buf, static_cast<std::size_t>(got)))) {
      tell("error " + *problem);
      return 2;
    }
  }
  const agent_spec& spec = decoder.spec();
  std::string control = std::move(decoder.rest());

  // The survivors' report channel (--replace-lost): relayed line by line to the launcher.
  int report[2] = {-1, -1};
  if (spec.report && ::pipe2(report, O_CLOEXEC) != 0) {
    tell(std::string("error pipe: ") + std::strerror(errno));
    return 1;
  }
  // The child tells the agent why exec failed through this pipe (closed unread on success: O_CLOEXEC).
  int exec_status[2];
  if (::pipe2(exec_status, O_CLOEXEC) != 0) {
    tell(std::string("error pipe: ") + std::strerror(errno));
    return 1;
  }
  sigset_t all{};
  sigset_t before{};
  ::sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &before);
  const pid_t agent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    tell(std::string("error fork: ") + std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // an agent killed outright still takes its worker along
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    auto fail = [&](const std::string& why) {
      const ssize_t n = ::write(exec_status[1], why.data(), why.size());
      (void)n;
      std::_Exit(127);
    };
    if (::getppid() != agent) std::_Exit(128 + SIGTERM);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null < 0 || ::dup2(null, STDIN_FILENO) < 0) fail(std::string("cannot open /dev/null: ") + std::strerror(errno));
    ::dup2(STDOUT_FILENO, STDERR_FILENO);  // one stream per worker, as the launcher gives a local one
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) {
      fail("cannot enter the working directory '" + spec.cwd + "': " + std::strerror(errno));
    }
    for (const auto& [name, value] : spec.env) ::setenv(name.c_str(), value.c_str(), 1);
    if (spec.report) {
      const int fd = ::dup(report[1]);  // without O_CLOEXEC: the worker's own
      ::setenv("MWSTRAT_LAUNCH_REPORT_FD", std::to_string(fd).c_str(), 1);
    }
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    fail("cannot run '" + spec.argv[0] + "': " + std::strerror(errno));
  }
  ::setpgid(pid, pid);
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::close(exec_status[1]);
  if (report[1] >= 0) ::close(report[1]);
  {
    std::string why;
    for (ssize_t got; (got = ::read(exec_status[0], buf, sizeof buf)) != 0;) {
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) break;
      why.append(buf, static_cast<std::size_t>(got));
    }
    ::close(exec_status[0]);
    if (!why.empty()) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      tell("error " + why);
      return 127;
    }
  }
  tell("started " + std::to_string(pid));

  const auto grace = std::chrono::milliseconds(spec.grace_ms);
  const auto liveness = std::chrono::milliseconds(spec.liveness_ms);
  auto last_heard = clock::now();
  auto kill_at = clock::time_point::max();
  bool ending = false;  // the worker has been told to end because the launcher is gone (or the agent was signalled)
  bool launcher_gone = false;
  std::string reports;
  auto end_worker = [&](const char* why) {
    if (ending) return;
    ending = true;
    tell(std::string("ending the worker: ") + why);
    ::kill(-pid, SIGTERM);
    ::kill(-pid, SIGCONT);
    kill_at = clock::now() + grace;
  };
  auto handle_control = [&] {
    for (std::size_t nl; (nl = control.find('\n')) != std::string::npos; control.erase(0, nl + 1)) {
      const std::string line = control.substr(0, nl);
      int sig = 0;
      if (std::sscanf(line.c_str(), "signal %d", &sig) == 1 && sig > 0 && sig < 65) {
        ::kill(-pid, sig);
        if (sig == SIGTERM) ::kill(-pid, SIGCONT);  // a stopped worker would hold it until the SIGKILL
      }
    }
  };
  handle_control();
  int status = 0;
  for (;;) {
    pollfd pfds[2] = {{launcher_gone ? -1 : STDIN_FILENO, POLLIN, 0}, {report[0], POLLIN, 0}};
    ::poll(pfds, 2, 100);
    if (!launcher_gone && (pfds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
      if (got > 0) {
        control.append(buf, static_cast<std::size_t>(got));
        last_heard = clock::now();
        handle_control();
      } else if (got == 0 || errno != EINTR) {
        launcher_gone = true;
        end_worker("the launcher's connection closed");
      }
    }
    if (report[0] >= 0 && (pfds[1].revents & (POLLIN | POLLHUP)) != 0) {
      const ssize_t got = ::read(report[0], buf, sizeof buf);
      if (got > 0) reports.append(buf, static_cast<std::size_t>(got));
      if (got == 0) {
        ::close(report[0]);
        report[0] = -1;
      }
      for (std::size_t nl; (nl = reports.find('\n')) != std::string::npos; reports.erase(0, nl + 1)) {
        tell(reports.substr(0, nl));  // "lost RANK GENERATION"
      }
    }
    if (!launcher_gone && clock::now() - last_heard > liveness) {
      launcher_gone = true;
      end_worker("nothing heard from the launcher within the liveness timeout");
    }
    if (agent_signalled) end_worker(strsignal(agent_signalled));
    if (clock::now() >= kill_at) {
      ::kill(-pid, SIGKILL);
      kill_at = clock::time_point::max();
    }
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
  }
  // What the worker left in its group: SIGTERM, then SIGKILL after the grace period; waited for (boundedly).
  if (!group_gone(pid)) {
    ::kill(-pid, SIGTERM);
    ::kill(-pid, SIGCONT);
    const auto term_deadline = clock::now() + grace;
    while (!group_gone(pid) && clock::now() < term_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::kill(-pid, SIGKILL);
    const auto kill_deadline = clock::now() + std::chrono::seconds(1);
    while (!group_gone(pid) && clock::now() < kill_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Said before exiting, so that the launcher tells the worker's status from ssh's own 255 (a lost connection).
  if (WIFSIGNALED(status)) {
    tell("signal " + std::to_string(WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  tell("exit " + std::to_string(WEXITSTATUS(status)));
  return WEXITSTATUS(status);
}

}  // namespace mwstrat_launch
