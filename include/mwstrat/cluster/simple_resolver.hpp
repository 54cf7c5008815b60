#pragma once
/// \file
/// A cluster given explicitly: the training addresses in rank order and this process's rank. For programs
/// that configure themselves (command-line flags, their own launcher) rather than through TF_CONFIG.

#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/cluster_spec.hpp>
#include <mwstrat/cluster/concepts.hpp>
#include <mwstrat/cluster/detail/address_set.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/task_info.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat {

/// Resolves to `worker` tasks at `addresses` (rank i = worker:i; worker 0 is the chief) with this process at
/// `rank`.
class simple_resolver {
 public:
  /// `addresses`: the training tasks' "host:port" in rank order; `rank`: this process's index into them.
  simple_resolver(std::vector<std::string> addresses, int rank, std::string rpc_layer = {})
      : addresses_(std::move(addresses)), rank_(rank), rpc_layer_(std::move(rpc_layer)) {}

  /// The cluster. Throws `config_error` (component "cluster", source "simple_resolver") naming `addresses[i]`
  /// or `rank` and the value: an empty list, a malformed or duplicate address, a rank out of range.
  [[nodiscard]] cluster_config resolve() const {
    if (addresses_.empty()) {
      detail::throw_cluster_error(source, "addresses", "[] is empty; give at least this process's \"host:port\"");
    }
    detail::address_set seen(source);
    for (std::size_t i = 0; i < addresses_.size(); ++i) (void)seen.add(addresses_[i], detail::path_index("addresses", i));
    if (rank_ < 0 || static_cast<std::size_t>(rank_) >= addresses_.size()) {
      detail::throw_cluster_error(source, "rank",
                                  std::to_string(rank_) + " is out of range (" + std::to_string(addresses_.size()) +
                                      (addresses_.size() == 1 ? " address)" : " addresses)"));
    }
    cluster_spec spec = cluster_spec::from_jobs({{job::worker, addresses_}}, source, "addresses");
    return detail::cluster_config_access::make(std::move(spec), task_info{job::worker, rank_}, rpc_layer_,
                                               std::string(source), "rank", "rank");
  }

  /// "simple_resolver".
  [[nodiscard]] std::string_view name() const noexcept { return source; }

 private:
  static constexpr std::string_view source = "simple_resolver";

  std::vector<std::string> addresses_;
  int rank_;
  std::string rpc_layer_;
};

static_assert(cluster_resolver<simple_resolver>);

}  // namespace mwstrat
