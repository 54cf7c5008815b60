#pragma once
/// \file
/// `indexed_tfrecord_file`: one TFRecord file read by record number, in any order, from any thread.
///
/// Opening it reads the framing only — each record's 12-byte header (length and length CRC), then a seek past the
/// data — so indexing a file costs one small read per record, not a read of the file; the index keeps 12 bytes per
/// record (offset and length), whatever the records hold. `read(i)` then reads record i with one `pread` and
/// checks its data CRC. This is what lets a data set be shuffled by a seeded permutation of its records (exactly
/// resumable, docs/sharding.md) while holding in memory only the records of the batches being built.
///
/// A GZIP or ZLIB file cannot be read at an offset: it is inflated once, at opening, into an uncompressed copy
/// in `inflate_directory` (tf.data's `cache(filename)` pays the same disk for the same reason), which is removed
/// when the object is destroyed. Offsets in messages are those of the uncompressed record stream, as
/// `tfrecord_reader` reports them.
///
/// Refused, each a `data_error` naming the file (and the record's offset where there is one): a missing file (an
/// `io_error`), a directory, an empty file, a header cut short, a bad length CRC, a record running past the end of
/// the file, a length over `max_record_bytes` (at opening); a bad data CRC (at `read`).

#include <mwstrat/data/record_location.hpp>
#include <mwstrat/data/tfrecord.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>
#include <mwstrat/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// How an `indexed_tfrecord_file` opens its file.
struct indexed_tfrecord_options {
  tfrecord_compression compression = tfrecord_compression::automatic;  ///< how the file is stored
  std::size_t max_record_bytes = std::size_t{256} << 20;  ///< a longer record is refused at opening
  /// Where a compressed file's uncompressed copy goes (empty: the system's temporary directory).
  std::filesystem::path inflate_directory;
};

/// One TFRecord file, indexed at opening, read by record number (see the file comment).
class indexed_tfrecord_file {
 public:
  /// Opens and indexes `path`; throws as the file comment says.
  explicit indexed_tfrecord_file(std::filesystem::path path, indexed_tfrecord_options options = {})
      : path_(std::move(path)), name_(path_.string()), options_(std::move(options)) {
    mwstrat::detail::check_tfrecord_file(path_);
    fd_ = open_read(name_);
    std::array<std::byte, tfrecord_header_bytes> head{};
    const std::size_t got = pread_some(head.data(), head.size(), 0);
    if (got == 0) {
      close_fd();
      throw data_error({"tfrecord"}, name_, name_ + ": empty file (0 bytes): no TFRecord records");
    }
    compression_ = resolved_compression(std::span<const std::byte>(head.data(), got));
    if (compression_ != tfrecord_compression::none) inflate();
    build_index();
  }

  indexed_tfrecord_file(const indexed_tfrecord_file&) = delete;
  indexed_tfrecord_file& operator=(const indexed_tfrecord_file&) = delete;
  indexed_tfrecord_file(indexed_tfrecord_file&& other) noexcept { *this = std::move(other); }
  indexed_tfrecord_file& operator=(indexed_tfrecord_file&& other) noexcept {
    if (this != &other) {
      release();
      path_ = std::move(other.path_);
      name_ = std::move(other.name_);
      options_ = std::move(other.options_);
      compression_ = other.compression_;
      inflated_ = std::move(other.inflated_);
      offsets_ = std::move(other.offsets_);
      lengths_ = std::move(other.lengths_);
      fd_ = std::exchange(other.fd_, -1);
      other.inflated_.clear();
    }
    return *this;
  }
  ~indexed_tfrecord_file() { release(); }

  /// Records in the file.
  [[nodiscard]] std::size_t size() const noexcept { return offsets_.size(); }
  /// The file, as given.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// How the file is stored.
  [[nodiscard]] tfrecord_compression compression() const noexcept { return compression_; }
  /// Where record `i` starts (its offset in the uncompressed record stream).
  [[nodiscard]] record_location location(std::size_t i) const { return {name_, offsets_.at(i)}; }
  /// The length of record `i`'s data.
  [[nodiscard]] std::size_t length(std::size_t i) const { return lengths_.at(i); }

  /// Record `i`'s data, read into `buffer` (grown as needed, reused by the caller from record to record) and CRC
  /// checked; valid until `buffer` changes. Safe to call from several threads at once with different buffers.
  [[nodiscard]] std::span<const std::byte> read(std::size_t i, std::vector<std::byte>& buffer) const {
    const std::size_t length = lengths_.at(i);
    const std::size_t total = length + tfrecord_footer_bytes;
    if (buffer.size() < total) buffer.resize(total);
    const std::uint64_t at = offsets_[i] + tfrecord_header_bytes;
    if (pread_some(buffer.data(), total, at) < total) {
      throw record_error(location(i), "truncated record: the file is shorter than when it was indexed");
    }
    const std::span<const std::byte> data(buffer.data(), length);
    if (masked_crc32c(data) != mwstrat::detail::load_le32_bytes(buffer.data() + length)) {
      throw record_error(location(i), "bad data CRC (the " + std::to_string(length) +
                                          " bytes of data do not match their checksum: corrupt)");
    }
    return data;
  }

 private:
  static int open_read(const std::string& name) {
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      throw io_error({"tfrecord"}, "cannot open " + name + ": " + std::strerror(err));
    }
    return fd;
  }

  // Reads up to n bytes at `offset`, retrying short reads; returns how many (fewer only at the end of the file).
  std::size_t pread_some(std::byte* out, std::size_t n, std::uint64_t offset) const {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        throw io_error({"tfrecord"}, "cannot read " + name_ + ": " + std::strerror(err));
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }

  [[nodiscard]] tfrecord_compression resolved_compression(std::span<const std::byte> head) const {
    switch (options_.compression) {
      case tfrecord_compression::automatic:
        switch (mwstrat::detail::detect_tfrecord_codec(head)) {
          case mwstrat::detail::stream_codec::gzip: return tfrecord_compression::gzip;
          case mwstrat::detail::stream_codec::zlib: return tfrecord_compression::zlib;
          case mwstrat::detail::stream_codec::raw: return tfrecord_compression::none;
        }
        return tfrecord_compression::none;
      default: return options_.compression;
    }
  }

  // The compressed file's records, checked by tfrecord_reader, copied uncompressed; the copy is read from then on.
  void inflate() {
    static std::atomic<unsigned> serial{0};
    const auto dir = options_.inflate_directory.empty() ? std::filesystem::temp_directory_path()
                                                        : options_.inflate_directory;
    const auto copy = dir / ("mwstrat-inflated-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) +
                             "-" + path_.filename().string());
    {
      tfrecord_options read_options;
      read_options.compression = compression_;
      read_options.max_record_bytes = options_.max_record_bytes;
      tfrecord_reader reader(path_, read_options);
      tfrecord_writer writer(copy, tfrecord_writer_options{});
      while (const auto record = reader.next()) writer.write(record->data);
      writer.close();
    }
    close_fd();
    inflated_ = copy;
    fd_ = open_read(copy.string());
  }

  void build_index() {
    struct stat st{};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      throw io_error({"tfrecord"}, "cannot stat " + name_ + ": " + std::strerror(err));
    }
    const auto end = static_cast<std::uint64_t>(st.st_size);
    std::uint64_t offset = 0;
    std::array<std::byte, tfrecord_header_bytes> header{};
    while (offset < end) {
      const record_location at{name_, offset};
      const std::size_t got = pread_some(header.data(), header.size(), offset);
      if (got < header.size()) {
        throw record_error(at, "truncated record: the file ends " + std::to_string(got) +
                                   " bytes into its 12-byte header");
      }
      if (!mwstrat::detail::is_tfrecord_header(header)) {
        throw record_error(at, "bad length CRC (the 8 length bytes do not match their checksum: not a TFRecord "
                               "file, or corrupt)");
      }
      const std::uint64_t length = mwstrat::detail::load_le64_bytes(header.data());
      if (length > options_.max_record_bytes || length > std::uint64_t{UINT32_MAX}) {
        throw record_error(at, "length " + std::to_string(length) + " exceeds the limit of " +
                                   std::to_string(options_.max_record_bytes) +
                                   " bytes (indexed_tfrecord_options::max_record_bytes)");
      }
      const std::uint64_t next = offset + tfrecord_header_bytes + length + tfrecord_footer_bytes;
      if (next > end) {
        throw record_error(at, "truncated record: its header promises " + std::to_string(length) +
                                   " bytes of data and a 4-byte CRC, the file ends after " +
                                   std::to_string(end - offset - tfrecord_header_bytes));
      }
      offsets_.push_back(offset);
      lengths_.push_back(static_cast<std::uint32_t>(length));
      offset = next;
    }
  }

  void close_fd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void release() noexcept {
    close_fd();
    if (!inflated_.empty()) {
      std::error_code ec;
      std::filesystem::remove(inflated_, ec);
      inflated_.clear();
    }
  }

  std::filesystem::path path_;
  std::string name_;
  indexed_tfrecord_options options_;
  tfrecord_compression compression_ = tfrecord_compression::none;
  std::filesystem::path inflated_;       // the uncompressed copy of a compressed file, removed with this object
  std::vector<std::uint64_t> offsets_;   // each record's header offset
  std::vector<std::uint32_t> lengths_;   // each record's data length (max_record_bytes keeps it below 4 GiB)
  int fd_ = -1;
};

}  // namespace mwstrat::data
