#pragma once
/// \file
/// Named tensors of the user's own type in and out of safetensors files: the joint between `tensor_like` and the
/// checkpoint format.
///
///     my::matrix w = ...;  std::vector<std::int64_t> counts = ...;   // any `storable_tensor` types
///     mwstrat::save_tensors("model.safetensors", std::vector{mwstrat::named("dense/kernel", w)});
///     mwstrat::load_tensors("model.safetensors", std::vector{mwstrat::named("dense/kernel", w)});   // in place
///
/// Saving reads each tensor's elements and shape through `mwstrat::elements` / `mwstrat::shape` and stores it
/// with the dtype of its element type (F32 for float, F64, I64, ...), with the same writer, checks and bytes as
/// every other safetensors file mwstrat writes. Loading finds each tensor by name and checks, before copying
/// anything into it, that the file has it, that the dtype is the tensor's and that the shape is the tensor's (a
/// destination without a shape hook, a plain `std::vector` say, is flat: only the element count must match);
/// any defect is a `checkpoint_error` naming the tensor and the file. Loading several checks all of them before
/// copying into any. BOOL data other than bytes 0 and 1 never reaches a `bool`: reading refuses it.

#include <mwstrat/checkpoint/atomic_file.hpp>
#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/checkpoint/detail/fail.hpp>
#include <mwstrat/checkpoint/dtype.hpp>
#include <mwstrat/checkpoint/safetensors.hpp>
#include <mwstrat/tensor/concepts.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// A tensor of the user's type with the name it is stored under; it refers to the tensor (no copy).
template <storable_tensor T>
struct named_tensor {
  std::string name;  ///< unique in a file, non-empty, not "__metadata__"
  T& tensor;         ///< the tensor, which must outlive the save or load
};

/// `named_tensor{name, t}`.
template <storable_tensor T>
[[nodiscard]] named_tensor<T> named(std::string name, T& t) {
  return {std::move(name), t};
}

namespace detail {

template <class N>
inline constexpr bool is_named_tensor = false;
template <class T>
inline constexpr bool is_named_tensor<named_tensor<T>> = true;

template <class R>
concept named_tensor_range =
    std::ranges::input_range<R> && is_named_tensor<std::remove_cv_t<std::ranges::range_value_t<R>>>;

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

template <class T>
std::vector<std::int64_t> int64_shape(const T& t) {
  const std::vector<std::size_t> extents = mwstrat::shape(t);
  return {extents.begin(), extents.end()};
}

}  // namespace detail

/// The `tensor_entry` that stores `t` (its bytes are viewed, not copied); `target` and `rank` name the file in
/// the error thrown when its shape does not match its element count.
template <class T>
[[nodiscard]] tensor_entry tensor_entry_of(const named_tensor<T>& t, const std::filesystem::path& target = "<memory>",
                                           std::optional<int> rank = {}) {
  const T& tensor = t.tensor;
  return detail::checked_entry(t.name, mwstrat::elements(tensor), detail::int64_shape(tensor), target, rank);
}

/// The entries of `tensors`, in order.
template <detail::named_tensor_range R>
[[nodiscard]] std::vector<tensor_entry> tensor_entries_of(R&& tensors, const std::filesystem::path& target = "<memory>",
                                                          std::optional<int> rank = {}) {
  std::vector<tensor_entry> out;
  for (const auto& t : tensors) out.push_back(tensor_entry_of(t, target, rank));
  return out;
}

/// Writes `tensors` (and `metadata`) to `path` atomically as a safetensors file (see `save_safetensors`).
template <detail::named_tensor_range R>
void save_tensors(const std::filesystem::path& path, R&& tensors, const metadata_map& metadata = {},
                  const write_options& options = {}) {
  const std::vector<tensor_entry> entries = tensor_entries_of(tensors, path, options.rank);
  save_safetensors(path, entries, metadata, options);
}

/// The bytes of the safetensors file holding `tensors` (and `metadata`).
template <detail::named_tensor_range R>
[[nodiscard]] std::vector<std::byte> encode_tensors(R&& tensors, const metadata_map& metadata = {}) {
  const std::vector<tensor_entry> entries = tensor_entries_of(tensors);
  return encode_safetensors(entries, metadata);
}

namespace detail {
/// The bytes `t` is to be filled from: those of the tensor of its name in `stored`, once it is known that the file
/// has it, with `t`'s dtype and shape (see the file comment). Writes nothing.
template <class Stored, class T>
  requires restorable_tensor<T>
std::span<const std::byte> checked_source(const Stored& stored, const named_tensor<T>& t,
                                          const std::filesystem::path& source, std::optional<int> rank) {
  using element = std::remove_cv_t<tensor_element_t<T>>;
  const tensor_view* found = stored.find(t.name);
  if (!found) checkpoint_fail(rank, source, "no tensor '" + t.name + "' in the file");
  if (found->type != *dtype_of<element>)
    checkpoint_fail(rank, source,
                    "tensor '" + t.name + "' is " + std::string(to_string(found->type)) +
                        " in the file; the destination holds " + std::string(to_string(*dtype_of<element>)));
  const std::vector<std::int64_t> extents = int64_shape(t.tensor);
  const bool flat_destination = !has_shape_hook<T>;
  if (flat_destination ? found->element_count() != mwstrat::elements(t.tensor).size() : found->shape != extents)
    checkpoint_fail(rank, source,
                    "tensor '" + t.name + "' has shape " + shape_text(found->shape) +
                        " in the file; the destination has shape " + shape_text(extents));
  return found->data;
}

inline void copy_bytes(std::span<const std::byte> from, std::span<std::byte> into) noexcept {
  if (!from.empty()) std::memcpy(into.data(), from.data(), from.size());
}
}  // namespace detail

/// Fills `t` in place from the tensor of its name in `stored` (a `safetensors_view` or `safetensors_file`, whose
/// BOOL data `parse` has checked); `source` names the file in errors. Checks presence, dtype and shape first (see
/// the file comment).
template <class Stored, class T>
  requires restorable_tensor<T>
void load_tensor(const Stored& stored, const named_tensor<T>& t, const std::filesystem::path& source,
                 std::optional<int> rank = {}) {
  const std::span<const std::byte> from = detail::checked_source(stored, t, source, rank);
  detail::copy_bytes(from, std::as_writable_bytes(mwstrat::elements(t.tensor)));
}

/// Fills every tensor of `tensors` in place from `stored` (see `load_tensor`). Every tensor is checked before any is
/// written, so a bad one leaves all of them as they were.
template <class Stored, detail::named_tensor_range R>
void load_tensors(const Stored& stored, R&& tensors, const std::filesystem::path& source,
                  std::optional<int> rank = {}) {
  // The destinations' bytes, not the range's elements, are kept: an input range may be walked only once.
  std::vector<std::pair<std::span<const std::byte>, std::span<std::byte>>> copies;
  for (const auto& t : tensors)
    copies.emplace_back(detail::checked_source(stored, t, source, rank),
                        std::as_writable_bytes(mwstrat::elements(t.tensor)));
  for (const auto& [from, into] : copies) detail::copy_bytes(from, into);
}

/// Reads and validates the safetensors file `path` and fills every tensor of `tensors` in place from it.
template <detail::named_tensor_range R>
void load_tensors(const std::filesystem::path& path, R&& tensors, const read_options& options = {}) {
  const safetensors_file file = safetensors_file::open(path, options);
  load_tensors(file, tensors, path, options.rank);
}

}  // namespace mwstrat
