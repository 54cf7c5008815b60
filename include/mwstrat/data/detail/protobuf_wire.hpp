#pragma once
/// \file
/// The few pieces of protobuf's wire format (https://protobuf.dev/programming-guides/encoding/) that
/// `tf.train.Example` uses: varints, tags, length-delimited fields, fixed32 floats; and skipping any other field,
/// as a protobuf parser must. A reader never reads past its end: each step says whether it could, and why not.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

enum class wire_type : std::uint8_t { varint = 0, fixed64 = 1, len = 2, start_group = 3, end_group = 4, fixed32 = 5 };

/// Reads one message's bytes. On a malformed input a step returns false and leaves `error` saying what was wrong
/// and `at()` where (bytes from the start of the outermost buffer, given as `base`).
class wire_reader {
 public:
  wire_reader(std::span<const std::byte> bytes, std::size_t base = 0) noexcept
      : p_(bytes.data()), end_(bytes.data() + bytes.size()), start_(bytes.data()), base_(base) {}

  [[nodiscard]] bool done() const noexcept { return p_ == end_; }
  [[nodiscard]] std::size_t at() const noexcept { return base_ + static_cast<std::size_t>(p_ - start_); }
  [[nodiscard]] const char* error() const noexcept { return error_; }

  bool varint(std::uint64_t& v) noexcept {
    v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return fail("a varint runs past the end");
      const auto b = std::to_integer<std::uint64_t>(*p_++);
      v |= (b & 0x7fu) << shift;
      if ((b & 0x80u) == 0) return true;
    }
    return fail("a varint is longer than 10 bytes");
  }

  bool tag(std::uint32_t& field, wire_type& type) noexcept {
    std::uint64_t v = 0;
    if (!varint(v)) return false;
    const std::uint64_t number = v >> 3;
    if (number == 0 || number > 0x1fffffffu) return fail("a field number is 0 or above 2^29 - 1");
    field = static_cast<std::uint32_t>(number);
    type = static_cast<wire_type>(v & 7u);
    return true;
  }

  /// A length-delimited field's bytes, and a reader over them that counts positions in the same buffer.
  bool len(wire_reader& inner) noexcept {
    std::uint64_t n = 0;
    if (!varint(n)) return false;
    if (n > static_cast<std::uint64_t>(end_ - p_)) return fail("a length-delimited field runs past the end");
    inner = wire_reader({p_, static_cast<std::size_t>(n)}, at());
    p_ += n;
    return true;
  }

  bool fixed32(std::uint32_t& v) noexcept {
    if (end_ - p_ < 4) return fail("a fixed32 runs past the end");
    v = load32(p_);
    p_ += 4;
    return true;
  }

  /// Skips a field of `type` whose tag was just read (an unknown field: kept by no one, refused by no one).
  bool skip(wire_type type) noexcept {
    std::uint64_t v = 0;
    wire_reader ignored({}, 0);
    switch (type) {
      case wire_type::varint: return varint(v);
      case wire_type::fixed64:
        if (end_ - p_ < 8) return fail("a fixed64 runs past the end");
        p_ += 8;
        return true;
      case wire_type::len: return len(ignored);
      case wire_type::fixed32:
        if (end_ - p_ < 4) return fail("a fixed32 runs past the end");
        p_ += 4;
        return true;
      case wire_type::start_group:
      case wire_type::end_group: return fail("a group (wire types 3 and 4, deprecated: no tf.train message has one)");
    }
    return fail("an invalid wire type (6 or 7)");
  }

  [[nodiscard]] std::span<const std::byte> rest() const noexcept {
    return {p_, static_cast<std::size_t>(end_ - p_)};
  }

  static std::uint32_t load32(const std::byte* p) noexcept {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
    return v;
  }

  bool fail(const char* what) noexcept {
    error_ = what;
    return false;
  }

 private:
  const std::byte* p_;
  const std::byte* end_;
  const std::byte* start_;
  std::size_t base_;
  const char* error_ = nullptr;
};

/// Appends protobuf's encodings to a byte buffer.
struct wire_writer {
  std::vector<std::byte>& out;

  void varint(std::uint64_t v) {
    while (v >= 0x80u) {
      out.push_back(static_cast<std::byte>(v | 0x80u));
      v >>= 7;
    }
    out.push_back(static_cast<std::byte>(v));
  }
  void tag(std::uint32_t field, wire_type type) { varint((std::uint64_t{field} << 3) | static_cast<std::uint8_t>(type)); }
  void len(std::uint32_t field, std::span<const std::byte> bytes) {
    tag(field, wire_type::len);
    varint(bytes.size());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  void fixed32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
};

/// The bytes a varint of `v` takes.
[[nodiscard]] constexpr std::size_t varint_size(std::uint64_t v) noexcept {
  std::size_t n = 1;
  while (v >= 0x80u) {
    v >>= 7;
    ++n;
  }
  return n;
}

}  // namespace mwstrat::detail
