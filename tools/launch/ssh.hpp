#pragma once
// How mwstrat-launch reaches another node: which hosts are this machine's (started as local processes), and the
// command line of the system's OpenSSH client for the others. The user's own ssh configuration applies (aliases,
// users, keys, ProxyJump); the launcher adds only what it needs: BatchMode (a password prompt would hang the job),
// a connect timeout (an unreachable node fails the launch instead of stalling it) and keep-alives (a connection
// that hangs ends within the liveness timeout on the launcher's side too).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace mwstrat_launch {

// A host is this machine when it is "localhost", this machine's own host name (gethostname), an IPv4 address in
// 127.0.0.0/8, or an IPv4 address of one of its interfaces (in its network namespace). Every other name is another
// node, reached over ssh.
inline bool is_local_host(const std::string& name) {
  if (name == "localhost") return true;
  char own[256] = {};
  if (::gethostname(own, sizeof own - 1) == 0 && name == own) return true;
  in_addr probe{};
  if (::inet_pton(AF_INET, name.c_str(), &probe) != 1) return false;
  if ((ntohl(probe.s_addr) >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (const ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    found = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == probe.s_addr;
  }
  ::freeifaddrs(list);
  return found;
}

// `text` as one word of a POSIX shell (the remote login shell reads ssh's command line).
inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct ssh_settings {
  int connect_timeout_s = 10;          // --ssh-connect-timeout
  int liveness_timeout_s = 10;         // --liveness-timeout
  std::string config;                  // --ssh-config FILE (-F); empty: the user's own
  std::vector<std::string> options;    // --ssh-option OPT, each as -o OPT
  std::string remote_launcher;         // --remote-launcher PATH: mwstrat-launch on the node
};

// ssh's argv to start the remote agent on `host`. `-T`: no terminal (the agent's stdin is the launcher's channel);
// `--` before the host so that no host name is ever taken for an option.
inline std::vector<std::string> ssh_argv(const ssh_settings& s, const std::string& host) {
  std::vector<std::string> argv = {"ssh", "-T", "-o", "BatchMode=yes", "-o",
                                   "ConnectTimeout=" + std::to_string(s.connect_timeout_s)};
  const int interval = std::max(1, s.liveness_timeout_s / 3);
  argv.insert(argv.end(), {"-o", "ServerAliveInterval=" + std::to_string(interval), "-o", "ServerAliveCountMax=3"});
  if (!s.config.empty()) argv.insert(argv.end(), {"-F", s.config});
  for (const auto& o : s.options) argv.insert(argv.end(), {"-o", o});
  argv.insert(argv.end(), {"--", host, "exec " + shell_quote(s.remote_launcher) + " --remote-agent"});
  return argv;
}

}  // namespace mwstrat_launch
