#pragma once
/// \file
/// Keras's BackupAndRestore, exact: the full training state is backed up every epoch or every N steps, and a
/// restarted job resumes at the saved epoch and step with the same weights, optimizer slots, step count and data
/// position — so its final weights are bitwise those of an uninterrupted run (same world size).
///
/// Only the chief reads and writes `backup_dir` (so no shared file system is needed). The callback says where and
/// when to save; resuming is the trainer's: it is a `resume_source` (train/resume.hpp), and at the start `fit`
/// restores the newest good backup on the chief and broadcasts it to every worker, which then continue from it. The backup is
/// written atomically (a crash mid-write leaves the previous one) and keeps the one before as a fallback; it is
/// removed after a successful `fit` when `delete_checkpoint` is set.
///
/// The backups go through any `checkpointer` (checkpoint/concepts.hpp): by default a `checkpoint_manager` of
/// `backup_dir` keeping the newest two (`backup_and_restore`); `basic_backup_and_restore<K>` takes one of the
/// user's own (an object store, a different folder layout, memory), built by the user and used only on the chief.
/// The model and optimizer's resume hooks must come in complete groups (`check_resume_hooks`, train/concepts.hpp):
/// a misspelt hook does not compile rather than resuming inexactly.
///
/// Writing in the background (the default): at a save point the chief copies the state into a buffer it reuses
/// (a memcpy of the weights and optimizer slots) and a writer thread serialises, writes, fsyncs, renames and
/// prunes, while training goes on. At most one write is in flight: the next save point, `on_train_end`,
/// `wait_for_backup` and the destructor wait for it. A failed background write is a `checkpoint_error` at the next
/// save point or at `on_train_end` (the destructor, which cannot throw, logs it). Since every write is atomic, a
/// crash at any instant still leaves the previous complete backup, and a restart resumes from the newest backup
/// complete on disk, which may be one save point earlier than the last one started.
///
/// A model's state (batch normalization's moving statistics) may differ between replicas: plain batch norm
/// averages each worker's own batches. The weights hold the chief's; every other replica's goes in the metadata
/// (`train.replica_state.<rank>`, gathered at each save point), and a resumed job gives each its own back, so
/// that what every worker evaluates (validation) is what the uninterrupted run evaluated.

#include <mwstrat/checkpoint/background_writer.hpp>
#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/checkpoint/manager.hpp>
#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/run_state.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/checkpoint_tensors.hpp>
#include <mwstrat/train/resume.hpp>

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// How often a backup is written: at the end of every epoch, or every `steps` global steps.
struct save_frequency {
  std::size_t steps = 0;  ///< 0: every epoch

  /// Every epoch (Keras's `save_freq="epoch"`).
  [[nodiscard]] static constexpr save_frequency epoch() { return {0}; }
  /// Every `n` global steps (Keras's `save_freq=n`); `n` must be positive.
  [[nodiscard]] static save_frequency every(std::size_t n) {
    if (n == 0) throw config_error({"train"}, "save_freq: 0 steps; use save_frequency::epoch() or a positive count");
    return {n};
  }
  /// Parses "epoch" or a positive integer (command lines); `what` names the option in the error.
  [[nodiscard]] static save_frequency parse(const std::string& text, const std::string& what = "save_freq") {
    if (text == "epoch") return epoch();
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || n == 0 || text.front() == '-') {
      throw config_error({"train"}, what + ": '" + text + "' is neither 'epoch' nor a positive number of steps");
    }
    return {static_cast<std::size_t>(n)};
  }
  [[nodiscard]] bool per_epoch() const { return steps == 0; }
};

/// Options of `backup_and_restore`.
struct backup_options {
  /// The chief's backup folder (created when needed) for the default checkpointer; with a checkpointer of the
  /// user's own it only names the backup in messages (and may be empty).
  std::filesystem::path backup_dir;
  save_frequency save_freq = save_frequency::epoch();
  bool delete_checkpoint = true;                   ///< remove the backup after a successful fit
  std::ostream* log = &std::cerr;                  ///< where the chief says what it restored
  /// Write each backup on a background thread (see the file comment): a step then costs the chief a memcpy of
  /// the state, and it holds one more copy of it. false: write on the training thread, which waits for the
  /// serialisation, both fsyncs and the rename (the cost of a whole save at every save point, no extra memory).
  bool write_in_background = true;
  /// How the default checkpointer writes the backup files (fsync, fault hooks for tests); the rank is filled in.
  write_options write = {};
};

/// Backs up the whole training state through a `Checkpointer` and restores it when a job restarts (see the file
/// comment). `backup_and_restore` is the one over a `checkpoint_manager` of `backup_dir`.
template <checkpointer Checkpointer>
class basic_backup_and_restore {
 public:
  /// Never stops training: fit need not agree on a stop after each step because of it (fit.hpp).
  static constexpr bool stops_one_worker = false;
  /// An epoch's backup holds the other callbacks' changes of that epoch's end, wherever this one is listed
  /// (callback.hpp, saves_training_state).
  static constexpr bool saves_training_state = true;

  /// Backs up to a `checkpoint_manager` of `options.backup_dir` (made on the chief at the start of `fit`).
  explicit basic_backup_and_restore(backup_options options)
    requires std::same_as<Checkpointer, checkpoint_manager>
      : options_(std::move(options)) {
    if (options_.backup_dir.empty()) throw config_error({"train"}, "backup_and_restore: backup_dir is empty");
  }
  /// Backs up through `k` (used on the chief only); `options.backup_dir`, if empty, becomes "<checkpointer>" in
  /// messages.
  basic_backup_and_restore(Checkpointer k, backup_options options)
      : options_(std::move(options)), checkpointer_(std::move(k)), user_checkpointer_(true) {
    if (options_.backup_dir.empty()) options_.backup_dir = "<checkpointer>";
  }
  basic_backup_and_restore(const basic_backup_and_restore&) = delete;
  basic_backup_and_restore& operator=(const basic_backup_and_restore&) = delete;
  /// Waits for a backup still being written; logs its failure, if it failed, since nobody else will see it.
  ~basic_backup_and_restore() {
    if (const std::exception_ptr failure = writer_.finish(); failure && options_.log) {
      *options_.log << "[mwstrat.train.backup] rank " << rank_ << ": warning: " << failure_message(failure) << "\n"
                    << std::flush;
    }
  }

  /// Waits until the backup being written in the background, if any, is durable on disk; throws
  /// `checkpoint_error` if writing it failed. Only the chief writes: on other workers it returns at once.
  void wait_for_backup() {
    if (const std::exception_ptr failure = writer_.finish()) {
      throw checkpoint_error({"train.backup", rank_}, options_.backup_dir.string(), failure_message(failure));
    }
  }

  /// Whether the last `fit` resumed from a backup, and at which global step.
  [[nodiscard]] std::optional<std::uint64_t> resumed_at() const { return resumed_at_; }
  /// Where the last `fit` resumed from (the restored checkpoint's path), on the chief; empty when it did not.
  [[nodiscard]] const std::string& resumed_from() const { return source_; }
  /// The checkpointer (on the chief, once `fit` has started, or from construction when the user gave one).
  [[nodiscard]] Checkpointer* backup_checkpointer() { return checkpointer_ ? &*checkpointer_ : nullptr; }

  /// Where `fit` resumes from (train/resume.hpp), asked before any `on_train_begin`: the backups' checkpointer on the
  /// chief (made there for `backup_dir` by default).
  template <class Ctx>
  mwstrat::resume_target<Checkpointer> resume_target(Ctx& ctx) {
    resumed_at_.reset();
    source_.clear();
    // A write left in flight by an earlier fit that failed: let it finish before reading the folder. Its failure
    // does not stop this run, which restores the newest complete backup, but it is said.
    if (const std::exception_ptr failure = writer_.finish(); failure && options_.log) {
      *options_.log << "[mwstrat.train.backup] rank " << rank_ << ": warning: " << failure_message(failure) << "\n"
                    << std::flush;
    }
    if (!user_checkpointer_) checkpointer_.reset();  // each fit reads the folder afresh
    make_checkpointer(ctx);
    return {ctx.strategy.is_chief() ? &*checkpointer_ : nullptr, options_.backup_dir.string(), options_.log};
  }
  /// Told by `fit` where the run resumed (nullopt: from the start, or a replacement worker's survivor's memory).
  void resumed(const std::optional<resume_point>& point) {
    if (!point) return;
    resumed_at_ = point->global_step;
    source_ = point->source;
  }

  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (options_.save_freq.per_epoch() || ctx.global_step() % options_.save_freq.steps != 0) return;
    save(ctx, ctx.epoch, ctx.step);
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs&) {
    if (!options_.save_freq.per_epoch() || ctx.step != 0) return;  // ctx.step != 0: stopped mid-epoch
    save(ctx, epoch + 1, 0);
  }

  template <class Ctx>
  void on_train_end(Ctx& ctx, const history& h) {
    // Preempted: back up where every worker stopped (fit agreed on the step), so the restarted job resumes there.
    // Every worker takes part (the replicas' states are gathered); the chief writes.
    if (ctx.preempted) save(ctx, ctx.epoch, ctx.step);
    if (!ctx.strategy.is_chief()) return;
    make_checkpointer(ctx);
    wait_for_backup();  // the last backup is on disk, or its failure is thrown, before fit returns or deletes it
    if (!options_.delete_checkpoint || h.stopped_early || ctx.preempted) return;
    if (ctx.epoch < ctx.epochs) return;  // not finished: keep the backup
    checkpointer_->remove_all();
  }

 private:
  // The chief's checkpointer over backup_dir (made on the chief by default; the user's, when given, is kept). Also
  // at each save: an elastic job that lost its chief has a new one (train/in_memory_recovery.hpp), which makes it
  // there and writes the next backups.
  template <class Ctx>
  void make_checkpointer(Ctx& ctx) {
    rank_ = ctx.strategy.replica_id();
    if constexpr (std::same_as<Checkpointer, checkpoint_manager>) {
      if (ctx.strategy.is_chief() && !user_checkpointer_ && !checkpointer_) {
        checkpoint_manager_options mo;
        mo.write = options_.write;
        mo.write.rank = rank_;
        checkpointer_.emplace(options_.backup_dir, 2, "backup", mo);  // the newest two: the older is the fallback
      }
    }
  }

  // Called on every worker at the same save points.
  template <class Ctx>
  void save(Ctx& ctx, int epoch, std::size_t step) {
    gather_replica_states(ctx);
    if (!ctx.strategy.is_chief()) return;
    make_checkpointer(ctx);
    wait_for_backup();  // one write in flight at most; a failed one surfaces here
    state_.capture(ctx);
    state_.move_to(epoch, step);
    training_state_view s = state_.to_file(ctx);
    detail::replica_states_to_file(s, replica_states_, static_cast<std::size_t>(s.world_size));
    if (!options_.write_in_background) {
      checkpointer_->save(s, s.step);
      return;
    }
    // Training changes the values `s` views as soon as this returns: the writer gets a copy.
    snapshot_into(s, snapshot_);
    pending_step_ = s.step;
    writer_.submit([this] { checkpointer_->save(view_of(snapshot_), snapshot_.step); });
  }

  // Every replica's model state on every worker (rank r's at r × its size), each float's bits as a whole number
  // in a double: summed with the other replicas' zeros, they come back exactly. Nothing for one replica or a model
  // without state.
  template <class Ctx>
  void gather_replica_states(Ctx& ctx) {
    replica_states_.clear();
    if constexpr (stateful_model<std::remove_cvref_t<decltype(ctx.model)>>) {
      const std::span<const float> st = ctx.model.model_state();
      const auto world = static_cast<std::size_t>(ctx.strategy.num_replicas_in_sync());
      if (st.empty() || world < 2) return;
      replica_states_.assign(world * st.size(), 0.0);
      const std::size_t at = static_cast<std::size_t>(ctx.strategy.replica_id()) * st.size();
      for (std::size_t i = 0; i < st.size(); ++i) {
        replica_states_[at + i] = static_cast<double>(std::bit_cast<std::uint32_t>(st[i]));
      }
      ctx.strategy.sum_metrics(std::span<double>(replica_states_));
    }
  }

  /// What to say about a failed background write.
  [[nodiscard]] std::string failure_message(const std::exception_ptr& failure) const {
    std::string why;
    try {
      std::rethrow_exception(failure);
    } catch (const error& e) {
      why = e.detail();
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "unknown exception";
    }
    return "the backup of global step " + std::to_string(pending_step_) + " (written in the background to " +
           options_.backup_dir.string() + ") failed: " + why;
  }

  backup_options options_;
  std::optional<Checkpointer> checkpointer_;
  bool user_checkpointer_ = false;  // the user gave the checkpointer: never replaced
  std::string source_;
  std::optional<std::uint64_t> resumed_at_;
  int rank_ = 0;
  training_state snapshot_;        // the state being written in the background (its storage is reused)
  detail::run_state state_;       // the state at a save point (its memory is reused)
  std::vector<double> replica_states_;  // every replica's model state, gathered at a save point
  std::int64_t pending_step_ = 0;  // the global step of the last background write, for messages
  // Last, so that it is destroyed (its thread joined) before what the thread uses.
  background_writer writer_;
};

/// Keras's BackupAndRestore over the library's checkpointer: a `checkpoint_manager` of `backup_dir`.
using backup_and_restore = basic_backup_and_restore<checkpoint_manager>;

}  // namespace mwstrat
