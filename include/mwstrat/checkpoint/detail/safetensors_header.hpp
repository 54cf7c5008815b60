#pragma once
/// \file
/// The safetensors header: building it deterministically and validating one read from an untrusted file.

#include <mwstrat/checkpoint/crc32c.hpp>
#include <mwstrat/checkpoint/detail/fail.hpp>
#include <mwstrat/checkpoint/dtype.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace mwstrat {
/// String-to-string metadata stored under `__metadata__`, in sorted key order (which keeps files deterministic).
using metadata_map = std::map<std::string, std::string, std::less<>>;
}  // namespace mwstrat

namespace mwstrat::detail {

static_assert(std::endian::native == std::endian::little,
              "mwstrat checkpoints store raw little-endian data and are only implemented for little-endian hosts");

/// The same limit as the reference implementation: a larger header is refused before anything is allocated.
inline constexpr std::uint64_t safetensors_max_header = 100'000'000;
inline constexpr std::string_view safetensors_metadata_key = "__metadata__";

/// One tensor as the header describes it; offsets are relative to the start of the data section.
struct stored_tensor {
  std::string name;
  dtype type = dtype::u8;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

struct parsed_header {
  std::uint64_t header_length = 0;
  std::vector<stored_tensor> tensors;  // in data order
  metadata_map metadata;

  [[nodiscard]] std::uint64_t data_offset() const noexcept { return 8 + header_length; }
};

/// Bytes of a tensor with `shape` and elements of `element_size` bytes, if that is at most `limit`.
inline std::optional<std::uint64_t> tensor_bytes(const std::vector<std::int64_t>& shape, std::size_t element_size,
                                                 std::uint64_t limit) noexcept {
  std::uint64_t count = 1;
  bool zero = false;
  for (const std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) zero = true;
  }
  if (zero) return 0;
  for (const std::int64_t dim : shape) {
    const auto d = static_cast<std::uint64_t>(dim);
    if (count > limit / d) return std::nullopt;
    count *= d;
  }
  if (count > limit / element_size) return std::nullopt;
  return count * element_size;
}

/// The length of the well-formed UTF-8 sequence at `text[at]`, or 0 if an ill-formed one starts there (an overlong
/// form, a surrogate, a code point above U+10FFFF, a stray continuation byte, a truncated sequence).
inline std::size_t utf8_sequence_length(std::string_view text, std::size_t at) noexcept {
  // Unicode's table 3-7: by lead byte, the length and the second byte's range (which is what excludes overlongs
  // after E0 and F0, surrogates after ED, and > U+10FFFF after F4); later bytes are 80-BF.
  struct sequence_form {
    unsigned char lead_low, lead_high;
    std::size_t length;
    unsigned char second_low, second_high;
  };
  static constexpr sequence_form forms[] = {
      {0x00, 0x7F, 1, 0x00, 0x00}, {0xC2, 0xDF, 2, 0x80, 0xBF}, {0xE0, 0xE0, 3, 0xA0, 0xBF},
      {0xE1, 0xEC, 3, 0x80, 0xBF}, {0xED, 0xED, 3, 0x80, 0x9F}, {0xEE, 0xEF, 3, 0x80, 0xBF},
      {0xF0, 0xF0, 4, 0x90, 0xBF}, {0xF1, 0xF3, 4, 0x80, 0xBF}, {0xF4, 0xF4, 4, 0x80, 0x8F},
  };
  const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte_at(at);
  const auto form = std::find_if(std::begin(forms), std::end(forms), [&](const sequence_form& f) {
    return lead >= f.lead_low && lead <= f.lead_high;
  });
  if (form == std::end(forms) || text.size() - at < form->length) return 0;
  if (form->length == 1) return 1;
  if (byte_at(at + 1) < form->second_low || byte_at(at + 1) > form->second_high) return 0;
  for (std::size_t k = 2; k < form->length; ++k)
    if (byte_at(at + k) < 0x80 || byte_at(at + k) > 0xBF) return 0;
  return form->length;
}

/// The offset of the first byte of `text` that starts an ill-formed UTF-8 sequence, or nothing when all of `text`
/// is UTF-8. A header is JSON, which Boost.JSON and Python's safetensors refuse unless it is UTF-8.
inline std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

/// `value` as two lowercase hex digits.
inline std::string hex8(unsigned char value) {
  static constexpr char digits[] = "0123456789abcdef";
  return {digits[value >> 4], digits[value & 0xFu]};
}

/// `text` for an error message: well-formed UTF-8 as it is, every other byte, control character and backslash as
/// `\xNN`, so that a message about bad bytes shows them and is itself UTF-8.
inline std::string escaped(std::string_view text) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    const auto b = static_cast<unsigned char>(text[at]);
    if (length > 1 || (length == 1 && b >= 0x20 && b != 0x7F && b != '\\')) {
      out += text.substr(at, length);
      at += length;
    } else {
      out += "\\x" + hex8(b);
      ++at;
    }
  }
  return out;
}

/// The index of the first byte of BOOL data that is neither 0 nor 1, or nothing. Any other byte read as `bool` is
/// undefined behaviour.
inline std::optional<std::size_t> first_non_boolean(std::span<const std::byte> data) noexcept {
  for (std::size_t i = 0; i < data.size(); ++i)
    if (data[i] != std::byte{0} && data[i] != std::byte{1}) return i;
  return std::nullopt;
}

/// The error text for BOOL element `index` holding `value`.
inline std::string non_boolean_text(std::size_t index, std::byte value) {
  return "BOOL element " + std::to_string(index) + " is " + std::to_string(std::to_integer<unsigned>(value)) +
         ", not 0 or 1";
}

inline std::string hex32(std::uint32_t value) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, value >>= 4) out[static_cast<std::size_t>(i)] = digits[value & 0xFu];
  return out;
}

inline std::optional<std::uint32_t> parse_hex32(std::string_view text) noexcept {
  if (text.size() != 8) return std::nullopt;
  std::uint32_t value = 0;
  for (const char c : text) {
    std::uint32_t digit = 0;
    if (c >= '0' && c <= '9') digit = static_cast<std::uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') digit = static_cast<std::uint32_t>(c - 'a' + 10);
    else return std::nullopt;
    value = (value << 4) | digit;
  }
  return value;
}

inline constexpr std::string_view data_crc_key = "mwstrat.crc32c";
inline constexpr std::string_view header_crc_key = "mwstrat.header_crc32c";

/// CRC32C of everything the header says except `mwstrat.header_crc32c` itself, in a canonical form that does not
/// depend on JSON spelling: for each tensor in data order its name, dtype, dimensions, begin and end, then each
/// metadata key and value in key order, every field written as "<length>:<bytes>,".
inline std::uint32_t header_checksum(const std::vector<stored_tensor>& tensors, const metadata_map& metadata) {
  std::string canonical;
  const auto field = [&](std::string_view text) {
    canonical += std::to_string(text.size());
    canonical += ':';
    canonical += text;
    canonical += ',';
  };
  for (const auto& t : tensors) {
    field(t.name);
    field(to_string(t.type));
    field(std::to_string(t.shape.size()));
    for (const std::int64_t dim : t.shape) field(std::to_string(dim));
    field(std::to_string(t.begin));
    field(std::to_string(t.end));
  }
  for (const auto& [key, value] : metadata) {
    if (key == header_crc_key) continue;
    field(key);
    field(value);
  }
  return ~crc32c_update(~std::uint32_t{0}, reinterpret_cast<const std::byte*>(canonical.data()), canonical.size());
}

/// The header text, padded with spaces so that the data section starts on an 8-byte boundary. Keys appear as
/// `__metadata__` first, then the tensors in data order; inside a tensor: dtype, shape, data_offsets.
inline std::string build_header(const std::vector<stored_tensor>& tensors, const metadata_map& metadata) {
  boost::json::object root;
  if (!metadata.empty()) {
    boost::json::object meta;
    for (const auto& [key, value] : metadata) meta.emplace(key, value);
    root.emplace(safetensors_metadata_key, std::move(meta));
  }
  for (const auto& t : tensors) {
    boost::json::object entry;
    entry.emplace("dtype", to_string(t.type));
    boost::json::array shape;
    shape.reserve(t.shape.size());
    for (const std::int64_t dim : t.shape) shape.emplace_back(dim);
    entry.emplace("shape", std::move(shape));
    entry.emplace("data_offsets", boost::json::array{t.begin, t.end});
    root.emplace(t.name, std::move(entry));
  }
  std::string header = boost::json::serialize(root);
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

inline std::int64_t json_to_int64(const boost::json::value& v, bool& ok) noexcept {
  if (const auto* i = v.if_int64()) return *i;
  if (const auto* u = v.if_uint64(); u && *u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return static_cast<std::int64_t>(*u);
  ok = false;
  return 0;
}

/// Validates a header read from a file whose data section has `data_size` bytes: JSON syntax, every entry's
/// dtype, shape and offsets, dtype × shape = size, and that the tensors tile the data section exactly (no
/// overlap, no gap, nothing after the last one). `source` names the file in errors.
inline parsed_header parse_header(std::string_view text, std::uint64_t data_size, const std::filesystem::path& source,
                                  std::optional<int> rank) {
  const auto fail = [&](std::string_view what) { checkpoint_fail(rank, source, what); };
  parsed_header out;
  out.header_length = text.size();
  if (text.empty() || text.front() != '{') fail("header is not a JSON object");

  boost::system::error_code ec;
  boost::json::value root = boost::json::parse(text, ec);
  if (ec) fail("header is not valid JSON: " + ec.message());
  const boost::json::object* object = root.if_object();
  if (object == nullptr) fail("header is not a JSON object");

  for (const auto& [key, value] : *object) {
    const std::string name(key);
    if (name == safetensors_metadata_key) {
      if (value.is_null()) continue;
      const auto* meta = value.if_object();
      if (meta == nullptr) fail("__metadata__ is not an object");
      for (const auto& [meta_key, meta_value] : *meta) {
        const auto* s = meta_value.if_string();
        if (s == nullptr) fail("__metadata__ value of '" + std::string(meta_key) + "' is not a string");
        out.metadata.insert_or_assign(std::string(meta_key), std::string(*s));
      }
      continue;
    }
    const auto where = "tensor '" + name + "': ";
    const auto* entry = value.if_object();
    if (entry == nullptr) fail(where + "entry is not an object");
    if (entry->size() != 3) fail(where + "entry must have exactly dtype, shape and data_offsets");
    const auto* type_value = entry->if_contains("dtype");
    const auto* shape_value = entry->if_contains("shape");
    const auto* offsets_value = entry->if_contains("data_offsets");
    if (!type_value || !shape_value || !offsets_value) fail(where + "entry must have dtype, shape and data_offsets");

    stored_tensor t;
    t.name = name;
    const auto* type_name = type_value->if_string();
    if (type_name == nullptr) fail(where + "dtype is not a string");
    const auto type = parse_dtype(std::string_view(*type_name));
    if (!type) fail(where + "unknown dtype '" + std::string(*type_name) + "'");
    t.type = *type;

    const auto* shape = shape_value->if_array();
    if (shape == nullptr) fail(where + "shape is not an array");
    t.shape.reserve(shape->size());
    for (const auto& dim_value : *shape) {
      bool ok = true;
      const std::int64_t dim = json_to_int64(dim_value, ok);
      if (!ok || dim < 0) fail(where + "shape holds something other than a non-negative integer");
      t.shape.push_back(dim);
    }

    const auto* offsets = offsets_value->if_array();
    if (offsets == nullptr || offsets->size() != 2) fail(where + "data_offsets is not a pair");
    bool ok = true;
    const std::int64_t begin = json_to_int64((*offsets)[0], ok);
    const std::int64_t end = json_to_int64((*offsets)[1], ok);
    if (!ok || begin < 0 || end < begin) fail(where + "data_offsets is not an ordered pair of non-negative integers");
    t.begin = static_cast<std::uint64_t>(begin);
    t.end = static_cast<std::uint64_t>(end);
    if (t.end > data_size)
      fail(where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
           "] run past the end of the data (" + std::to_string(data_size) + " bytes; file truncated?)");
    const auto bytes = tensor_bytes(t.shape, size_of(t.type), data_size);
    if (!bytes || *bytes != t.end - t.begin)
      fail(where + "dtype " + std::string(to_string(t.type)) + " and shape need a different size than data_offsets [" +
           std::to_string(t.begin) + ", " + std::to_string(t.end) + "] give");
    out.tensors.push_back(std::move(t));
  }

  // Stable: empty tensors share an offset, and then the header's order (the writer's order) decides.
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const stored_tensor& a, const stored_tensor& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  std::uint64_t expected = 0;
  for (const auto& t : out.tensors) {
    if (t.begin < expected) fail("tensor '" + t.name + "' overlaps the tensor before it");
    if (t.begin > expected)
      fail("gap of " + std::to_string(t.begin - expected) + " bytes before tensor '" + t.name + "'");
    expected = t.end;
  }
  if (expected != data_size)
    fail(std::to_string(data_size - expected) + " bytes after the last tensor belong to no tensor");
  return out;
}

}  // namespace mwstrat::detail
