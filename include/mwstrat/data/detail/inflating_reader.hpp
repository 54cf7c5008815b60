#pragma once
/// \file
/// A file read front to back through one buffer of fixed size (the FILE itself is unbuffered), raw or inflated on the fly (gzip, with concatenated
/// members as gzip(1) reads them, or one zlib stream): what the TFRecord reader reads records from. Memory is the
/// buffer alone, whatever the file's size. A defect of the compressed stream ends the stream and is kept as text
/// for the reader to name with the record it was reading; an operating-system failure is an `io_error`.

#include <mwstrat/error.hpp>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::detail {

/// How the bytes of a file are stored.
enum class stream_codec { raw, gzip, zlib };

class inflating_reader {
 public:
  /// Takes ownership of `file` (open for reading, positioned at 0, unbuffered: `in_` is the one buffer); `name` is
  /// used in messages.
  inflating_reader(std::FILE* file, std::string name, stream_codec codec, std::size_t buffer_bytes)
      : file_(file), name_(std::move(name)), codec_(codec), in_(std::max<std::size_t>(buffer_bytes, 64)) {
    if (codec_ == stream_codec::raw) return;
    if (inflateInit2(&zs_, codec_ == stream_codec::gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
      throw io_error({"tfrecord"}, name_ + ": zlib could not start inflating");
    }
  }
  inflating_reader(const inflating_reader&) = delete;
  inflating_reader& operator=(const inflating_reader&) = delete;
  ~inflating_reader() {
    if (codec_ != stream_codec::raw) inflateEnd(&zs_);
  }

  /// Reads up to `n` bytes into `out`; fewer only where the stream ends (then `defect()` says whether it ended
  /// cleanly). Throws io_error when the operating system refuses.
  std::size_t read(std::byte* out, std::size_t n) {
    if (ended_ || n == 0) return 0;
    std::size_t got = codec_ == stream_codec::raw ? read_raw(out, n) : inflate_into(out, n);
    position_ += got;
    return got;
  }

  /// Bytes delivered so far: the offset in the (uncompressed) stream.
  [[nodiscard]] std::uint64_t position() const noexcept { return position_; }
  /// Bytes of the file used so far (the same as position() for a raw file).
  [[nodiscard]] std::uint64_t file_position() const noexcept { return consumed_ - zs_.avail_in; }
  /// What was wrong with the compressed stream, if it ended on a defect.
  [[nodiscard]] const std::optional<std::string>& defect() const noexcept { return defect_; }
  /// True once the stream has ended (cleanly or on a defect).
  [[nodiscard]] bool ended() const noexcept { return ended_; }

 private:
  // From the buffer; a read at least as large as the buffer goes straight into `out`.
  std::size_t read_raw(std::byte* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      if (zs_.avail_in == 0) {
        if (file_ended_) {
          ended_ = true;
          break;
        }
        if (n - done >= in_.size()) {
          done += fread_some(out + done, n - done);
          continue;
        }
        refill();
        continue;
      }
      const std::size_t take = std::min<std::size_t>(zs_.avail_in, n - done);
      std::memcpy(out + done, zs_.next_in, take);
      zs_.next_in += take;
      zs_.avail_in -= static_cast<uInt>(take);
      done += take;
    }
    return done;
  }

  std::size_t fread_some(std::byte* out, std::size_t n) {
    const std::size_t got = std::fread(out, 1, n, file_.get());
    if (got < n) {
      check_io();
      file_ended_ = true;
    }
    consumed_ += got;
    return got;
  }

  void check_io() {
    if (std::ferror(file_.get())) {
      const int err = errno;
      throw io_error({"tfrecord"}, "cannot read " + name_ + ": " + std::strerror(err));
    }
  }

  // Refills the input buffer when zlib has used it up; false at the end of the file.
  bool refill() {
    if (zs_.avail_in > 0) return true;
    if (file_ended_) return false;
    const std::size_t got = fread_some(in_.data(), in_.size());
    zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
    zs_.avail_in = static_cast<uInt>(got);
    return got > 0;
  }

  void fail(std::string what) {
    ended_ = true;
    defect_ = std::move(what);
  }

  [[nodiscard]] const char* format() const noexcept { return codec_ == stream_codec::gzip ? "gzip" : "zlib"; }

  std::size_t inflate_into(std::byte* out, std::size_t n) {
    std::size_t produced = 0;
    while (produced < n && !ended_) {
      if (stream_done_) {  // between gzip members, or past the end of the zlib stream
        if (!refill()) {
          ended_ = true;
          break;
        }
        const auto* next = reinterpret_cast<const unsigned char*>(zs_.next_in);
        if (codec_ == stream_codec::zlib || next[0] != 0x1f || (zs_.avail_in > 1 && next[1] != 0x8b)) {
          fail(std::string("corrupt ") + format() + " file: bytes after the end of the compressed data at file byte " +
               std::to_string(file_position()) + " are not " +
               (codec_ == stream_codec::gzip ? "another gzip member" : "part of it"));
          break;
        }
        inflateReset(&zs_);
        stream_done_ = false;
      }
      if (!refill()) {
        fail(std::string("truncated ") + format() + " stream: the file ends inside compressed data (after " +
             std::to_string(file_position()) + " bytes of the file, " + std::to_string(position_ + produced) +
             " bytes of records)");
        break;
      }
      const std::size_t room = std::min<std::size_t>(n - produced, std::size_t{1} << 30);
      zs_.next_out = reinterpret_cast<Bytef*>(out + produced);
      zs_.avail_out = static_cast<uInt>(room);
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      produced += room - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        stream_done_ = true;
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) {
        fail(std::string("corrupt ") + format() + " stream (" + (zs_.msg != nullptr ? zs_.msg : "bad data") +
             ") at file byte " + std::to_string(file_position()));
      } else if (rc == Z_MEM_ERROR) {
        throw io_error({"tfrecord"}, name_ + ": zlib ran out of memory");
      }
      // Z_OK and Z_BUF_ERROR: go on (more input is read above; the end of the file inside a stream is truncation).
    }
    return produced;
  }

  // Owned from the first member on: closed however the constructor or the reader ends (a buffer that cannot be
  // allocated, zlib that cannot start).
  struct closes_file {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, closes_file> file_;
  std::string name_;
  stream_codec codec_;
  std::vector<std::byte> in_;
  z_stream zs_{};
  std::uint64_t position_ = 0;
  std::uint64_t consumed_ = 0;  // bytes read from the file (some may still wait in the buffer)
  bool file_ended_ = false;
  bool stream_done_ = false;
  bool ended_ = false;
  std::optional<std::string> defect_;
};

}  // namespace mwstrat::detail
