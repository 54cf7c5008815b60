// Deadline-bounded socket I/O of the ring, on a real TCP connection over 127.0.0.1: exact reads across partial
// writes, a closed peer reported as closed, silence reported as a timeout at the deadline, and a full socket
// buffer that times out instead of blocking.
#include <mwstrat/collective/ring/detail/socket_io.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

namespace socket_io_test {

namespace d = mwstrat::detail;
using namespace std::chrono_literals;

// A connected pair of non-blocking TCP sockets on 127.0.0.1 (an ephemeral port).
std::pair<d::unique_socket, d::unique_socket> tcp_pair() {
  d::unique_socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener.get(), 1) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "cannot listen on 127.0.0.1";
    return {};
  }
  d::unique_socket client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ADD_FAILURE() << "cannot connect to 127.0.0.1";
    return {};
  }
  d::unique_socket server(::accept(listener.get(), nullptr, nullptr));
  for (const int fd : {client.get(), server.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return {std::move(client), std::move(server)};
}

TEST(socket_io, read_exact_gathers_partial_writes) {
  auto [a, b] = tcp_pair();
  ASSERT_TRUE(a && b);
  std::vector<std::uint8_t> sent(100000);
  std::iota(sent.begin(), sent.end(), std::uint8_t{0});
  std::thread writer([&, fd = a.get()] {
    for (std::size_t at = 0; at < sent.size(); at += 7777) {
      const std::size_t n = std::min<std::size_t>(7777, sent.size() - at);
      EXPECT_EQ(d::write_all(fd, sent.data() + at, n, d::steady::now() + 5s).status, d::io_status::ok);
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<std::uint8_t> got(sent.size());
  const auto r = d::read_exact(b.get(), got.data(), got.size(), d::steady::now() + 10s);
  writer.join();
  EXPECT_EQ(r.status, d::io_status::ok) << r.describe();
  EXPECT_EQ(got, sent);
}

TEST(socket_io, a_closed_peer_is_closed_and_silence_times_out_at_the_deadline) {
  auto [a, b] = tcp_pair();
  ASSERT_TRUE(a && b);
  std::uint8_t byte = 0;
  const auto start = d::steady::now();
  auto r = d::read_exact(b.get(), &byte, 1, start + 100ms);
  const auto waited = d::steady::now() - start;
  EXPECT_EQ(r.status, d::io_status::timed_out);
  EXPECT_EQ(r.describe(), "timed out");
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, 5s);

  const std::uint8_t two[2] = {1, 2};
  ASSERT_EQ(d::write_all(a.get(), two, 1, d::steady::now() + 1s).status, d::io_status::ok);
  a.reset();  // one byte sent, then closed: a read of two gets the byte, then sees the close
  std::uint8_t buf[2] = {};
  r = d::read_exact(b.get(), buf, 2, d::steady::now() + 5s);
  EXPECT_EQ(r.status, d::io_status::closed);
  EXPECT_EQ(r.describe(), "connection closed");
  EXPECT_EQ(buf[0], 1);
}

TEST(socket_io, a_peer_that_does_not_read_makes_a_large_write_time_out) {
  auto [a, b] = tcp_pair();
  ASSERT_TRUE(a && b);
  d::tune_socket(a.get(), 64 << 10);
  d::tune_socket(b.get(), 64 << 10);
  const std::vector<std::uint8_t> big(64 << 20, 7);  // far more than both socket buffers hold
  const auto start = d::steady::now();
  const auto r = d::write_all(a.get(), big.data(), big.size(), start + 200ms);
  EXPECT_EQ(r.status, d::io_status::timed_out);
  EXPECT_LT(d::steady::now() - start, 10s);
}

TEST(socket_io, writing_to_a_closed_peer_is_reported_not_a_signal) {
  auto [a, b] = tcp_pair();
  ASSERT_TRUE(a && b);
  b.reset();
  const std::vector<std::uint8_t> data(1 << 20, 1);
  // The first send may still be accepted by the kernel; the reset arrives and a later one fails (no SIGPIPE).
  d::io_result r;
  for (int i = 0; i < 100 && r.status == d::io_status::ok; ++i) {
    r = d::write_all(a.get(), data.data(), data.size(), d::steady::now() + 2s);
  }
  EXPECT_EQ(r.status, d::io_status::closed) << r.describe();
}

TEST(socket_io, poll_ms_rounds_up_and_clamps) {
  EXPECT_EQ(d::poll_ms(d::steady::now() - 1s), 0);
  const int soon = d::poll_ms(d::steady::now() + 1500us);
  EXPECT_GE(soon, 1);
  EXPECT_LE(soon, 2);
  EXPECT_EQ(d::poll_ms(d::steady::now() + std::chrono::hours(24 * 365 * 100)), 1 << 30);
}

TEST(socket_io, unique_socket_closes_once_and_moves) {
  d::unique_socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int raw = s.get();
  ASSERT_GE(raw, 0);
  d::unique_socket t = std::move(s);
  EXPECT_FALSE(s);  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
  EXPECT_EQ(t.get(), raw);
  t.reset();
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
  EXPECT_FALSE(t);
}

}  // namespace socket_io_test
