#pragma once
// The address exchange behind `mpi_resolver`: rank 0 listens on a known IPv4 address; every other rank connects,
// says which rank it is and where its ring will listen, and gets back everybody's address in rank order. Plain
// POSIX sockets and text lines ("mwstrat-rendezvous/1 ..."); every wait is bounded by one deadline.
//
// A rank's ring address uses the IP its connection to rank 0 came from (so it is the address rank 0's host
// routes to, not a guess among the interfaces), and a port that was free a moment ago on that IP.

#include <mwstrat/error.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat::detail {

inline constexpr const char* rendezvous_magic = "mwstrat-rendezvous/1";

class rendezvous_socket {
 public:
  rendezvous_socket() = default;
  explicit rendezvous_socket(int fd) : fd_(fd) {}
  rendezvous_socket(rendezvous_socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  rendezvous_socket& operator=(rendezvous_socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  rendezvous_socket(const rendezvous_socket&) = delete;
  rendezvous_socket& operator=(const rendezvous_socket&) = delete;
  ~rendezvous_socket() { reset(); }
  [[nodiscard]] int fd() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct rendezvous_context {
  std::string endpoint;  // "ip:port" of rank 0's listener, for messages
  int rank = 0;
  int size = 1;
  std::chrono::steady_clock::time_point deadline;
  [[nodiscard]] error_origin origin() const { return {"cluster", rank}; }
  [[nodiscard]] int millis_left() const {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1'000'000));
  }
  [[noreturn]] void fail_io(const std::string& what, int err) const {
    throw io_error(origin(), "MPI rendezvous at " + endpoint + ": " + what + ": " + std::strerror(err));
  }
  [[noreturn]] void fail_timeout(const std::string& what) const {
    throw timeout_error(origin(), "MPI rendezvous at " + endpoint + ": " + what);
  }
};

inline sockaddr_in ipv4_socket_address(const std::string& ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

inline std::string ipv4_text(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return text;
}

/// A port on `ip` that is free now (bound, read, released; the ring binds it a moment later).
inline std::uint16_t free_port_on(const rendezvous_context& ctx, const std::string& ip) {
  rendezvous_socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = ipv4_socket_address(ip, 0);
  socklen_t len = sizeof a;
  if (s.fd() < 0 || ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ctx.fail_io("cannot find a free port on " + ip, errno);
  }
  return ntohs(a.sin_port);
}

/// Sends `line` whole before the deadline.
inline void send_line(const rendezvous_context& ctx, int fd, const std::string& line) {
  for (std::size_t sent = 0; sent < line.size();) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ctx.millis_left()) != 1) ctx.fail_timeout("cannot send within the deadline");
    const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) ctx.fail_io("send", errno);
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
}

/// Reads one '\n'-terminated line (at most 1 MiB) before the deadline; nothing when the peer closed first.
inline std::optional<std::string> read_line(const rendezvous_context& ctx, int fd, const std::string& waiting_for) {
  std::string line;
  char c = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ctx.millis_left()) != 1) {
      ctx.fail_timeout("no answer from " + waiting_for + " within the deadline");
    }
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n == 0) return std::nullopt;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      ctx.fail_io("receiving from " + waiting_for, errno);
    }
    if (c == '\n') return line;
    if (line.size() > (1u << 20)) ctx.fail_io("a line from " + waiting_for + " is longer than 1 MiB", EPROTO);
    line += c;
  }
}

/// Rank 0: listens on `ip:port`, collects every other rank's address, answers all. Returns the addresses.
inline std::vector<std::string> rendezvous_serve(const rendezvous_context& ctx, const std::string& ip,
                                                 std::uint16_t port) {
  rendezvous_socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a = ipv4_socket_address(ip, port);
  if (listener.fd() < 0 || ::bind(listener.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener.fd(), 128) != 0) {
    ctx.fail_io("rank 0 cannot listen (is this rank on the first host, and the port free?)", errno);
  }
  std::vector<std::string> addresses(static_cast<std::size_t>(ctx.size));
  addresses[0] = ip + ':' + std::to_string(free_port_on(ctx, ip));
  std::map<int, rendezvous_socket> peers;  // rank -> its connection, waiting for the answer
  // Tells every rank that registered, and the one that just came (`current`), why the rendezvous failed.
  auto fail_all = [&](int current, const std::string& why) {
    std::vector<int> fds{current};
    for (auto& [rank, s] : peers) fds.push_back(s.fd());
    for (const int fd : fds) {
      try {
        send_line(ctx, fd, std::string("error ") + why + "\n");
      } catch (const error&) {
        // that rank is gone too; the others still hear why
      }
    }
    throw config_error(ctx.origin(), "MPI rendezvous at " + ctx.endpoint + ": " + why);
  };
  while (static_cast<int>(peers.size()) + 1 < ctx.size) {
    pollfd p{listener.fd(), POLLIN, 0};
    if (::poll(&p, 1, ctx.millis_left()) != 1) {
      std::string missing;
      for (int r = 1; r < ctx.size; ++r) {
        if (!peers.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      ctx.fail_timeout("rank(s) " + missing + " did not register within the deadline");
    }
    rendezvous_socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (s.fd() < 0) continue;
    const auto line = read_line(ctx, s.fd(), "a registering rank");
    if (!line) continue;
    std::istringstream in(*line);
    std::string magic, endpoint;
    int rank = -1, size = -1;
    in >> magic >> rank >> size >> endpoint;
    if (magic != rendezvous_magic || endpoint.empty()) {
      fail_all(s.fd(), "a peer sent '" + line->substr(0, 80) + "', not a registration");
    }
    if (size != ctx.size) {
      fail_all(s.fd(), "rank " + std::to_string(rank) + " says the world has " + std::to_string(size) +
                           " ranks, rank 0 says " + std::to_string(ctx.size));
    }
    if (rank < 1 || rank >= ctx.size) {
      fail_all(s.fd(), "a peer registered as rank " + std::to_string(rank) + ", out of range");
    }
    if (peers.count(rank)) fail_all(s.fd(), "rank " + std::to_string(rank) + " registered twice");
    addresses[static_cast<std::size_t>(rank)] = endpoint;
    peers.emplace(rank, std::move(s));
  }
  std::string answer = "ok";
  for (const auto& address : addresses) answer += ' ' + address;
  answer += '\n';
  for (auto& [rank, s] : peers) send_line(ctx, s.fd(), answer);
  return addresses;
}

/// Any rank but 0: connects to rank 0 (retrying while it is not listening yet), registers, returns the addresses.
inline std::vector<std::string> rendezvous_join(const rendezvous_context& ctx, const std::string& ip,
                                                std::uint16_t port) {
  const sockaddr_in server = ipv4_socket_address(ip, port);
  rendezvous_socket s;
  for (;;) {
    s = rendezvous_socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.fd() < 0) ctx.fail_io("socket", errno);
    int err = 0;
    if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&server), sizeof server) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{s.fd(), POLLOUT, 0};
        socklen_t len = sizeof err;
        if (::poll(&p, 1, ctx.millis_left()) == 1) {
          ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    if (err == 0) break;
    if (ctx.millis_left() == 0) {
      ctx.fail_timeout("rank 0 did not accept within the deadline (" + std::string(std::strerror(err)) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 not listening yet
  }
  sockaddr_in self{};
  socklen_t len = sizeof self;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&self), &len) != 0) ctx.fail_io("getsockname", errno);
  const std::string my_ip = ipv4_text(self);
  const std::string mine = my_ip + ':' + std::to_string(free_port_on(ctx, my_ip));
  send_line(ctx, s.fd(),
            std::string(rendezvous_magic) + ' ' + std::to_string(ctx.rank) + ' ' + std::to_string(ctx.size) + ' ' +
                mine + '\n');
  const auto line = read_line(ctx, s.fd(), "rank 0");
  if (!line) throw io_error(ctx.origin(), "MPI rendezvous at " + ctx.endpoint + ": rank 0 closed the connection");
  if (line->rfind("error ", 0) == 0) {
    throw config_error(ctx.origin(), "MPI rendezvous at " + ctx.endpoint + ": rank 0 refused: " + line->substr(6));
  }
  std::istringstream in(*line);
  std::string ok;
  in >> ok;
  std::vector<std::string> addresses;
  for (std::string a; in >> a;) addresses.push_back(a);
  if (ok != "ok" || static_cast<int>(addresses.size()) != ctx.size ||
      addresses[static_cast<std::size_t>(ctx.rank)] != mine) {
    throw config_error(ctx.origin(), "MPI rendezvous at " + ctx.endpoint + ": rank 0 answered '" + line->substr(0, 80) +
                                         "', not the " + std::to_string(ctx.size) + " addresses");
  }
  return addresses;
}

}  // namespace mwstrat::detail
