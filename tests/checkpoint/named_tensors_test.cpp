// checkpoint/named_tensors.hpp: named tensors of any storable `tensor_like` type, every element type, to a
// safetensors file and back in place, with errors that name the tensor and the file.
#include <mwstrat/checkpoint/named_tensors.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/tensor/tensor.hpp>

#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace user {
// A user's tensor type: a shape and the values, opted in through the two hooks beside it.
struct grid {
  std::size_t rows = 0, cols = 0;
  std::vector<double> cells;
};
inline std::span<double> mwstrat_elements(grid& g) { return g.cells; }
inline std::span<const double> mwstrat_elements(const grid& g) { return g.cells; }
inline std::vector<std::size_t> mwstrat_shape(const grid& g) { return {g.rows, g.cols}; }
}  // namespace user

namespace user {
// A 16-bit float of the user's own (bfloat16 bits), let into tensor_like and given the BF16 dtype.
struct bf16 {
  std::uint16_t bits;
  friend bool operator==(bf16, bf16) = default;
};
struct wide {  // claims BF16 but is 4 bytes
  std::uint32_t bits;
};
}  // namespace user
template <>
inline constexpr bool mwstrat::enable_tensor_element<user::bf16> = true;
template <>
inline constexpr bool mwstrat::enable_tensor_element<user::wide> = true;
template <>
inline constexpr std::optional<mwstrat::dtype> mwstrat::dtype_of<user::wide> = mwstrat::dtype::bf16;
template <>
inline constexpr std::optional<mwstrat::dtype> mwstrat::dtype_of<user::bf16> = mwstrat::dtype::bf16;

namespace named_tensors_test {

using namespace mwstrat;

static_assert(storable_tensor<std::vector<user::bf16>>);
static_assert(!storable_tensor<std::vector<user::wide>>);  // a dtype whose size is not the element's

TEST(named_tensors, a_user_16_bit_float_type_is_stored_as_bf16) {
  test::temp_dir dir;
  std::vector<user::bf16> half{{0x3f80}, {0x4000}, {0xbf80}};
  save_tensors(dir.path() / "h.safetensors", std::vector{named("half", half)});
  const safetensors_file file = safetensors_file::open(dir.path() / "h.safetensors");
  EXPECT_EQ(file.find("half")->type, dtype::bf16);
  std::vector<user::bf16> back(3);
  load_tensors(file, std::vector{named("half", back)}, file.path());
  EXPECT_EQ(back, half);
}

static_assert(storable_tensor<user::grid>);
static_assert(restorable_tensor<user::grid>);
static_assert(storable_tensor<const user::grid>);
static_assert(!restorable_tensor<const user::grid>);
static_assert(storable_tensor<float_tensor> && restorable_tensor<float_tensor>);
static_assert(storable_tensor<float_tensor_view> && !restorable_tensor<float_tensor_view>);
static_assert(storable_tensor<std::vector<std::int64_t>> && storable_tensor<std::array<std::int32_t, 3>>);

// Near misses of storable_tensor: not tensor_like; an element type without a dtype.
struct no_elements {};
struct unstorable_element {
  int a, b;
};
static_assert(!storable_tensor<no_elements>);
static_assert(!storable_tensor<std::vector<long double>>);
static_assert(!storable_tensor<std::vector<unstorable_element>>);

TEST(named_tensors, tensors_of_several_types_and_dtypes_round_trip_in_place) {
  test::temp_dir dir;
  const auto path = dir.path() / "t.safetensors";
  user::grid g{2, 3, {1, 2, 3, 4, 5, 6}};
  std::vector<std::int64_t> counts{7, 8, 9};
  basic_tensor<std::int32_t> ids({2, 2}, {1, -2, 3, -4});
  tensor f({3}, {0.5f, 1.5f, 2.5f});
  std::vector<tensor_entry> entries{tensor_entry_of(named("grid", g)), tensor_entry_of(named("counts", counts)),
                                    tensor_entry_of(named("ids", ids)), tensor_entry_of(named("f", f))};
  save_safetensors(path, entries);

  const safetensors_file file = safetensors_file::open(path);
  EXPECT_EQ(file.find("grid")->type, dtype::f64);
  EXPECT_EQ(file.find("grid")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(file.find("counts")->type, dtype::i64);
  EXPECT_EQ(file.find("ids")->type, dtype::i32);
  EXPECT_EQ(file.find("f")->type, dtype::f32);

  user::grid g2{2, 3, std::vector<double>(6)};
  std::vector<std::int64_t> counts2(3);
  basic_tensor<std::int32_t> ids2({2, 2});
  tensor f2({3});
  load_tensors(path, std::vector{named("grid", g2)});
  load_tensors(path, std::vector{named("counts", counts2)});
  load_tensors(file, std::vector{named("ids", ids2)}, path);
  load_tensors(path, std::vector{named("f", f2)});
  EXPECT_EQ(g2.cells, g.cells);
  EXPECT_EQ(counts2, counts);
  EXPECT_EQ(ids2, ids);
  EXPECT_EQ(f2, f);
}

TEST(named_tensors, one_type_range_saves_as_the_float_path_does) {
  // The float path of training states and save_model is this path for float spans: same bytes.
  std::vector<float> a{1, 2, 3, 4}, b{5};
  std::vector<named_tensor<std::vector<float>>> tensors{named("a", a), named("b", b)};
  const std::vector<std::byte> generic = encode_tensors(tensors);
  const std::vector<tensor_entry> plain{make_tensor_entry<float>("a", a), make_tensor_entry<float>("b", b)};
  EXPECT_EQ(generic, encode_safetensors(plain));
}

std::string load_error(const std::filesystem::path& path, auto&& destination) {
  try {
    load_tensors(path, std::vector{named("w", destination)});
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.path(), path.string());
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

std::string load_error_of(const std::filesystem::path& path, const auto& destinations) {
  try {
    load_tensors(path, destinations);
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.path(), path.string());
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(named_tensors, loading_checks_presence_dtype_and_shape_and_names_tensor_and_file) {
  test::temp_dir dir;
  const auto path = dir.path() / "w.safetensors";
  user::grid w{2, 3, {1, 2, 3, 4, 5, 6}};
  save_tensors(path, std::vector{named("w", w)});

  user::grid missing{2, 3, std::vector<double>(6)};
  try {
    load_tensors(path, std::vector{named("v", missing)});
    FAIL();
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'v'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("w.safetensors"), std::string::npos) << e.what();
  }
  std::vector<float> wrong_type(6);
  EXPECT_NE(load_error(path, wrong_type).find("tensor 'w' is F64 in the file; the destination holds F32"),
            std::string::npos);
  user::grid transposed{3, 2, std::vector<double>(6)};
  EXPECT_NE(load_error(path, transposed).find("tensor 'w' has shape [2, 3] in the file; the destination has shape [3, 2]"),
            std::string::npos);
  std::vector<double> flat_short(5);
  EXPECT_NE(load_error(path, flat_short).find("has shape [2, 3] in the file"), std::string::npos);
  std::vector<double> flat(6);  // a flat destination takes any shape of the right count
  load_tensors(path, std::vector{named("w", flat)});
  EXPECT_EQ(flat, w.cells);
}

// Loading several tensors checks them all before writing any: a bad later one leaves the earlier ones untouched.
TEST(named_tensors, a_bad_tensor_in_a_load_leaves_every_destination_unchanged) {
  test::temp_dir dir;
  const auto path = dir.path() / "a.safetensors";
  std::vector<double> a{1, 2, 3};
  std::vector<double> short_b{4};
  save_tensors(path, std::vector{named("a", a), named("short_b", short_b)});

  std::vector<double> x(3, -1.0);
  std::vector<double> y(3, -1.0);
  const auto missing = load_error_of(path, std::vector{named("a", x), named("b", y)});
  EXPECT_NE(missing.find("no tensor 'b'"), std::string::npos) << missing;
  EXPECT_EQ(x, std::vector<double>(3, -1.0)) << "'a' was copied before 'b' was found missing";
  const auto wrong_shape = load_error_of(path, std::vector{named("a", x), named("short_b", y)});
  EXPECT_NE(wrong_shape.find("tensor 'short_b' has shape [1]"), std::string::npos) << wrong_shape;
  EXPECT_EQ(x, std::vector<double>(3, -1.0));

  load_tensors(path, std::vector{named("a", x)});
  EXPECT_EQ(x, a);
}

// A hostile file's BOOL byte 2 must not reach a bool (undefined behaviour): refused, naming the tensor and the
// element. The destination is compared as bytes, so this test never loads a bad bool even when the check is gone.
TEST(named_tensors, bool_bytes_other_than_0_and_1_are_refused) {
  test::temp_dir dir;
  const auto path = dir.path() / "flags.safetensors";
  const std::string header = "{\"flags\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}";
  const std::uint64_t length = header.size();
  std::string file(reinterpret_cast<const char*>(&length), 8);
  file += header;
  file += std::string("\x01\x00\x02", 3);
  {
    std::ofstream out(path, std::ios::binary);
    out << file;
  }
  std::array<bool, 3> flags{};
  const auto e = load_error_of(path, std::vector{named("flags", flags)});
  EXPECT_NE(e.find("tensor 'flags': BOOL element 2 is 2, not 0 or 1"), std::string::npos) << e;
  std::array<unsigned char, 3> bytes{};
  std::memcpy(bytes.data(), flags.data(), 3);
  EXPECT_EQ(bytes, (std::array<unsigned char, 3>{0, 0, 0}));

  std::array<bool, 3> good{true, false, true};
  save_tensors(path, std::vector{named("flags", good)});
  load_tensors(path, std::vector{named("flags", flags)});
  EXPECT_EQ(flags, good);
}

TEST(named_tensors, a_tensor_whose_shape_does_not_match_its_values_is_refused_on_save) {
  test::temp_dir dir;
  user::grid bad{2, 2, {1, 2, 3}};
  try {
    save_tensors(dir.path() / "bad.safetensors", std::vector{named("bad", bad)});
    FAIL();
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'bad': shape does not match its 3 values"), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "bad.safetensors"));
}

}  // namespace named_tensors_test
