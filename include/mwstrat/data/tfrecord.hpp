#pragma once
/// \file
/// Reading TFRecord files, TensorFlow's container of records (what `tf.io.TFRecordWriter`, Apache Beam's
/// `WriteToTFRecord` and TFDS write), record by record in bounded memory.
///
/// A file is a sequence of records, each
///
///     uint64 length  |  uint32 masked CRC32C of the 8 length bytes  |  length bytes of data  |  uint32 masked CRC32C of the data
///
/// all little-endian, where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (so a CRC of bytes that hold
/// CRCs is not itself a CRC of zero). A file may be stored as it is, as a gzip file (one or more members, as
/// gzip(1) writes them) or as one zlib stream: TensorFlow's compression types "", "GZIP" and "ZLIB". Compressed
/// files are inflated as they are read (zlib streaming), never as a whole.
///
/// Contract of `tfrecord_reader`:
///   - memory: one read buffer of `buffer_bytes` and the largest record so far, whatever the size of the file;
///   - each record is delivered only once all of it has been read and both its CRCs checked; a record is never
///     delivered in part, and nothing after a defect is delivered at all (the reader stays failed);
///   - every record comes with its byte offset (of its length field, in the uncompressed record stream: for a raw
///     file its offset in the file), and every defect is a `data_error` naming the file and that offset;
///   - a file that cannot be opened is an `io_error`; a directory, an empty file (0 bytes, or no record: an empty
///     shard is almost always a writer that failed; `allow_empty` accepts one), a truncated record, a bad length
///     CRC, a bad data CRC, a length above `max_record_bytes`, a corrupt or truncated gzip/zlib stream are
///     `data_error`s (component `tfrecord`).
///
/// `tfrecord_compression::automatic` (the default) tells the three apart by the file's first bytes: a first
/// record header whose length CRC holds is a raw file (a gzip or zlib header passes that check with probability
/// 2^-32); else the gzip magic 1f 8b means gzip and a valid zlib header (RFC 1950: deflate, check bits) zlib; else
/// the file is read as raw, and its first record is reported as having a bad length CRC.

#include <mwstrat/checkpoint/crc32c.hpp>
#include <mwstrat/data/detail/inflating_reader.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/error.hpp>

#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// How a TFRecord file is stored (TensorFlow's `compression_type`).
enum class tfrecord_compression {
  automatic,  ///< reading only: told from the file's first bytes (see the file comment)
  none,       ///< ""
  gzip,       ///< "GZIP"
  zlib,       ///< "ZLIB"
};

/// The name used in messages and on the command line: "automatic", "none", "gzip", "zlib".
[[nodiscard]] constexpr std::string_view to_string(tfrecord_compression c) noexcept {
  switch (c) {
    case tfrecord_compression::automatic: return "automatic";
    case tfrecord_compression::none: return "none";
    case tfrecord_compression::gzip: return "gzip";
    case tfrecord_compression::zlib: return "zlib";
  }
  return "unknown";
}

/// Bytes of framing around each record's data: 8 of length and 4 of its CRC before, 4 of CRC after.
inline constexpr std::size_t tfrecord_header_bytes = 12;
inline constexpr std::size_t tfrecord_footer_bytes = 4;

/// TFRecord's masked CRC32C of `bytes`.
[[nodiscard]] inline std::uint32_t masked_crc32c(std::span<const std::byte> bytes) noexcept {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// Options of `tfrecord_reader`.
struct tfrecord_options {
  tfrecord_compression compression = tfrecord_compression::automatic;  ///< how the file is stored
  std::size_t buffer_bytes = std::size_t{256} << 10;                   ///< the one read buffer (file or inflate input)
  std::size_t max_record_bytes = std::size_t{256} << 20;  ///< a longer record is refused before any allocation
  bool allow_empty = false;  ///< accept a file that holds no record (0 bytes, or an empty compressed stream)
};

/// One record as the reader delivers it: its data (valid until the reader's next call) and where it starts.
struct tfrecord_view {
  std::span<const std::byte> data;  ///< the record's bytes, CRC checked
  std::uint64_t offset = 0;         ///< byte offset of its length field in the (uncompressed) record stream
};

}  // namespace mwstrat::data

namespace mwstrat::detail {

[[nodiscard]] inline std::uint64_t load_le64_bytes(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

[[nodiscard]] inline std::uint32_t load_le32_bytes(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

// True when the 12 bytes are a record header whose length CRC holds.
[[nodiscard]] inline bool is_tfrecord_header(std::span<const std::byte> h) noexcept {
  return h.size() >= data::tfrecord_header_bytes &&
         data::masked_crc32c(h.first(8)) == load_le32_bytes(h.data() + 8);
}

// The codec of a file whose first bytes are `head` (see tfrecord.hpp's comment on automatic).
[[nodiscard]] inline stream_codec detect_tfrecord_codec(std::span<const std::byte> head) noexcept {
  if (is_tfrecord_header(head)) return stream_codec::raw;
  if (head.size() >= 2) {
    const auto b0 = std::to_integer<unsigned>(head[0]);
    const auto b1 = std::to_integer<unsigned>(head[1]);
    if (b0 == 0x1f && b1 == 0x8b) return stream_codec::gzip;
    if ((b0 & 0x0fu) == 8 && (b0 >> 4) <= 7 && (b0 * 256 + b1) % 31 == 0) return stream_codec::zlib;
  }
  return stream_codec::raw;
}

/// Throws io_error when `path` does not exist, data_error when it is a directory or not a regular file: what every
/// reader of a TFRecord file checks before opening it.
inline void check_tfrecord_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw io_error({"tfrecord"}, "cannot open " + name + ": " +
                                     (ec ? ec.message() : std::string("No such file or directory")));
  }
  if (std::filesystem::is_directory(status)) {
    throw data_error({"tfrecord"}, name, name + ": a directory, not a TFRecord file (list its files with "
                                                "list_files(\"" + name + "/*\"))");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw data_error({"tfrecord"}, name, name + ": not a regular file (a device, socket or pipe)");
  }
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// Reads the records of one TFRecord file in order (see the file comment for the contract).
class tfrecord_reader {
 public:
  /// Opens `path`; throws io_error when it cannot be opened, data_error when it is not a regular file.
  explicit tfrecord_reader(std::filesystem::path path, tfrecord_options options = {})
      : path_(std::move(path)), name_(path_.string()), options_(options) {
    detail::check_tfrecord_file(path_);
    std::FILE* file = std::fopen(name_.c_str(), "rb");
    if (file == nullptr) {
      const int err = errno;
      throw io_error({"tfrecord"}, "cannot open " + name_ + ": " + std::strerror(err));
    }
    std::setvbuf(file, nullptr, _IONBF, 0);  // the reader's buffer is the one buffer
    std::array<std::byte, tfrecord_header_bytes> head{};
    const std::size_t got = std::fread(head.data(), 1, head.size(), file);
    if (got == 0 && !options_.allow_empty) {
      std::fclose(file);
      throw data_error({"tfrecord"}, name_, name_ + ": empty file (0 bytes): no TFRecord records");
    }
    detail::stream_codec codec = detail::stream_codec::raw;
    switch (options_.compression) {
      case tfrecord_compression::automatic: codec = detail::detect_tfrecord_codec({head.data(), got}); break;
      case tfrecord_compression::none: codec = detail::stream_codec::raw; break;
      case tfrecord_compression::gzip: codec = detail::stream_codec::gzip; break;
      case tfrecord_compression::zlib: codec = detail::stream_codec::zlib; break;
    }
    compression_ = codec == detail::stream_codec::gzip   ? tfrecord_compression::gzip
                   : codec == detail::stream_codec::zlib ? tfrecord_compression::zlib
                                                         : tfrecord_compression::none;
    if (std::fseek(file, 0, SEEK_SET) != 0) {
      const int err = errno;
      std::fclose(file);
      throw io_error({"tfrecord"}, "cannot seek in " + name_ + ": " + std::strerror(err));
    }
    in_ = std::make_unique<detail::inflating_reader>(file, name_, codec, options_.buffer_bytes);
  }

  /// The next record, or nothing at the end of the file. The view stays valid until the next call. Throws
  /// data_error on a defect, and again on every later call.
  [[nodiscard]] std::optional<tfrecord_view> next() {
    if (failure_) throw *failure_;
    const std::uint64_t offset = in_->position();
    std::array<std::byte, tfrecord_header_bytes> header{};
    const std::size_t got = in_->read(header.data(), header.size());
    if (got == 0 && !in_->defect()) {
      if (records_ == 0 && !options_.allow_empty) {
        fail({name_, offset}, "empty: the file holds no record");
      }
      return std::nullopt;
    }
    if (got < header.size()) {
      fail_short({name_, offset}, "the file ends " + std::to_string(got) + " bytes into its 12-byte header");
    }
    const std::uint64_t length = detail::load_le64_bytes(header.data());
    if (!detail::is_tfrecord_header(header)) {
      fail({name_, offset}, "bad length CRC (the 8 length bytes do not match their checksum: not a TFRecord file, "
                            "a compressed file read as " + std::string(to_string(compression_)) +
                            ", or corrupt)");
    }
    if (length > options_.max_record_bytes) {
      fail({name_, offset}, "length " + std::to_string(length) + " exceeds the limit of " +
                                std::to_string(options_.max_record_bytes) + " bytes (tfrecord_options::max_record_bytes)");
    }
    const std::size_t total = static_cast<std::size_t>(length) + tfrecord_footer_bytes;
    if (buffer_.size() < total) buffer_.resize(total);
    const std::size_t body = in_->read(buffer_.data(), total);
    if (body < total) {
      fail_short({name_, offset}, "its header promises " + std::to_string(length) +
                                      " bytes of data and a 4-byte CRC, the file ends after " + std::to_string(body));
    }
    const std::span<const std::byte> data(buffer_.data(), static_cast<std::size_t>(length));
    if (masked_crc32c(data) != detail::load_le32_bytes(buffer_.data() + length)) {
      fail({name_, offset}, "bad data CRC (the " + std::to_string(length) +
                                " bytes of data do not match their checksum: corrupt)");
    }
    ++records_;
    return tfrecord_view{data, offset};
  }

  /// The file, as given.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// How the file is stored (automatic resolved).
  [[nodiscard]] tfrecord_compression compression() const noexcept { return compression_; }
  /// Records delivered so far.
  [[nodiscard]] std::uint64_t records_read() const noexcept { return records_; }
  /// The offset the next record starts at (the end of the last one delivered).
  [[nodiscard]] std::uint64_t position() const noexcept { return in_->position(); }

 private:
  [[noreturn]] void fail(const record_location& at, std::string_view what) {
    failure_ = record_error(at, what);
    throw *failure_;
  }

  // The stream ended early: on a defect of the compressed stream (which is what to report), or truncation.
  [[noreturn]] void fail_short(const record_location& at, const std::string& what) {
    if (in_->defect()) fail(at, *in_->defect());
    fail(at, "truncated record: " + what);
  }

  std::filesystem::path path_;
  std::string name_;
  tfrecord_options options_;
  tfrecord_compression compression_ = tfrecord_compression::none;
  std::unique_ptr<detail::inflating_reader> in_;
  std::vector<std::byte> buffer_;
  std::uint64_t records_ = 0;
  std::optional<data_error> failure_;
};

}  // namespace mwstrat::data
