// The tests of tests/hosts/, and two small tools they run inside simulated hosts (so no other program is needed):
//   mwstrat_hosts_tests tcp-sink PORT                       accepts one connection, reads to its end, prints
//                                                           "received N bytes in S s: R bit/s" (from the first byte)
//   mwstrat_hosts_tests tcp-source ADDR PORT BYTES TIMEOUT  connects (retrying for TIMEOUT s), sends BYTES, closes
// Every wait is bounded: the sink gives up after 60 s without a connection or 30 s without data.
#include "hosts_support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat::test {
std::string self;
}  // namespace mwstrat::test

namespace hosts_main {

using clock_type = std::chrono::steady_clock;

int fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), std::strerror(errno));
  return 1;
}

int tcp_sink(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0) return fail("tcp-sink: listen");
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 60'000) != 1) return fail("tcp-sink: no connection within 60 s");
  const int c = ::accept(fd, nullptr, nullptr);
  if (c < 0) return fail("tcp-sink: accept");
  std::vector<char> buf(1 << 20);
  std::size_t total = 0;
  clock_type::time_point first{};
  for (;;) {
    pollfd q{c, POLLIN, 0};
    if (::poll(&q, 1, 30'000) != 1) return fail("tcp-sink: no data within 30 s");
    const ssize_t got = ::recv(c, buf.data(), buf.size(), 0);
    if (got < 0) return fail("tcp-sink: recv");
    if (got == 0) break;
    if (total == 0) first = clock_type::now();
    total += static_cast<std::size_t>(got);
  }
  const double s = std::chrono::duration<double>(clock_type::now() - first).count();
  std::printf("received %zu bytes in %.6f s: %.0f bit/s\n", total, s, s > 0 ? 8.0 * static_cast<double>(total) / s : 0.0);
  return 0;
}

int tcp_source(const char* address, int port, std::size_t bytes, double timeout_s) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, address, &a.sin_addr) != 1) return fail(std::string("tcp-source: bad address ") + address);
  const auto deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  int fd = -1;
  for (;;) {  // refused (sink not listening yet): retry; silence (a cut link): wait, up to the deadline
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int err = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      if (::poll(&p, 1, static_cast<int>(std::max<long long>(left, 1))) == 1) {
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    } else {
      err = errno == EISCONN ? 0 : errno;
    }
    if (err == 0) break;
    ::close(fd);
    if (clock_type::now() >= deadline) {
      errno = err;
      return fail(std::string("tcp-source: cannot connect to ") + address + ":" + std::to_string(port));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::fcntl(fd, F_SETFL, 0);
  std::vector<char> buf(1 << 20, 'x');
  for (std::size_t sent = 0; sent < bytes;) {
    const ssize_t n = ::send(fd, buf.data(), std::min(buf.size(), bytes - sent), MSG_NOSIGNAL);
    if (n <= 0) return fail("tcp-source: send");
    sent += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return 0;
}

}  // namespace hosts_main

int main(int argc, char** argv) {
  const std::string tool = argc > 1 ? argv[1] : "";
  if (tool == "tcp-sink" && argc == 3) return hosts_main::tcp_sink(std::atoi(argv[2]));
  if (tool == "tcp-source" && argc == 6) {
    return hosts_main::tcp_source(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10), std::atof(argv[5]));
  }
  mwstrat::test::self = std::filesystem::canonical("/proc/self/exe").string();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
