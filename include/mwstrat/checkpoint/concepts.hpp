#pragma once
/// \file
/// The `checkpointer` concept: what a trainer needs from something that saves and restores training states.
///
/// A type `K` is a checkpointer when:
///   1. it opts in: `K::is_checkpointer` names a type, or `mwstrat::enable_checkpointer<K>` is specialised to true;
///   2. `k.save(state, step)` with a `const training_state_view&` and a `std::int64_t` saves the state atomically
///      (a crash leaves the previous checkpoint usable) and returns something convertible to
///      `std::filesystem::path` (where it went);
///   3. `k.latest()` on a `const K` returns `std::optional<std::filesystem::path>`: the latest checkpoint, if any;
///   4. `k.restore_latest()` on a `const K` returns `std::optional<training_state>`: the newest checkpoint that
///      loads and validates, nothing when there is none, `checkpoint_error` when all are corrupt;
///   5. `k.remove_all()` deletes every checkpoint it made (BackupAndRestore after a successful fit).
///
/// `checkpoint_manager` is the library's checkpointer. Opting a type of your own in (one that keeps checkpoints
/// in an object store, say):
///
///     struct bucket_checkpointer {
///       using is_checkpointer = void;
///       std::string save(const mwstrat::training_state_view& state, std::int64_t step);
///       std::optional<std::filesystem::path> latest() const;
///       std::optional<mwstrat::training_state> restore_latest() const;
///       void remove_all();
///     };
///     static_assert(mwstrat::checkpointer<bucket_checkpointer>);

#include <mwstrat/checkpoint/training_state.hpp>

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <optional>

namespace mwstrat {

/// Requirement 1 of `checkpointer`, as a customisation point: specialise to true to opt a type in from outside.
template <class K>
inline constexpr bool enable_checkpointer = requires { typename K::is_checkpointer; };

/// Saves and restores training states atomically and finds the latest good one (requirements in the file comment).
template <class K>
concept checkpointer = enable_checkpointer<K> &&
                       requires(K& k, const K& ck, const training_state_view& state, std::int64_t step) {
                         { k.save(state, step) } -> std::convertible_to<std::filesystem::path>;
                         { ck.latest() } -> std::same_as<std::optional<std::filesystem::path>>;
                         { ck.restore_latest() } -> std::same_as<std::optional<training_state>>;
                         k.remove_all();
                       };

}  // namespace mwstrat
