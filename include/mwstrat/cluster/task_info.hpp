#pragma once
/// \file
/// Which task of the cluster this process is: a job name and an index, as in TF_CONFIG's `task`.

#include <string>

namespace mwstrat {

/// The job names mwstrat knows. `chief` and `worker` train; `evaluator` runs beside the training cluster.
namespace job {
inline constexpr const char* chief = "chief";          ///< at most one task; the chief when present
inline constexpr const char* worker = "worker";        ///< the training workers
inline constexpr const char* evaluator = "evaluator";  ///< at most one task; not part of training
}  // namespace job

/// This process's task: `type` is a job name ("chief", "worker", "evaluator"), `index` its position in the job.
struct task_info {
  std::string type = "worker";  ///< job name
  int index = 0;                ///< 0-based position in the job's address list

  /// `type:index`, e.g. "worker:1", for logs.
  [[nodiscard]] std::string to_string() const { return type + ":" + std::to_string(index); }

  friend bool operator==(const task_info&, const task_info&) = default;
};

}  // namespace mwstrat
