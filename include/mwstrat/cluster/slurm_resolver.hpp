#pragma once
/// \file
/// The cluster of a Slurm job step (`srun`): one training worker per Slurm task, from Slurm's variables.
///
/// Read: `SLURM_PROCID` (this task's global rank), `SLURM_NTASKS` (or `SLURM_NPROCS`), the node list
/// `SLURM_STEP_NODELIST` (or `SLURM_JOB_NODELIST`, `SLURM_NODELIST`) and the tasks per node
/// `SLURM_STEP_TASKS_PER_NODE` (or `SLURM_TASKS_PER_NODE`; without either, the tasks must divide evenly among
/// the nodes). Tasks are placed as Slurm's default block distribution does: ranks fill the first node, then
/// the next. The task with local index j on a node listens on `base_port + j`. Where `SLURM_LOCALID` is set it
/// must agree with that placement. Every task is a `worker`; worker 0 is the chief, as in TensorFlow's
/// SlurmClusterResolver.

#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/cluster_spec.hpp>
#include <mwstrat/cluster/concepts.hpp>
#include <mwstrat/cluster/detail/address_set.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/hostlist.hpp>
#include <mwstrat/cluster/task_info.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat {

/// How `slurm_resolver` turns Slurm's tasks into addresses.
struct slurm_options {
  std::uint16_t base_port = 8888;  ///< local task j on a node listens on base_port + j (TensorFlow's default)
  std::string rpc_layer = {};      ///< reported as the config's rpc_layer
};

/// Resolves the cluster from the Slurm environment of an `srun` step.
class slurm_resolver {
 public:
  /// Reads the process environment when `resolve()` is called.
  explicit slurm_resolver(slurm_options options = {}) : options_(std::move(options)) {}
  /// Reads the variables from `env` (tests, launchers).
  explicit slurm_resolver(environment env, slurm_options options = {})
      : env_(std::move(env)), options_(std::move(options)) {}

  /// The Slurm step's cluster with this task as `worker:<SLURM_PROCID>`. Throws `config_error` (component
  /// "cluster", source "Slurm") naming the variable and its value when one is missing or malformed or they
  /// disagree.
  [[nodiscard]] cluster_config resolve() const {
    const auto [ntasks_name, ntasks_text] = require({"SLURM_NTASKS", "SLURM_NPROCS"});
    const auto [procid_name, procid_text] = require({"SLURM_PROCID"});
    const auto [nodes_name, nodes_text] = require({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    const int ntasks = to_int(ntasks_name, ntasks_text);
    const int procid = to_int(procid_name, procid_text);
    if (ntasks < 1) fail(ntasks_name, ntasks_text + " is not a task count; it must be at least 1");
    if (procid >= ntasks) {
      fail(procid_name, procid_text + " is out of range (" + ntasks_name + " is " + std::to_string(ntasks) + ")");
    }
    if (options_.base_port == 0) fail("base_port", "0 is not a port; choose a base port in 1..65535");

    const std::vector<std::string> hosts = expand_hostlist(nodes_text, source, nodes_name);
    std::set<std::string_view> unique;
    for (const std::string& host : hosts) {
      if (!unique.insert(host).second) {
        fail(nodes_name, detail::quote(nodes_text) + " lists node " + detail::quote(host) + " twice");
      }
    }

    std::vector<int> per_node;
    const auto [counts_name, counts_text] = optional_var({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
    if (!counts_name.empty()) {
      per_node = expand_tasks_per_node(counts_text, source, counts_name);
      if (per_node.size() != hosts.size()) {
        fail(counts_name, detail::quote(counts_text) + " gives counts for " + std::to_string(per_node.size()) +
                              " nodes, but " + nodes_name + " lists " + std::to_string(hosts.size()));
      }
      std::int64_t sum = 0;
      for (const int n : per_node) sum += n;
      if (sum != ntasks) {
        fail(counts_name, detail::quote(counts_text) + " adds up to " + std::to_string(sum) + " tasks, but " +
                              ntasks_name + " is " + std::to_string(ntasks));
      }
    } else {
      if (ntasks % static_cast<int>(hosts.size()) != 0) {
        fail(ntasks_name, ntasks_text + " tasks do not divide evenly among the " + std::to_string(hosts.size()) +
                              " nodes of " + nodes_name + "; set SLURM_STEP_TASKS_PER_NODE");
      }
      per_node.assign(hosts.size(), ntasks / static_cast<int>(hosts.size()));
    }

    const int most = *std::max_element(per_node.begin(), per_node.end());
    if (static_cast<int>(options_.base_port) + most - 1 > 65535) {
      fail("base_port", std::to_string(options_.base_port) + " leaves no room for " + std::to_string(most) +
                            " tasks on one node below port 65535; choose a lower base port");
    }

    std::vector<std::string> addresses;
    addresses.reserve(static_cast<std::size_t>(ntasks));
    detail::address_set seen(source);
    int local_of_procid = -1;
    for (std::size_t node = 0; node < hosts.size(); ++node) {
      for (int local = 0; local < per_node[node]; ++local) {
        if (static_cast<int>(addresses.size()) == procid) local_of_procid = local;
        std::string text = hosts[node] + ":" + std::to_string(options_.base_port + local);
        (void)seen.add(text, detail::path_index(nodes_name, node));
        addresses.push_back(std::move(text));
      }
    }
    if (const auto local_id = env_.get("SLURM_LOCALID")) {
      if (to_int("SLURM_LOCALID", *local_id) != local_of_procid) {
        fail("SLURM_LOCALID", *local_id + " does not match Slurm's block distribution, which puts rank " +
                                  procid_text + " at local index " + std::to_string(local_of_procid) +
                                  "; run srun with --distribution=block");
      }
    }
    cluster_spec spec = cluster_spec::from_jobs({{job::worker, std::move(addresses)}}, source, nodes_name);
    return detail::cluster_config_access::make(std::move(spec), task_info{job::worker, procid}, options_.rpc_layer,
                                               std::string(source), procid_name, procid_name);
  }

  /// "Slurm".
  [[nodiscard]] std::string_view name() const noexcept { return source; }

 private:
  static constexpr std::string_view source = "Slurm";

  [[noreturn]] static void fail(std::string_view variable, const std::string& what) {
    detail::throw_cluster_error(source, variable, what);
  }

  // The first of `names` that is set (the name and its value), or both empty.
  [[nodiscard]] std::pair<std::string, std::string> optional_var(std::initializer_list<std::string_view> names) const {
    for (const std::string_view name : names) {
      if (auto value = env_.get(name)) return {std::string(name), std::move(*value)};
    }
    return {};
  }

  [[nodiscard]] std::pair<std::string, std::string> require(std::initializer_list<std::string_view> names) const {
    auto found = optional_var(names);
    if (found.first.empty()) {
      std::string alternatives;
      for (const std::string_view name : names) {
        if (name == *names.begin()) continue;
        alternatives += alternatives.empty() ? " (nor " : ", ";
        alternatives += name;
      }
      if (!alternatives.empty()) alternatives += ")";
      fail(*names.begin(), "not set" + alternatives + "; is this process running under srun?");
    }
    return found;
  }

  [[nodiscard]] static int to_int(std::string_view name, const std::string& text) {
    bool ok = !text.empty() && text.size() <= 9;
    for (const char c : text) ok = ok && c >= '0' && c <= '9';
    if (!ok) fail(name, detail::quote(text) + " is not a non-negative integer");
    int value = 0;
    for (const char c : text) value = value * 10 + (c - '0');
    return value;
  }

  environment env_;
  slurm_options options_;
};

static_assert(cluster_resolver<slurm_resolver>);

}  // namespace mwstrat
