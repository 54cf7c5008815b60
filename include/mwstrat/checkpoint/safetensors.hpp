#pragma once
/// \file
/// The safetensors format: writing named tensors with string metadata, and reading them back with every offset
/// checked.
///
/// Layout: an 8-byte little-endian header length N, N bytes of JSON header
/// `{"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}`
/// padded with spaces so the data starts on an 8-byte boundary, then the raw little-endian data, tensor after
/// tensor, with no gaps. Python's `safetensors` and plain numpy read these files.
///
/// Determinism: the writer orders tensors by element size (largest first, which keeps every tensor aligned to
/// its element size) and then as given, writes `__metadata__` keys sorted, and adds the data's CRC32C under
/// `mwstrat.crc32c` and one of the header's content under `mwstrat.header_crc32c`; the same tensors and metadata
/// always give the same bytes. The writer refuses, before writing anything, what no reader would accept: a tensor
/// name or metadata key or value that is not UTF-8 (the header is JSON), BOOL data other than bytes 0 and 1.
///
/// Reading never trusts the file: the header length is checked against the file size and a 100 MB limit before
/// anything is allocated; every entry's dtype, shape and offsets are checked; the tensors must tile the data
/// exactly; the checksums, when present, must match; BOOL data must be bytes 0 and 1 (any other byte read as a
/// `bool` is undefined behaviour). Any defect is a `checkpoint_error` naming the file.

#include <mwstrat/checkpoint/atomic_file.hpp>
#include <mwstrat/checkpoint/crc32c.hpp>
#include <mwstrat/checkpoint/detail/fail.hpp>
#include <mwstrat/checkpoint/detail/posix_file.hpp>
#include <mwstrat/checkpoint/detail/safetensors_header.hpp>
#include <mwstrat/checkpoint/dtype.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

namespace detail {

/// The slice of a checksummed read. The CRC of a slice runs right after the kernel copied it in, while it is
/// still in L1/L2, so the data is not fetched from memory a second time. 256 KiB: with 1 MiB slices part of a
/// slice had left L2 by the time its CRC ran (on the development machine, pread + CRC of 33 MB from the page cache
/// ran at ~80 % of a plain read with 1 MiB slices, ~85 % with 128–512 KiB); 32–64 KiB slices gain nothing more
/// and make 4–8 times the system calls.
inline constexpr std::size_t crc_read_slice = std::size_t{256} << 10;

/// Reads exactly `out.size()` bytes at `offset` (see `read_exact`) and returns `crc` extended over them.
inline std::uint32_t read_exact_checksummed(int fd, std::span<std::byte> out, std::uint64_t offset, std::uint32_t crc,
                                            const std::filesystem::path& path, std::optional<int> rank) {
  for (std::size_t done = 0; done < out.size(); done += crc_read_slice) {
    const std::span<std::byte> part = out.subspan(done, std::min(crc_read_slice, out.size() - done));
    read_exact(fd, part, offset + done, path, rank);
    crc = crc32c_extend(crc, part);
  }
  return crc;
}

}  // namespace detail

/// The metadata key under which the writer stores the data section's CRC32C (8 lowercase hex digits).
inline constexpr std::string_view crc32c_metadata_key = detail::data_crc_key;
/// The metadata key under which the writer stores the CRC32C of the header's content (every tensor's name, dtype,
/// shape and offsets and every other metadata entry, in a canonical form: see docs/checkpointing.md).
inline constexpr std::string_view header_crc32c_metadata_key = detail::header_crc_key;

/// One tensor to write: its bytes are not copied; they must stay alive until the write returns.
struct tensor_entry {
  std::string name;                  ///< unique, non-empty, not "__metadata__"
  dtype type = dtype::f32;           ///< element type
  std::vector<std::int64_t> shape;   ///< dimensions; their product times the element size is `data.size()`
  std::span<const std::byte> data;   ///< raw little-endian elements
};

/// A `tensor_entry` viewing `values` with the shape `extents` (a flat vector when `extents` is empty). (Not named
/// `shape`: that would shadow `mwstrat::shape` of tensor/concepts.hpp.)
template <class T>
  requires(dtype_of<T>.has_value())
[[nodiscard]] tensor_entry make_tensor_entry(std::string name, std::span<const T> values,
                                             std::vector<std::int64_t> extents = {}) {
  if (extents.empty()) extents.push_back(static_cast<std::int64_t>(values.size()));
  return {std::move(name), *dtype_of<T>, std::move(extents), std::as_bytes(values)};
}

namespace detail {
/// A `tensor_entry` viewing `values` under the shape `extents`; throws `checkpoint_error` naming `target` when the
/// shape's product is not the number of values. Every writer of typed values goes through it (training states, named
/// tensors of any `storable_tensor` type), so they all check the same way and give the same bytes.
template <class E>
  requires(mwstrat::dtype_of<std::remove_cv_t<E>>.has_value())
[[nodiscard]] tensor_entry checked_entry(std::string name, std::span<E> values, std::vector<std::int64_t> extents,
                                         const std::filesystem::path& target, std::optional<int> rank) {
  const auto count = tensor_bytes(extents, 1, std::numeric_limits<std::uint64_t>::max());
  if (!count || *count != values.size())
    checkpoint_fail(rank, target,
                    "tensor '" + name + "': shape does not match its " + std::to_string(values.size()) + " values");
  return {std::move(name), *mwstrat::dtype_of<std::remove_cv_t<E>>, std::move(extents), std::as_bytes(values)};
}
}  // namespace detail

/// How safetensors files are read.
struct read_options {
  /// This worker's rank, for error messages.
  std::optional<int> rank = {};
  /// Refuse a file without `mwstrat.crc32c` and `mwstrat.header_crc32c` (files written by other tools have none).
  bool require_crc = false;
};

/// One stored tensor, viewing the bytes of a `safetensors_view` or `safetensors_file`.
struct tensor_view {
  std::string name;
  dtype type = dtype::u8;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;

  /// Number of elements (the product of `shape`).
  [[nodiscard]] std::uint64_t element_count() const noexcept { return data.size() / size_of(type); }

  /// The elements as `T`, without a copy, when `T` is this tensor's type and the bytes are aligned for it
  /// (they are in files written by mwstrat or by Python's safetensors); otherwise nothing. Also nothing for `bool`
  /// when a byte is neither 0 nor 1, which only a view built by hand can hold (`parse` refuses such data).
  template <class T>
  [[nodiscard]] std::optional<std::span<const T>> try_values() const noexcept {
    if (dtype_of<T> != type) return std::nullopt;
    if (reinterpret_cast<std::uintptr_t>(data.data()) % alignof(T) != 0) return std::nullopt;
    if constexpr (std::is_same_v<T, bool>)
      if (detail::first_non_boolean(data)) return std::nullopt;
    return std::span<const T>(reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T));
  }

  /// A copy of the elements as `T` (any alignment); nothing if `T` is not this tensor's type, or for `bool` (as
  /// `try_values`) when a byte is neither 0 nor 1.
  template <class T>
  [[nodiscard]] std::optional<std::vector<T>> copy_values() const {
    if (dtype_of<T> != type) return std::nullopt;
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: no data() to copy into
      if (detail::first_non_boolean(data)) return std::nullopt;
      std::vector<bool> out(data.size());
      for (std::size_t i = 0; i < data.size(); ++i) out[i] = data[i] == std::byte{1};
      return out;
    } else {
      std::vector<T> out(data.size() / sizeof(T));
      if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
      return out;
    }
  }
};

/// The tensors and metadata of safetensors bytes held elsewhere (a buffer received over the network, say).
class safetensors_view {
 public:
  /// Validates `bytes` (see the file comment) and indexes them; `source` names them in errors.
  [[nodiscard]] static safetensors_view parse(std::span<const std::byte> bytes,
                                              const std::filesystem::path& source = "<memory>",
                                              const read_options& options = {}) {
    return parse(bytes, source, options, std::nullopt);
  }

  /// As above, with the CRC32C of the data section already computed (`data_crc`, by a reader that checksummed
  /// the data as it read it) or, when it is empty, computed here.
  [[nodiscard]] static safetensors_view parse(std::span<const std::byte> bytes, const std::filesystem::path& source,
                                              const read_options& options, std::optional<std::uint32_t> data_crc) {
    const auto fail = [&](std::string_view what) { detail::checkpoint_fail(options.rank, source, what); };
    if (bytes.size() < 8)
      fail("too short for a safetensors file (" + std::to_string(bytes.size()) + " bytes, need at least 8)");
    std::uint64_t header_length = 0;
    std::memcpy(&header_length, bytes.data(), 8);
    check_header_length(header_length, bytes.size(), source, options.rank);
    const std::string_view header_text(reinterpret_cast<const char*>(bytes.data()) + 8, header_length);
    const std::uint64_t data_size = bytes.size() - 8 - header_length;
    detail::parsed_header header = detail::parse_header(header_text, data_size, source, options.rank);
    const std::span<const std::byte> data = bytes.subspan(8 + header_length);
    verify_checksums(header, data_crc ? *data_crc : crc32c(data), source, options);
    for (const auto& t : header.tensors)
      if (t.type == dtype::boolean)
        if (const auto bad = detail::first_non_boolean(data.subspan(t.begin, t.end - t.begin)))
          fail("tensor '" + t.name + "': " + detail::non_boolean_text(*bad, data[t.begin + *bad]));

    safetensors_view view;
    view.metadata_ = std::move(header.metadata);
    view.tensors_.reserve(header.tensors.size());
    for (auto& t : header.tensors)
      view.tensors_.push_back({std::move(t.name), t.type, std::move(t.shape), data.subspan(t.begin, t.end - t.begin)});
    view.by_name_.reserve(view.tensors_.size());
    for (std::size_t i = 0; i < view.tensors_.size(); ++i) view.by_name_.push_back(i);
    std::sort(view.by_name_.begin(), view.by_name_.end(),
              [&](std::size_t a, std::size_t b) { return view.tensors_[a].name < view.tensors_[b].name; });
    return view;
  }

  /// Every tensor, in the order of its data in the file.
  [[nodiscard]] const std::vector<tensor_view>& tensors() const noexcept { return tensors_; }
  /// The tensor called `name`, or null.
  [[nodiscard]] const tensor_view* find(std::string_view name) const noexcept {
    const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                     [&](std::size_t i, std::string_view n) { return tensors_[i].name < n; });
    return it != by_name_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
  }
  /// The `__metadata__` entries (including `mwstrat.crc32c` when present).
  [[nodiscard]] const metadata_map& metadata() const noexcept { return metadata_; }

  /// Throws `checkpoint_error` if `header_length` cannot be right for a file of `file_size` bytes.
  static void check_header_length(std::uint64_t header_length, std::uint64_t file_size,
                                  const std::filesystem::path& source, std::optional<int> rank) {
    if (header_length > detail::safetensors_max_header)
      detail::checkpoint_fail(rank, source,
                              "header length " + std::to_string(header_length) + " exceeds the limit of " +
                                  std::to_string(detail::safetensors_max_header) + " bytes");
    if (header_length > file_size - 8)
      detail::checkpoint_fail(rank, source,
                              "header length " + std::to_string(header_length) + " runs past the end of the file (" +
                                  std::to_string(file_size) + " bytes; truncated?)");
  }

  /// Checks the checksums `header` carries: `mwstrat.crc32c` against `data_crc` (the data section's CRC32C) and
  /// `mwstrat.header_crc32c` against the header's content. Throws `checkpoint_error` on a mismatch, a malformed
  /// value, or (with `require_crc`) a missing one.
  static void verify_checksums(const detail::parsed_header& header, std::uint32_t data_crc,
                               const std::filesystem::path& source, const read_options& options) {
    const auto check = [&](std::string_view key, std::uint32_t actual, std::string_view what) {
      const auto it = header.metadata.find(key);
      if (it == header.metadata.end()) {
        if (options.require_crc)
          detail::checkpoint_fail(options.rank, source, "no " + std::string(key) + " in __metadata__");
        return;
      }
      const auto expected = detail::parse_hex32(it->second);
      if (!expected)
        detail::checkpoint_fail(options.rank, source, std::string(key) + " is not 8 lowercase hex digits");
      if (*expected != actual)
        detail::checkpoint_fail(options.rank, source,
                                std::string(what) + " CRC32C mismatch: stored " + it->second + ", computed " +
                                    detail::hex32(actual) + " (corrupt " + std::string(what) + ")");
    };
    check(detail::header_crc_key, detail::header_checksum(header.tensors, header.metadata), "header");
    check(detail::data_crc_key, data_crc, "data");
  }

 private:
  std::vector<tensor_view> tensors_;
  std::vector<std::size_t> by_name_;
  metadata_map metadata_;
};

namespace detail {
/// A safetensors file opened for reading, its size, and its header's length checked against that size: how every
/// reader of a file starts (`safetensors_file::open`, `load_training_state`).
struct opened_safetensors {
  unique_fd fd;
  std::uint64_t size = 0;
  std::uint64_t header_length = 0;
};

[[nodiscard]] inline opened_safetensors open_safetensors(const std::filesystem::path& path, std::optional<int> rank) {
  opened_safetensors file{open_for_reading(path, rank)};
  file.size = file_size(file.fd.get(), path, rank);
  if (file.size < 8)
    checkpoint_fail(rank, path,
                    "too short for a safetensors file (" + std::to_string(file.size) + " bytes, need at least 8)");
  read_exact(file.fd.get(), std::as_writable_bytes(std::span(&file.header_length, 1)), 0, path, rank);
  safetensors_view::check_header_length(file.header_length, file.size, path, rank);
  return file;
}
}  // namespace detail

/// A safetensors file read into memory (64-byte aligned, so typed views of its tensors are aligned too).
class safetensors_file {
 public:
  /// Reads and validates `path`; throws `checkpoint_error` naming it if it is missing, unreadable or corrupt.
  [[nodiscard]] static safetensors_file open(const std::filesystem::path& path, const read_options& options = {}) {
    const auto [fd, size, header_length] = detail::open_safetensors(path, options.rank);
    safetensors_file file;
    file.size_ = static_cast<std::size_t>(size);
    file.buffer_.reset(static_cast<std::byte*>(::operator new(file.size_, std::align_val_t{64})));
    // The header, then the data with its CRC32C computed slice by slice as it comes in (not in a second pass).
    const std::size_t data_offset = 8 + static_cast<std::size_t>(header_length);
    detail::read_exact(fd.get(), {file.buffer_.get(), data_offset}, 0, path, options.rank);
    const std::uint32_t data_crc = detail::read_exact_checksummed(
        fd.get(), {file.buffer_.get() + data_offset, file.size_ - data_offset}, data_offset, 0, path, options.rank);
    file.view_ = safetensors_view::parse({file.buffer_.get(), file.size_}, path, options, data_crc);
    file.path_ = path;
    return file;
  }

  /// Every tensor, in the order of its data in the file.
  [[nodiscard]] const std::vector<tensor_view>& tensors() const noexcept { return view_.tensors(); }
  /// The tensor called `name`, or null.
  [[nodiscard]] const tensor_view* find(std::string_view name) const noexcept { return view_.find(name); }
  /// The `__metadata__` entries.
  [[nodiscard]] const metadata_map& metadata() const noexcept { return view_.metadata(); }
  /// The file's path.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The whole file's bytes.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {buffer_.get(), size_}; }

 private:
  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte, aligned_delete> buffer_;
  std::size_t size_ = 0;
  safetensors_view view_;
  std::filesystem::path path_;
};

namespace detail {

/// Throws `checkpoint_error` naming `target` unless `text` (which `what` names) is UTF-8: checked before anything is
/// written, since a header that is not UTF-8 is a file no reader accepts.
inline void require_utf8(std::string_view text, const std::string& what, const std::filesystem::path& target,
                         std::optional<int> rank) {
  const auto bad = first_invalid_utf8(text);
  if (!bad) return;
  const auto byte = static_cast<unsigned char>(text[*bad]);
  checkpoint_fail(rank, target,
                  what + " is not valid UTF-8 (byte 0x" + hex8(byte) + " at offset " + std::to_string(*bad) +
                      "); a safetensors header is JSON, which must be UTF-8");
}

/// What a write will put where: validated entries in data order with their offsets.
struct safetensors_plan {
  std::vector<const tensor_entry*> order;
  std::vector<stored_tensor> stored;
  metadata_map metadata;
  std::uint64_t data_size = 0;
};

inline safetensors_plan plan_safetensors(std::span<const tensor_entry> entries, metadata_map metadata,
                                         const std::filesystem::path& target, std::optional<int> rank) {
  safetensors_plan plan;
  plan.metadata = std::move(metadata);
  plan.order.reserve(entries.size());
  for (const auto& e : entries) plan.order.push_back(&e);
  // Largest elements first keeps every tensor aligned to its element size; stable keeps the caller's order.
  std::stable_sort(plan.order.begin(), plan.order.end(),
                   [](const tensor_entry* a, const tensor_entry* b) { return size_of(a->type) > size_of(b->type); });

  std::vector<const tensor_entry*> by_name = plan.order;
  std::sort(by_name.begin(), by_name.end(), [](const tensor_entry* a, const tensor_entry* b) { return a->name < b->name; });
  for (std::size_t i = 0; i + 1 < by_name.size(); ++i)
    if (by_name[i]->name == by_name[i + 1]->name)
      checkpoint_fail(rank, target, "two tensors are called '" + by_name[i]->name + "'");

  plan.stored.reserve(plan.order.size());
  for (const tensor_entry* e : plan.order) {
    const std::string where = "cannot write tensor '" + escaped(e->name) + "': ";
    if (e->name.empty()) checkpoint_fail(rank, target, "cannot write a tensor with an empty name");
    if (e->name == safetensors_metadata_key) checkpoint_fail(rank, target, where + "the name is reserved");
    require_utf8(e->name, where + "the name", target, rank);
    const auto bytes = tensor_bytes(e->shape, size_of(e->type), std::numeric_limits<std::uint64_t>::max());
    if (!bytes || *bytes != e->data.size())
      checkpoint_fail(rank, target,
                      where + "shape and dtype " + std::string(to_string(e->type)) + " do not match its " +
                          std::to_string(e->data.size()) + " bytes");
    if (e->type == dtype::boolean)
      if (const auto bad = first_non_boolean(e->data))
        checkpoint_fail(rank, target, where + non_boolean_text(*bad, e->data[*bad]));
    plan.stored.push_back({e->name, e->type, e->shape, plan.data_size, plan.data_size + e->data.size()});
    plan.data_size += e->data.size();
  }
  for (const auto& [key, value] : plan.metadata) {
    require_utf8(key, "cannot write metadata key '" + escaped(key) + "': the key", target, rank);
    require_utf8(value, "cannot write metadata '" + escaped(key) + "': the value", target, rank);
  }
  return plan;
}

/// The padded header for `plan` once the data's CRC32C is known. Its length does not depend on the CRC (both
/// checksums are always 8 hex digits), which lets a streaming writer put a placeholder first and patch it.
inline std::string header_for(const safetensors_plan& plan, std::uint32_t data_crc) {
  metadata_map metadata = plan.metadata;
  metadata.insert_or_assign(std::string(data_crc_key), hex32(data_crc));
  metadata.insert_or_assign(std::string(header_crc_key), hex32(header_checksum(plan.stored, metadata)));
  return build_header(plan.stored, metadata);
}

inline std::array<std::byte, 8> length_prefix(std::uint64_t length) noexcept {
  std::array<std::byte, 8> out{};
  std::memcpy(out.data(), &length, 8);
  return out;
}

}  // namespace detail

/// The bytes of a safetensors file holding `entries` and `metadata` (plus the two checksums).
[[nodiscard]] inline std::vector<std::byte> encode_safetensors(std::span<const tensor_entry> entries,
                                                               const metadata_map& metadata = {},
                                                               std::optional<int> rank = {}) {
  const detail::safetensors_plan plan = detail::plan_safetensors(entries, metadata, "<memory>", rank);
  std::uint32_t crc = 0;
  for (const tensor_entry* e : plan.order) crc = crc32c_extend(crc, e->data);
  const std::string header = detail::header_for(plan, crc);
  std::vector<std::byte> out(8 + header.size() + static_cast<std::size_t>(plan.data_size));
  const auto prefix = detail::length_prefix(header.size());
  std::memcpy(out.data(), prefix.data(), prefix.size());
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::size_t at = 8 + header.size();
  for (const tensor_entry* e : plan.order) {
    if (!e->data.empty()) std::memcpy(out.data() + at, e->data.data(), e->data.size());
    at += e->data.size();
  }
  return out;
}

/// Writes `entries` and `metadata` (plus the two checksums) to `path` atomically (see `write_file_atomically`).
/// On failure `path` is untouched and a `checkpoint_error` names it. The data goes out in slices that are
/// checksummed just before they are written, while still in cache; the header, written first with placeholder
/// checksums of the same length, is patched at the end.
inline void save_safetensors(const std::filesystem::path& path, std::span<const tensor_entry> entries,
                             const metadata_map& metadata = {}, const write_options& options = {}) {
  const detail::safetensors_plan plan = detail::plan_safetensors(entries, metadata, path, options.rank);
  write_file_atomically(
      path,
      [&](file_sink& sink) {
        const std::string placeholder = detail::header_for(plan, 0);
        const auto prefix = detail::length_prefix(placeholder.size());
        const std::span<const std::byte> head[] = {prefix, std::as_bytes(std::span(placeholder))};
        sink.write(head);
        constexpr std::size_t slice = std::size_t{1} << 20;
        std::uint32_t crc = 0;
        for (const tensor_entry* e : plan.order)
          for (std::size_t done = 0; done < e->data.size(); done += slice) {
            const auto part = e->data.subspan(done, std::min(slice, e->data.size() - done));
            crc = crc32c_extend(crc, part);
            sink.write(part);
          }
        const std::string header = detail::header_for(plan, crc);
        if (header.size() != placeholder.size())
          detail::checkpoint_fail(options.rank, path, "internal error: the header changed length");
        sink.write_at(8, std::as_bytes(std::span(header)));
      },
      options);
}

}  // namespace mwstrat
