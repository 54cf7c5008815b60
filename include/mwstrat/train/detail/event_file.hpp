#pragma once
/// \file
/// A TensorBoard event file writer for scalars: TFRecord framing (uint64 length, masked CRC32C of the length, the
/// record, masked CRC32C of the record; all little-endian) around hand-encoded `tensorflow.Event` protobuf messages —
/// the few fields scalars need: `wall_time` (1, double), `step` (2, int64), `file_version` (3, string) and
/// `summary` (5) with `Summary.value` (1) {`tag` (1, string), `simple_value` (2, float)}. The first record is the
/// `file_version` event "brain.Event:2", as TensorFlow writes it.

#include <mwstrat/checkpoint/crc32c.hpp>
#include <mwstrat/error.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

namespace mwstrat::detail {

/// Protobuf wire encoding of the few field kinds an Event needs.
class proto_writer {
 public:
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      bytes_.push_back(static_cast<std::byte>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    bytes_.push_back(static_cast<std::byte>(v));
  }
  void key(int field, int wire_type) { varint(static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire_type)); }
  void fixed64_field(int field, double v) {
    key(field, 1);
    raw(&v, 8);
  }
  void fixed32_field(int field, float v) {
    key(field, 5);
    raw(&v, 4);
  }
  void varint_field(int field, std::int64_t v) {
    key(field, 0);
    varint(static_cast<std::uint64_t>(v));
  }
  void bytes_field(int field, std::span<const std::byte> b) {
    key(field, 2);
    varint(b.size());
    bytes_.insert(bytes_.end(), b.begin(), b.end());
  }
  void string_field(int field, std::string_view s) { bytes_field(field, std::as_bytes(std::span(s.data(), s.size()))); }
  [[nodiscard]] const std::vector<std::byte>& bytes() const noexcept { return bytes_; }

 private:
  void raw(const void* p, std::size_t n) {  // little-endian hosts only (detail/platform.hpp: Linux x86-64/ARM64)
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<std::byte> bytes_;
};

/// TFRecord's checksum: CRC32C rotated right by 15 bits plus a constant.
[[nodiscard]] inline std::uint32_t masked_crc32c(std::span<const std::byte> data) noexcept {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// One events file, appended record by record and flushed after each (TensorBoard reads it while training runs).
class event_file_writer {
 public:
  /// Creates `dir` and `dir/events.out.tfevents.<seconds>.<host>.<pid>.<n>.mwstrat` (a new file for every writer:
  /// a restarted job, or a second `fit` in the same second, never overwrites earlier events) and writes the
  /// file_version event.
  event_file_writer(const std::filesystem::path& dir, const std::string& host) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    static std::atomic<unsigned> writers{0};
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const std::string stem = "events.out.tfevents." +
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "." +
                             host + "." + std::to_string(::getpid()) + ".";
    for (unsigned n = writers++;; n = writers++) {
      path_ = dir / (stem + std::to_string(n) + ".mwstrat");
      if (!std::filesystem::exists(path_, ec)) break;
    }
    out_.open(path_, std::ios::binary | std::ios::trunc);
    if (!out_) throw io_error({"train"}, "tensorboard: cannot create " + path_.string());
    proto_writer e;
    e.fixed64_field(1, wall_time());
    e.string_field(3, "brain.Event:2");
    record(e.bytes());
  }

  /// Writes one event holding the scalars `values` (tag, value) at `step`.
  void scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values) {
    proto_writer summary;
    for (const auto& [tag, v] : values) {
      proto_writer value;
      value.string_field(1, tag);
      value.fixed32_field(2, static_cast<float>(v));
      summary.bytes_field(1, value.bytes());
    }
    proto_writer e;
    e.fixed64_field(1, wall_time());
    e.varint_field(2, step);
    e.bytes_field(5, summary.bytes());
    record(e.bytes());
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  static double wall_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  void record(const std::vector<std::byte>& data) {
    const std::uint64_t length = data.size();
    std::byte header[12];
    std::memcpy(header, &length, 8);
    const std::uint32_t length_crc = masked_crc32c({header, 8});
    std::memcpy(header + 8, &length_crc, 4);
    const std::uint32_t data_crc = masked_crc32c(data);
    out_.write(reinterpret_cast<const char*>(header), 12);
    out_.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    out_.write(reinterpret_cast<const char*>(&data_crc), 4);
    out_.flush();
    if (!out_) throw io_error({"train"}, "tensorboard: cannot write " + path_.string());
  }

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace mwstrat::detail
