#pragma once
/// \file
/// A task's network address, `host:port`, as written in a cluster description.
///
/// Accepted forms: `hostname:port` (RFC 1123 labels; `_` allowed for container names), `a.b.c.d:port` (IPv4),
/// `[v6]:port` and `[v6%zone]:port` (IPv6 in brackets). Ports are decimal, 1..65535. Hostnames are compared
/// case-insensitively and IPv6 addresses in their canonical form, so `[0:0::1]:80` and `[::1]:80` are the
/// same task address.

#include <mwstrat/cluster/detail/diagnostics.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace mwstrat {

/// One task address, parsed and in canonical form (lower-case hostname, canonical IPv6, port as a number).
struct address {
  std::string host;        ///< hostname or IP literal, without brackets
  std::uint16_t port = 0;  ///< 1..65535
  bool ipv6 = false;       ///< `host` is an IPv6 literal (printed in brackets)

  /// `host:port`, or `[host]:port` for IPv6: the canonical text used for fingerprints and duplicate checks.
  [[nodiscard]] std::string to_string() const {
    std::string out;
    if (ipv6) {
      out += '[';
      out += host;
      out += ']';
    } else {
      out += host;
    }
    out += ':';
    out += std::to_string(port);
    return out;
  }

  friend bool operator==(const address&, const address&) = default;
};

namespace detail {

/// The result of checking one address: the address, or why it is not one (`reason` non-empty).
struct address_parse_result {
  address value;
  std::string reason;
};

[[nodiscard]] inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
[[nodiscard]] inline bool is_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A decimal port, 1..65535 (0 too with `allow_zero`); leading zeros are tolerated (the number is what counts).
[[nodiscard]] inline std::string parse_port(std::string_view text, std::uint16_t& port, bool allow_zero = false) {
  if (text.empty()) return "the port is empty; expected host:port with a port in 1..65535";
  std::uint32_t value = 0;
  for (const char c : text) {
    if (!is_digit(c)) return "port " + quote(text, 16) + " is not a decimal number";
    value = value * 10 + static_cast<std::uint32_t>(c - '0');
    if (value > 65535) {
      // Keep reading only to tell "not a number" from "too large".
      for (const char d : text) {
        if (!is_digit(d)) return "port " + quote(text, 16) + " is not a decimal number";
      }
      return "port " + std::string(text.substr(0, 16)) + (text.size() > 16 ? "..." : "") +
             " is out of range (1..65535)";
    }
  }
  if (value == 0 && !allow_zero) return "port 0 is out of range (1..65535); a task needs a fixed port its peers can reach";
  port = static_cast<std::uint16_t>(value);
  return {};
}

[[nodiscard]] inline std::string check_hostname(std::string_view host, std::string& canonical) {
  if (host.empty()) return "the host is empty; expected host:port";
  if (host.size() > 253) return "the host name is longer than 253 characters";
  bool all_numeric = true;
  std::size_t label_start = 0;
  for (std::size_t i = 0; i <= host.size(); ++i) {
    if (i == host.size() || host[i] == '.') {
      const std::string_view label = host.substr(label_start, i - label_start);
      if (label.empty()) return "the host " + quote(host) + " has an empty label (two dots, or a dot at an end)";
      if (label.size() > 63) return "the host " + quote(host) + " has a label longer than 63 characters";
      if (label.front() == '-' || label.back() == '-') {
        return "the host " + quote(host) + " has a label that starts or ends with '-'";
      }
      label_start = i + 1;
      continue;
    }
    const char c = host[i];
    if (!is_alnum(c) && c != '-' && c != '_') {
      return "the host " + quote(host) + " contains " + quote(std::string_view(&host[i], 1)) +
             ", which no host name may contain";
    }
    if (!is_digit(c)) all_numeric = false;
  }
  if (all_numeric) {
    // Only digits and dots: this must be a dotted-quad IPv4 address, not a host name.
    std::string copy(host);
    in_addr v4{};
    if (inet_pton(AF_INET, copy.c_str(), &v4) != 1) {
      return "the host " + quote(host) + " is not a valid IPv4 address (expected a.b.c.d, each 0..255)";
    }
  }
  canonical.assign(host);
  for (char& c : canonical) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return {};
}

[[nodiscard]] inline std::string check_ipv6(std::string_view inside, std::string& canonical) {
  std::string_view literal = inside;
  std::string_view zone;
  if (const auto percent = inside.find('%'); percent != std::string_view::npos) {
    literal = inside.substr(0, percent);
    zone = inside.substr(percent + 1);
    if (zone.empty()) return "the IPv6 address " + quote(inside) + " has an empty zone after '%'";
    for (const char c : zone) {
      if (!is_alnum(c) && c != '-' && c != '_' && c != '.') {
        return "the IPv6 zone " + quote(zone) + " is not an interface name";
      }
    }
  }
  if (literal.empty() || literal.size() > 45) return quote(inside) + " in brackets is not a valid IPv6 address";
  std::string copy(literal);
  in6_addr v6{};
  if (inet_pton(AF_INET6, copy.c_str(), &v6) != 1) {
    return quote(literal) + " in brackets is not a valid IPv6 address";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, &v6, text, sizeof text) == nullptr) return quote(literal) + " is not a valid IPv6 address";
  canonical = text;
  if (!zone.empty()) {
    canonical += '%';
    canonical += zone;
  }
  return {};
}

/// Parses `text` as an address without throwing; `reason` says what is wrong, in words a user can act on.
/// `allow_port_zero`: port 0 (the kernel picks one) is accepted, for a task that nobody connects to (the ring's
/// world of one); a cluster's tasks need fixed ports.
[[nodiscard]] inline address_parse_result parse_address_nothrow(std::string_view text, bool allow_port_zero = false) {
  address_parse_result result;
  std::string& reason = result.reason;
  if (text.empty()) {
    reason = "the address is empty; expected host:port";
    return result;
  }
  for (const char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      reason = "the address contains whitespace";
      return result;
    }
  }
  if (const auto scheme = text.find("://"); scheme != std::string_view::npos) {
    reason = "the address has a scheme prefix " + quote(text.substr(0, scheme + 3)) +
             "; write plain host:port (the protocol is set by rpc_layer)";
    return result;
  }
  std::string_view port_text;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      reason = "the IPv6 address has no closing ']'; expected [v6]:port";
      return result;
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      reason = "the IPv6 address has no port; expected [v6]:port";
      return result;
    }
    reason = check_ipv6(text.substr(1, close - 1), result.value.host);
    if (!reason.empty()) return result;
    result.value.ipv6 = true;
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      reason = "the address has no port; expected host:port";
      return result;
    }
    const std::string_view host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      reason = "the address looks like an IPv6 address without brackets; write [v6]:port";
      return result;
    }
    if (host.find_first_of("[]") != std::string_view::npos) {
      reason = "the address has a misplaced bracket; IPv6 addresses are written [v6]:port";
      return result;
    }
    reason = check_hostname(host, result.value.host);
    if (!reason.empty()) return result;
    port_text = text.substr(colon + 1);
  }
  reason = parse_port(port_text, result.value.port, allow_port_zero);
  return result;
}

}  // namespace detail

/// Parses one address; throws `config_error` (component "cluster") naming `source` and the text when it is not
/// `host:port`, `[v6]:port` or its port is outside 1..65535.
[[nodiscard]] inline address parse_address(std::string_view text, std::string_view source = "address") {
  auto parsed = detail::parse_address_nothrow(text);
  if (!parsed.reason.empty()) detail::throw_cluster_error(source, {}, detail::quote(text) + ": " + parsed.reason);
  return std::move(parsed.value);
}

}  // namespace mwstrat
