#pragma once
/// \file
/// Where each task writes a file that only the chief's copy of matters (a saved model, a checkpoint).
///
/// All tasks must take part in a save (the variables are all-reduced while saving), but they must not write to
/// one path. The rule of TensorFlow's multi-worker tutorial: the chief writes to `path`; any other task writes
/// to `dirname(path)/workertemp_<task_id>/basename(path)` and removes that folder afterwards. An evaluator or a
/// non-chief `chief` task (neither trains, but the names must not collide with worker folders) uses
/// `workertemp_<type>_<task_id>`.

#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/task_info.hpp>
#include <mwstrat/error.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace mwstrat {

/// The folder a non-chief task writes in instead of `dirname(path)`: `dirname(path)/workertemp_<id>` for a
/// worker, `dirname(path)/workertemp_<type>_<id>` for any other task type.
[[nodiscard]] inline std::filesystem::path worker_temp_dir(const std::filesystem::path& path, const task_info& task) {
  std::string name = "workertemp_";
  if (task.type != job::worker) {
    name += task.type;
    name += '_';
  }
  name += std::to_string(task.index);
  return path.parent_path() / name;
}

/// Where `task` writes `path`: `path` itself when `is_chief`, else `worker_temp_dir(path, task)/basename(path)`.
[[nodiscard]] inline std::filesystem::path write_filepath(const std::filesystem::path& path, const task_info& task,
                                                          bool is_chief) {
  if (is_chief) return path;
  return worker_temp_dir(path, task) / path.filename();
}

/// Where this process writes `path`: the training chief (and a local worker) writes `path`; every other task,
/// the evaluator included, writes in its own temporary folder.
[[nodiscard]] inline std::filesystem::path write_filepath(const std::filesystem::path& path,
                                                          const cluster_config& config) {
  return write_filepath(path, config.task(), config.is_chief() && !config.is_evaluator());
}

/// Removes the temporary folder `write_filepath(path, config)` wrote in, with everything in it; does nothing
/// for the chief (whose files are the real ones) or when the folder does not exist. Returns the number of files
/// and folders removed. Throws `io_error` (component "cluster", with this task's rank) if removal fails.
inline std::uintmax_t remove_worker_temp_dir(const std::filesystem::path& path, const cluster_config& config) {
  if (config.is_chief() && !config.is_evaluator()) return 0;
  const std::filesystem::path dir = worker_temp_dir(path, config.task());
  std::error_code ec;
  const std::uintmax_t removed = std::filesystem::remove_all(dir, ec);
  if (ec) {
    throw io_error({"cluster", config.rank()},
                   "cannot remove worker temp dir '" + dir.string() + "' of task " + config.task().to_string() +
                       ": " + ec.message());
  }
  return removed;
}

}  // namespace mwstrat
