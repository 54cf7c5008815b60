#pragma once
/// \file
/// Thin POSIX file wrappers for the checkpoint family: an owning descriptor, whole-buffer write/read loops that
/// survive EINTR and short transfers, fsync of a file and of its folder. Every failure is a `checkpoint_error`
/// naming the file.

#include <mwstrat/checkpoint/detail/fail.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <utility>

namespace mwstrat::detail {

/// Linux caps one read/write at a little under 2 GiB; stay below it so each call is one bounded transfer.
inline constexpr std::size_t max_io_chunk = std::size_t{1} << 30;

class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~unique_fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  /// Closes and reports the error close() gives (on NFS a failed write may only show here).
  [[nodiscard]] int close_checked() noexcept {
    const int fd = std::exchange(fd_, -1);
    if (fd < 0) return 0;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

inline unique_fd open_for_reading(const std::filesystem::path& path, std::optional<int> rank) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) checkpoint_fail_errno(rank, path, "cannot open for reading", errno);
  return unique_fd(fd);
}

/// Creates `path`, which must not exist yet (temporary names are unique, so an existing one is a bug or a race).
inline unique_fd create_exclusive(const std::filesystem::path& path, std::optional<int> rank) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) checkpoint_fail_errno(rank, path, "cannot create", errno);
  return unique_fd(fd);
}

inline std::uint64_t file_size(int fd, const std::filesystem::path& path, std::optional<int> rank) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) checkpoint_fail_errno(rank, path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) checkpoint_fail(rank, path, "not a regular file");
  return static_cast<std::uint64_t>(st.st_size);
}

/// Writes all of `buffers` (gathered, so headers and tensor data go out without being copied together).
inline void write_all(int fd, std::span<const std::span<const std::byte>> buffers, const std::filesystem::path& path,
                      std::optional<int> rank) {
  constexpr std::size_t max_iov = 64;
  std::size_t index = 0;
  std::size_t done_in_first = 0;  // bytes of buffers[index] already written
  while (index < buffers.size()) {
    iovec iov[max_iov];
    int count = 0;
    std::size_t batch = 0;
    for (std::size_t i = index; i < buffers.size() && count < static_cast<int>(max_iov) && batch < max_io_chunk;
         ++i) {
      const std::size_t skip = i == index ? done_in_first : 0;
      const std::size_t len = std::min(buffers[i].size() - skip, max_io_chunk - batch);
      if (len == 0) continue;
      iov[count].iov_base = const_cast<std::byte*>(buffers[i].data() + skip);
      iov[count].iov_len = len;
      ++count;
      batch += len;
    }
    if (count == 0) break;  // only empty buffers left
    const ssize_t n = ::writev(fd, iov, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      checkpoint_fail_errno(rank, path, "write failed", errno);
    }
    if (n == 0) checkpoint_fail(rank, path, "write made no progress");
    auto left = static_cast<std::size_t>(n);
    while (left > 0 && index < buffers.size()) {
      const std::size_t rest = buffers[index].size() - done_in_first;
      if (left >= rest) {
        left -= rest;
        ++index;
        done_in_first = 0;
      } else {
        done_in_first += left;
        left = 0;
      }
    }
    while (index < buffers.size() && buffers[index].size() == done_in_first) {  // skip empties
      ++index;
      done_in_first = 0;
    }
  }
}

/// Overwrites `bytes` at `offset`.
inline void pwrite_all(int fd, std::span<const std::byte> bytes, std::uint64_t offset,
                       const std::filesystem::path& path, std::optional<int> rank) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t len = std::min(bytes.size() - done, max_io_chunk);
    const ssize_t n = ::pwrite(fd, bytes.data() + done, len, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      checkpoint_fail_errno(rank, path, "write failed", errno);
    }
    if (n == 0) checkpoint_fail(rank, path, "write made no progress");
    done += static_cast<std::size_t>(n);
  }
}

/// Asks the kernel to start writing `[offset, offset + length)` to disk now, without waiting, so the final fsync
/// finds most of the file already on its way. Only a hint: errors surface at fsync.
inline void start_writeback([[maybe_unused]] int fd, [[maybe_unused]] std::uint64_t offset,
                            [[maybe_unused]] std::uint64_t length) noexcept {
#if defined(__linux__)
  (void)::sync_file_range(fd, static_cast<off_t>(offset), static_cast<off_t>(length), SYNC_FILE_RANGE_WRITE);
#endif
}

/// Reads exactly `out.size()` bytes at `offset`; a short file is a corrupt checkpoint, not an I/O error.
inline void read_exact(int fd, std::span<std::byte> out, std::uint64_t offset, const std::filesystem::path& path,
                       std::optional<int> rank) {
  std::size_t done = 0;
  while (done < out.size()) {
    const std::size_t len = std::min(out.size() - done, max_io_chunk);
    const ssize_t n = ::pread(fd, out.data() + done, len, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      checkpoint_fail_errno(rank, path, "read failed", errno);
    }
    if (n == 0) checkpoint_fail(rank, path, "file ended early (truncated while being read?)");
    done += static_cast<std::size_t>(n);
  }
}

inline void sync_fd(int fd, const std::filesystem::path& path, std::optional<int> rank) {
  int rc = 0;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) checkpoint_fail_errno(rank, path, "fsync failed", errno);
}

/// Makes a rename in `folder` durable. File systems that cannot sync a folder (EINVAL) have nothing to sync.
inline void sync_folder(const std::filesystem::path& folder, std::optional<int> rank) {
  int fd = -1;
  do {
    fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) checkpoint_fail_errno(rank, folder, "cannot open folder to fsync it", errno);
  unique_fd owner(fd);
  int rc = 0;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINVAL) checkpoint_fail_errno(rank, folder, "fsync of folder failed", errno);
}

}  // namespace mwstrat::detail
