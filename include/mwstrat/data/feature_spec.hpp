#pragma once
/// \file
/// Feature specs and the parser that checks records against them: what `tf.io.parse_single_example` does with
/// `FixedLenFeature` / `VarLenFeature`.
///
/// A spec names a feature, its list type and its shape (a fixed length: the product of the dimensions, 1 for a
/// scalar `{}`), or says it may hold any number of values. `example_parser::parse` decodes only the features the
/// specs name (others are skipped, unread) into a `parsed_example` whose memory is reused from record to record,
/// and refuses a record that
///   - lacks a named feature:                `... record at byte N: lacks feature 'label' (the spec asks for an int64_list of 1 value)`
///   - holds another list type, or none:     `... feature 'label': is a float_list, the spec asks for an int64_list`
///   - holds another number of values:       `... feature 'image': holds 783 float_list values, the spec's shape [28, 28] asks for 784`
///   - is not a well-formed Example (example.hpp),
/// each a `data_error` (component `tfrecord`) naming the file and the record's byte offset. A refused record
/// leaves the `parsed_example` empty: nothing of it is delivered. For a bytes feature the shape counts values
/// (strings), not bytes, as in TensorFlow. There are no default values: a feature that may be absent is not part
/// of a spec (TensorFlow's `default_value` is for data sets that are ragged by design, which shards written by a
/// converter are not).

#include <mwstrat/data/example.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// One feature a record must hold.
struct feature_spec {
  std::string name;                        ///< the key in the Example's feature map
  feature_type type = feature_type::float32;  ///< which list it must be
  std::vector<std::size_t> shape = {};     ///< its fixed shape: product of the dimensions values ({}: one value)
  bool variable_length = false;            ///< true: any number of values (VarLenFeature), shape ignored

  /// Values a record must hold (the product of `shape`); meaningless when `variable_length`.
  [[nodiscard]] std::size_t length() const noexcept {
    std::size_t n = 1;
    for (const std::size_t d : shape) n *= d;
    return n;
  }
};

/// The values of a record's specified features, in spec order. Spans stay valid until the next parse into it.
class parsed_example {
 public:
  /// How many features (the parser's specs).
  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }
  /// Where the record came from.
  [[nodiscard]] const record_location& location() const noexcept { return at_; }

  /// Feature `i`'s floats; throws config_error when the spec is not a float_list.
  [[nodiscard]] std::span<const float> floats(std::size_t i) const { return checked(i, feature_type::float32).floats; }
  /// Feature `i`'s int64s; throws config_error when the spec is not an int64_list.
  [[nodiscard]] std::span<const std::int64_t> int64s(std::size_t i) const {
    return checked(i, feature_type::int64).int64s;
  }
  /// How many strings feature `i` holds; throws config_error when the spec is not a bytes_list.
  [[nodiscard]] std::size_t bytes_count(std::size_t i) const { return checked(i, feature_type::bytes).ends.size(); }
  /// String `k` of feature `i` (a bytes_list), as bytes.
  [[nodiscard]] std::span<const std::byte> bytes(std::size_t i, std::size_t k = 0) const {
    const slot& s = checked(i, feature_type::bytes);
    if (k >= s.ends.size()) {
      throw config_error({"tfrecord"}, "parsed_example: feature " + std::to_string(i) + " holds " +
                                           std::to_string(s.ends.size()) + " strings, asked for string " +
                                           std::to_string(k));
    }
    const std::size_t begin = k == 0 ? 0 : s.ends[k - 1];
    return std::span<const std::byte>(s.bytes).subspan(begin, s.ends[k] - begin);
  }
  /// String `k` of feature `i` as characters.
  [[nodiscard]] std::string_view text(std::size_t i, std::size_t k = 0) const {
    const auto b = bytes(i, k);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }

 private:
  friend class example_parser;
  struct slot {
    feature_type type = feature_type::float32;  // the spec's
    std::optional<feature_type> held;           // what the record held, if the feature was present
    bool present = false;
    std::vector<float> floats;
    std::vector<std::int64_t> int64s;
    std::vector<std::byte> bytes;  // all strings, end to end
    std::vector<std::size_t> ends;  // where each string ends in `bytes`
    std::size_t count = 0;          // values of the case held (for the length check, whatever its type)

    void clear() noexcept {
      held.reset();
      present = false;
      floats.clear();
      int64s.clear();
      bytes.clear();
      ends.clear();
      count = 0;
    }
    // detail::feature_sink: values of another type than the spec's are counted, not kept.
    void begin(feature_type t) {
      floats.clear();
      int64s.clear();
      bytes.clear();
      ends.clear();
      count = 0;
      held = t;
    }
    void add_bytes(std::span<const std::byte> b) {
      ++count;
      if (type != feature_type::bytes) return;
      bytes.insert(bytes.end(), b.begin(), b.end());
      ends.push_back(bytes.size());
    }
    void add_float(float v) {
      ++count;
      if (type == feature_type::float32) floats.push_back(v);
    }
    void add_int64(std::int64_t v) {
      ++count;
      if (type == feature_type::int64) int64s.push_back(v);
    }
  };

  [[nodiscard]] const slot& checked(std::size_t i, feature_type want) const {
    if (i >= slots_.size() || slots_[i].type != want) {
      throw config_error({"tfrecord"}, "parsed_example: feature " + std::to_string(i) + " is not a " +
                                           std::string(to_string(want)) +
                                           (i >= slots_.size() ? " (no such feature)" : " in the spec"));
    }
    return slots_[i];
  }

  std::vector<slot> slots_;
  record_location at_;
};

/// Checks and decodes records against a list of feature specs (see the file comment).
class example_parser {
 public:
  /// Throws config_error for an empty or repeated name.
  explicit example_parser(std::vector<feature_spec> specs) : specs_(std::move(specs)) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (!index_.emplace(specs_[i].name, i).second) {
        throw config_error({"tfrecord"}, "example_parser: feature '" + specs_[i].name + "' is specified twice");
      }
    }
  }

  /// The specs, in order.
  [[nodiscard]] std::span<const feature_spec> specs() const noexcept { return specs_; }
  /// The position of the feature named `name` in the specs; throws config_error when there is none.
  [[nodiscard]] std::size_t index_of(std::string_view name) const {
    const auto it = index_.find(name);
    if (it == index_.end()) throw config_error({"tfrecord"}, "example_parser: no feature '" + std::string(name) + "'");
    return it->second;
  }

  /// Decodes `record` (found at `at`) into `out`; throws data_error, leaving `out` empty, when it does not fit.
  void parse(std::span<const std::byte> record, const record_location& at, parsed_example& out) const {
    out.at_ = at;
    out.slots_.resize(specs_.size());
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      out.slots_[i].clear();
      out.slots_[i].type = specs_[i].type;
    }
    try {
      detail::for_each_feature(record, at, [&](std::string_view name, detail::wire_reader entry) {
        const auto it = index_.find(name);
        if (it == index_.end()) return;  // not asked for: skipped unread
        auto& s = out.slots_[it->second];
        s.clear();  // the last entry of a name wins
        s.present = true;
        detail::decode_feature_entry(entry, s, at, record.size());
      });
      for (std::size_t i = 0; i < specs_.size(); ++i) check(specs_[i], out.slots_[i], at);
    } catch (...) {
      out.slots_.clear();
      throw;
    }
  }

  /// `parse` into a new `parsed_example`.
  [[nodiscard]] parsed_example parse(std::span<const std::byte> record, const record_location& at) const {
    parsed_example out;
    parse(record, at, out);
    return out;
  }

 private:
  static std::string shape_text(const std::vector<std::size_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  static std::string article(feature_type t) { return t == feature_type::int64 ? "an " : "a "; }

  static void check(const feature_spec& spec, const parsed_example::slot& s, const record_location& at) {
    const std::string wanted = article(spec.type) + std::string(to_string(spec.type));
    if (!s.present) {
      throw record_error(at, "lacks feature '" + spec.name + "' (the spec asks for " + wanted +
                                 (spec.variable_length ? ""
                                                       : " of " + std::to_string(spec.length()) +
                                                             (spec.length() == 1 ? " value" : " values")) +
                                 ")");
    }
    if (!s.held) {
      throw feature_error(at, spec.name, "holds no list (its kind is not set), the spec asks for " + wanted);
    }
    if (*s.held != spec.type) {
      throw feature_error(at, spec.name, "is " + article(*s.held) + std::string(to_string(*s.held)) +
                                             ", the spec asks for " + wanted);
    }
    if (!spec.variable_length && s.count != spec.length()) {
      throw feature_error(at, spec.name, "holds " + std::to_string(s.count) + " " + std::string(to_string(spec.type)) +
                                             " values, the spec's shape " + shape_text(spec.shape) + " asks for " +
                                             std::to_string(spec.length()));
    }
  }

  std::vector<feature_spec> specs_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace mwstrat::data
