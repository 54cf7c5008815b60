// The IDX reader: valid files of every element type, raw and gzip; each kind of defect gives a data_error
// (component "idx") that names the file and the defect; a missing file is an io_error.

#include "idx_files.hpp"

#include <mwstrat/data/idx.hpp>
#include <mwstrat/data/mnist.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace idx_test {

using namespace mwstrat_data_test;
namespace data = mwstrat::data;

// Runs `f`, expects a data_error whose message names `file` and contains `what`.
template <class F>
void expect_data_error(F&& f, const std::string& file, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no data_error; expected one about: " << what;
  } catch (const mwstrat::data_error& e) {
    EXPECT_EQ(e.kind(), mwstrat::error_kind::data);
    EXPECT_EQ(e.component(), "idx") << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_EQ(e.path(), file) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[mwstrat.idx] ", 0), 0U) << e.what();
  }
}

TEST(Idx, ReadsRawU8) {
  temp_dir dir;
  const auto set = make_small_set(5, 3, 2);
  write_file(dir / "images", set.images);
  const data::idx_array a = data::read_idx(dir / "images");
  EXPECT_EQ(a.type, data::idx_type::u8);
  EXPECT_EQ(a.dims, (std::vector<std::size_t>{5, 3, 2}));
  ASSERT_EQ(a.data.size(), 30U);
  EXPECT_EQ(a.data[7], (1 * 7 + 1) % 256);
  EXPECT_EQ(a.size(), 30U);
  EXPECT_EQ(a.source, (dir / "images").string());
}

TEST(Idx, ReadsGzipSameAsRaw) {
  temp_dir dir;
  const auto set = make_small_set(17, 4, 4);
  write_file(dir / "raw", set.images);
  write_file(dir / "packed.gz", gzip(set.images));
  EXPECT_EQ(data::read_idx(dir / "raw").data, data::read_idx(dir / "packed.gz").data);
  // gzip is recognised by content, not by name; two concatenated members are one file, as for gzip(1).
  auto half1 = std::vector<std::uint8_t>(set.images.begin(), set.images.begin() + 50);
  auto half2 = std::vector<std::uint8_t>(set.images.begin() + 50, set.images.end());
  auto two = gzip(half1);
  const auto second = gzip(half2);
  two.insert(two.end(), second.begin(), second.end());
  write_file(dir / "two_members", two);
  EXPECT_EQ(data::read_idx(dir / "two_members").data, data::read_idx(dir / "raw").data);
}

TEST(Idx, ConvertsBigEndianElementTypes) {
  temp_dir dir;
  // i16 {-2, 300}, i32 {70000}, f32 {1.5}, f64 {-0.25}
  write_file(dir / "i16", idx_bytes(0x0B, {2}, {0xFF, 0xFE, 0x01, 0x2C}));
  write_file(dir / "i32", idx_bytes(0x0C, {1}, {0x00, 0x01, 0x11, 0x70}));
  write_file(dir / "f32", idx_bytes(0x0D, {1}, {0x3F, 0xC0, 0x00, 0x00}));
  write_file(dir / "f64", idx_bytes(0x0E, {1, 1}, {0xBF, 0xD0, 0, 0, 0, 0, 0, 0}));
  write_file(dir / "i8", idx_bytes(0x09, {1}, {0xFF}));
  EXPECT_EQ(data::read_idx(dir / "i16").to_vector<int>(), (std::vector<int>{-2, 300}));
  EXPECT_EQ(data::read_idx(dir / "i32").to_vector<long>(), (std::vector<long>{70000}));
  EXPECT_EQ(data::read_idx(dir / "f32").to_vector<double>(), (std::vector<double>{1.5}));
  EXPECT_EQ(data::read_idx(dir / "f64").to_vector<double>(), (std::vector<double>{-0.25}));
  EXPECT_EQ(data::read_idx(dir / "i8").to_vector<int>(), (std::vector<int>{-1}));
}

TEST(Idx, EmptyDimensionIsValid) {
  temp_dir dir;
  write_file(dir / "empty", idx_bytes(0x08, {0, 28, 28}, {}));
  const auto a = data::read_idx(dir / "empty");
  EXPECT_EQ(a.size(), 0U);
  EXPECT_EQ(a.dims.size(), 3U);
}

TEST(Idx, MissingFileIsIoError) {
  temp_dir dir;
  try {
    (void)data::read_idx(dir / "nope");
    ADD_FAILURE() << "no error";
  } catch (const mwstrat::io_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "nope").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(Idx, WrongMagic) {
  temp_dir dir;
  auto bytes = make_small_set(2, 2, 2).images;
  bytes[0] = 0x50;  // e.g. a PNG or a text file
  const auto file = (dir / "f").string();
  write_file(file, bytes);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "wrong magic: starts with 50 00 08 03");
  bytes[0] = 0;
  bytes[1] = 1;
  write_file(file, bytes);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "wrong magic");
}

TEST(Idx, UnknownElementType) {
  temp_dir dir;
  const auto file = (dir / "f").string();
  write_file(file, idx_bytes(0x0A, {1}, {0}));
  expect_data_error([&] { (void)data::read_idx(file); }, file, "unknown element type 0x0a");
}

TEST(Idx, BadDimensionCount) {
  temp_dir dir;
  const auto file = (dir / "f").string();
  write_file(file, {0, 0, 8, 0});
  expect_data_error([&] { (void)data::read_idx(file); }, file, "unsupported number of dimensions 0");
}

TEST(Idx, Truncated) {
  temp_dir dir;
  const auto file = (dir / "f").string();
  write_file(file, {0, 0});
  expect_data_error([&] { (void)data::read_idx(file); }, file, "truncated: 2 bytes, shorter than the 4-byte IDX magic");
  auto bytes = make_small_set(3, 2, 2).images;  // 4 + 12 header, 12 data
  write_file(file, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 10));
  expect_data_error([&] { (void)data::read_idx(file); }, file, "truncated header: 3 dimensions need 16 bytes, the file has 10");
  bytes.pop_back();
  write_file(file, bytes);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "truncated: the dimensions promise 12 bytes of data, the file has 11");
  write_file(file, idx_bytes(0x0C, {3}, std::vector<std::uint8_t>(11, 0)));  // i32: 12 bytes needed
  expect_data_error([&] { (void)data::read_idx(file); }, file, "promise 12 bytes of data, the file has 11");
}

TEST(Idx, TrailingBytesAreCorruption) {
  temp_dir dir;
  const auto file = (dir / "f").string();
  auto bytes = make_small_set(3, 2, 2).images;
  bytes.push_back(1);
  bytes.push_back(2);
  write_file(file, bytes);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "corrupt: 2 bytes after the data");
}

TEST(Idx, HugeDimensionsAreRefusedBeforeAllocating) {
  temp_dir dir;
  const auto file = (dir / "f").string();
  write_file(file, idx_bytes(0x0E, {0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU}, {}));
  expect_data_error([&] { (void)data::read_idx(file); }, file, "dimensions describe more than");
}

TEST(Idx, TruncatedGzip) {
  temp_dir dir;
  const auto file = (dir / "f.gz").string();
  const auto packed = gzip(make_small_set(50, 8, 8).images);
  write_file(file, std::vector<std::uint8_t>(packed.begin(), packed.begin() + static_cast<long>(packed.size() / 2)));
  expect_data_error([&] { (void)data::read_idx(file); }, file, "truncated gzip stream");
  // Only the 8-byte trailer (CRC, length) missing: still truncated.
  write_file(file, std::vector<std::uint8_t>(packed.begin(), packed.end() - 8));
  expect_data_error([&] { (void)data::read_idx(file); }, file, "truncated gzip stream");
}

TEST(Idx, CorruptGzip) {
  temp_dir dir;
  const auto file = (dir / "f.gz").string();
  auto packed = gzip(make_small_set(50, 8, 8).images);
  // A flipped bit in the CRC-32 of the trailer: the data inflates but fails its check.
  auto bad_crc = packed;
  bad_crc[bad_crc.size() - 6] ^= 0x10U;
  write_file(file, bad_crc);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "corrupt gzip stream (incorrect data check)");
  // The deflate stream itself broken: its first block header (byte 10, after the 10-byte gzip header) says
  // block type 3, which does not exist.
  auto bad_body = packed;
  bad_body[10] = 0x07;
  write_file(file, bad_body);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "corrupt gzip stream (invalid block type) at input byte");
  // Trailing garbage after a complete member.
  auto trailing = packed;
  trailing.push_back(0x42);
  trailing.push_back(0x42);
  write_file(file, trailing);
  expect_data_error([&] { (void)data::read_idx(file); }, file, "are not a gzip member");
}

TEST(Idx, GzipDecompressionLimit) {
  temp_dir dir;
  const auto file = (dir / "f.gz").string();
  write_file(file, gzip(make_small_set(100, 10, 10).images));
  data::idx_read_options options;
  options.max_bytes = 1000;
  expect_data_error([&] { (void)data::read_idx(file, options); }, file, "exceeds the limit of 1000 bytes");
}

TEST(Idx, ADirectoryOrAnOversizedFileIsRefusedBeforeAnythingIsRead) {
  temp_dir dir;
  const auto folder = (dir / "train-images-idx3-ubyte").string();
  std::filesystem::create_directory(folder);
  expect_data_error([&] { (void)data::read_idx(folder); }, folder, "not a regular file");
  // A sparse file of 64 GiB: read whole, it would take the machine's memory (or end in bad_alloc).
  const auto big = (dir / "big").string();
  write_file(big, {});
  std::filesystem::resize_file(big, std::uintmax_t{64} << 30U);
  expect_data_error([&] { (void)data::read_idx(big); }, big,
                    "file of 68719476736 bytes exceeds the limit of 8589934592 bytes");
  data::idx_read_options options;
  options.max_bytes = std::size_t{1} << 20U;
  expect_data_error([&] { (void)data::read_idx(big, options); }, big, "exceeds the limit of 1048576 bytes");
  // A file that starts like gzip is allowed a gzip's overhead over the limit, and its inflated size is checked.
  const auto set = make_small_set(100, 10, 10);  // 10 016 bytes
  const auto stored = (dir / "stored.gz").string();
  write_file(stored, gzip(set.images, 0));
  options.max_bytes = set.images.size();
  EXPECT_EQ(data::read_idx(stored, options).data.size(), 10000U);
  options.max_bytes = set.images.size() - 1;
  expect_data_error([&] { (void)data::read_idx(stored, options); }, stored, "exceeds the limit of 10015 bytes");
}

// zlib takes its input in slices (1 GiB each for a real file): a member that runs on across slices inflates whole,
// and only input that really ends inside a member is truncation.
TEST(Idx, GzipMemberAcrossInputSlicesInflatesWhole) {
  const auto set = make_small_set(40, 9, 9);
  const auto packed = gzip(set.images);
  ASSERT_GT(packed.size(), 100U);
  for (const std::size_t slice : {std::size_t{1}, std::size_t{7}, std::size_t{64}, packed.size() - 1}) {
    EXPECT_EQ(mwstrat::detail::gunzip(packed, "f.gz", std::size_t{1} << 20U, slice), set.images) << "slice " << slice;
  }
  auto two = gzip(std::vector<std::uint8_t>(set.images.begin(), set.images.begin() + 100));
  const auto rest = gzip(std::vector<std::uint8_t>(set.images.begin() + 100, set.images.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  EXPECT_EQ(mwstrat::detail::gunzip(two, "f.gz", std::size_t{1} << 20U, 5), set.images);
  const std::vector<std::uint8_t> cut(packed.begin(), packed.end() - 8);
  try {
    (void)mwstrat::detail::gunzip(cut, "f.gz", std::size_t{1} << 20U, 7);
    ADD_FAILURE() << "a member without its trailer inflated";
  } catch (const mwstrat::data_error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated gzip stream: input ended after " + std::to_string(cut.size()) +
                                         " bytes"),
              std::string::npos)
        << e.what();
  }
}

TEST(Idx, GzipOfBrokenIdxReportsTheIdxDefect) {
  temp_dir dir;
  const auto file = (dir / "f.gz").string();
  auto bytes = make_small_set(3, 2, 2).images;
  bytes.resize(bytes.size() - 3);
  write_file(file, gzip(bytes));
  expect_data_error([&] { (void)data::read_idx(file); }, file, "promise 12 bytes of data, the file has 9");
}

TEST(LoadLabeledImages, MatchingPair) {
  temp_dir dir;
  const auto set = make_small_set(12, 3, 4, 5);
  write_file(dir / "img", set.images);
  write_file(dir / "lbl.gz", gzip(set.labels));
  const auto images = data::load_labeled_images(dir / "img", dir / "lbl.gz");
  ASSERT_EQ(images.count(), 12U);
  EXPECT_EQ(images.rows(), 3U);
  EXPECT_EQ(images.cols(), 4U);
  EXPECT_EQ(images.example_size(), 12U);
  EXPECT_EQ(images.label(7), 2);
  EXPECT_EQ(images.image(2)[1], (2 * 7 + 1) % 256);
  ASSERT_EQ(images.file_counts().size(), 1U);
  EXPECT_EQ(images.file_counts()[0], 12U);
}

TEST(LoadLabeledImages, MismatchedCounts) {
  temp_dir dir;
  const auto ten = make_small_set(10, 2, 2);
  const auto nine = make_small_set(9, 2, 2);
  write_file(dir / "img", ten.images);
  write_file(dir / "lbl", nine.labels);
  const std::string img = (dir / "img").string();
  expect_data_error([&] { (void)data::load_labeled_images(dir / "img", dir / "lbl"); }, img,
                    "mismatched files: " + img + " holds 10 images but " + (dir / "lbl").string() + " holds 9 labels");
}

TEST(LoadLabeledImages, WrongShapesAndTypes) {
  temp_dir dir;
  const auto set = make_small_set(4, 2, 2);
  write_file(dir / "img", set.images);
  write_file(dir / "lbl", set.labels);
  // Labels given where images are expected: one dimension, not three.
  const std::string lbl = (dir / "lbl").string();
  expect_data_error([&] { (void)data::load_labeled_images(dir / "lbl", dir / "lbl"); }, lbl,
                    "images must have 3 dimensions (count, rows, cols), the file has 1");
  // Images given as labels.
  const std::string img = (dir / "img").string();
  expect_data_error([&] { (void)data::load_labeled_images(dir / "img", dir / "img"); }, img,
                    "labels must have 1 dimension, the file has 3");
  write_file(dir / "fimg", idx_bytes(0x0D, {1, 1, 1}, {0, 0, 0, 0}));
  expect_data_error([&] { (void)data::load_labeled_images(dir / "fimg", dir / "lbl"); }, (dir / "fimg").string(),
                    "images must be u8, the file holds f32");
  write_file(dir / "flbl", idx_bytes(0x0D, {4}, std::vector<std::uint8_t>(16, 0)));
  expect_data_error([&] { (void)data::load_labeled_images(dir / "img", dir / "flbl"); }, (dir / "flbl").string(),
                    "labels must be integers, the file holds f32");
}

TEST(LoadLabeledImages, LabelOutOfRange) {
  temp_dir dir;
  const auto set = make_small_set(4, 2, 2);
  write_file(dir / "img", set.images);
  write_file(dir / "lbl", idx_bytes(0x08, {4}, {1, 2, 10, 3}));
  const std::string lbl = (dir / "lbl").string();
  expect_data_error([&] { (void)data::load_labeled_images(dir / "img", dir / "lbl"); }, lbl,
                    "corrupt: label 10 of example 2 is outside [0, 10)");
}

TEST(LoadMnist, FindsRawOrGzAndChecksImageSize) {
  temp_dir dir;
  const auto set = make_small_set(3, 28, 28);
  write_file(dir / "train-images-idx3-ubyte.gz", gzip(set.images));
  write_file(dir / "train-labels-idx1-ubyte", set.labels);
  EXPECT_EQ(data::load_mnist(dir.path(), data::mnist_split::train).count(), 3U);
  EXPECT_THROW((void)data::load_mnist(dir.path(), data::mnist_split::test), mwstrat::io_error);
  const auto small = make_small_set(3, 27, 28);
  write_file(dir / "t10k-images-idx3-ubyte", small.images);
  write_file(dir / "t10k-labels-idx1-ubyte", small.labels);
  expect_data_error([&] { (void)data::load_fashion_mnist(data::mnist_split::test, dir.path()); },
                    (dir / "t10k-images-idx3-ubyte").string(), "Fashion-MNIST images are 28x28, the file holds 27x28");
}

}  // namespace idx_test
