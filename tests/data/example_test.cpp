// tf.train.Example decoding and encoding (the hand-written wire format of example.hpp) and feature specs
// (feature_spec.hpp): round trips, protobuf's parsing rules on hand-made bytes (packed and unpacked lists, fields
// in any order, unknown fields, repeated keys and cases), malformed messages, and every spec refusal with the file,
// the record's offset and the feature in its message. Examples written by Google's protobuf library are read in
// tfrecord_interop_test.cpp.
#include <mwstrat/data/example.hpp>
#include <mwstrat/data/feature_spec.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace example_test {

using namespace mwstrat;
using namespace mwstrat::data;

const record_location here{"/data/shard-00001", 4242};

// Wire-format bytes built by hand: each helper appends one field.
struct bytes_builder {
  std::vector<std::byte> out;
  bytes_builder& raw(std::initializer_list<int> bs) {
    for (const int b : bs) out.push_back(static_cast<std::byte>(b));
    return *this;
  }
  bytes_builder& varint(std::uint64_t v) {
    detail::wire_writer{out}.varint(v);
    return *this;
  }
  bytes_builder& tag(std::uint32_t field, detail::wire_type t) {
    detail::wire_writer{out}.tag(field, t);
    return *this;
  }
  bytes_builder& len(std::uint32_t field, const std::vector<std::byte>& inner) {
    detail::wire_writer{out}.len(field, inner);
    return *this;
  }
  bytes_builder& text(std::uint32_t field, std::string_view s) {
    detail::wire_writer{out}.len(field, std::as_bytes(std::span(s.data(), s.size())));
    return *this;
  }
};

// An Example holding one map entry per (name, Feature bytes).
std::vector<std::byte> example_of(const std::vector<std::pair<std::string, std::vector<std::byte>>>& entries) {
  bytes_builder features;
  for (const auto& [name, feature_bytes] : entries) {
    bytes_builder entry;
    entry.text(1, name).len(2, feature_bytes);
    features.len(1, entry.out);
  }
  return bytes_builder{}.len(1, features.out).out;
}

std::string message_of(const std::vector<std::byte>& record, const std::vector<feature_spec>& specs) {
  try {
    example_parser parser(specs);
    parsed_example out = parser.parse(record, here);
    return "";
  } catch (const data_error& e) {
    EXPECT_EQ(e.path(), here.file);
    return e.what();
  }
}

TEST(example, every_kind_of_feature_round_trips_packed_and_unpacked) {
  example ex;
  ex.features["bytes"] = bytes_list{{"", std::string("\0\xff\x01", 3), std::string(300, 'x')}};
  ex.features["floats"] = float_list{{0.0f, -1.5f, 3.25e-42f, std::numeric_limits<float>::infinity(), 0.1f}};
  ex.features["int64s"] = int64_list{{0, -1, std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max(), 300}};
  ex.features["empty_floats"] = float_list{};
  ex.features["empty_bytes"] = bytes_list{};
  ex.features["no_kind"] = std::monostate{};
  ex.features[""] = int64_list{{7}};
  for (const bool packed : {true, false}) {
    const auto bytes = encode_example(ex, {.packed = packed});
    EXPECT_EQ(decode_example(bytes, here), ex) << "packed " << packed;
  }
  EXPECT_LT(encode_example(ex).size(), encode_example(ex, {.packed = false}).size());
  EXPECT_EQ(decode_example(encode_example(example{}), here), example{});
  EXPECT_EQ(decode_example({}, here), example{}) << "an empty message is an Example with no features";
}

TEST(example, encoding_is_tensorflows_deterministic_bytes) {
  // tf.train.Example(features=tf.train.Features(feature={"a": Feature(int64_list=Int64List(value=[1, 2])),
  //   "b": Feature(float_list=FloatList(value=[1.0]))})).SerializeToString(deterministic=True)
  example ex;
  ex.features["b"] = float_list{{1.0f}};
  ex.features["a"] = int64_list{{1, 2}};
  const auto bytes = encode_example(ex);
  // Example{features (28 bytes)}: entry "a" (key, Feature{int64_list{packed [1, 2]}}), entry "b" (float 1.0).
  const std::vector<int> exact = {0x0a, 0x1c,
                                  0x0a, 0x0b, 0x0a, 0x01, 'a', 0x12, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0x01, 0x02,
                                  0x0a, 0x0d, 0x0a, 0x01, 'b', 0x12, 0x08, 0x12, 0x06, 0x0a, 0x04, 0x00, 0x00, 0x80,
                                  0x3f};
  ASSERT_EQ(bytes.size(), exact.size());
  for (std::size_t i = 0; i < exact.size(); ++i) EXPECT_EQ(std::to_integer<int>(bytes[i]), exact[i]) << "byte " << i;
}

TEST(example, protobuf_parsing_rules_hold) {
  using detail::wire_type;
  // Unpacked floats and int64s, an unknown field in every message, the value before the key.
  bytes_builder floats;
  floats.tag(1, wire_type::fixed32).raw({0, 0, 0x80, 0x3f}).tag(9, wire_type::varint).varint(5)
      .tag(1, wire_type::fixed32).raw({0, 0, 0, 0x40});
  bytes_builder f1;
  f1.len(2, floats.out).tag(7, wire_type::fixed64).raw({1, 2, 3, 4, 5, 6, 7, 8});
  bytes_builder entry;
  entry.len(2, f1.out).text(1, "f").tag(3, wire_type::fixed32).raw({9, 9, 9, 9});
  bytes_builder ints;
  ints.tag(1, wire_type::varint).varint(3).len(1, bytes_builder{}.varint(4).varint(5).out);  // unpacked then packed
  bytes_builder f2;
  f2.len(3, ints.out);
  bytes_builder entry2;
  entry2.text(1, "i").len(2, f2.out);
  // A key given twice (the last entry wins) and a oneof whose case changes (the last case wins) and then merges.
  bytes_builder f3a;
  f3a.len(1, bytes_builder{}.text(1, "old").out);
  bytes_builder f3b;
  f3b.len(1, bytes_builder{}.text(1, "x").out).len(3, bytes_builder{}.tag(1, wire_type::varint).varint(1).out)
      .len(3, bytes_builder{}.tag(1, wire_type::varint).varint(2).out);
  bytes_builder features;
  features.len(1, entry.out).len(1, entry2.out).len(1, bytes_builder{}.text(1, "k").len(2, f3a.out).out)
      .len(1, bytes_builder{}.text(1, "k").len(2, f3b.out).out).tag(5, wire_type::varint).varint(1);
  // The features field twice: merged.
  bytes_builder more;
  more.len(1, bytes_builder{}.text(1, "m").out);  // an entry without value: an empty Feature
  const auto record = bytes_builder{}.len(1, features.out).tag(2, wire_type::varint).varint(0).len(1, more.out).out;
  const example ex = decode_example(record, here);
  ASSERT_EQ(ex.features.size(), 4u);
  EXPECT_EQ(std::get<float_list>(ex.features.at("f")).value, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(std::get<int64_list>(ex.features.at("i")).value, (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(std::get<int64_list>(ex.features.at("k")).value, (std::vector<std::int64_t>{1, 2}));
  EXPECT_FALSE(type_of(ex.features.at("m")));
}

TEST(example, malformed_messages_name_the_file_the_record_and_the_byte) {
  using detail::wire_type;
  const auto expect = [](const std::vector<std::byte>& record, const std::string& text) {
    try {
      (void)decode_example(record, here);
      ADD_FAILURE() << "accepted; expected " << text;
    } catch (const data_error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("[mwstrat.tfrecord] /data/shard-00001: record at byte 4242: not a tf.train.Example: ", 0), 0u)
          << m;
      EXPECT_NE(m.find(text), std::string::npos) << m;
    }
  };
  expect(bytes_builder{}.raw({0x0a, 0x05, 0x0a}).out, "a length-delimited field runs past the end in the Example at byte 2");
  expect(bytes_builder{}.raw({0x10, 0xff, 0xff}).out, "a varint runs past the end");  // unknown field 2
  expect(bytes_builder{}.raw({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}).out,
         "a varint is longer than 10 bytes");
  expect(bytes_builder{}.raw({0x13}).out, "a group");
  expect(bytes_builder{}.raw({0x00}).out, "a field number is 0");
  expect(bytes_builder{}.raw({0x08, 0x01}).out, "its features field is not length-delimited");
  const auto bad_floats = bytes_builder{}.len(2, bytes_builder{}.tag(1, wire_type::len).varint(3).raw({0, 0, 0}).out).out;
  expect(example_of({{"f", bad_floats}}), "a packed float list whose length is not a multiple of 4 in a FloatList");
  const auto bad_bytes = bytes_builder{}.len(1, bytes_builder{}.tag(1, wire_type::varint).varint(3).out).out;
  expect(example_of({{"b", bad_bytes}}), "a bytes value that is not length-delimited in a BytesList");
  const auto bad_ints = bytes_builder{}.len(3, bytes_builder{}.tag(1, wire_type::len).varint(2).raw({0x80, 0x80}).out).out;
  expect(example_of({{"i", bad_ints}}), "a varint runs past the end in a packed Int64List");
}

std::vector<std::byte> mnist_like(std::size_t pixels, bool label_as_float = false) {
  example ex;
  ex.features["image"] = float_list{std::vector<float>(pixels, 0.5f)};
  if (label_as_float) ex.features["label"] = float_list{{3.0f}};
  else ex.features["label"] = int64_list{{3}};
  ex.features["id"] = bytes_list{{"img-7"}};
  return encode_example(ex);
}

const std::vector<feature_spec> mnist_spec = {{.name = "image", .type = feature_type::float32, .shape = {28, 28}},
                                              {.name = "label", .type = feature_type::int64}};

TEST(example, a_parser_decodes_the_specified_features_into_reused_memory) {
  example_parser parser({{.name = "label", .type = feature_type::int64},
                         {.name = "id", .type = feature_type::bytes, .variable_length = true},
                         {.name = "image", .type = feature_type::float32, .shape = {28, 28}}});
  parsed_example out;
  for (int round = 0; round < 3; ++round) {
    parser.parse(mnist_like(784), here, out);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out.int64s(parser.index_of("label")).size(), 1u);
    EXPECT_EQ(out.int64s(0)[0], 3);
    EXPECT_EQ(out.bytes_count(1), 1u);
    EXPECT_EQ(out.text(1), "img-7");
    ASSERT_EQ(out.floats(2).size(), 784u);
    EXPECT_EQ(out.floats(2)[783], 0.5f);
    EXPECT_EQ(out.location().offset, here.offset);
  }
  EXPECT_THROW((void)out.floats(0), config_error) << "label is an int64_list";
  EXPECT_THROW((void)out.bytes(1, 1), config_error);
  EXPECT_THROW((void)parser.index_of("nope"), config_error);
  EXPECT_THROW(example_parser({{.name = "a"}, {.name = "a"}}), config_error);
}

TEST(example, a_record_lacking_a_feature_is_refused) {
  example ex;
  ex.features["image"] = float_list{std::vector<float>(784, 0.0f)};
  EXPECT_EQ(message_of(encode_example(ex), mnist_spec),
            "[mwstrat.tfrecord] /data/shard-00001: record at byte 4242: lacks feature 'label' (the spec asks for an "
            "int64_list of 1 value)");
}

TEST(example, a_feature_of_another_type_is_refused) {
  EXPECT_EQ(message_of(mnist_like(784, true), mnist_spec),
            "[mwstrat.tfrecord] /data/shard-00001: record at byte 4242: feature 'label': is a float_list, the spec "
            "asks for an int64_list");
  example ex;
  ex.features["image"] = float_list{std::vector<float>(784, 0.0f)};
  ex.features["label"] = std::monostate{};
  EXPECT_EQ(message_of(encode_example(ex), mnist_spec),
            "[mwstrat.tfrecord] /data/shard-00001: record at byte 4242: feature 'label': holds no list (its kind is "
            "not set), the spec asks for an int64_list");
}

TEST(example, a_feature_of_another_length_is_refused_and_nothing_is_delivered) {
  EXPECT_EQ(message_of(mnist_like(783), mnist_spec),
            "[mwstrat.tfrecord] /data/shard-00001: record at byte 4242: feature 'image': holds 783 float_list values, "
            "the spec's shape [28, 28] asks for 784");
  example_parser parser(mnist_spec);
  parsed_example out;
  parser.parse(mnist_like(784), here, out);
  EXPECT_THROW(parser.parse(mnist_like(785), here, out), data_error);
  EXPECT_EQ(out.size(), 0u) << "a refused record leaves nothing behind";
  example_parser variable({{.name = "image", .type = feature_type::float32, .variable_length = true}});
  EXPECT_EQ(variable.parse(mnist_like(3), here).floats(0).size(), 3u);
}

}  // namespace example_test
