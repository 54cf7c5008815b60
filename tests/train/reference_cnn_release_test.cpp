// The synchronous-data-parallel guarantee with the reference CNN on real MNIST, in one process:
// 4 local replicas × per-replica batch B train exactly like 1 replica × 4B. Optimised builds only.
#include <mwstrat/data/mnist.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/strategy/local_mirrored_strategy.hpp>
#include <mwstrat/train/distributed_input.hpp>
#include <mwstrat/train/fit.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

namespace reference_cnn_release_test {

std::vector<float> train(int replicas, std::size_t global_batch, const mwstrat::data::labeled_images& set) {
  std::vector<float> result;
  std::mutex m;
  mwstrat::run_mirrored_replicas(replicas, [&](mwstrat::local_mirrored_strategy& strategy) {
    mwstrat::nn::model_options o;
    o.seed = 100 + static_cast<std::uint64_t>(strategy.replica_id());  // differs: fit mirrors the chief's
    auto model = mwstrat::nn::reference_cnn(o);
    mwstrat::nn::sgd sgd(0.05);
    mwstrat::distributed_input data(set, global_batch, strategy, 3);
    mwstrat::fit_options fo;
    fo.steps_per_epoch = 20;
    mwstrat::fit(strategy, model, sgd, data, fo);
    if (strategy.is_chief()) {
      const std::lock_guard lock(m);
      result.assign(model.parameters().begin(), model.parameters().end());
    }
  });
  return result;
}

TEST(reference_cnn_release, four_local_replicas_of_b_equal_one_of_4b) {
  const auto set = mwstrat::data::load_mnist(MWSTRAT_TEST_MNIST_DIR, mwstrat::data::mnist_split::train);
  const auto one = train(1, 128, set);
  const auto four = train(4, 128, set);
  ASSERT_EQ(one.size(), 2770634u);
  ASSERT_EQ(four.size(), one.size());
  float scale = 0;
  for (const float w : one) scale = std::max(scale, std::abs(w));
  double worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i) {
    const double d = std::abs(double(one[i]) - double(four[i]));
    worst = std::max(worst, d / std::max(std::abs(double(one[i])), 1e-2 * double(scale)));
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(train(4, 128, set), four) << "the same world size and seed give the same bits";
}

}  // namespace reference_cnn_release_test
