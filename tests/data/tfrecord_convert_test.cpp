// tools/tfrecord_convert on the real data sets: MNIST's test split as 4 gzip shards of PNG examples reads back, in
// order, to the same pixels and labels as the IDX loader; CIFAR-10's test split as 3 zlib shards of raw bytes to
// the same as the binary loader; MNIST as 8 PNG shards streams (record_batches) the batches of the in-memory set,
// bit for bit; bad arguments exit 2 saying why. Skipped, saying so, where a data set is absent
// (scripts/test fetches both).
#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/feature_spec.hpp>
#include <mwstrat/data/file_list.hpp>
#include <mwstrat/data/images/image_decode.hpp>
#include <mwstrat/data/mnist.hpp>
#include <mwstrat/data/record_batches.hpp>
#include <mwstrat/data/tfrecord.hpp>

#include <support/process.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <algorithm>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tfrecord_convert_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;

const std::string tool = MWSTRAT_TFRECORD_CONVERT;

// Reads every shard matching `pattern` in order; checks each example against `set` (PNG or raw image bytes).
void expect_same_examples(const std::string& pattern, std::size_t shards, const labeled_images& set, bool png) {
  const auto files = list_files(pattern);
  ASSERT_EQ(files.size(), shards);
  const example_parser parser({{.name = "image", .type = feature_type::bytes},
                               {.name = "label", .type = feature_type::int64}});
  parsed_example parsed;
  decoded_image image;
  const image_decode_options expect{.channels = set.channels(), .rows = set.rows(), .cols = set.cols()};
  std::size_t i = 0;
  for (const auto& file : files) {
    tfrecord_reader reader(file);
    while (const auto rec = reader.next()) {
      ASSERT_LT(i, set.count()) << file;
      const record_location at{file.string(), rec->offset};
      parser.parse(rec->data, at, parsed);
      ASSERT_EQ(parsed.int64s(1)[0], set.label(i)) << "example " << i;
      const auto bytes = parsed.bytes(0);
      const auto want = set.image(i);
      if (png) {
        decode_png(bytes, image, at, "image", expect);
        ASSERT_TRUE(std::equal(image.pixels.begin(), image.pixels.end(), want.begin(), want.end())) << "example " << i;
      } else {
        ASSERT_EQ(bytes.size(), want.size());
        ASSERT_EQ(std::memcmp(bytes.data(), want.data(), want.size()), 0) << "example " << i;
      }
      ++i;
    }
  }
  EXPECT_EQ(i, set.count());
}

TEST(tfrecord_convert, mnist_shards_read_back_to_the_idx_loaders_pixels_and_labels) {
  const fs::path mnist = MWSTRAT_TEST_MNIST_DIR;
  if (!fs::exists(mnist / "t10k-images-idx3-ubyte") && !fs::exists(mnist / "t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "SKIPPED: no MNIST in " << mnist << " (scripts/fetch-mnist)";
  }
  test::temp_dir dir("tfrecord-convert");
  const auto r = test::run(tool + " mnist " + mnist.string() + " " + (dir / "out").string() +
                               " --split test --shards 4 --compression gzip", 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 10000 examples of mnist test to 4 shards"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "out" / "mnist-test.tfrecord-00003-of-00004"));
  EXPECT_EQ(tfrecord_reader(dir / "out" / "mnist-test.tfrecord-00000-of-00004").compression(), tfrecord_compression::gzip);
  expect_same_examples((dir / "out" / "mnist-test.tfrecord-*-of-00004").string(), 4,
                       load_mnist(mnist, mnist_split::test), true);
}

TEST(tfrecord_convert, mnist_as_8_png_shards_streams_the_batches_of_the_in_memory_set) {
  const fs::path mnist = MWSTRAT_TEST_MNIST_DIR;
  if (!fs::exists(mnist / "t10k-images-idx3-ubyte") && !fs::exists(mnist / "t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "SKIPPED: no MNIST in " << mnist << " (scripts/fetch-mnist)";
  }
  test::temp_dir dir("tfrecord-convert");
  const auto r = test::run(tool + " mnist " + mnist.string() + " " + (dir / "out").string() +
                               " --split test --shards 8", 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto files = list_files((dir / "out" / "mnist-test.tfrecord-*").string());
  ASSERT_EQ(files.size(), 8U);
  const labeled_images set = load_mnist(mnist, mnist_split::test);
  record_image_format format;
  format.shape = set.shape();
  format.decode = png_jpeg_decoder();
  for (int w = 0; w < 2; ++w) {
    distribution_options o;
    o.global_batch = 128;
    o.num_workers = 2;
    o.worker_index = w;
    o.seed = 42;
    o.policy = data_shard{};
    distributed_batches memory(set, o);
    record_batches records(files, format, o);
    ASSERT_EQ(records.count(), set.count());
    ASSERT_EQ(records.steps_per_epoch(), memory.steps_per_epoch());
    std::vector<float> a(64 * 784), b(64 * 784);
    std::vector<std::int64_t> la(64), lb(64);
    const std::uint64_t last = memory.steps_per_epoch() - 1;
    for (const data_cursor at : {data_cursor{0, 0, 42}, data_cursor{0, 1, 42}, data_cursor{0, last, 42},
                                 data_cursor{1, 0, 42}, data_cursor{3, 17, 42}}) {
      (void)memory.fill(at, a, la);
      (void)records.fill(at, b, lb);
      ASSERT_EQ(la, lb) << "worker " << w << " pass " << at.epoch << " step " << at.step;
      ASSERT_EQ(a, b) << "worker " << w << " pass " << at.epoch << " step " << at.step;
    }
  }
}

TEST(tfrecord_convert, cifar10_shards_of_raw_bytes_read_back_to_the_binary_loaders) {
  const fs::path cifar = MWSTRAT_TEST_CIFAR10_DIR;
  labeled_images set;
  try {
    set = load_cifar10(cifar, cifar10_split::test);
  } catch (const error& e) {
    GTEST_SKIP() << "SKIPPED: no CIFAR-10 in " << cifar << " (scripts/fetch-cifar10): " << e.what();
  }
  test::temp_dir dir("tfrecord-convert");
  const auto r = test::run(tool + " cifar10 " + cifar.string() + " " + (dir / "out").string() +
                               " --split test --shards 3 --image raw --compression zlib", 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_examples((dir / "out" / "cifar10-test.tfrecord-*").string(), 3, set, false);
}

TEST(tfrecord_convert, bad_arguments_exit_2_saying_why) {
  test::temp_dir dir("tfrecord-convert");
  const auto expect = [&](const std::string& args, const std::string& text, int code = 2) {
    const auto r = test::run(tool + " " + args, 60);
    EXPECT_EQ(r.exit_code, code) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(text), std::string::npos) << r.output;
  };
  expect("", "expected 3 arguments, got 0");
  expect("imagenet a b", "the data set is mnist, fashion_mnist or cifar10, not imagenet");
  expect("mnist a b --shards 0", "--shards is a number from 1 to 100000, not 0");
  expect("mnist a b --compression lz4", "--compression is none, gzip or zlib, not lz4");
  expect("mnist " + (dir / "none").string() + " " + (dir / "out").string(), "tfrecord_convert: ", 1);
}

}  // namespace tfrecord_convert_test
