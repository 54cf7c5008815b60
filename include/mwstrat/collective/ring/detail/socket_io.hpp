#pragma once
// Deadline-bounded I/O on non-blocking POSIX sockets (poll), used for the handshake and the data path.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

namespace mwstrat::detail {

using steady = std::chrono::steady_clock;

class unique_socket {
 public:
  unique_socket() = default;
  explicit unique_socket(int fd) : fd_(fd) {}
  unique_socket(unique_socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_socket& operator=(unique_socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  unique_socket(const unique_socket&) = delete;
  unique_socket& operator=(const unique_socket&) = delete;
  ~unique_socket() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] explicit operator bool() const { return fd_ >= 0; }
  // Gives the descriptor up (to an owner that closes it); -1 when there was none.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

enum class io_status { ok, closed, failed, timed_out };

struct io_result {
  io_status status = io_status::ok;
  int error = 0;  // errno when failed

  [[nodiscard]] std::string describe() const {
    switch (status) {
      case io_status::ok: return "ok";
      case io_status::closed: return "connection closed";
      case io_status::timed_out: return "timed out";
      case io_status::failed: return std::strerror(error);
    }
    return "?";
  }
};

// Milliseconds until `deadline`, rounded up, clamped to [0, int max / 2].
inline int poll_ms(steady::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

inline io_result wait_fd(int fd, short events, steady::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc > 0) return {};
    if (rc == 0) return {io_status::timed_out, 0};
    if (errno != EINTR) return {io_status::failed, errno};
  }
}

inline io_result read_exact(int fd, void* buffer, std::size_t size, steady::time_point deadline) {
  auto* at = static_cast<char*>(buffer);
  while (size > 0) {
    const auto n = ::recv(fd, at, size, MSG_DONTWAIT);
    if (n > 0) {
      at += n;
      size -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      return {io_status::closed, 0};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (auto r = wait_fd(fd, POLLIN, deadline); r.status != io_status::ok) return r;
    } else if (errno == ECONNRESET || errno == EPIPE) {
      return {io_status::closed, errno};
    } else {
      return {io_status::failed, errno};
    }
  }
  return {};
}

inline io_result write_all(int fd, const void* buffer, std::size_t size, steady::time_point deadline) {
  const auto* at = static_cast<const char*>(buffer);
  while (size > 0) {
    const auto n = ::send(fd, at, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      at += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (auto r = wait_fd(fd, POLLOUT, deadline); r.status != io_status::ok) return r;
    } else if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) {
      return {io_status::closed, errno};
    } else {
      return {io_status::failed, n < 0 ? errno : EIO};
    }
  }
  return {};
}

inline void tune_socket(int fd, int buffer_bytes) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
}

}  // namespace mwstrat::detail
