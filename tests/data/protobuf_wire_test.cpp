// detail::wire_reader and wire_writer (protobuf_wire.hpp) alone, on bytes written out by hand: varints as
// protobuf encodes them, tags, length-delimited fields whose readers count positions in the outermost buffer,
// little-endian fixed32, skipping every wire type; and each malformed or truncated input refused with its reason
// and position, never read past its end. (example_test.cpp checks the same rules through tf.train.Example.)
#include <mwstrat/data/detail/protobuf_wire.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace protobuf_wire_test {

using mwstrat::detail::varint_size;
using mwstrat::detail::wire_reader;
using mwstrat::detail::wire_type;
using mwstrat::detail::wire_writer;

std::vector<std::byte> bytes(std::initializer_list<int> bs) {
  std::vector<std::byte> v;
  for (const int b : bs) v.push_back(static_cast<std::byte>(b));
  return v;
}

std::string error_of(const wire_reader& r) { return r.error() ? r.error() : "(none)"; }

TEST(protobuf_wire, varints_are_protobuf_s_bytes_and_read_back) {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> cases = {
      {0, bytes({0x00})},
      {1, bytes({0x01})},
      {127, bytes({0x7f})},
      {128, bytes({0x80, 0x01})},
      {150, bytes({0x96, 0x01})},  // protobuf.dev's example
      {300, bytes({0xac, 0x02})},
      {0xffffffffu, bytes({0xff, 0xff, 0xff, 0xff, 0x0f})},
      {std::uint64_t{1} << 63, bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})},
      {max, bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})},  // also int64 -1
  };
  for (const auto& [value, encoding] : cases) {
    SCOPED_TRACE(std::to_string(value));
    std::vector<std::byte> out;
    wire_writer{out}.varint(value);
    EXPECT_EQ(out, encoding);
    EXPECT_EQ(varint_size(value), encoding.size());
    wire_reader r(encoding, 40);
    std::uint64_t back = 12345;
    ASSERT_TRUE(r.varint(back)) << error_of(r);
    EXPECT_EQ(back, value);
    EXPECT_TRUE(r.done());
    EXPECT_EQ(r.at(), 40 + encoding.size());
    EXPECT_EQ(r.error(), nullptr);
  }
  static_assert(varint_size(0) == 1 && varint_size(127) == 1 && varint_size(128) == 2 && varint_size(max) == 10);
}

TEST(protobuf_wire, a_varint_that_runs_past_the_end_or_past_ten_bytes_is_refused) {
  for (const auto& cut : {bytes({}), bytes({0x80}), bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})}) {
    wire_reader r(cut, 100);
    std::uint64_t v = 0;
    EXPECT_FALSE(r.varint(v)) << cut.size() << " bytes";
    EXPECT_EQ(error_of(r), "a varint runs past the end");
    EXPECT_EQ(r.at(), 100 + cut.size()) << "where the bytes ran out, and not beyond";
  }
  const auto eleven = bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01});
  wire_reader r(eleven);
  std::uint64_t v = 0;
  EXPECT_FALSE(r.varint(v));
  EXPECT_EQ(error_of(r), "a varint is longer than 10 bytes");
  EXPECT_EQ(r.at(), 10u);
}

TEST(protobuf_wire, a_tag_gives_the_field_and_wire_type_and_refuses_field_numbers_out_of_range) {
  std::vector<std::byte> out;
  wire_writer w{out};
  w.tag(1, wire_type::len);
  w.tag(15, wire_type::varint);
  w.tag(16, wire_type::fixed32);  // the first field number of a two-byte tag
  w.tag(0x1fffffff, wire_type::fixed64);
  EXPECT_EQ(std::vector<std::byte>(out.begin(), out.begin() + 4), bytes({0x0a, 0x78, 0x85, 0x01}));
  wire_reader r(out);
  for (const auto& [field, type] : {std::pair{1u, wire_type::len}, std::pair{15u, wire_type::varint},
                                    std::pair{16u, wire_type::fixed32}, std::pair{0x1fffffffu, wire_type::fixed64}}) {
    std::uint32_t f = 0;
    wire_type t{};
    ASSERT_TRUE(r.tag(f, t)) << error_of(r);
    EXPECT_EQ(f, field);
    EXPECT_EQ(t, type);
  }
  EXPECT_TRUE(r.done());

  std::vector<std::byte> too_far;
  wire_writer{too_far}.varint(std::uint64_t{0x20000000} << 3);  // field 2^29
  for (const auto& bad : {bytes({0x00}), bytes({0x02}), too_far}) {
    wire_reader b(bad);
    std::uint32_t f = 0;
    wire_type t{};
    EXPECT_FALSE(b.tag(f, t));
    EXPECT_EQ(error_of(b), "a field number is 0 or above 2^29 - 1");
  }
  const auto half_tag = bytes({0x85});
  wire_reader cut(half_tag);
  std::uint32_t f = 0;
  wire_type t{};
  EXPECT_FALSE(cut.tag(f, t));
  EXPECT_EQ(error_of(cut), "a varint runs past the end");
}

TEST(protobuf_wire, a_length_delimited_field_is_read_by_a_reader_counting_in_the_outer_buffer) {
  std::vector<std::byte> inner;
  wire_writer{inner}.tag(1, wire_type::varint);
  wire_writer{inner}.varint(300);
  std::vector<std::byte> outer = bytes({0x08, 0x05});  // field 1 = 5
  wire_writer{outer}.len(2, inner);
  wire_writer{outer}.len(3, {});
  EXPECT_EQ(outer, bytes({0x08, 0x05, 0x12, 0x03, 0x08, 0xac, 0x02, 0x1a, 0x00}));

  wire_reader r(outer, 1000);
  std::uint32_t f = 0;
  wire_type t{};
  std::uint64_t v = 0;
  ASSERT_TRUE(r.tag(f, t) && r.varint(v) && r.tag(f, t));
  EXPECT_EQ(t, wire_type::len);
  wire_reader field({}, 0);
  ASSERT_TRUE(r.len(field)) << error_of(r);
  EXPECT_EQ(field.at(), 1004u) << "the field's first byte, counted from the outer buffer's base";
  EXPECT_EQ(std::vector<std::byte>(field.rest().begin(), field.rest().end()), inner);
  EXPECT_EQ(r.at(), 1007u) << "the outer reader is past the whole field";
  ASSERT_TRUE(field.tag(f, t) && field.varint(v));
  EXPECT_EQ(v, 300u);
  EXPECT_TRUE(field.done());
  EXPECT_EQ(field.at(), 1007u);
  ASSERT_TRUE(r.tag(f, t) && r.len(field));
  EXPECT_TRUE(field.done()) << "an empty field";
  EXPECT_TRUE(r.done());

  // A length beyond what is left, by one or however far, is refused without reading on.
  std::vector<std::byte> huge = bytes({0x12});
  wire_writer{huge}.varint(std::numeric_limits<std::uint64_t>::max());
  for (const auto& [bad, after_length] : {std::pair{bytes({0x12, 0x03, 'a', 'b'}), std::size_t{2}},
                                          std::pair{huge, huge.size()}}) {
    wire_reader b(bad, 7);
    ASSERT_TRUE(b.tag(f, t));
    EXPECT_FALSE(b.len(field));
    EXPECT_EQ(error_of(b), "a length-delimited field runs past the end");
    EXPECT_EQ(b.at(), 7 + after_length) << "just after the length";
  }
  // A truncated field inside a field says where in the outer buffer it stopped.
  const auto nested_cut = bytes({0x12, 0x02, 0x08, 0x80});
  wire_reader n(nested_cut, 50);
  ASSERT_TRUE(n.tag(f, t) && n.len(field) && field.tag(f, t));
  EXPECT_FALSE(field.varint(v));
  EXPECT_EQ(error_of(field), "a varint runs past the end");
  EXPECT_EQ(field.at(), 54u);
}

TEST(protobuf_wire, fixed32_is_little_endian) {
  std::vector<std::byte> out;
  wire_writer{out}.fixed32(0x04030201u);
  wire_writer{out}.fixed32(std::bit_cast<std::uint32_t>(1.0f));
  EXPECT_EQ(out, bytes({0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x80, 0x3f}));
  EXPECT_EQ(wire_reader::load32(out.data()), 0x04030201u);
  wire_reader r(out);
  std::uint32_t a = 0, b = 0;
  ASSERT_TRUE(r.fixed32(a) && r.fixed32(b));
  EXPECT_EQ(a, 0x04030201u);
  EXPECT_EQ(std::bit_cast<float>(b), 1.0f);
  EXPECT_TRUE(r.done());

  const auto three = bytes({1, 2, 3});
  wire_reader cut(three, 9);
  EXPECT_FALSE(cut.fixed32(a));
  EXPECT_EQ(error_of(cut), "a fixed32 runs past the end");
  EXPECT_EQ(cut.at(), 9u) << "nothing taken";
}

TEST(protobuf_wire, skip_passes_over_exactly_one_field_of_each_wire_type) {
  std::vector<std::byte> m;
  wire_writer w{m};
  w.tag(1, wire_type::varint);
  w.varint(1u << 20);
  w.tag(2, wire_type::fixed64);
  for (int i = 0; i < 8; ++i) m.push_back(std::byte{0xee});
  w.len(3, bytes({'x', 'y', 'z'}));
  w.tag(4, wire_type::fixed32);
  w.fixed32(0xdeadbeef);
  w.tag(5, wire_type::varint);
  w.varint(7);  // what comes after the skipped fields

  wire_reader r(m);
  std::uint32_t f = 0;
  wire_type t{};
  for (std::uint32_t field = 1; field <= 4; ++field) {
    ASSERT_TRUE(r.tag(f, t));
    EXPECT_EQ(f, field);
    ASSERT_TRUE(r.skip(t)) << "field " << field << ": " << error_of(r);
  }
  std::uint64_t v = 0;
  ASSERT_TRUE(r.tag(f, t) && r.varint(v));
  EXPECT_EQ(f, 5u);
  EXPECT_EQ(v, 7u);
  EXPECT_TRUE(r.done());
}

TEST(protobuf_wire, skip_refuses_a_field_cut_short_a_group_and_an_unknown_wire_type) {
  const std::vector<std::pair<std::vector<std::byte>, std::string>> cases = {
      {bytes({0x08, 0x80}), "a varint runs past the end"},
      {bytes({0x09, 1, 2, 3, 4, 5, 6, 7}), "a fixed64 runs past the end"},
      {bytes({0x12, 0x04, 1, 2, 3}), "a length-delimited field runs past the end"},
      {bytes({0x1d, 1, 2, 3}), "a fixed32 runs past the end"},
      {bytes({0x0b}), "a group (wire types 3 and 4, deprecated: no tf.train message has one)"},
      {bytes({0x0c}), "a group (wire types 3 and 4, deprecated: no tf.train message has one)"},
      {bytes({0x0e}), "an invalid wire type (6 or 7)"},
      {bytes({0x0f}), "an invalid wire type (6 or 7)"},
  };
  for (const auto& [input, reason] : cases) {
    wire_reader r(input);
    std::uint32_t f = 0;
    wire_type t{};
    ASSERT_TRUE(r.tag(f, t)) << reason;
    EXPECT_FALSE(r.skip(t)) << reason;
    EXPECT_EQ(error_of(r), reason);
    EXPECT_LE(r.at(), input.size());
  }
}

}  // namespace protobuf_wire_test
