#pragma once
/// \file
/// The cluster: which jobs exist and the address of every task, validated, in TensorFlow's rank order.
///
/// Jobs: `chief` (at most one task), `worker` (the training workers) and `evaluator` (at most one task, beside
/// training and not part of it). The training tasks are the chief and the workers; their global rank order is
/// chief first, then the workers by index: `{"chief": [c], "worker": [w0, w1]}` gives ranks c=0, w0=1, w1=2.
/// A parameter-server job (`ps`) or any other job is rejected: mwstrat trains synchronously with all-reduce.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/cluster/detail/address_set.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/task_info.hpp>
#include <mwstrat/detail/hash.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat {

namespace detail {

/// Why mwstrat cannot run job `name`, phrased to follow the quoted name ("\"ps\" is a parameter-server
/// job..."), or "" when it can (chief, worker, evaluator).
[[nodiscard]] inline std::string job_rejection(std::string_view name) {
  if (name == job::chief || name == job::worker || name == job::evaluator) return {};
  if (name == "ps") {
    return "is a parameter-server job, which mwstrat does not support: it trains synchronously with all-reduce, "
           "as MultiWorkerMirroredStrategy does; remove 'ps' and list every training process under 'worker'";
  }
  if (name == "master") return "is TensorFlow 1's name for the chief; rename it 'chief'";
  return "is not a job mwstrat can run (allowed: chief, worker, evaluator)" +
         did_you_mean(name, {"chief", "worker", "evaluator"});
}

}  // namespace detail

/// A validated cluster description: job name -> task addresses. A value type; cheap to copy for small clusters.
class cluster_spec {
 public:
  /// The empty cluster: no jobs. This is what "no TF_CONFIG" resolves to (a single local worker).
  cluster_spec() = default;

  /// Validates `jobs` (job name -> "host:port" list) and builds the spec. Throws `config_error` naming `source`,
  /// the path (`<path_prefix>.<job>[i]`) and the offending value: unknown or `ps` job, empty list, more than one
  /// chief or evaluator, a malformed or duplicate address, no training task.
  [[nodiscard]] static cluster_spec from_jobs(const std::map<std::string, std::vector<std::string>>& jobs,
                                              std::string_view source = "cluster_spec",
                                              std::string_view path_prefix = "cluster") {
    if (jobs.empty()) {
      detail::throw_cluster_error(source, path_prefix,
                                  "{} has no job; list the training tasks as \"worker\": [\"host:port\", ...]");
    }
    for (const auto& [name, list] : jobs) {
      const std::string path = detail::path_member(path_prefix, name);
      if (auto why = detail::job_rejection(name); !why.empty()) {
        detail::throw_cluster_error(source, path, detail::quote(name, 40) + " " + why);
      }
      if (list.empty()) {
        detail::throw_cluster_error(source, path, "[] is empty; list at least one \"host:port\" or leave the job out");
      }
      if ((name == job::chief || name == job::evaluator) && list.size() > 1) {
        detail::throw_cluster_error(source, path,
                                    "has " + std::to_string(list.size()) + " tasks; there can be at most one " +
                                        name + " (put the others under 'worker')");
      }
    }
    cluster_spec spec;
    detail::address_set seen(source);
    for (const char* name : {job::chief, job::worker, job::evaluator}) {
      const auto found = jobs.find(name);
      if (found == jobs.end()) continue;
      const std::string path = detail::path_member(path_prefix, name);
      auto& parsed = spec.jobs_[name];
      parsed.reserve(found->second.size());
      for (std::size_t i = 0; i < found->second.size(); ++i) {
        parsed.push_back(seen.add(found->second[i], detail::path_index(path, i)));
      }
    }
    if (spec.num_workers() == 0) {
      detail::throw_cluster_error(source, path_prefix,
                                  "has no training task (only an evaluator); add \"worker\": [\"host:port\", ...]");
    }
    return spec;
  }

  /// Every job and its parsed addresses, by job name.
  [[nodiscard]] const std::map<std::string, std::vector<address>, std::less<>>& jobs() const noexcept {
    return jobs_;
  }

  /// True for the empty cluster (a single local worker).
  [[nodiscard]] bool empty() const noexcept { return jobs_.empty(); }

  /// Whether the cluster has job `name`.
  [[nodiscard]] bool has_job(std::string_view name) const { return jobs_.find(name) != jobs_.end(); }

  /// Number of tasks in job `name` (0 if there is no such job).
  [[nodiscard]] int num_tasks(std::string_view name) const {
    const auto found = jobs_.find(name);
    return found == jobs_.end() ? 0 : static_cast<int>(found->second.size());
  }

  /// The addresses of job `name` (empty if there is no such job).
  [[nodiscard]] std::vector<address> job_addresses(std::string_view name) const {
    const auto found = jobs_.find(name);
    return found == jobs_.end() ? std::vector<address>{} : found->second;
  }

  /// The number of training tasks: chief (0 or 1) plus workers. 0 for the empty cluster.
  [[nodiscard]] int num_workers() const { return num_tasks(job::chief) + num_tasks(job::worker); }

  /// The training tasks in global rank order: the chief first, then the workers by index.
  [[nodiscard]] std::vector<task_info> training_tasks() const {
    std::vector<task_info> tasks;
    for (int i = 0; i < num_tasks(job::chief); ++i) tasks.push_back({job::chief, i});
    for (int i = 0; i < num_tasks(job::worker); ++i) tasks.push_back({job::worker, i});
    return tasks;
  }

  /// The training tasks' addresses in global rank order (what the ring connects).
  [[nodiscard]] std::vector<address> training_endpoints() const {
    std::vector<address> out;
    for (const char* name : {job::chief, job::worker}) {
      const auto found = jobs_.find(name);
      if (found != jobs_.end()) out.insert(out.end(), found->second.begin(), found->second.end());
    }
    return out;
  }

  /// The training tasks' addresses in global rank order, as canonical "host:port" / "[v6]:port" text.
  [[nodiscard]] std::vector<std::string> training_addresses() const {
    std::vector<std::string> out;
    for (const address& a : training_endpoints()) out.push_back(a.to_string());
    return out;
  }

  /// The global training rank of `task`, or nothing for an evaluator or a task not in the cluster.
  [[nodiscard]] std::optional<int> rank_of(const task_info& task) const {
    if (task.index < 0 || task.index >= num_tasks(task.type)) return std::nullopt;
    if (task.type == job::chief) return task.index;
    if (task.type == job::worker) return num_tasks(job::chief) + task.index;
    return std::nullopt;
  }

  /// The training task at global rank `rank`, or nothing when out of range.
  [[nodiscard]] std::optional<task_info> task_at_rank(int rank) const {
    if (rank < 0 || rank >= num_workers()) return std::nullopt;
    const int chiefs = num_tasks(job::chief);
    if (rank < chiefs) return task_info{job::chief, rank};
    return task_info{job::worker, rank - chiefs};
  }

  /// The address of `task`, or nothing when the cluster has no such task.
  [[nodiscard]] std::optional<address> address_of(const task_info& task) const {
    const auto found = jobs_.find(task.type);
    if (found == jobs_.end() || task.index < 0 || task.index >= static_cast<int>(found->second.size())) {
      return std::nullopt;
    }
    return found->second[static_cast<std::size_t>(task.index)];
  }

  /// A stable 64-bit hash of the training addresses in rank order. Two processes agree on it exactly when they
  /// were given the same training cluster (same tasks, same order); the ring handshake compares it.
  [[nodiscard]] std::uint64_t fingerprint_value() const {
    std::uint64_t hash = detail::fnv1a64("mwstrat-cluster-v1\n");
    for (const std::string& a : training_addresses()) {
      hash = detail::fnv1a64(a, hash);
      hash = detail::fnv1a64("\n", hash);
    }
    return hash;
  }

  /// `fingerprint_value()` as 16 lower-case hex digits, for logs and messages.
  [[nodiscard]] std::string fingerprint() const {
    static constexpr char hex[] = "0123456789abcdef";
    const std::uint64_t value = fingerprint_value();
    std::string out(16, '0');
    for (int i = 0; i < 16; ++i) out[static_cast<std::size_t>(15 - i)] = hex[(value >> (4 * i)) & 0xf];
    return out;
  }

  friend bool operator==(const cluster_spec&, const cluster_spec&) = default;

 private:
  std::map<std::string, std::vector<address>, std::less<>> jobs_;
};

}  // namespace mwstrat
