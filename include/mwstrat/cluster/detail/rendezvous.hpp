#pragma once
// The address exchange behind `mpi_resolver`: rank 0 listens on a known IPv4 address; every other rank connects,
// says which rank it is and where its ring will listen, and gets back everybody's address in rank order. Plain
// POSIX sockets and text lines ("mwstrat-rendezvous/1 ..."); every wait is bounded by one deadline.
//
// A rank's ring address uses the IP its connection to rank 0 came from (so it is the address rank 0's host
// routes to, not a guess among the interfaces), and a port each rank holds bound until the exchange ends, so two
// ranks on one host never pick the same port (the ring binds it a moment after it is released).
//
// Rank 0 serves every connection at once (poll): a connection that says nothing, or reads its answer slowly,
// delays nobody else, and a rank seen to go away after registering (before rank 0 answers) is named. When rank 0
// gives up, every rank that registered hears why and throws the same kind of error.

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
  // Who meets, for messages: MPI ranks (mpi_resolver) or per-node launchers (mwstrat-launch --nnodes).
  std::string name = "MPI rendezvous";
  std::string member = "rank";
  [[nodiscard]] error_origin origin() const { return {"cluster", rank}; }
  [[nodiscard]] int millis_left() const {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1'000'000));
  }
  [[noreturn]] void fail_io(const std::string& what, int err) const {
    throw io_error(origin(), name + " at " + endpoint + ": " + what + ": " + std::strerror(err));
  }
  [[noreturn]] void fail_timeout(const std::string& what) const {
    throw timeout_error(origin(), name + " at " + endpoint + ": " + what);
  }
};

// Why rank 0 gave up, sent to every rank as the first word of its answer so each throws the same kind of error:
// bad registrations (config_error), ranks that never came (timeout_error), a rank gone after registering
// (io_error).
enum class rendezvous_refusal { config, timeout, lost };

inline const char* refusal_word(rendezvous_refusal kind) {
  switch (kind) {
    case rendezvous_refusal::timeout: return "timeout";
    case rendezvous_refusal::lost: return "lost";
    default: return "error";
  }
}

[[noreturn]] inline void throw_refusal(const rendezvous_context& ctx, rendezvous_refusal kind, const std::string& why) {
  const std::string text = ctx.name + " at " + ctx.endpoint + ": " + why;
  switch (kind) {
    case rendezvous_refusal::timeout: throw timeout_error(ctx.origin(), text);
    case rendezvous_refusal::lost: throw io_error(ctx.origin(), text);
    default: throw config_error(ctx.origin(), text);
  }
}

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

/// A port on `ip`, held bound by `socket` (not listening) until the caller lets it go.
struct reserved_port {
  rendezvous_socket socket;
  std::uint16_t port = 0;
};

/// Binds a fresh port on `ip` and keeps it: while held, no other rank (or process) on the host is given it.
inline reserved_port reserve_port(const rendezvous_context& ctx, const std::string& ip) {
  reserved_port r{rendezvous_socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), 0};
  sockaddr_in a = ipv4_socket_address(ip, 0);
  socklen_t len = sizeof a;
  if (r.socket.fd() < 0 || ::bind(r.socket.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(r.socket.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ctx.fail_io("cannot find a free port on " + ip, errno);
  }
  r.port = ntohs(a.sin_port);
  return r;
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

/// Sends every (fd, text) whole, to all at once (poll), before the deadline: a slow reader delays nobody else.
/// Returns the positions in `out` that could not be sent to (closed, failed, or out of time).
inline std::vector<std::size_t> send_to_all(const rendezvous_context& ctx,
                                            const std::vector<std::pair<int, std::string>>& out) {
  std::vector<std::size_t> sent(out.size(), 0);
  std::vector<std::size_t> failed;
  std::vector<std::size_t> busy;  // positions still sending
  for (std::size_t i = 0; i < out.size(); ++i) busy.push_back(i);
  while (!busy.empty()) {
    std::vector<pollfd> p;
    for (const std::size_t i : busy) p.push_back({out[i].first, POLLOUT, 0});
    const int ready = ::poll(p.data(), p.size(), ctx.millis_left());
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      failed.insert(failed.end(), busy.begin(), busy.end());  // out of time (or poll failed): give up on them
      break;
    }
    std::vector<std::size_t> still;
    for (std::size_t k = 0; k < busy.size(); ++k) {
      const std::size_t i = busy[k];
      if (p[k].revents == 0) {
        still.push_back(i);
        continue;
      }
      const std::string& text = out[i].second;
      const ssize_t n = ::send(out[i].first, text.data() + sent[i], text.size() - sent[i], MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        failed.push_back(i);
        continue;
      }
      if (n > 0) sent[i] += static_cast<std::size_t>(n);
      if (sent[i] < text.size()) still.push_back(i);
    }
    busy = std::move(still);
  }
  std::sort(failed.begin(), failed.end());
  return failed;
}

/// A connection rank 0 serves: the bytes of its registration line so far, and its rank once registered.
struct rendezvous_peer {
  rendezvous_socket socket;
  std::string received;
  int rank = -1;
};

/// Rank 0: listens on `ip:port`, collects every other rank's address, answers all. Returns the addresses.
inline std::vector<std::string> rendezvous_serve(const rendezvous_context& ctx, const std::string& ip,
                                                 std::uint16_t port) {
  rendezvous_socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int on = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a = ipv4_socket_address(ip, port);
  if (listener.fd() < 0 || ::bind(listener.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener.fd(), 128) != 0) {
    ctx.fail_io(ctx.member + " 0 cannot listen (is this " + ctx.member + " on the first host, and the port free?)",
                errno);
  }
  const reserved_port own = reserve_port(ctx, ip);  // held until the answer is out
  std::vector<std::string> addresses(static_cast<std::size_t>(ctx.size));
  addresses[0] = ip + ':' + std::to_string(own.port);
  std::vector<rendezvous_peer> pending;       // connected, registration line not complete yet
  std::map<int, rendezvous_peer> registered;  // rank -> its connection, waiting for the answer
  // Tells every rank that registered, and `current` (a connection that just broke the rules, or -1), why the
  // rendezvous failed, then fails here too, with the error of `kind` (rendezvous_refusal) on every rank.
  auto fail_all = [&](int current, const std::string& why, rendezvous_refusal kind = rendezvous_refusal::config) {
    const std::string line = std::string(refusal_word(kind)) + ' ' + why + '\n';
    std::vector<std::pair<int, std::string>> out;
    if (current >= 0) out.emplace_back(current, line);
    for (auto& [rank, peer] : registered) {
      if (peer.socket.fd() != current) out.emplace_back(peer.socket.fd(), line);
    }
    (void)send_to_all(ctx, out);  // a rank that is gone already cannot be told; the others are
    throw_refusal(ctx, kind, why);
  };
  // A complete registration line from `peer`: checked, then the peer moves to `registered`.
  auto take_registration = [&](rendezvous_peer& peer, const std::string& line) {
    std::istringstream in(line);
    std::string magic, endpoint;
    int rank = -1, size = -1;
    in >> magic >> rank >> size >> endpoint;
    const int fd = peer.socket.fd();
    if (magic != rendezvous_magic || endpoint.empty()) {
      fail_all(fd, "a peer sent '" + line.substr(0, 80) + "', not a registration");
    }
    if (size != ctx.size) {
      fail_all(fd, ctx.member + " " + std::to_string(rank) + " says the world has " + std::to_string(size) +
                       " " + ctx.member + "s, " + ctx.member + " 0 says " + std::to_string(ctx.size));
    }
    if (rank < 1 || rank >= ctx.size) {
      fail_all(fd, "a peer registered as " + ctx.member + " " + std::to_string(rank) + ", out of range");
    }
    if (registered.count(rank)) fail_all(fd, ctx.member + " " + std::to_string(rank) + " registered twice");
    addresses[static_cast<std::size_t>(rank)] = endpoint;
    peer.rank = rank;
    registered.emplace(rank, std::move(peer));
  };
  auto missing_ranks = [&] {
    std::string missing;
    for (int r = 1; r < ctx.size; ++r) {
      if (!registered.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    return missing;
  };
  while (static_cast<int>(registered.size()) + 1 < ctx.size) {
    // Watched: the listener, every pending connection, and every registered one (which must stay silent: a
    // readable registered connection has closed, or broken the protocol).
    std::vector<pollfd> p{{listener.fd(), POLLIN, 0}};
    for (const auto& peer : pending) p.push_back({peer.socket.fd(), POLLIN, 0});
    for (const auto& [rank, peer] : registered) p.push_back({peer.socket.fd(), POLLIN, 0});
    const int ready = ::poll(p.data(), p.size(), ctx.millis_left());
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) ctx.fail_io("poll", errno);
    if (ready == 0) {
      fail_all(-1, ctx.member + "(s) " + missing_ranks() + " did not register within the deadline",
               rendezvous_refusal::timeout);
    }
    std::size_t k = 1;
    std::vector<rendezvous_peer> still_pending;
    for (auto& peer : pending) {
      const short revents = p[k++].revents;
      if (revents == 0) {
        still_pending.push_back(std::move(peer));
        continue;
      }
      char buffer[4096];
      const ssize_t n = ::recv(peer.socket.fd(), buffer, sizeof buffer, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        still_pending.push_back(std::move(peer));
        continue;
      }
      if (n <= 0) continue;  // closed (or failed) before registering: not a rank, forget it
      peer.received.append(buffer, static_cast<std::size_t>(n));
      const auto newline = peer.received.find('\n');
      if (newline == std::string::npos && peer.received.size() > (1u << 16)) {
        fail_all(peer.socket.fd(), "a peer sent 64 KiB without a line end, not a registration");
      }
      still_pending.push_back(std::move(peer));
    }
    for (auto& [rank, peer] : registered) {
      if (p[k++].revents == 0) continue;
      char c = 0;
      const ssize_t n = ::recv(peer.socket.fd(), &c, 1, MSG_PEEK);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n > 0) fail_all(-1, ctx.member + " " + std::to_string(rank) + " sent more than its registration");
      fail_all(-1, ctx.member + " " + std::to_string(rank) + " closed its connection after registering",
               rendezvous_refusal::lost);
    }
    // Registrations completed in this round are checked and taken; the rest wait for more bytes.
    pending.clear();
    for (auto& peer : still_pending) {
      const auto newline = peer.received.find('\n');
      if (newline == std::string::npos) {
        pending.push_back(std::move(peer));
      } else {
        const std::string line = peer.received.substr(0, newline);
        take_registration(peer, line);
      }
    }
    if (p[0].revents != 0) {
      for (;;) {
        rendezvous_socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (s.fd() < 0) break;  // EAGAIN: nobody else is waiting (or a connection that failed: theirs to retry)
        pending.push_back(rendezvous_peer{std::move(s), {}, -1});
      }
    }
  }
  // One last look before answering: a rank that went away while the others were still coming is named here.
  {
    std::vector<pollfd> p;
    std::vector<int> ranks;
    for (const auto& [rank, peer] : registered) {
      p.push_back({peer.socket.fd(), POLLIN, 0});
      ranks.push_back(rank);
    }
    if (::poll(p.data(), p.size(), 0) > 0) {
      for (std::size_t k = 0; k < p.size(); ++k) {
        if (p[k].revents == 0) continue;
        char c = 0;
        const ssize_t n = ::recv(p[k].fd, &c, 1, MSG_PEEK);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        const std::string who = ctx.member + " " + std::to_string(ranks[k]);
        if (n > 0) fail_all(-1, who + " sent more than its registration");
        fail_all(-1, who + " closed its connection after registering", rendezvous_refusal::lost);
      }
    }
  }
  std::string answer = "ok";
  for (const auto& address : addresses) answer += ' ' + address;
  answer += '\n';
  std::vector<std::pair<int, std::string>> out;
  std::vector<int> ranks;
  for (auto& [rank, peer] : registered) {
    out.emplace_back(peer.socket.fd(), answer);
    ranks.push_back(rank);
  }
  const auto failed = send_to_all(ctx, out);
  if (!failed.empty()) {
    std::string who;
    for (const std::size_t i : failed) who += (who.empty() ? "" : ", ") + std::to_string(ranks[i]);
    // The ranks that got the answer go on and meet the missing one's absence at the ring's start-up.
    throw io_error(ctx.origin(), ctx.name + " at " + ctx.endpoint + ": " + ctx.member + "(s) " + who +
                                     " could not be sent the addresses (gone after registering?)");
  }
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
      ctx.fail_timeout(ctx.member + " 0 did not accept within the deadline (" + std::string(std::strerror(err)) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 not listening yet
  }
  sockaddr_in self{};
  socklen_t len = sizeof self;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&self), &len) != 0) ctx.fail_io("getsockname", errno);
  const std::string my_ip = ipv4_text(self);
  const reserved_port own = reserve_port(ctx, my_ip);  // held until the answer is in
  const std::string mine = my_ip + ':' + std::to_string(own.port);
  send_line(ctx, s.fd(),
            std::string(rendezvous_magic) + ' ' + std::to_string(ctx.rank) + ' ' + std::to_string(ctx.size) + ' ' +
                mine + '\n');
  // Rank 0 answers by the same deadline, with the addresses or with why not (ranks that never came): a little
  // grace lets its answer arrive, so this rank reports the cause instead of its own time-out.
  rendezvous_context answer_ctx = ctx;
  answer_ctx.deadline += std::chrono::seconds(2);
  const auto line = read_line(answer_ctx, s.fd(), ctx.member + " 0");
  if (!line) {
    throw io_error(ctx.origin(), ctx.name + " at " + ctx.endpoint + ": " + ctx.member + " 0 closed the connection");
  }
  for (const auto kind : {rendezvous_refusal::config, rendezvous_refusal::timeout, rendezvous_refusal::lost}) {
    const std::string word = std::string(refusal_word(kind)) + ' ';
    if (line->rfind(word, 0) == 0) throw_refusal(ctx, kind, ctx.member + " 0 refused: " + line->substr(word.size()));
  }
  std::istringstream in(*line);
  std::string ok;
  in >> ok;
  std::vector<std::string> addresses;
  for (std::string a; in >> a;) addresses.push_back(a);
  if (ok != "ok" || static_cast<int>(addresses.size()) != ctx.size ||
      addresses[static_cast<std::size_t>(ctx.rank)] != mine) {
    throw config_error(ctx.origin(), ctx.name + " at " + ctx.endpoint + ": " + ctx.member + " 0 answered '" +
                                         line->substr(0, 80) +
                                         "', not the " + std::to_string(ctx.size) + " addresses");
  }
  return addresses;
}

}  // namespace mwstrat::detail
