#pragma once
/// \file
/// Reading IDX files (the format of MNIST and Fashion-MNIST), raw or gzip-compressed.
///
/// An IDX file is a 4-byte magic `00 00 <type> <ndims>`, then `ndims` big-endian 32-bit dimension sizes, then
/// the elements, big-endian, row-major. `read_idx` checks every part of that against the file: the magic, the
/// element type, the number of dimensions, that the header is complete, and that the data is exactly as long as
/// the dimensions say (no byte missing, none left over). gzip input (RFC 1952, detected by its own magic, not by
/// the file name) is inflated with zlib first and its CRC checked. Every defect is a `mwstrat::data_error`
/// (component "idx") whose message names the file and the defect; a file that cannot be opened is an `io_error`.

#include <mwstrat/data/detail/gzip.hpp>
#include <mwstrat/error.hpp>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// The element types an IDX file can hold (the third byte of its magic).
enum class idx_type : std::uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

/// The size in bytes of one element of `type`.
[[nodiscard]] constexpr std::size_t element_size(idx_type type) noexcept {
  switch (type) {
    case idx_type::u8:
    case idx_type::i8: return 1;
    case idx_type::i16: return 2;
    case idx_type::i32:
    case idx_type::f32: return 4;
    case idx_type::f64: return 8;
  }
  return 0;
}

/// The name of an IDX element type as used in messages ("u8", "f32", ...).
[[nodiscard]] constexpr std::string_view to_string(idx_type type) noexcept {
  switch (type) {
    case idx_type::u8: return "u8";
    case idx_type::i8: return "i8";
    case idx_type::i16: return "i16";
    case idx_type::i32: return "i32";
    case idx_type::f32: return "f32";
    case idx_type::f64: return "f64";
  }
  return "unknown";
}

/// Limits applied while reading, so a hostile or broken file cannot make the reader allocate without bound.
struct idx_read_options {
  std::size_t max_bytes = std::size_t{8} << 30U;  ///< largest decompressed file accepted
  std::size_t max_dims = 16;                       ///< most dimensions accepted
};

/// One IDX file in memory: element type, dimensions and the elements in host byte order.
struct idx_array {
  idx_type type = idx_type::u8;       ///< element type
  std::vector<std::size_t> dims;      ///< dimension sizes, outermost first
  std::vector<std::uint8_t> data;     ///< elements, row-major, host byte order
  std::string source;                 ///< the file it came from (or the name given to parse_idx)

  /// Number of elements (product of the dimensions).
  [[nodiscard]] std::size_t size() const noexcept { return data.size() / element_size(type); }

  /// The elements converted to `T` (a copy; use `data` directly for u8).
  template <class T>
  [[nodiscard]] std::vector<T> to_vector() const {
    std::vector<T> out(size());
    auto convert = [&]<class E>(E /*tag*/) {
      for (std::size_t i = 0; i < out.size(); ++i) {
        E value;
        std::memcpy(&value, data.data() + i * sizeof(E), sizeof(E));
        out[i] = static_cast<T>(value);
      }
    };
    switch (type) {
      case idx_type::u8: convert(std::uint8_t{}); break;
      case idx_type::i8: convert(std::int8_t{}); break;
      case idx_type::i16: convert(std::int16_t{}); break;
      case idx_type::i32: convert(std::int32_t{}); break;
      case idx_type::f32: convert(float{}); break;
      case idx_type::f64: convert(double{}); break;
    }
    return out;
  }
};

}  // namespace mwstrat::data

namespace mwstrat::detail {

[[nodiscard]] inline data_error idx_defect(const std::string& name, std::string_view what) {
  std::string message = name;
  message += ": ";
  message += what;
  return data_error({"idx"}, name, message);
}

[[nodiscard]] inline std::uint32_t load_be32(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24U) | (std::uint32_t{p[1]} << 16U) | (std::uint32_t{p[2]} << 8U) | std::uint32_t{p[3]};
}

inline void big_endian_to_host(std::span<std::uint8_t> bytes, std::size_t width) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    if (width > 1) {
      for (std::size_t i = 0; i + width <= bytes.size(); i += width) {
        for (std::size_t a = i, b = i + width - 1; a < b; ++a, --b) {
          std::swap(bytes[a], bytes[b]);
        }
      }
    }
  }
}

// The bytes of the file at `path`, refused before anything is allocated when it is not a regular file or is larger
// than `max_bytes` allows: the raw size for a plain file, or for a gzip file (inflated and checked against
// max_bytes later) a generous bound on a gzip of max_bytes: zlib stores incompressible data in blocks of about
// 16 KiB with 5 bytes each (measured: 1 in 3 277), bounded here at 1 in 1 024, and a MiB for headers and trailers.
[[nodiscard]] inline std::vector<std::uint8_t> read_whole_file(const std::filesystem::path& path,
                                                               std::size_t max_bytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) {
    throw io_error({"idx"}, "cannot open " + path.string() + ": " + ec.message());
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw idx_defect(path.string(), "not a regular file (a directory, device or socket): an IDX file is expected");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw io_error({"idx"}, "cannot open " + path.string() + ": " + std::strerror(err));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff length = in.tellg();
  if (length < 0) {
    throw io_error({"idx"}, "cannot determine the size of " + path.string());
  }
  in.seekg(0, std::ios::beg);
  const auto size = static_cast<std::uintmax_t>(length);
  char magic[2] = {0, 0};
  const bool gzipped = size >= 2 && in.read(magic, 2) && magic[0] == '\x1f' && magic[1] == '\x8b';
  in.seekg(0, std::ios::beg);
  const std::uintmax_t slack = max_bytes / 1024 + (std::uintmax_t{1} << 20U);  // stored blocks, headers, trailers
  const std::uintmax_t most = std::numeric_limits<std::uintmax_t>::max();
  const std::uintmax_t limit = !gzipped ? max_bytes : max_bytes > most - slack ? most : max_bytes + slack;
  if (size > limit) {
    throw idx_defect(path.string(), std::string(gzipped ? "gzip file" : "file") + " of " + std::to_string(size) +
                                        " bytes exceeds the limit of " + std::to_string(max_bytes) +
                                        (gzipped ? " bytes inflated" : " bytes") + " (idx_read_options::max_bytes)");
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(length));
  if (!bytes.empty() && !in.read(reinterpret_cast<char*>(bytes.data()), length)) {
    throw io_error({"idx"}, "cannot read " + path.string() + " (" + std::to_string(length) + " bytes)");
  }
  return bytes;
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// Parses a whole IDX file held in memory (gzip-compressed or not); `name` is used in error messages.
/// Takes the bytes by value so the element data can stay where it is: the header is cut off in place.
[[nodiscard]] inline idx_array parse_idx(std::vector<std::uint8_t> bytes, std::string name,
                                         const idx_read_options& options = {}) {
  if (detail::looks_gzipped(bytes)) {
    bytes = detail::gunzip(bytes, name, options.max_bytes);
  }
  if (bytes.size() > options.max_bytes) {
    throw detail::idx_defect(name, "file of " + std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                                       std::to_string(options.max_bytes));
  }
  if (bytes.size() < 4) {
    throw detail::idx_defect(name, "truncated: " + std::to_string(bytes.size()) +
                                       " bytes, shorter than the 4-byte IDX magic");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", bytes[0], bytes[1], bytes[2], bytes[3]);
    throw detail::idx_defect(name, std::string("wrong magic: starts with ") + hex +
                                       ", an IDX file starts with 00 00 <type> <ndims>");
  }
  idx_array result;
  switch (bytes[2]) {
    case 0x08: case 0x09: case 0x0B: case 0x0C: case 0x0D: case 0x0E:
      result.type = static_cast<idx_type>(bytes[2]);
      break;
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", bytes[2]);
      throw detail::idx_defect(name, std::string("unknown element type ") + hex +
                                         " in the magic (expected 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)");
    }
  }
  const std::size_t ndims = bytes[3];
  if (ndims == 0 || ndims > options.max_dims) {
    throw detail::idx_defect(name, "unsupported number of dimensions " + std::to_string(ndims) + " (1 to " +
                                       std::to_string(options.max_dims) + " accepted)");
  }
  const std::size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    throw detail::idx_defect(name, "truncated header: " + std::to_string(ndims) + " dimensions need " +
                                       std::to_string(header) + " bytes, the file has " + std::to_string(bytes.size()));
  }
  const std::size_t width = element_size(result.type);
  std::size_t expected = width;
  result.dims.reserve(ndims);
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::size_t dim = detail::load_be32(bytes.data() + 4 + 4 * d);
    result.dims.push_back(dim);
    if (dim != 0 && expected > options.max_bytes / dim) {
      throw detail::idx_defect(name, "dimensions describe more than " + std::to_string(options.max_bytes) +
                                         " bytes of data (dimension " + std::to_string(d) + " is " +
                                         std::to_string(dim) + ")");
    }
    expected *= dim;
  }
  const std::size_t have = bytes.size() - header;
  if (have < expected) {
    throw detail::idx_defect(name, "truncated: the dimensions promise " + std::to_string(expected) +
                                       " bytes of data, the file has " + std::to_string(have));
  }
  if (have > expected) {
    throw detail::idx_defect(name, "corrupt: " + std::to_string(have - expected) +
                                       " bytes after the data the dimensions describe (" + std::to_string(expected) +
                                       " bytes)");
  }
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  detail::big_endian_to_host(bytes, width);
  result.data = std::move(bytes);
  result.source = std::move(name);
  return result;
}

/// Reads and validates an IDX file, raw or gzip-compressed.
[[nodiscard]] inline idx_array read_idx(const std::filesystem::path& path, const idx_read_options& options = {}) {
  return parse_idx(detail::read_whole_file(path, options.max_bytes), path.string(), options);
}

}  // namespace mwstrat::data
