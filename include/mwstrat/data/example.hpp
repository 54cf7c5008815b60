#pragma once
/// \file
/// `tf.train.Example`, the message nearly every TFRecord data set holds (TFDS, Beam and Spark pipelines,
/// `tf.io.serialize_example`): a map from feature names to lists of bytes, floats or int64s.
///
///     message Example   { Features features = 1; }
///     message Features  { map<string, Feature> feature = 1; }
///     message Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
///     message BytesList { repeated bytes value = 1; }
///     message FloatList { repeated float value = 1 [packed = true]; }
///     message Int64List { repeated int64 value = 1 [packed = true]; }
///
/// Decoded by hand, not with libprotobuf: these six messages are all a reader needs, a hand-written decoder of
/// them is ~200 lines of wire format (detail/protobuf_wire.hpp), and it keeps this header-only library free of
/// protoc-generated code, of a link dependency on libprotobuf (whose ABI follows its exact version) and of a
/// generated-code/runtime version match that a user's own protobuf would have to satisfy. It follows protobuf's
/// parsing rules, so it reads what any protobuf writer writes: packed and unpacked repeated fields alike, fields in
/// any order, unknown fields skipped, a message field given twice merged, a map key given twice (the last entry
/// wins), a oneof set twice (the last case wins; the same case twice merges its lists). A malformed message (a
/// field running past its end, a varint of more than 10 bytes, a wrong wire type for a known field, a packed
/// float list whose length is not a multiple of 4, a group) is a `data_error` naming the file, the record's byte
/// offset and the byte within the record. `encode_example` writes what TensorFlow writes: keys in sorted order
/// (protobuf's deterministic serialization) and packed lists.
///
/// For reading many records against a fixed set of features, `example_parser` (feature_spec.hpp) decodes only
/// those, into reused memory; `decode_example` here decodes everything, for inspection and for tests.

#include <mwstrat/data/detail/protobuf_wire.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/error.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mwstrat::data {

/// The three kinds of feature list.
enum class feature_type { bytes, float32, int64 };

/// The list's name as in feature.proto: "bytes_list", "float_list", "int64_list".
[[nodiscard]] constexpr std::string_view to_string(feature_type type) noexcept {
  switch (type) {
    case feature_type::bytes: return "bytes_list";
    case feature_type::float32: return "float_list";
    case feature_type::int64: return "int64_list";
  }
  return "unknown";
}

/// `tf.train.BytesList`.
struct bytes_list {
  std::vector<std::string> value;  ///< each value's bytes
  friend bool operator==(const bytes_list&, const bytes_list&) = default;
};
/// `tf.train.FloatList`.
struct float_list {
  std::vector<float> value;  ///< the values
  friend bool operator==(const float_list&, const float_list&) = default;
};
/// `tf.train.Int64List`.
struct int64_list {
  std::vector<std::int64_t> value;  ///< the values
  friend bool operator==(const int64_list&, const int64_list&) = default;
};

/// `tf.train.Feature`: one of the three lists, or none (`kind` not set: a Feature message with no list).
using feature = std::variant<std::monostate, bytes_list, float_list, int64_list>;

/// The type of the list `f` holds; nothing when it holds none.
[[nodiscard]] inline std::optional<feature_type> type_of(const feature& f) noexcept {
  switch (f.index()) {
    case 1: return feature_type::bytes;
    case 2: return feature_type::float32;
    case 3: return feature_type::int64;
    default: return std::nullopt;
  }
}

/// `tf.train.Example`: features by name.
struct example {
  std::map<std::string, feature, std::less<>> features;  ///< sorted by name
  friend bool operator==(const example&, const example&) = default;
};

/// How `encode_example` writes repeated numbers.
struct example_encoding {
  bool packed = true;  ///< packed (what TensorFlow writes) or one field per value (what proto2 writers once wrote)
};

}  // namespace mwstrat::data

namespace mwstrat::detail {

[[noreturn]] inline void malformed_example(const data::record_location& at, const wire_reader& r,
                                           std::size_t record_size, std::string_view context) {
  throw data::record_error(at, "not a tf.train.Example: " + std::string(r.error() ? r.error() : "malformed") +
                                   " in " + std::string(context) + " at byte " + std::to_string(r.at()) + " of the " +
                                   std::to_string(record_size) + "-byte record");
}

/// What decoding a Feature reports to: `begin(type)` when the oneof's case becomes `type` (drop what an earlier
/// case delivered), then the values of that case in order.
template <class Sink>
concept feature_sink = requires(Sink& s, data::feature_type t, std::span<const std::byte> b, float f, std::int64_t i) {
  s.begin(t);
  s.add_bytes(b);
  s.add_float(f);
  s.add_int64(i);
};

/// Decodes one `tf.train.Feature` message (the bytes of `r`) into `sink`; `kind` is the oneof's case so far (a
/// Feature given in parts is decoded part by part with one `kind`). `size` is the record's, for messages.
template <feature_sink Sink>
void decode_feature(wire_reader r, Sink& sink, std::optional<data::feature_type>& kind,
                    const data::record_location& at, std::size_t size) {
  while (!r.done()) {
    std::uint32_t field = 0;
    wire_type type{};
    if (!r.tag(field, type)) malformed_example(at, r, size, "a Feature");
    if (field < 1 || field > 3) {
      if (!r.skip(type)) malformed_example(at, r, size, "a Feature");
      continue;
    }
    if (type != wire_type::len) {
      r.fail("a list field that is not length-delimited");
      malformed_example(at, r, size, "a Feature");
    }
    wire_reader list({}, 0);
    if (!r.len(list)) malformed_example(at, r, size, "a Feature");
    const auto t = static_cast<data::feature_type>(field - 1);
    if (kind != t) {
      sink.begin(t);
      kind = t;
    }
    const char* where = t == data::feature_type::bytes ? "a BytesList" : t == data::feature_type::float32 ? "a FloatList" : "an Int64List";
    while (!list.done()) {
      std::uint32_t f = 0;
      wire_type wt{};
      if (!list.tag(f, wt)) malformed_example(at, list, size, where);
      if (f != 1) {
        if (!list.skip(wt)) malformed_example(at, list, size, where);
        continue;
      }
      if (t == data::feature_type::bytes) {
        wire_reader value({}, 0);
        if (wt != wire_type::len) list.fail("a bytes value that is not length-delimited");
        if (wt != wire_type::len || !list.len(value)) malformed_example(at, list, size, where);
        sink.add_bytes(value.rest());
      } else if (t == data::feature_type::float32) {
        if (wt == wire_type::fixed32) {  // unpacked
          std::uint32_t bits = 0;
          if (!list.fixed32(bits)) malformed_example(at, list, size, where);
          sink.add_float(std::bit_cast<float>(bits));
        } else if (wt == wire_type::len) {  // packed
          wire_reader packed({}, 0);
          if (!list.len(packed)) malformed_example(at, list, size, where);
          const std::span<const std::byte> bytes = packed.rest();
          if (bytes.size() % 4 != 0) {
            list.fail("a packed float list whose length is not a multiple of 4");
            malformed_example(at, list, size, where);
          }
          for (std::size_t i = 0; i < bytes.size(); i += 4)
            sink.add_float(std::bit_cast<float>(wire_reader::load32(bytes.data() + i)));
        } else {
          list.fail("a float value that is neither fixed32 nor packed");
          malformed_example(at, list, size, where);
        }
      } else {
        if (wt == wire_type::varint) {  // unpacked
          std::uint64_t v = 0;
          if (!list.varint(v)) malformed_example(at, list, size, where);
          sink.add_int64(static_cast<std::int64_t>(v));
        } else if (wt == wire_type::len) {  // packed
          wire_reader packed({}, 0);
          if (!list.len(packed)) malformed_example(at, list, size, where);
          while (!packed.done()) {
            std::uint64_t v = 0;
            if (!packed.varint(v)) malformed_example(at, packed, size, "a packed Int64List");
            sink.add_int64(static_cast<std::int64_t>(v));
          }
        } else {
          list.fail("an int64 value that is neither a varint nor packed");
          malformed_example(at, list, size, where);
        }
      }
    }
  }
}

/// Decodes the value of a feature map entry (the bytes of `entry`) into `sink`: every value field of the entry, in
/// order, as one Feature (a message field given twice is merged). An entry with no value is an empty Feature.
template <feature_sink Sink>
void decode_feature_entry(wire_reader entry, Sink& sink, const data::record_location& at, std::size_t size) {
  std::optional<data::feature_type> kind;
  while (!entry.done()) {
    std::uint32_t ef = 0;
    wire_type et{};
    if (!entry.tag(ef, et)) malformed_example(at, entry, size, "a feature map entry");
    if (ef == 2 && et == wire_type::len) {
      wire_reader part({}, 0);
      if (!entry.len(part)) malformed_example(at, entry, size, "a feature map entry");
      decode_feature(part, sink, kind, at, size);
    } else if (!entry.skip(et)) {
      malformed_example(at, entry, size, "a feature map entry");
    }
  }
}

/// Calls `on_feature(name, entry)` for each entry of the Example's feature map, in the record's order, `entry`
/// being the entry's bytes for `decode_feature_entry` (a name may come more than once: the last entry wins, so a
/// caller replaces what an earlier one gave). Checks the entry's framing before the call.
template <class OnFeature>
void for_each_feature(std::span<const std::byte> record, const data::record_location& at, OnFeature&& on_feature) {
  const std::size_t size = record.size();
  wire_reader ex(record);
  while (!ex.done()) {
    std::uint32_t field = 0;
    wire_type type{};
    if (!ex.tag(field, type)) malformed_example(at, ex, size, "the Example");
    if (field != 1) {
      if (!ex.skip(type)) malformed_example(at, ex, size, "the Example");
      continue;
    }
    wire_reader features({}, 0);
    if (type != wire_type::len) ex.fail("its features field is not length-delimited");
    if (type != wire_type::len || !ex.len(features)) malformed_example(at, ex, size, "the Example");
    while (!features.done()) {
      std::uint32_t f = 0;
      wire_type wt{};
      if (!features.tag(f, wt)) malformed_example(at, features, size, "its Features");
      if (f != 1) {
        if (!features.skip(wt)) malformed_example(at, features, size, "its Features");
        continue;
      }
      wire_reader entry({}, 0);
      if (wt != wire_type::len) features.fail("a map entry that is not length-delimited");
      if (wt != wire_type::len || !features.len(entry)) malformed_example(at, features, size, "its Features");
      std::span<const std::byte> key;  // absent: the empty name
      wire_reader scan = entry;
      while (!scan.done()) {
        std::uint32_t ef = 0;
        wire_type et{};
        if (!scan.tag(ef, et)) malformed_example(at, scan, size, "a feature map entry");
        if (ef == 1 || ef == 2) {
          wire_reader part({}, 0);
          if (et != wire_type::len) scan.fail("a key or value that is not length-delimited");
          if (et != wire_type::len || !scan.len(part)) malformed_example(at, scan, size, "a feature map entry");
          if (ef == 1) key = part.rest();
        } else if (!scan.skip(et)) {
          malformed_example(at, scan, size, "a feature map entry");
        }
      }
      on_feature(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()), entry);
    }
  }
}

}  // namespace mwstrat::detail

namespace mwstrat::detail {

// Fills a `data::feature` (replacing it at each change of case).
struct variant_feature_sink {
  data::feature& f;
  void begin(data::feature_type t) {
    switch (t) {
      case data::feature_type::bytes: f = data::bytes_list{}; break;
      case data::feature_type::float32: f = data::float_list{}; break;
      case data::feature_type::int64: f = data::int64_list{}; break;
    }
  }
  void add_bytes(std::span<const std::byte> b) {
    std::get<data::bytes_list>(f).value.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void add_float(float v) { std::get<data::float_list>(f).value.push_back(v); }
  void add_int64(std::int64_t v) { std::get<data::int64_list>(f).value.push_back(v); }
};

inline void encode_feature(const data::feature& f, const data::example_encoding& how, std::vector<std::byte>& out) {
  std::vector<std::byte> list;
  wire_writer w{list};
  std::uint32_t field = 0;
  if (const auto* b = std::get_if<data::bytes_list>(&f)) {
    field = 1;
    for (const std::string& v : b->value) w.len(1, std::as_bytes(std::span(v.data(), v.size())));
  } else if (const auto* fl = std::get_if<data::float_list>(&f)) {
    field = 2;
    if (how.packed && !fl->value.empty()) {
      w.tag(1, wire_type::len);
      w.varint(4 * fl->value.size());
      for (const float v : fl->value) w.fixed32(std::bit_cast<std::uint32_t>(v));
    } else {
      for (const float v : fl->value) {
        w.tag(1, wire_type::fixed32);
        w.fixed32(std::bit_cast<std::uint32_t>(v));
      }
    }
  } else if (const auto* il = std::get_if<data::int64_list>(&f)) {
    field = 3;
    if (how.packed && !il->value.empty()) {
      std::size_t n = 0;
      for (const std::int64_t v : il->value) n += varint_size(static_cast<std::uint64_t>(v));
      w.tag(1, wire_type::len);
      w.varint(n);
      for (const std::int64_t v : il->value) w.varint(static_cast<std::uint64_t>(v));
    } else {
      for (const std::int64_t v : il->value) {
        w.tag(1, wire_type::varint);
        w.varint(static_cast<std::uint64_t>(v));
      }
    }
  } else {
    return;  // kind not set: an empty Feature
  }
  wire_writer{out}.len(field, list);
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// Decodes a whole `tf.train.Example` (every feature); throws data_error naming `at` when it is malformed.
[[nodiscard]] inline example decode_example(std::span<const std::byte> record, const record_location& at = {}) {
  example ex;
  detail::for_each_feature(record, at, [&](std::string_view name, detail::wire_reader entry) {
    feature& f = ex.features[std::string(name)];
    f = std::monostate{};  // the last entry of a name wins
    detail::variant_feature_sink sink{f};
    detail::decode_feature_entry(entry, sink, at, record.size());
  });
  return ex;
}

/// Serializes `ex` as a `tf.train.Example` (deterministically: keys sorted, as TensorFlow writes them).
[[nodiscard]] inline std::vector<std::byte> encode_example(const example& ex, const example_encoding& how = {}) {
  std::vector<std::byte> features;
  std::vector<std::byte> entry;
  std::vector<std::byte> value;
  for (const auto& [name, f] : ex.features) {
    entry.clear();
    value.clear();
    detail::wire_writer e{entry};
    e.len(1, std::as_bytes(std::span(name.data(), name.size())));
    detail::encode_feature(f, how, value);
    e.len(2, value);
    detail::wire_writer{features}.len(1, entry);
  }
  std::vector<std::byte> out;
  detail::wire_writer{out}.len(1, features);
  return out;
}

}  // namespace mwstrat::data
