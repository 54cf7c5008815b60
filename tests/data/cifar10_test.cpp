// The CIFAR-10 reader: small batch files written here in the official layout ([label][1024 R][1024 G][1024 B]
// records) read back as HWC images with the right labels and file counts; every refusal (missing file, truncated,
// wrong size, label 10) names the file and the record and loads nothing; and the real data set in .cache/cifar10
// (skipped, saying why, when scripts/fetch-cifar10 has not run).

#include "idx_files.hpp"

#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/distributed.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cifar10_test {

using namespace mwstrat_data_test;
namespace data = mwstrat::data;

constexpr std::size_t plane = 1024;
constexpr std::size_t record_size = 3073;

// The value of channel c at pixel p of record r in file f: distinct enough that a mixed-up plane shows.
std::uint8_t pixel_value(std::size_t f, std::size_t r, std::size_t c, std::size_t p) {
  return static_cast<std::uint8_t>((f * 53 + r * 31 + c * 101 + p * 7) % 256);
}

std::int64_t label_value(std::size_t f, std::size_t r) { return static_cast<std::int64_t>((f * 3 + r) % 10); }

// `records` records of file number f in the official layout.
std::vector<std::uint8_t> batch_bytes(std::size_t f, std::size_t records) {
  std::vector<std::uint8_t> out;
  for (std::size_t r = 0; r < records; ++r) {
    out.push_back(static_cast<std::uint8_t>(label_value(f, r)));
    for (std::size_t c = 0; c < 3; ++c) {
      for (std::size_t p = 0; p < plane; ++p) {
        out.push_back(pixel_value(f, r, c, p));
      }
    }
  }
  return out;
}

// Writes the five training files and the test file, `records` each, under dir/cifar-10-batches-bin.
std::filesystem::path write_cifar(const std::filesystem::path& dir, std::size_t records) {
  const auto bin = dir / "cifar-10-batches-bin";
  std::filesystem::create_directories(bin);
  for (std::size_t f = 0; f < 5; ++f) {
    write_file(bin / ("data_batch_" + std::to_string(f + 1) + ".bin"), batch_bytes(f, records));
  }
  write_file(bin / "test_batch.bin", batch_bytes(5, records));
  return bin;
}

// Runs `f`, expects a data_error of component cifar10 naming `file` and containing each of `what`.
template <class F>
void expect_cifar_error(F&& f, const std::filesystem::path& file, const std::vector<std::string>& what) {
  try {
    f();
    ADD_FAILURE() << "no data_error; expected one about " << file;
  } catch (const mwstrat::data_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.component(), "cifar10") << message;
    EXPECT_EQ(e.path(), file.string()) << message;
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    for (const auto& w : what) {
      EXPECT_NE(message.find(w), std::string::npos) << "missing '" << w << "' in: " << message;
    }
  }
}

TEST(Cifar10, ReadsTheOfficialLayoutAsHwc) {
  temp_dir dir("cifar10");
  write_cifar(dir.path(), 3);
  const auto options = data::cifar10_options{3};
  const auto train = data::load_cifar10(dir.path(), data::cifar10_split::train, options);
  ASSERT_EQ(train.count(), 15U);
  EXPECT_EQ(train.rows(), 32U);
  EXPECT_EQ(train.cols(), 32U);
  EXPECT_EQ(train.channels(), 3U);
  EXPECT_EQ(train.example_size(), 3072U);
  EXPECT_EQ(std::vector<std::size_t>(train.file_counts().begin(), train.file_counts().end()),
            (std::vector<std::size_t>{3, 3, 3, 3, 3}));
  for (std::size_t f = 0; f < 5; ++f) {
    for (std::size_t r = 0; r < 3; ++r) {
      const std::size_t i = f * 3 + r;
      EXPECT_EQ(train.label(i), label_value(f, r));
      const auto image = train.image(i);
      for (const std::size_t p : {std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{1023}}) {
        for (std::size_t c = 0; c < 3; ++c) {
          ASSERT_EQ(image[p * 3 + c], pixel_value(f, r, c, p)) << "file " << f << " record " << r << " pixel " << p;
        }
      }
    }
  }
  const auto test = data::load_cifar10(dir.path(), data::cifar10_split::test, options);
  ASSERT_EQ(test.count(), 3U);
  EXPECT_EQ(test.label(2), label_value(5, 2));
  EXPECT_EQ(test.image(2)[5 * 3 + 1], pixel_value(5, 2, 1, 5));

  // The folder holding the .bin files directly works too.
  const auto direct = data::load_cifar10(dir / "cifar-10-batches-bin", data::cifar10_split::test, options);
  EXPECT_TRUE(std::equal(direct.pixels().begin(), direct.pixels().end(), test.pixels().begin(), test.pixels().end()));
}

TEST(Cifar10, MissingFileIsIoErrorNamingIt) {
  temp_dir dir("cifar10");
  const auto bin = write_cifar(dir.path(), 2);
  std::filesystem::remove(bin / "data_batch_4.bin");
  try {
    (void)data::load_cifar10(dir.path(), data::cifar10_split::train, {2});
    ADD_FAILURE() << "no io_error";
  } catch (const mwstrat::io_error& e) {
    EXPECT_NE(std::string(e.what()).find((bin / "data_batch_4.bin").string()), std::string::npos) << e.what();
  }
  // The test split does not need the training files.
  EXPECT_EQ(data::load_cifar10(dir.path(), data::cifar10_split::test, {2}).count(), 2U);
}

TEST(Cifar10, TruncatedFileNamesTheRecordCutShort) {
  temp_dir dir("cifar10");
  const auto bin = write_cifar(dir.path(), 3);
  const auto file = bin / "data_batch_2.bin";
  auto bytes = read_file(file);
  bytes.resize(record_size + 100);  // record 1 cut short
  write_file(file, bytes);
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::train, {3}); }, file,
                     {"truncated", "record 1", std::to_string(record_size + 100) + " bytes", "expected 3 records"});
  bytes.clear();  // empty: record 0
  write_file(file, bytes);
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::train, {3}); }, file,
                     {"truncated", "record 0"});
}

TEST(Cifar10, WrongSizedFileIsRefused) {
  temp_dir dir("cifar10");
  const auto bin = write_cifar(dir.path(), 3);
  const auto file = bin / "test_batch.bin";
  auto bytes = read_file(file);
  bytes.push_back(0);  // one byte too many
  write_file(file, bytes);
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::test, {3}); }, file,
                     {"wrong size", std::to_string(3 * record_size + 1) + " bytes", "record 3"});
  // Whole extra records are also wrong: the official files hold exactly 10 000 records.
  write_file(file, batch_bytes(5, 4));
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::test, {3}); }, file,
                     {"wrong size"});
  // A file of the right size for 3 records read as the official 10 000 is truncated.
  write_file(file, batch_bytes(5, 3));
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::test); }, file,
                     {"truncated", "record 3", "expected 10000 records"});
}

TEST(Cifar10, LabelTenNamesFileAndRecord) {
  temp_dir dir("cifar10");
  const auto bin = write_cifar(dir.path(), 4);
  const auto file = bin / "data_batch_5.bin";
  auto bytes = read_file(file);
  bytes[2 * record_size] = 10;  // record 2's label
  write_file(file, bytes);
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::train, {4}); }, file,
                     {"record 2", "label 10", "[0, 10)"});
  bytes[2 * record_size] = 255;
  write_file(file, bytes);
  expect_cifar_error([&] { (void)data::load_cifar10(dir.path(), data::cifar10_split::train, {4}); }, file,
                     {"record 2", "label 255"});
  // One file read into vectors that already hold another's images: the refusal leaves them as they were.
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  data::read_cifar10_batch(bin / "data_batch_1.bin", 4, pixels, labels);
  const auto pixels_before = pixels;
  const auto labels_before = labels;
  expect_cifar_error([&] { data::read_cifar10_batch(file, 4, pixels, labels); }, file, {"record 2", "label 255"});
  EXPECT_EQ(pixels, pixels_before);
  EXPECT_EQ(labels, labels_before);
}

TEST(Cifar10, ZeroRecordsPerFileIsAConfigError) {
  temp_dir dir("cifar10");
  write_cifar(dir.path(), 1);
  EXPECT_THROW((void)data::load_cifar10(dir.path(), data::cifar10_split::test, {0}), mwstrat::config_error);
}

TEST(Cifar10, RealDataSet) {
  const std::filesystem::path dir = MWSTRAT_TEST_CIFAR10_DIR;
  if (!std::filesystem::exists(dir / "cifar-10-batches-bin" / "test_batch.bin")) {
    GTEST_SKIP() << "CIFAR-10 not found in " << dir << " (scripts/fetch-cifar10 fills it)";
  }
  const auto train = data::load_cifar10(dir, data::cifar10_split::train);
  const auto test = data::load_cifar10(dir, data::cifar10_split::test);
  ASSERT_EQ(train.count(), 50000U);
  ASSERT_EQ(test.count(), 10000U);
  EXPECT_EQ(train.class_counts(10), std::vector<std::size_t>(10, 5000));
  EXPECT_EQ(test.class_counts(10), std::vector<std::size_t>(10, 1000));
  EXPECT_EQ(train.file_counts().size(), 5U);
  // The first training image's label (a frog, 6) and the first test image's (a cat, 3), as published.
  EXPECT_EQ(train.label(0), 6);
  EXPECT_EQ(test.label(0), 3);
  const auto [lo, hi] = std::minmax_element(test.pixels().begin(), test.pixels().end());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
  // Five files make five file shards: two workers get whole batch files.
  data::distribution_options o;
  o.global_batch = 256;
  o.num_workers = 2;
  o.worker_index = 1;
  o.policy = data::file_shard{};
  const data::distributed_batches shard(train, o);
  EXPECT_EQ(shard.mode(), data::shard_mode::file);
}

}  // namespace cifar10_test
