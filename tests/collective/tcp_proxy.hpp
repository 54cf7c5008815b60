#pragma once
// A TCP proxy on 127.0.0.1 for tests that stand between two ranks: each connection it accepts is forwarded to the
// target port; the bytes from the connecting side pass through `tamper` (which may change them in place) and are
// captured, per connection, in the order they were accepted. Blocking sockets, poll() with short timeouts, so the
// destructor stops it within a tenth of a second.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mwstrat::test {

class tcp_proxy {
 public:
  // Called with (connection index, the bytes just read from the client side); may alter them.
  using tamper_fn = std::function<void(std::size_t, std::span<std::uint8_t>)>;

  tcp_proxy(int target_port, tamper_fn tamper = {}) : target_(target_port), tamper_(std::move(tamper)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = loopback(0);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener_, 16) != 0)
      throw std::runtime_error("tcp_proxy: cannot listen");
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;
  ~tcp_proxy() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : pumps_) t.join();
    ::close(listener_);
  }

  [[nodiscard]] int port() const { return port_; }
  // What the client side of connection `k` has sent so far (after tampering).
  [[nodiscard]] std::vector<std::uint8_t> upstream(std::size_t k) const {
    const std::lock_guard lock(mutex_);
    return k < captured_.size() ? captured_[k] : std::vector<std::uint8_t>{};
  }
  [[nodiscard]] std::size_t connections() const {
    const std::lock_guard lock(mutex_);
    return captured_.size();
  }

 private:
  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }

  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = loopback(target_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {  // the target is not up: refuse too
        ::close(server);
        ::close(client);
        continue;
      }
      std::size_t index = 0;
      {
        const std::lock_guard lock(mutex_);
        index = captured_.size();
        captured_.emplace_back();
      }
      pumps_.emplace_back([this, client, server, index] { pump(client, server, index); });
    }
  }

  // Forwards both ways, passing a half-close on (an aborting rank shuts its sending half and still reads), until
  // both directions have ended or the proxy stops.
  void pump(int client, int server, std::size_t index) {
    std::vector<std::uint8_t> buffer(1 << 16);
    bool done[2] = {false, false};
    while (!(done[0] && done[1]) && !stop_) {
      pollfd p[2] = {{done[0] ? -1 : client, POLLIN, 0}, {done[1] ? -1 : server, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      for (int side = 0; side < 2; ++side) {
        if (done[side] || (p[side].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const int from = side == 0 ? client : server, to = side == 0 ? server : client;
        const auto n = ::recv(from, buffer.data(), buffer.size(), 0);
        if (n <= 0) {
          done[side] = true;
          ::shutdown(to, SHUT_WR);
          continue;
        }
        std::span<std::uint8_t> bytes(buffer.data(), static_cast<std::size_t>(n));
        if (side == 0) {
          if (tamper_) tamper_(index, bytes);
          const std::lock_guard lock(mutex_);
          captured_[index].insert(captured_[index].end(), bytes.begin(), bytes.end());
        }
        for (std::size_t at = 0; at < bytes.size();) {
          const auto w = ::send(to, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
          if (w <= 0) {
            done[side] = true;
            break;
          }
          at += static_cast<std::size_t>(w);
        }
      }
    }
    ::close(client);
    ::close(server);
  }

  int target_;
  tamper_fn tamper_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // the acceptor's only
  mutable std::mutex mutex_;
  std::vector<std::vector<std::uint8_t>> captured_;
};

}  // namespace mwstrat::test
