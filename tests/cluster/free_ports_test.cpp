// free_listen_ports: distinct ports that a worker can then listen on, none from the kernel's ephemeral range (where
// outgoing connections take their source ports), and clear refusals.
#include <mwstrat/cluster/free_ports.hpp>
#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>

namespace free_ports_test {

// Listens on 127.0.0.1:port as a worker does (SO_REUSEADDR); true when it could.
bool can_listen(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

TEST(free_listen_ports, gives_distinct_listenable_ports_outside_the_ephemeral_range) {
  const auto [low, high] = mwstrat::ephemeral_port_range();
  ASSERT_LE(low, high);
  const bool room_outside = low > 1024 || high < 65535;
  for (int round = 0; round < 5; ++round) {
    const auto ports = mwstrat::free_listen_ports("127.0.0.1", 8);
    ASSERT_EQ(ports.size(), 8u);
    EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), 8u) << "ports repeat";
    for (const int p : ports) {
      EXPECT_GT(p, 0);
      EXPECT_LE(p, 65535);
      if (room_outside) {
        EXPECT_TRUE(p < low || p > high) << p << " is in the ephemeral range " << low << "-" << high;
      }
      EXPECT_TRUE(can_listen(p)) << p;
    }
  }
}

// What free_listen_ports(host, n) throws as `Error`; "no error" when it returns.
template <class Error>
std::string error_of(const std::string& host, int n) {
  try {
    (void)mwstrat::free_listen_ports(host, n);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(free_listen_ports, refuses_a_host_that_is_not_an_ipv4_address_naming_it) {
  const std::string what = error_of<mwstrat::config_error>("localhost", 2);
  EXPECT_NE(what.find("'localhost' is not an IPv4 address"), std::string::npos) << what;
}

TEST(free_listen_ports, an_address_of_no_local_interface_is_an_error_naming_it) {
  // 192.0.2.1 (TEST-NET-1) is on no interface here, so nothing can bind to it; nothing is sent to it.
  const std::string what = error_of<mwstrat::io_error>("192.0.2.1", 1);
  EXPECT_NE(what.find("free ports on 192.0.2.1"), std::string::npos) << what;
}

// The library's own hierarchy, as every mwstrat throw: a caller catches mwstrat::error and reads its component.
TEST(free_listen_ports, its_refusals_are_mwstrat_errors_of_the_cluster_component) {
  try {
    (void)mwstrat::free_listen_ports("localhost", 1);
    ADD_FAILURE() << "'localhost' was accepted";
  } catch (const mwstrat::error& e) {
    EXPECT_EQ(e.kind(), mwstrat::error_kind::config);
    EXPECT_EQ(e.component(), "cluster");
    EXPECT_EQ(std::string(e.what()).rfind("[mwstrat.cluster] ", 0), 0u) << e.what();
  }
  try {
    (void)mwstrat::free_listen_ports("192.0.2.1", 1);
    ADD_FAILURE() << "a port on 192.0.2.1 was found";
  } catch (const mwstrat::error& e) {
    EXPECT_EQ(e.kind(), mwstrat::error_kind::io);
    EXPECT_EQ(e.component(), "cluster");
  }
}

}  // namespace free_ports_test
