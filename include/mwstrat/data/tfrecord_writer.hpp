#pragma once
/// \file
/// Writing TFRecord files (the framing of tfrecord.hpp), raw, gzip or zlib, in bounded memory: what tools/ and
/// the tests use to make shards, and what TensorFlow's `TFRecordDataset` reads.
///
/// A file is written as `<path>.part` and renamed to `<path>` by `close()` once every byte is written and synced,
/// so a run that fails or is killed never leaves a file that looks complete; a writer destroyed without `close()`
/// (an exception on the way) removes its `.part` file. Failures are `io_error`s naming the file.

#include <mwstrat/data/tfrecord.hpp>
#include <mwstrat/error.hpp>

#include <zlib.h>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// Options of `tfrecord_writer`.
struct tfrecord_writer_options {
  tfrecord_compression compression = tfrecord_compression::none;  ///< none, gzip or zlib (not automatic)
  int level = Z_DEFAULT_COMPRESSION;                                ///< zlib's level, 0 (store) to 9
  std::size_t buffer_bytes = std::size_t{256} << 10;                ///< the one output buffer
};

/// Writes records to one TFRecord file (see the file comment).
class tfrecord_writer {
 public:
  /// Creates `<path>.part`; throws config_error for `automatic` or a bad level, io_error when it cannot be made.
  explicit tfrecord_writer(std::filesystem::path path, tfrecord_writer_options options = {})
      : path_(std::move(path)), part_(path_.string() + ".part"), options_(options),
        out_(std::max<std::size_t>(options.buffer_bytes, 64)) {
    if (options_.compression == tfrecord_compression::automatic) {
      throw config_error({"tfrecord"}, "tfrecord_writer " + path_.string() +
                                           ": compression must be none, gzip or zlib, not automatic");
    }
    if (options_.level < Z_DEFAULT_COMPRESSION || options_.level > 9) {
      throw config_error({"tfrecord"}, "tfrecord_writer " + path_.string() + ": compression level " +
                                           std::to_string(options_.level) + " is not in [-1, 9]");
    }
    file_ = std::fopen(part_.c_str(), "wb");
    if (file_ == nullptr) {
      const int err = errno;
      throw io_error({"tfrecord"}, "cannot create " + part_ + ": " + std::strerror(err));
    }
    std::setvbuf(file_, nullptr, _IONBF, 0);  // out_ is the one buffer
    if (compressed()) {
      const int bits = options_.compression == tfrecord_compression::gzip ? 16 + MAX_WBITS : MAX_WBITS;
      if (deflateInit2(&zs_, options_.level, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        discard();
        throw io_error({"tfrecord"}, part_ + ": zlib could not start deflating");
      }
      deflating_ = true;
    }
  }
  tfrecord_writer(const tfrecord_writer&) = delete;
  tfrecord_writer& operator=(const tfrecord_writer&) = delete;
  /// Removes the `.part` file unless `close()` finished.
  ~tfrecord_writer() { discard(); }

  /// Appends one record; returns its offset (in the uncompressed record stream, as the reader reports it).
  std::uint64_t write(std::span<const std::byte> data) {
    if (file_ == nullptr) throw io_error({"tfrecord"}, path_.string() + ": write after close");
    const std::uint64_t offset = position_;
    std::array<std::byte, tfrecord_header_bytes> header{};
    const std::uint64_t length = data.size();
    for (std::size_t i = 0; i < 8; ++i) header[i] = static_cast<std::byte>(length >> (8 * i));
    store_le32(header.data() + 8, masked_crc32c(std::span<const std::byte>(header.data(), 8)));
    std::array<std::byte, tfrecord_footer_bytes> footer{};
    store_le32(footer.data(), masked_crc32c(data));
    put(header);
    put(data);
    put(footer);
    position_ += tfrecord_header_bytes + data.size() + tfrecord_footer_bytes;
    ++records_;
    return offset;
  }

  /// Appends the characters of `data` as one record.
  std::uint64_t write(std::string_view data) { return write(std::as_bytes(std::span(data.data(), data.size()))); }

  /// Finishes the file (the compressed stream's end), syncs it and renames it to its path.
  void close() {
    if (file_ == nullptr) return;
    if (deflating_) deflate_some(nullptr, 0, Z_FINISH);
    flush_buffer();
    if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) io_failure("cannot write");
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) io_failure("cannot close");
    std::error_code ec;
    std::filesystem::rename(part_, path_, ec);
    if (ec) {
      std::filesystem::remove(part_, ec);
      throw io_error({"tfrecord"}, "cannot rename " + part_ + " to " + path_.string() + ": " + ec.message());
    }
    closed_ = true;
  }

  /// The file this writer makes.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Records written so far.
  [[nodiscard]] std::uint64_t records_written() const noexcept { return records_; }
  /// Bytes of records written so far (uncompressed).
  [[nodiscard]] std::uint64_t position() const noexcept { return position_; }

 private:
  [[nodiscard]] bool compressed() const noexcept { return options_.compression != tfrecord_compression::none; }

  static void store_le32(std::byte* p, std::uint32_t v) noexcept {
    for (std::size_t i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
  }

  void put(std::span<const std::byte> bytes) {
    if (deflating_) {
      deflate_some(bytes.data(), bytes.size(), Z_NO_FLUSH);
      return;
    }
    std::size_t done = 0;
    while (done < bytes.size()) {
      if (used_ == out_.size()) flush_buffer();
      if (used_ == 0 && bytes.size() - done >= out_.size()) {  // a large record goes straight to the file
        write_file(bytes.data() + done, bytes.size() - done);
        return;
      }
      const std::size_t take = std::min(out_.size() - used_, bytes.size() - done);
      std::memcpy(out_.data() + used_, bytes.data() + done, take);
      used_ += take;
      done += take;
    }
  }

  void deflate_some(const std::byte* p, std::size_t n, int flush) {
    zs_.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(p));  // zlib only reads it
    while (true) {
      const std::size_t slice = std::min<std::size_t>(n, std::size_t{1} << 30);
      zs_.avail_in = static_cast<uInt>(slice);
      int rc = Z_OK;
      do {
        if (used_ == out_.size()) flush_buffer();
        zs_.next_out = reinterpret_cast<Bytef*>(out_.data() + used_);
        zs_.avail_out = static_cast<uInt>(out_.size() - used_);
        const uInt room = zs_.avail_out;
        rc = deflate(&zs_, n > slice ? Z_NO_FLUSH : flush);
        used_ += room - zs_.avail_out;
        if (rc == Z_STREAM_ERROR) throw io_error({"tfrecord"}, part_ + ": zlib failed while deflating");
      } while (zs_.avail_out == 0 || (flush == Z_FINISH && n <= slice && rc != Z_STREAM_END));
      n -= slice;
      if (n == 0) break;
    }
  }

  void flush_buffer() {
    write_file(out_.data(), used_);
    used_ = 0;
  }

  void write_file(const std::byte* p, std::size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, file_) != n) io_failure("cannot write");
  }

  [[noreturn]] void io_failure(const char* what) {
    const int err = errno;
    discard();
    throw io_error({"tfrecord"}, std::string(what) + " " + part_ + ": " + std::strerror(err));
  }

  void discard() noexcept {
    if (deflating_) {
      deflateEnd(&zs_);
      deflating_ = false;
    }
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
    }
    if (!closed_) {
      std::error_code ec;
      std::filesystem::remove(part_, ec);
    }
  }

  std::filesystem::path path_;
  std::string part_;
  tfrecord_writer_options options_;
  std::vector<std::byte> out_;
  std::size_t used_ = 0;
  std::FILE* file_ = nullptr;
  z_stream zs_{};
  bool deflating_ = false;
  bool closed_ = false;
  std::uint64_t position_ = 0;
  std::uint64_t records_ = 0;
};

}  // namespace mwstrat::data
