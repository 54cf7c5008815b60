#pragma once
// Collects a cluster's addresses in order, rejecting malformed ones and any address two tasks share.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>

#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace mwstrat::detail {

class address_set {
 public:
  explicit address_set(std::string_view source) : source_(source) {}

  /// Parses `text` found at `path`; throws a config_error naming source, path and value on any defect.
  address add(std::string_view text, const std::string& path) {
    auto parsed = parse_address_nothrow(text);
    if (!parsed.reason.empty()) throw_cluster_error(source_, path, quote(text) + ": " + parsed.reason);
    std::string key = parsed.value.to_string();
    const auto [where, inserted] = seen_.try_emplace(std::move(key), path);
    if (!inserted) {
      throw_cluster_error(source_, path,
                          quote(text) + " is already the address of " + where->second +
                              "; every task needs its own host:port");
    }
    return std::move(parsed.value);
  }

 private:
  std::string source_;
  std::map<std::string, std::string, std::less<>> seen_;  // canonical address -> path of its first use
};

}  // namespace mwstrat::detail
