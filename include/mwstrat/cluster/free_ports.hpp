#pragma once
/// \file
/// Ports for workers to listen on, picked by whoever launches them (mwstrat-launch, the tests, a launcher of your
/// own): free now, and outside the kernel's ephemeral range. A port from that range (what bind to port 0 gives) can
/// be taken between the pick and the worker's listen by any outgoing connection on the machine, which gets its
/// source port from the same range: with several jobs or tests starting at once, a worker then fails with "Address
/// already in use".

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <mwstrat/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// The kernel's ephemeral port range (net.ipv4.ip_local_port_range), or Linux's default where it cannot be read.
inline std::pair<int, int> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && 0 < low && low <= high && high <= 65535) return {low, high};
  return {32768, 60999};
}

/// `n` distinct ports on `ipv4_host` that were free when bound together, chosen from the ports just below the
/// ephemeral range (up to 12288 of them, never under 1024) and those above it, from a random start so that launches
/// running at once do not try the same ones first. Where the range leaves no such ports, the kernel's own choice.
/// Throws `config_error` for a host that is not an IPv4 address and `io_error`, naming the host, when too few ports
/// are free (both "[mwstrat.cluster] ...").
inline std::vector<int> free_listen_ports(const std::string& ipv4_host, int n) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (::inet_pton(AF_INET, ipv4_host.c_str(), &address.sin_addr) != 1) {
    throw config_error({"cluster"}, "free_listen_ports: '" + ipv4_host + "' is not an IPv4 address");
  }
  const auto [low, high] = ephemeral_port_range();
  std::vector<int> candidates;
  for (int p = std::max(1024, low - 12288); p < low; ++p) candidates.push_back(p);
  for (int p = high + 1; p <= 65535; ++p) candidates.push_back(p);
  const bool kernel_picks = candidates.empty();  // no port outside the range: bind to port 0, n times
  const std::size_t tries = kernel_picks ? static_cast<std::size_t>(std::max(n, 0)) : candidates.size();
  const std::size_t start = kernel_picks ? 0 : std::random_device{}() % candidates.size();

  std::vector<int> fds, ports;
  int last_error = 0;
  for (std::size_t k = 0; k < tries && static_cast<int>(ports.size()) < n; ++k) {
    const int port = kernel_picks ? 0 : candidates[(start + k) % candidates.size()];
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = errno;
      break;
    }
    sockaddr_in a = address;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      last_error = errno;
      ::close(fd);
      if (last_error == EADDRNOTAVAIL) break;  // the host is no address of this machine: no port will do
      continue;
    }
    fds.push_back(fd);  // held until all n are found, so they differ
    ports.push_back(ntohs(a.sin_port));
  }
  for (const int fd : fds) ::close(fd);
  if (static_cast<int>(ports.size()) < n) {
    std::string why = "free_listen_ports: cannot find " + std::to_string(n) + " free ports on " + ipv4_host + " (found " +
                      std::to_string(ports.size());
    if (last_error != 0) why += std::string(": ") + std::strerror(last_error);
    throw io_error({"cluster"}, why + ")");
  }
  return ports;
}

}  // namespace mwstrat
