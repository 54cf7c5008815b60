#pragma once
/// \file
/// Crash-consistent replacement of a file: write a temporary file in the same folder, fsync it, rename it over
/// the target, fsync the folder. A crash at any instant leaves either the old file or the new one under the
/// target's name, never a mixture; the worst case is a stray temporary file, which `remove_stale_temporaries`
/// deletes.
///
/// Temporary files are named `.<target file name>.tmp-<pid>-<n>` so they are hidden, unique per process and
/// easy to recognise.

#include <mwstrat/checkpoint/detail/fail.hpp>
#include <mwstrat/checkpoint/detail/posix_file.hpp>

#include <unistd.h>

#include <atomic>
#include <concepts>
#include <cstdint>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace mwstrat {

/// The points of an atomic write at which a test hook may run (and, say, throw or kill the process).
enum class write_stage {
  created,    ///< the temporary file exists and is empty
  written,    ///< all bytes are written, not yet fsynced
  synced,     ///< the temporary file is fsynced and closed: the moment between write and rename
  renamed,    ///< the target now names the new file; its folder is not yet fsynced
  completed,  ///< the folder is fsynced: the new file is durable
};

/// The stable name of a write stage, for logs and test names.
[[nodiscard]] constexpr std::string_view to_string(write_stage stage) noexcept {
  switch (stage) {
    case write_stage::created: return "created";
    case write_stage::written: return "written";
    case write_stage::synced: return "synced";
    case write_stage::renamed: return "renamed";
    case write_stage::completed: return "completed";
  }
  return "unknown";
}

/// How files are written.
struct write_options {
  /// This worker's rank, for error messages.
  std::optional<int> rank = {};
  /// fsync the file and its folder. Turn off only where durability does not matter (a scratch file system).
  bool sync = true;
  /// Fault injection for tests: called at every stage with (stage, temporary path, target path). If it throws,
  /// the write is abandoned like any failed write: the temporary file is removed and the target is untouched
  /// (unless the stage was `renamed` or later, when the new file is already in place).
  std::function<void(write_stage, const std::filesystem::path&, const std::filesystem::path&)> on_stage = {};
};

/// Where an atomic write puts its bytes: gathered writes straight into the temporary file. When the write is to be
/// fsynced, the sink starts the disk writing every few MiB, so the final fsync waits for little more than the tail.
class file_sink {
 public:
  file_sink(int fd, const std::filesystem::path& path, std::optional<int> rank, bool sync = false) noexcept
      : fd_(fd), path_(path), rank_(rank), sync_(sync) {}

  /// Appends the buffers, in order, without copying them together.
  void write(std::span<const std::span<const std::byte>> buffers) {
    detail::write_all(fd_, buffers, path_, rank_);
    for (const auto& b : buffers) size_ += b.size();
    if (sync_ && size_ - started_ >= writeback_step) {
      detail::start_writeback(fd_, started_, size_ - started_);
      started_ = size_;
    }
  }
  /// Appends one buffer.
  void write(std::span<const std::byte> bytes) { write(std::span<const std::span<const std::byte>>(&bytes, 1)); }
  /// Overwrites bytes already appended, at `offset` (a header whose checksums are known only at the end, say).
  void write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
    if (offset + bytes.size() > size_) detail::checkpoint_fail(rank_, path_, "write_at past the end of what was written");
    detail::pwrite_all(fd_, bytes, offset, path_, rank_);
  }
  /// Bytes appended so far.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// The temporary file being written.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  static constexpr std::uint64_t writeback_step = std::uint64_t{8} << 20;
  int fd_;
  const std::filesystem::path& path_;
  std::optional<int> rank_;
  bool sync_;
  std::uint64_t size_ = 0;
  std::uint64_t started_ = 0;
};

namespace detail {
inline constexpr std::string_view temporary_marker = ".tmp-";

inline std::filesystem::path temporary_path_for(const std::filesystem::path& target) {
  static std::atomic<unsigned long long> counter{0};
  std::string name = ".";
  name += target.filename().string();
  name += temporary_marker;
  name += std::to_string(static_cast<long long>(::getpid()));
  name += '-';
  name += std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  return target.parent_path() / name;
}

inline std::filesystem::path folder_of(const std::filesystem::path& target) {
  const auto parent = target.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}
}  // namespace detail

/// Replaces (or creates) `target` with the bytes `write_body` puts into the sink, atomically and durably.
/// Throws `checkpoint_error` naming the file on any failure, after removing the temporary file; `target` is then
/// exactly what it was before.
template <class Body>
  requires std::invocable<Body&, file_sink&>
void write_file_atomically(const std::filesystem::path& target, Body&& write_body, const write_options& options = {}) {
  if (target.filename().empty()) detail::checkpoint_fail(options.rank, target, "not a file path");
  const std::filesystem::path temporary = detail::temporary_path_for(target);
  const auto stage = [&](write_stage s) {
    if (options.on_stage) options.on_stage(s, temporary, target);
  };
  bool renamed = false;
  try {
    detail::unique_fd fd = detail::create_exclusive(temporary, options.rank);
    stage(write_stage::created);
    file_sink sink(fd.get(), temporary, options.rank, options.sync);
    write_body(sink);
    stage(write_stage::written);
    if (options.sync) detail::sync_fd(fd.get(), temporary, options.rank);
    if (const int err = fd.close_checked(); err != 0)
      detail::checkpoint_fail_errno(options.rank, temporary, "close failed", err);
    stage(write_stage::synced);
    if (::rename(temporary.c_str(), target.c_str()) != 0)
      detail::checkpoint_fail_errno(options.rank, target, "cannot rename the temporary file over", errno);
    renamed = true;
    stage(write_stage::renamed);
    if (options.sync) detail::sync_folder(detail::folder_of(target), options.rank);
    stage(write_stage::completed);
  } catch (...) {
    if (!renamed) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
    }
    throw;
  }
}

/// Replaces `target` with `bytes`, atomically and durably (see `write_file_atomically`).
inline void write_bytes_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes,
                                   const write_options& options = {}) {
  write_file_atomically(target, [&](file_sink& sink) { sink.write(bytes); }, options);
}

namespace detail {
/// The name of the file whose atomic write left the temporary `file_name` (exactly `.<target>.tmp-<pid>-<n>`, as
/// `temporary_path_for` makes it), or nothing if `file_name` is not such a temporary.
[[nodiscard]] inline std::optional<std::string_view> temporary_target(std::string_view file_name) noexcept {
  const auto digits = [](std::string_view text) {
    return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  };
  // The last marker: a target name may hold ".tmp-" itself, the "<pid>-<n>" after the real one never does.
  const std::size_t marker = file_name.rfind(temporary_marker);
  if (!file_name.starts_with('.') || marker == std::string_view::npos || marker < 2) return std::nullopt;
  const std::string_view counters = file_name.substr(marker + temporary_marker.size());
  const std::size_t dash = counters.find('-');
  if (dash == std::string_view::npos || !digits(counters.substr(0, dash)) || !digits(counters.substr(dash + 1)))
    return std::nullopt;
  return file_name.substr(1, marker - 1);
}
}  // namespace detail

/// Whether `file_name` is a temporary file that an atomic write of a file named `target_prefix...` left behind.
[[nodiscard]] inline bool is_temporary_for(std::string_view file_name, std::string_view target_prefix) noexcept {
  const auto target = detail::temporary_target(file_name);
  return target && target->starts_with(target_prefix);
}

/// Deletes the temporary files of interrupted atomic writes in `folder` whose target's file name satisfies
/// `owns_target`. Only the process that writes those targets may call it: it would also delete the temporary file
/// of a write in progress. Returns how many it removed.
template <class Predicate>
  requires std::predicate<Predicate&, std::string_view>
std::size_t remove_stale_temporaries_if(const std::filesystem::path& folder, Predicate&& owns_target) {
  std::size_t removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto target = detail::temporary_target(name);
    if (!target || !owns_target(*target)) continue;
    std::error_code remove_ec;
    if (std::filesystem::remove(it->path(), remove_ec)) ++removed;
  }
  return removed;
}

/// Deletes temporary files of interrupted atomic writes in `folder` whose target names start with `target_prefix`
/// (everything the prefix "" matches: all of them); see `remove_stale_temporaries_if`. A prefix also matches the
/// targets of longer names ("ckpt" those of "ckpt-best"): pass a predicate to match exact names.
inline std::size_t remove_stale_temporaries(const std::filesystem::path& folder, std::string_view target_prefix) {
  return remove_stale_temporaries_if(folder,
                                     [&](std::string_view target) { return target.starts_with(target_prefix); });
}

}  // namespace mwstrat
