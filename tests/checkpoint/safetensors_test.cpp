#include "checkpoint_test_util.hpp"

#include <mwstrat/checkpoint/safetensors.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace safetensors_test {

using namespace mwstrat;
using mwstrat::test::expect_checkpoint_error;
using mwstrat::test::read_bytes;
using mwstrat::test::temp_dir;
using mwstrat::test::write_bytes;

struct sample {
  std::vector<double> f64{1.5, -2.25, 3.0};
  std::vector<float> f32{0.5f, 1.0f, -7.75f, 1e-30f, 3.4e38f, -0.0f};
  std::vector<std::int64_t> i64{-1, 0, 1LL << 62};
  std::vector<std::int32_t> i32{-5, 7};
  std::vector<std::uint8_t> u8{1, 2, 3, 250, 0};
  std::vector<float> empty;
  std::vector<float> scalar{42.0f};

  std::vector<tensor_entry> entries() const {
    return {make_tensor_entry<std::uint8_t>("bytes", u8),
            make_tensor_entry<float>("w", f32, {2, 3}),
            make_tensor_entry<std::int32_t>("ints", i32),
            make_tensor_entry<double>("doubles", f64, {3, 1}),
            make_tensor_entry<std::int64_t>("longs", i64),
            make_tensor_entry<float>("empty", empty, {0, 4}),
            tensor_entry{"scalar", dtype::f32, {}, std::as_bytes(std::span(scalar))}};
  }
};

std::uint64_t header_length(std::span<const std::byte> file) {
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return n;
}

TEST(safetensors, round_trip_keeps_every_dtype_shape_value_and_metadata) {
  temp_dir dir;
  const sample s;
  const auto entries = s.entries();
  save_safetensors(dir / "a.safetensors", entries, {{"epoch", "3"}, {"who", "test"}});
  const auto file = safetensors_file::open(dir / "a.safetensors", {.rank = {}, .require_crc = true});
  ASSERT_EQ(file.tensors().size(), entries.size());
  EXPECT_EQ(file.metadata().at("epoch"), "3");
  EXPECT_EQ(file.metadata().at("who"), "test");
  EXPECT_EQ(file.metadata().at("mwstrat.crc32c").size(), 8u);

  const auto* w = file.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, dtype::f32);
  EXPECT_EQ(w->shape, (std::vector<std::int64_t>{2, 3}));
  const auto values = w->try_values<float>();
  ASSERT_TRUE(values.has_value());
  EXPECT_TRUE(std::equal(values->begin(), values->end(), s.f32.begin(), s.f32.end()));
  EXPECT_FALSE(w->try_values<double>().has_value());

  EXPECT_EQ(*file.find("doubles")->copy_values<double>(), s.f64);
  EXPECT_EQ(file.find("doubles")->shape, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(*file.find("longs")->copy_values<std::int64_t>(), s.i64);
  EXPECT_EQ(*file.find("ints")->copy_values<std::int32_t>(), s.i32);
  EXPECT_EQ(*file.find("bytes")->copy_values<std::uint8_t>(), s.u8);
  EXPECT_EQ(file.find("empty")->element_count(), 0u);
  EXPECT_EQ(file.find("empty")->shape, (std::vector<std::int64_t>{0, 4}));
  EXPECT_TRUE(file.find("scalar")->shape.empty());
  EXPECT_EQ(*file.find("scalar")->copy_values<float>(), s.scalar);
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(safetensors, layout_is_padded_aligned_and_ordered_by_element_size) {
  const sample s;
  const auto entries = s.entries();
  const std::vector<std::byte> bytes = encode_safetensors(entries, {{"k", "v"}});
  const std::uint64_t n = header_length(bytes);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start on an 8-byte boundary";
  const std::string header(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.substr(0, 14), "{\"__metadata__");
  const auto last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(n - 1 - last, 8u) << "padding is fewer than 8 spaces";

  const auto view = safetensors_view::parse(bytes);
  std::vector<std::string> order;
  for (const auto& t : view.tensors()) {
    order.push_back(t.name);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data.data() - bytes.data() - 8 - n) % size_of(t.type), 0u);
  }
  // 8-byte types first (as given), then 4-byte, then 1-byte; the caller's order within each size.
  EXPECT_EQ(order, (std::vector<std::string>{"doubles", "longs", "w", "ints", "empty", "scalar", "bytes"}));
}

TEST(safetensors, same_tensors_and_metadata_give_identical_bytes) {
  temp_dir dir;
  const sample s;
  const auto entries = s.entries();
  metadata_map m1{{"b", "2"}, {"a", "1"}};
  metadata_map m2;
  m2["a"] = "1";
  m2["b"] = "2";
  save_safetensors(dir / "one", entries, m1);
  save_safetensors(dir / "two", entries, m2);
  EXPECT_EQ(read_bytes(dir / "one"), read_bytes(dir / "two"));
  EXPECT_EQ(read_bytes(dir / "one"), encode_safetensors(entries, m1));
}

TEST(safetensors, writer_rejects_bad_entries_and_leaves_the_target_alone) {
  temp_dir dir;
  const sample s;
  const auto target = dir / "t.safetensors";
  save_safetensors(target, s.entries());
  const auto before = read_bytes(target);

  std::vector<float> three{1, 2, 3};
  const std::vector<std::vector<tensor_entry>> bad = {
      {make_tensor_entry<float>("x", three), make_tensor_entry<float>("x", three)},       // duplicate
      {make_tensor_entry<float>("x", three, {2, 2})},                                    // size mismatch
      {make_tensor_entry<float>("", three)},                                             // empty name
      {make_tensor_entry<float>("__metadata__", three)},                                 // reserved
      {tensor_entry{"neg", dtype::f32, {-1, -3}, std::as_bytes(std::span(three))}},      // negative dims
  };
  for (const auto& entries : bad) {
    const auto e = expect_checkpoint_error([&] { save_safetensors(target, entries); });
    EXPECT_EQ(e.path(), target.string());
    EXPECT_NE(std::string(e.what()).find("[mwstrat.checkpoint]"), std::string::npos);
    EXPECT_EQ(read_bytes(target), before);
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u) << "no temporary file may be left behind";
}

// The header is JSON, which readers refuse unless it is UTF-8: the writer must refuse such a name or metadata
// entry up front instead of writing a file nothing can read.
TEST(safetensors, names_and_metadata_that_are_not_utf8_are_refused_before_anything_is_written) {
  temp_dir dir;
  const auto target = dir / "t.safetensors";
  std::vector<float> one{1};
  const auto refused = [&](std::string name, const metadata_map& metadata) {
    const std::vector<tensor_entry> entries{make_tensor_entry<float>(std::move(name), one)};
    return expect_checkpoint_error([&] { save_safetensors(target, entries, metadata); });
  };
  const auto bad_name = refused("w\xe9", {});
  EXPECT_EQ(bad_name.path(), target.string());
  EXPECT_NE(bad_name.detail().find("tensor 'w\\xe9': the name is not valid UTF-8 (byte 0xe9 at offset 1)"),
            std::string::npos)
      << bad_name.detail();
  const auto bad_value = refused("w", {{"note", "caf\xe9"}});
  EXPECT_NE(bad_value.detail().find("metadata 'note': the value is not valid UTF-8 (byte 0xe9 at offset 3)"),
            std::string::npos)
      << bad_value.detail();
  const auto bad_key = refused("w", {{"caf\xe9", "x"}});
  EXPECT_NE(bad_key.detail().find("metadata key 'caf\\xe9': the key is not valid UTF-8 (byte 0xe9 at offset 3)"),
            std::string::npos)
      << bad_key.detail();
  // Overlong '/', a surrogate (U+D800), U+110000, a lone continuation byte, a truncated sequence: all after "a".
  for (const std::string bad : {"a\xc0\xaf", "a\xed\xa0\x80", "a\xf4\x90\x80\x80", "a\x80", "a\xe6\x97"}) {
    const auto e = refused(bad, {});
    EXPECT_NE(e.detail().find("not valid UTF-8 (byte 0x"), std::string::npos) << e.detail();
    EXPECT_NE(e.detail().find("at offset 1)"), std::string::npos) << e.detail();
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 0u) << "neither the file nor a temporary file may be written";

  // Well-formed UTF-8 of every length, up to U+10FFFF, round-trips.
  const std::vector<tensor_entry> entries{make_tensor_entry<float>("w\xc3\xa9", one),
                                          make_tensor_entry<float>("\xe6\x97\xa5\xe6\x9c\xac", one)};
  save_safetensors(target, entries, {{"caf\xc3\xa9", "\xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf \xed\x9f\xbf"}});
  const auto file = safetensors_file::open(target, {.rank = {}, .require_crc = true});
  EXPECT_NE(file.find("w\xc3\xa9"), nullptr);
  EXPECT_NE(file.find("\xe6\x97\xa5\xe6\x9c\xac"), nullptr);
  EXPECT_EQ(file.metadata().at("caf\xc3\xa9"), "\xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf \xed\x9f\xbf");
}

TEST(safetensors, every_truncation_is_refused_with_the_file_named) {
  temp_dir dir;
  const sample s;
  const auto bytes = encode_safetensors(s.entries(), {{"k", "v"}});
  const auto path = dir / "cut.safetensors";
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    const auto m = expect_checkpoint_error([&] { (void)safetensors_view::parse(std::span(bytes).first(length), "cut"); });
    EXPECT_EQ(m.path(), "cut");
    if (length % 17 != 0 && length > 16) continue;  // the file path too, on a sample
    write_bytes(path, std::span(bytes).first(length));
    const auto e = expect_checkpoint_error([&] { (void)safetensors_file::open(path); });
    EXPECT_EQ(e.path(), path.string()) << "length " << length;
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
}

TEST(safetensors, every_single_bit_flip_is_refused) {
  const sample s;
  const auto clean = encode_safetensors(s.entries(), {{"epoch", "12"}});
  std::vector<std::byte> bytes = clean;
  for (std::size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    bytes[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    expect_checkpoint_error([&] { (void)safetensors_view::parse(bytes, "flipped", {.rank = 0, .require_crc = true}); });
    bytes[bit / 8] = clean[bit / 8];
  }
}

TEST(safetensors, oversized_header_length_is_refused_before_allocating) {
  temp_dir dir;
  const auto path = dir / "huge.safetensors";
  for (std::uint64_t length : {std::uint64_t{1} << 62, ~std::uint64_t{0}, std::uint64_t{100'000'001},
                               std::uint64_t{99'999'999}}) {
    std::vector<std::byte> bytes(64, std::byte{' '});
    std::memcpy(bytes.data(), &length, 8);
    bytes[8] = std::byte{'{'};
    write_bytes(path, bytes);
    const auto e = expect_checkpoint_error([&] { (void)safetensors_file::open(path); });
    EXPECT_NE(e.detail().find("header length"), std::string::npos) << e.what();
  }
}

std::vector<std::byte> with_header(std::string header, std::size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0});
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

TEST(safetensors, malformed_headers_are_refused_with_a_reason) {
  struct bad_case {
    std::string header;
    std::size_t data;
    std::string reason;
  };
  const std::vector<bad_case> cases = {
      {"[1,2]", 0, "not a JSON object"},
      {"{\"a\":", 0, "not valid JSON"},
      {"{\"a\":1}", 0, "not an object"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "exactly dtype, shape and data_offsets"},
      {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "non-negative integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "ordered pair"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "not a pair"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "different size"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "past the end"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, "overlaps"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap of 4 bytes"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, "belong to no tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],\"data_offsets\":[0,4]}}", 4,
       "different size"},
      {"{\"__metadata__\":{\"x\":1}}", 0, "is not a string"},
      {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
      {"{\"__metadata__\":{\"mwstrat.crc32c\":\"xyz\"}}", 0, "not 8 lowercase hex digits"},
      {"{\"__metadata__\":{\"mwstrat.crc32c\":\"00000001\"}}", 0, "data CRC32C mismatch"},
  };
  for (const auto& c : cases) {
    const auto e = expect_checkpoint_error([&] { (void)safetensors_view::parse(with_header(c.header, c.data), "bad"); });
    EXPECT_NE(e.detail().find(c.reason), std::string::npos) << c.header << "\n  gave: " << e.detail();
    EXPECT_EQ(e.path(), "bad");
  }
}

// A BOOL byte other than 0 or 1 is not a bool: reading it as one is undefined behaviour, so such a file is refused
// when it is parsed, and the writer does not produce one. Nothing here reads a bad byte as bool.
TEST(safetensors, bool_bytes_other_than_0_and_1_are_refused_naming_tensor_and_element) {
  const std::string header = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}";
  auto bytes = with_header(header, 3);
  const std::size_t data = 8 + header.size();
  bytes[data] = std::byte{1};
  bytes[data + 1] = std::byte{0};
  bytes[data + 2] = std::byte{2};
  const auto e = expect_checkpoint_error([&] { (void)safetensors_view::parse(bytes, "hostile"); });
  EXPECT_EQ(e.path(), "hostile");
  EXPECT_NE(e.detail().find("tensor 'm': BOOL element 2 is 2, not 0 or 1"), std::string::npos) << e.detail();

  bytes[data + 2] = std::byte{1};
  const auto view = safetensors_view::parse(bytes);
  EXPECT_EQ(*view.find("m")->copy_values<bool>(), (std::vector<bool>{true, false, true}));

  // A view built by hand is not parsed: the typed accessors refuse its bad bytes instead.
  const std::byte odd[2] = {std::byte{0}, std::byte{0xff}};
  const tensor_view by_hand{"h", dtype::boolean, {2}, odd};
  EXPECT_FALSE(by_hand.try_values<bool>().has_value());
  EXPECT_FALSE(by_hand.copy_values<bool>().has_value());

  temp_dir dir;
  const std::vector<tensor_entry> entries{tensor_entry{"flags", dtype::boolean, {2}, odd}};
  const auto w = expect_checkpoint_error([&] { save_safetensors(dir / "b.safetensors", entries); });
  EXPECT_NE(w.detail().find("tensor 'flags': BOOL element 1 is 255, not 0 or 1"), std::string::npos) << w.detail();
  EXPECT_FALSE(std::filesystem::exists(dir / "b.safetensors"));
}

TEST(safetensors, files_without_checksums_are_read_unless_checksums_are_required) {
  // A file as another tool writes it: no __metadata__, unpadded header.
  const std::string header = "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  auto bytes = with_header(header, 8);
  const std::int32_t values[2] = {-3, 9};
  std::memcpy(bytes.data() + 8 + header.size(), values, 8);
  const auto view = safetensors_view::parse(bytes);
  EXPECT_EQ(*view.tensors().at(0).copy_values<std::int32_t>(), (std::vector<std::int32_t>{-3, 9}));
  const auto e = expect_checkpoint_error([&] { (void)safetensors_view::parse(bytes, "strict", {.rank = 2, .require_crc = true}); });
  EXPECT_NE(e.detail().find("no mwstrat.header_crc32c"), std::string::npos) << e.what();
  EXPECT_EQ(e.rank(), 2);
}

TEST(safetensors, garbage_files_are_refused) {
  temp_dir dir;
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    std::vector<std::byte> junk(static_cast<std::size_t>(rng() % 300));
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    if (junk.size() >= 8 && i % 2 == 0) {  // half of them with a plausible length prefix
      const std::uint64_t n = junk.size() - 8 - rng() % (junk.size() - 7);
      std::memcpy(junk.data(), &n, 8);
    }
    write_bytes(dir / "junk", junk);
    expect_checkpoint_error([&] { (void)safetensors_file::open(dir / "junk"); });
  }
  const auto e = expect_checkpoint_error([&] { (void)safetensors_file::open(dir / "missing"); });
  EXPECT_NE(e.detail().find("cannot open"), std::string::npos);
  const auto d = expect_checkpoint_error([&] { (void)safetensors_file::open(dir.path()); });
  EXPECT_EQ(d.path(), dir.path().string());
}

}  // namespace safetensors_test

namespace safetensors_test {

// Written by Python: safetensors.numpy.save_file({"x": np.arange(3, dtype=np.float32),
// "y": np.ones((2, 2), dtype=np.float64)}, path, metadata={"m": "1"}).
TEST(safetensors, reads_a_file_written_by_python_safetensors) {
  const auto file = mwstrat::safetensors_file::open(std::filesystem::path(MWSTRAT_TEST_SOURCE_DIR) / "tests" /
                                                    "checkpoint" / "fuzz_corpus" / "python_written.safetensors");
  EXPECT_EQ(file.metadata().at("m"), "1");
  EXPECT_EQ(file.metadata().count("mwstrat.crc32c"), 0u);
  const auto* x = file.find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(*x->copy_values<float>(), (std::vector<float>{0.0f, 1.0f, 2.0f}));
  const auto* y = file.find("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->shape, (std::vector<std::int64_t>{2, 2}));
  const auto values = y->try_values<double>();
  ASSERT_TRUE(values.has_value()) << "Python aligns tensors too";
  EXPECT_EQ(std::vector<double>(values->begin(), values->end()), (std::vector<double>(4, 1.0)));
}

}  // namespace safetensors_test
