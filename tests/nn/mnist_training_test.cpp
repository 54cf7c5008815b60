// Release-only: one worker trains the reference CNN on the real MNIST for one epoch (Adam, batch 128) and must
// reach at least 97% accuracy on the 10 000 test images.
#include <mwstrat/nn.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

namespace nn = mwstrat::nn;

namespace mnist_training_test {

// A minimal raw IDX reader (magic, big-endian dimensions, unsigned bytes), enough for this test.
std::vector<std::uint8_t> read_idx(const std::string& path, std::vector<std::uint32_t>& dims) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  unsigned char head[4];
  in.read(reinterpret_cast<char*>(head), 4);
  if (head[0] != 0 || head[1] != 0 || head[2] != 0x08) return {};
  dims.assign(head[3], 0);
  std::size_t count = 1;
  for (auto& d : dims) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    d = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
    count *= d;
  }
  std::vector<std::uint8_t> data(count);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(count));
  if (static_cast<std::size_t>(in.gcount()) != count) return {};
  return data;
}

struct split {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::size_t n = 0;
};

split load(const std::string& dir, const std::string& prefix) {
  std::vector<std::uint32_t> di, dl;
  auto images = read_idx(dir + "/" + prefix + "-images-idx3-ubyte", di);
  auto labels = read_idx(dir + "/" + prefix + "-labels-idx1-ubyte", dl);
  split s;
  if (images.empty() || labels.empty() || di.size() != 3 || di[1] != 28 || di[2] != 28 || di[0] != dl[0]) return s;
  s.n = di[0];
  s.x.resize(images.size());
  for (std::size_t i = 0; i < images.size(); ++i) s.x[i] = static_cast<float>(images[i]) / 255.0f;
  s.y.assign(labels.begin(), labels.end());
  return s;
}


TEST(NnMnistTraining, OneEpochOfAdamReaches97PercentTestAccuracy) {
  const std::string dir = MWSTRAT_TEST_MNIST_DIR;
  const auto train = load(dir, "train");
  const auto test = load(dir, "t10k");
  if (train.n == 0 || test.n == 0) GTEST_SKIP() << "MNIST IDX files not found in " << dir << " (scripts/fetch-mnist)";

  auto model = nn::reference_cnn({.threads = 1, .seed = 1, .max_batch = 128});
  nn::adam opt;  // Keras defaults
  std::vector<std::size_t> order(train.n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = order.size() - 1; i > 0; --i)  // seeded Fisher-Yates
    std::swap(order[i], order[mwstrat::detail::random_bits(2024, 0, i) % (i + 1)]);

  const std::size_t batch = 128;
  std::vector<float> xb(batch * 784);
  std::vector<std::int64_t> yb(batch);
  nn::mean_metric loss;
  nn::sparse_categorical_accuracy train_acc;
  for (std::size_t start = 0; start < train.n; start += batch) {
    const std::size_t n = std::min(batch, train.n - start);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t s = order[start + i];
      std::copy_n(train.x.begin() + static_cast<std::ptrdiff_t>(s * 784), 784, xb.begin() + static_cast<std::ptrdiff_t>(i * 784));
      yb[i] = train.y[s];
    }
    const auto st = model.train_batch(std::span<const float>(xb).first(n * 784), std::span<const std::int64_t>(yb).first(n), n);
    opt.apply(model.parameters(), model.gradients());
    loss.update_sum(st.loss_sum, static_cast<double>(st.count));
    train_acc.update_counts(st.correct, st.count);
  }
  nn::sparse_categorical_accuracy test_acc;
  for (std::size_t start = 0; start < test.n; start += 500) {
    const std::size_t n = std::min<std::size_t>(500, test.n - start);
    const auto st = model.evaluate_batch(std::span<const float>(test.x).subspan(start * 784, n * 784),
                                         std::span<const std::int64_t>(test.y).subspan(start, n), n);
    test_acc.update_counts(st.correct, st.count);
  }
  std::printf("epoch 1: loss %.4f, train accuracy %.4f, test accuracy %.4f\n", loss.result(), train_acc.result(),
              test_acc.result());
  EXPECT_GE(test_acc.result(), 0.97);
}

}  // namespace mnist_training_test
