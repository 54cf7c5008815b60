#pragma once
// The join protocol's wire (elastic training: a worker started later asks the chief of a running ring to take it in;
// ring/join_desk.hpp is the chief's side, join_client.hpp the joiner's). A message is a little-endian u32 count of
// bytes, then fields, each a u32 length and its bytes. The conversation:
//   joiner -> chief  hello:     "mwstrat-join 1", joiner nonce (hex), its ring address, its worker index, token flag
//   chief  -> joiner challenge: "challenge", chief nonce (hex)
//   joiner -> chief  proof:     HMAC(token, "join request" | both nonces | address | worker), hex; "" without a token
//   chief  -> joiner            "pending" (kept until a step boundary admits it) or "refused", reason (closed)
//   chief  -> joiner admission: "admitted", generation, rank, cluster fingerprint, addresses..., then
//                               HMAC(token, "join admit" | both nonces | every field before it), hex
// The proofs bind the nonces of this conversation, so neither side's proof can be replayed in another one.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/error.hpp>

#include <boost/asio/ip/tcp.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat::detail {

inline constexpr std::string_view join_hello_tag = "mwstrat-join 1";
// No join message is near this; a peer that says more is not an mwstrat joiner.
inline constexpr std::uint32_t join_message_limit = 1u << 20;

using join_message = std::vector<std::string>;

inline io_result send_join_message(int fd, const join_message& fields, steady::time_point deadline) {
  std::string bytes(4, '\0');
  const auto put32 = [&bytes](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  for (const auto& f : fields) {
    const std::size_t at = bytes.size();
    bytes.resize(at + 4);
    put32(at, static_cast<std::uint32_t>(f.size()));
    bytes += f;
  }
  put32(0, static_cast<std::uint32_t>(bytes.size() - 4));
  return write_all(fd, bytes.data(), bytes.size(), deadline);
}

// The next message, or nullopt with `why` set (closed, timed out, or not this protocol).
inline std::optional<join_message> read_join_message(int fd, steady::time_point deadline, std::string& why) {
  const auto get32 = [](const unsigned char* p) {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
  };
  unsigned char head[4];
  if (auto r = read_exact(fd, head, 4, deadline); r.status != io_status::ok) {
    why = r.describe();
    return std::nullopt;
  }
  const std::uint32_t size = get32(head);
  if (size > join_message_limit) {
    why = "a message of " + std::to_string(size) + " bytes (not an mwstrat joiner)";
    return std::nullopt;
  }
  std::string body(size, '\0');
  if (auto r = read_exact(fd, body.data(), size, deadline); r.status != io_status::ok) {
    why = r.describe();
    return std::nullopt;
  }
  join_message fields;
  std::size_t at = 0;
  while (at < body.size()) {
    if (body.size() - at < 4) {
      why = "a truncated field";
      return std::nullopt;
    }
    const std::uint32_t n = get32(reinterpret_cast<const unsigned char*>(body.data() + at));
    at += 4;
    if (n > body.size() - at) {
      why = "a field longer than its message";
      return std::nullopt;
    }
    fields.emplace_back(body, at, n);
    at += n;
  }
  return fields;
}

inline std::string hex_of(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const auto b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 0xF];
  }
  return out;
}

// HMAC(token, label | fields, each with its length), hex: both sides compute it over what they sent and heard.
inline std::string join_proof(std::string_view token, std::string_view label, const join_message& fields) {
  std::vector<std::uint8_t> msg(label.begin(), label.end());
  for (const auto& f : fields) {
    const auto n = static_cast<std::uint32_t>(f.size());
    for (int i = 0; i < 4; ++i) msg.push_back(static_cast<std::uint8_t>((n >> (8 * i)) & 0xFF));
    msg.insert(msg.end(), f.begin(), f.end());
  }
  return hex_of(hmac_sha256(token, msg));
}

inline bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The endpoint of "host:port" (a numeric or named host), or nullopt with `why`.
inline std::optional<boost::asio::ip::tcp::endpoint> join_endpoint(const std::string& text, bool passive,
                                                                   std::string& why) {
  const auto parsed = parse_address_nothrow(text);
  if (!parsed.reason.empty()) {
    why = "'" + text + "' is not host:port: " + parsed.reason;
    return std::nullopt;
  }
  namespace ip = boost::asio::ip;
  boost::asio::io_context io;
  boost::system::error_code ec;
  ip::tcp::resolver resolver(io);
  const auto flags = passive ? ip::resolver_base::passive : ip::resolver_base::flags{};
  const auto found = resolver.resolve(parsed.value.host, std::to_string(parsed.value.port), flags, ec);
  if (ec || found.empty()) {
    why = "cannot resolve '" + parsed.value.host + "': " + (ec ? ec.message() : "no results");
    return std::nullopt;
  }
  return found.begin()->endpoint();
}

// A non-blocking socket connected to `text` within `deadline`, or an empty one with `why`.
inline unique_socket join_connect(const std::string& text, steady::time_point deadline, std::string& why) {
  const auto ep = join_endpoint(text, false, why);
  if (!ep) return {};
  unique_socket fd(::socket(ep->protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    why = std::string("socket: ") + std::strerror(errno);
    return {};
  }
  int rc = ::connect(fd.get(), ep->data(), static_cast<socklen_t>(ep->size()));
  if (rc < 0 && errno == EINPROGRESS) {
    if (wait_fd(fd.get(), POLLOUT, deadline).status != io_status::ok) {
      why = "connect timed out";
      return {};
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    why = std::strerror(errno);
    return {};
  }
  return fd;
}

}  // namespace mwstrat::detail
