#pragma once
/// \file
/// The checkpoint family's concepts: `storable_tensor` (a tensor a checkpoint can hold) and `checkpointer`
/// (something that saves and restores training states).
///
/// Opt-in scheme (the same for every mwstrat concept): structural. A type models a concept when it has the
/// members the numbered list asks for; there is no tag to declare and no trait to specialise. Optional
/// capabilities are named concepts of their own, tested by name where they are used.
///
/// `storable_tensor<T>`:
///   1. `T` is `tensor_like` (tensor/concepts.hpp): `mwstrat::elements(t)` and `mwstrat::shape(t)` reach it;
///   2. its element type has a safetensors dtype: `mwstrat::dtype_of<E>` is set (F64, F32, the fixed-width
///      integers, U8 for std::byte, BOOL; specialise `dtype_of` for a 16-bit float type of your own to store it as
///      F16 or BF16 — its size must be 2).
/// `restorable_tensor<T>` adds: 3. the elements are not const (a load can fill them in place).
///
/// `checkpointer<K>`:
///   1. `k.save(state, step)` with a `const training_state_view&` and a `std::int64_t` saves the state atomically
///      (a crash leaves the previous checkpoint usable) and returns something convertible to
///      `std::filesystem::path` (where it went);
///   2. `k.latest()` on a `const K` returns `std::optional<std::filesystem::path>`: the latest checkpoint, if any;
///   3. `k.restore_latest_checkpoint()` on a `const K` returns `std::optional<restored_checkpoint>`: the newest
///      checkpoint that loads and validates with where it came from (BackupAndRestore says which one it resumed
///      from), nothing when there is none, `checkpoint_error` when all are corrupt;
///   4. `k.remove_all()` deletes every checkpoint it made (BackupAndRestore after a successful fit).
///
/// `checkpoint_manager` is the library's checkpointer; `backup_and_restore` and `model_checkpoint` take any.
/// A type of your own (one that keeps checkpoints in an object store, say):
///
///     struct bucket_checkpointer {
///       std::string save(const mwstrat::training_state_view& state, std::int64_t step);
///       std::optional<std::filesystem::path> latest() const;
///       std::optional<mwstrat::restored_checkpoint> restore_latest_checkpoint() const;
///       void remove_all();
///     };
///     static_assert(mwstrat::checkpointer<bucket_checkpointer>);

#include <mwstrat/checkpoint/dtype.hpp>
#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/tensor/concepts.hpp>

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <type_traits>

namespace mwstrat {

/// A `tensor_like` whose elements a safetensors file can hold (requirements in the file comment).
template <class T>
concept storable_tensor = tensor_like<T> && dtype_of<std::remove_cv_t<tensor_element_t<T>>>.has_value() &&
                          sizeof(tensor_element_t<T>) == size_of(*dtype_of<std::remove_cv_t<tensor_element_t<T>>>);

/// A `storable_tensor` whose elements can be written in place (what `load_tensors` fills): requirements 1 and 2,
/// and 3. `mwstrat::elements(t)` on a `T&` gives a span of non-const elements.
template <class T>
concept restorable_tensor = storable_tensor<T> && !std::is_const_v<tensor_element_t<T>>;

/// Saves and restores training states atomically and finds the latest good one (requirements in the file comment).
template <class K>
concept checkpointer = requires(K& k, const K& ck, const training_state_view& state, std::int64_t step) {
  { k.save(state, step) } -> std::convertible_to<std::filesystem::path>;
  { ck.latest() } -> std::same_as<std::optional<std::filesystem::path>>;
  { ck.restore_latest_checkpoint() } -> std::same_as<std::optional<restored_checkpoint>>;
  k.remove_all();
};

}  // namespace mwstrat
