#pragma once
// Shared by the MNIST tests across simulated hosts: TF_CONFIG with host addresses, workers started on their
// hosts by hand (so a fault reaches them as it would on real machines, with no launcher ending them), bounded waits.
#include "hosts_support.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat::test {

/// TF_CONFIG for worker `index` of a cluster of "address:port" endpoints.
inline std::string tf_config(const std::vector<std::string>& endpoints, int index) {
  std::string workers;
  for (std::size_t k = 0; k < endpoints.size(); ++k) workers += (k ? ",\"" : "\"") + endpoints[k] + '"';
  return "{\"cluster\":{\"worker\":[" + workers + "]},\"task\":{\"type\":\"worker\",\"index\":" +
         std::to_string(index) + "}}";
}

/// Waits (at most `seconds`) until `path` exists.
inline bool wait_for(const std::filesystem::path& path, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// Ranks 0, 1 on h1 and 2, 3 on h2 (as mwstrat-launch --hosts h1:2,h2:2 places them).
inline std::vector<std::string> two_by_two(const simulated_hosts& hosts) {
  return {hosts.address(1) + ":20000", hosts.address(1) + ":20001", hosts.address(2) + ":20000",
          hosts.address(2) + ":20001"};
}

/// The four workers of `job` (a command line), each started on its host with its TF_CONFIG.
inline std::vector<std::unique_ptr<process>> start_two_by_two(const simulated_hosts& hosts,
                                                              const std::vector<std::string>& cluster,
                                                              const std::string& job, int limit_seconds = 600) {
  std::vector<std::unique_ptr<process>> workers;
  for (int rank = 0; rank < 4; ++rank) {
    workers.push_back(std::make_unique<process>(
        hosts.on(rank < 2 ? 1 : 2, "TF_CONFIG='" + tf_config(cluster, rank) + "' " + job), limit_seconds));
  }
  return workers;
}

}  // namespace mwstrat::test
