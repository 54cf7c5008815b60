#pragma once
/// \file
/// A resolved cluster: the spec, this process's task, and what follows from them (rank, world, chief).
///
/// Chief rules, exactly as TensorFlow's `multi_worker_util.is_chief`: with a `chief` job, `chief:0` is the chief;
/// without one, `worker:0` is. The `evaluator` runs outside the training cluster, in a world of its own, and is
/// the chief of that world (TensorFlow also answers `is_chief() == true` for it). With no cluster at all (no or
/// empty TF_CONFIG) the process is a single local worker: rank 0 of 1, and chief.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/cluster/cluster_spec.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/task_info.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mwstrat {

namespace detail {
struct cluster_config_access;
}  // namespace detail

/// The cluster as one process sees it. Built by a resolver (`tf_config_resolver`, `slurm_resolver`,
/// `simple_resolver`) or by hand; always valid: the task exists in the spec.
class cluster_config {
 public:
  /// A single local worker (what no TF_CONFIG means): empty spec, task worker:0, rank 0 of 1, chief.
  cluster_config() = default;

  /// Checks that `task` is in `spec` and builds the config. Throws `config_error` naming `source` and the
  /// paths `task.type` / `task.index` when the task's job is unknown, absent from the cluster, or its index is
  /// out of range. An evaluator may be left out of the cluster (as in TensorFlow); its index must then be 0.
  cluster_config(cluster_spec spec, task_info task, std::string rpc_layer = {},
                 std::string source = "cluster_config")
      : spec_(std::move(spec)), task_(std::move(task)), rpc_layer_(std::move(rpc_layer)), source_(std::move(source)) {
    validate("task.type", "task.index");
  }

  /// A single local worker, recording where that decision came from (e.g. "TF_CONFIG (not set)").
  [[nodiscard]] static cluster_config local(std::string source = "local") {
    cluster_config config;
    config.source_ = std::move(source);
    return config;
  }

  /// The cluster; empty for a single local worker.
  [[nodiscard]] const cluster_spec& spec() const noexcept { return spec_; }
  /// This process's task.
  [[nodiscard]] const task_info& task() const noexcept { return task_; }
  /// This task's job name: "chief", "worker" or "evaluator" ("worker" for a local worker).
  [[nodiscard]] const std::string& task_type() const noexcept { return task_.type; }
  /// This task's index in its job.
  [[nodiscard]] int task_id() const noexcept { return task_.index; }
  /// TF_CONFIG's `rpc_layer`, or "" when none was given.
  [[nodiscard]] const std::string& rpc_layer() const noexcept { return rpc_layer_; }
  /// Where this configuration came from ("TF_CONFIG", "Slurm", ...), as used in error messages.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

  /// True when there is no cluster: one process trains alone, nothing listens or connects.
  [[nodiscard]] bool is_local() const noexcept { return spec_.empty(); }
  /// True for the evaluator task, which is not part of training.
  [[nodiscard]] bool is_evaluator() const noexcept { return !is_local() && task_.type == job::evaluator; }
  /// True for a chief or worker task of a real cluster.
  [[nodiscard]] bool is_training_task() const noexcept { return !is_local() && !is_evaluator(); }

  /// The number of training tasks in the cluster (chief + workers); 1 for a local worker.
  [[nodiscard]] int num_workers() const { return is_local() ? 1 : spec_.num_workers(); }

  /// The size of this process's collective world: `num_workers()` for a training task, 1 for a local worker
  /// and for the evaluator (which trains with nobody).
  [[nodiscard]] int world_size() const { return is_training_task() ? spec_.num_workers() : 1; }

  /// This process's rank in its world: the global training rank (chief first, then workers by index) for a
  /// training task; 0 for a local worker and for the evaluator.
  [[nodiscard]] int rank() const {
    if (!is_training_task()) return 0;
    return *spec_.rank_of(task_);
  }

  /// TensorFlow's chief rule: chief:0 if the cluster has a chief job, else worker:0; also true for the
  /// evaluator (chief of its own world) and for a local worker.
  [[nodiscard]] bool is_chief() const noexcept {
    if (is_local() || task_.type == job::chief || task_.type == job::evaluator) return true;
    return task_.type == job::worker && task_.index == 0 && !spec_.has_job(job::chief);
  }

  /// This task's own address, or nothing for a local worker and for an evaluator left out of the cluster.
  [[nodiscard]] std::optional<address> self_address() const { return spec_.address_of(task_); }

  friend bool operator==(const cluster_config& a, const cluster_config& b) {
    return a.spec_ == b.spec_ && a.task_ == b.task_ && a.rpc_layer_ == b.rpc_layer_;
  }

 private:
  friend struct detail::cluster_config_access;

  void validate(std::string_view type_path, std::string_view index_path) const {
    if (spec_.empty()) {
      detail::throw_cluster_error(source_, "cluster",
                                  "is empty but task " + detail::quote(task_.to_string()) +
                                      " was given; describe the cluster or give no task for a local worker");
    }
    if (auto why = detail::job_rejection(task_.type); !why.empty()) {
      detail::throw_cluster_error(source_, type_path, detail::quote(task_.type, 40) + " " + why);
    }
    if (task_.index < 0) {
      detail::throw_cluster_error(source_, index_path,
                                  std::to_string(task_.index) + " is negative; task indices start at 0");
    }
    if (task_.type == job::evaluator && !spec_.has_job(job::evaluator)) {
      if (task_.index != 0) {
        detail::throw_cluster_error(source_, index_path,
                                    std::to_string(task_.index) +
                                        " is out of range for 'evaluator' (there is at most one evaluator; use 0)");
      }
      return;
    }
    if (!spec_.has_job(task_.type)) {
      std::string jobs;
      for (const auto& [name, list] : spec_.jobs()) {
        if (!jobs.empty()) jobs += ", ";
        jobs += name;
      }
      detail::throw_cluster_error(source_, type_path,
                                  detail::quote(task_.type) + " is not a job of the cluster (its jobs: " + jobs + ")");
    }
    const int tasks = spec_.num_tasks(task_.type);
    if (task_.index >= tasks) {
      detail::throw_cluster_error(source_, index_path,
                                  std::to_string(task_.index) + " is out of range for '" + task_.type + "' (" +
                                      std::to_string(tasks) + (tasks == 1 ? " task)" : " tasks)"));
    }
  }

  cluster_spec spec_;
  task_info task_;
  std::string rpc_layer_;
  std::string source_ = "local";
};

namespace detail {

// Lets the family's resolvers name the task fields as their input does ("rank", "SLURM_PROCID").
struct cluster_config_access {
  [[nodiscard]] static cluster_config make(cluster_spec spec, task_info task, std::string rpc_layer,
                                           std::string source, std::string_view type_path,
                                           std::string_view index_path) {
    cluster_config config;
    config.spec_ = std::move(spec);
    config.task_ = std::move(task);
    config.rpc_layer_ = std::move(rpc_layer);
    config.source_ = std::move(source);
    config.validate(type_path, index_path);
    return config;
  }

  [[nodiscard]] static cluster_config make_local(std::string rpc_layer, std::string source) {
    cluster_config config = cluster_config::local(std::move(source));
    config.rpc_layer_ = std::move(rpc_layer);
    return config;
  }
};

}  // namespace detail
}  // namespace mwstrat
