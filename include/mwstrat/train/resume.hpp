#pragma once
/// \file
/// Where a run resumes from: resuming is the trainer's job, and a callback only names the place. A `resume_source`
/// (BackupAndRestore is one) gives `fit`, before any `on_train_begin`, a `resume_target`: the checkpointer holding
/// its backups (on the chief) and a name for messages. `fit` then restores the newest good checkpoint there onto
/// every worker — weights, model state, optimizer slots, the run's position and sums (train/detail/resume.hpp) —
/// and tells the source where it resumed (`resumed`). A replacement worker under in-memory recovery
/// (`ctx.rejoined`) is asked for its target too, so that the source is ready to save, but nothing is read.
///
/// Requirements of `resume_source<C, Ctx>`:
///   1. `c.resume_target(ctx)` returns a `resume_target<K>` for some `checkpointer` K;
///   2. `c.resumed(point)` takes a `std::optional<resume_point>` (nullopt: nothing was restored).
///
/// \code
/// struct my_backups {
///   my_store store;  // a checkpointer
///   template <class Ctx> mwstrat::resume_target<my_store> resume_target(Ctx& ctx) {
///     return {ctx.strategy.is_chief() ? &store : nullptr, "my-store", &std::cerr};
///   }
///   void resumed(const std::optional<mwstrat::resume_point>&) {}
///   template <class Ctx> void on_epoch_end(Ctx& ctx, int, const mwstrat::epoch_logs&) { /* save */ }
/// };
/// \endcode

#include <mwstrat/checkpoint/concepts.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>

namespace mwstrat {

/// Where `fit` resumes a run from, as a `resume_source` names it.
template <checkpointer Checkpointer>
struct resume_target {
  Checkpointer* checkpointer = nullptr;  ///< on the chief: where the newest good checkpoint is; null elsewhere
  std::string where;                     ///< names it in messages (a backup folder)
  std::ostream* log = nullptr;           ///< where the chief says what it restored; null: nowhere
};

/// Where a run resumed: the restored checkpoint (its path on the chief, empty elsewhere) and the global step.
struct resume_point {
  std::string source;
  std::uint64_t global_step = 0;
};

namespace detail {
template <class T>
struct is_resume_target : std::false_type {};
template <class K>
struct is_resume_target<resume_target<K>> : std::true_type {};
}  // namespace detail

/// A callback that names where a run resumes from (see the file comment).
template <class C, class Ctx>
concept resume_source = requires(C& c, Ctx& ctx, const std::optional<resume_point>& point) {
  requires detail::is_resume_target<std::remove_cvref_t<decltype(c.resume_target(ctx))>>::value;
  c.resumed(point);
};

}  // namespace mwstrat
