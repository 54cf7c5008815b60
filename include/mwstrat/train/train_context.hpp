#pragma once
/// \file
/// The state of one `fit` run, shared with its callbacks: who we are (strategy), what we train (model,
/// optimizer), where we are (epoch, step), and the switches callbacks may flip.

#include <mwstrat/train/logs.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mwstrat {

/// The run a callback is called from. Callbacks may read everything; they may set `stop_training`, and in
/// `on_train_begin` they may move the start (`epoch`, `step`, `epoch_sums`). A run resumed from a backup is
/// already at its resume point then: resuming is `fit`'s, from a `resume_source` (train/resume.hpp).
template <class Strategy, class Model, class Optimizer>
struct train_context {
  train_context(Strategy& s, Model& m, Optimizer& o) : strategy(s), model(m), optimizer(o) {}

  Strategy& strategy;
  Model& model;
  Optimizer& optimizer;
  int epochs = 1;                  ///< the epoch count fit was asked for
  std::size_t steps_per_epoch = 0;
  std::size_t steps_per_pass = 0;  ///< global steps in one pass over the training data (the source's epoch)
  int epoch = 0;                   ///< the current epoch (0-based)
  std::size_t step = 0;            ///< the next step to run within the epoch (0-based)
  batch_stats epoch_sums;          ///< metrics of the current epoch so far, all workers
  /// The state of the `metrics<...>` given to fit (train/fit_metrics.hpp) over the current epoch so far, all workers;
  /// empty without metrics. BackupAndRestore saves and restores it with `epoch_sums`.
  std::span<double> epoch_metric_sums;
  /// Set by a callback (on any worker) to end fit after the current step: the workers agree at the step boundary
  /// (one in `on_epoch_end` ends it before the next epoch).
  bool stop_training = false;
  /// Set by fit on every worker when a preemption (SIGTERM, SIGINT, `request_preemption`) stopped the job: the
  /// epoch is not over, and `on_train_end` is the place to save what a restart needs (BackupAndRestore does).
  bool preempted = false;
  /// Set by fit on a worker that replaced a lost one (in-memory recovery, train/in_memory_recovery.hpp): its state
  /// came from a survivor's memory before `on_train_begin`, which must not restore anything else (`fit` reads no
  /// backup then).
  bool rejoined = false;
  /// Set by fit: the launcher started this process again — a restarted group or a replacement worker
  /// (cluster/launcher_environment.hpp: `restarted()`). A program's one-off fault injection reads it so that a
  /// restarted job does not fault again, without reading the launcher's variables itself.
  bool relaunched = false;
  /// Whether the model is a classifier (its batch results have `correct`), set by fit: only then do the logs carry
  /// an accuracy.
  bool reports_accuracy = true;
  /// `fit_options::max_micro_batch` (0: none), and the gradient sum of its micro-batches (the arena's size while it
  /// is on; train/micro_batches.hpp).
  std::size_t max_micro_batch = 0;
  std::vector<float> micro_batch_gradients;
  /// Elastic training: a callback may set this, to the same value on every worker at the same step (it is a
  /// collective wait), to hold the job at this step's boundary until a joiner is pending at the chief or this long
  /// has passed, and take in those pending there (a scheduler said a node is coming; a test that wants its join at a
  /// fixed step). fit clears it. Nothing without joins (in_memory_recovery_options::max_workers).
  std::chrono::milliseconds await_joiners{0};
  /// fit's own: the joiners pending at the chief, offered in the next step's reduction, and the count the workers
  /// agreed on there (train/in_memory_recovery.hpp).
  double join_offer = 0;
  int joiners_agreed = 0;

  /// Steps done since the start of training (epoch × steps_per_epoch + step), the same on every worker.
  [[nodiscard]] std::uint64_t global_step() const {
    return static_cast<std::uint64_t>(epoch) * steps_per_epoch + step;
  }
};

}  // namespace mwstrat
