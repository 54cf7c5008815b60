// The CIFAR-10 ResNet example (the multi-node tutorial's program) run for real: worker processes on 127.0.0.1,
// the real CIFAR-10 (scripts/fetch-cifar10 puts it in .cache/cifar10), real files. Optimised builds only.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

namespace {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string resnet_example = MWSTRAT_EXAMPLE_CIFAR10_RESNET;
const std::string cifar_dir = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/.cache/cifar10";

bool have_cifar() { return fs::exists(fs::path(cifar_dir) / "cifar-10-batches-bin" / "test_batch.bin"); }

// Largest |a - b| / max(|a|, 1% of the largest |a|) over every saved value (weights and moving statistics).
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 0;
  for (const float w : a) scale = std::max(scale, std::abs(w));
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(std::abs(double(a[i])), 1e-2 * double(scale)));
  return worst;
}

TEST(cifar10_resnet_example_release, sync_batch_norm_two_workers_of_64_equal_one_worker_of_128) {
  if (!have_cifar()) GTEST_SKIP() << "no CIFAR-10 in " << cifar_dir << " (scripts/fetch-cifar10 puts it there)";
  scratch_dir dir;
  // Ten steps of ResNet-20 (SGD momentum 0.9, lr 0.1, L2 2e-4) on the real CIFAR-10, two worker processes over the
  // ring against one: every sum over the batch is an aligned tree over power-of-two blocks of samples and the L2
  // gradients are added after the replicas' mean (nn/detail/batch_sum.hpp), so the two runs must agree bit for bit
  // — far inside the 1e-5. (Before those sums, one step agreed to 2.6e-6 and ten drifted apart to ~1: a
  // ReLU input within rounding of zero passes its gradient in one run and blocks it in the other, and lr 0.1 then
  // doubles any difference every step.)
  const std::string flags = " --depth 20 --epochs 1 --validation-steps 1 --steps-per-epoch 10";
  auto weights_and_loss = [&](const std::string& name, int workers, const std::string& more) {
    const auto r = run(launcher + " -n " + std::to_string(workers) + " -- " + resnet_example + " --data-dir " +
                           cifar_dir + " --seed 7 --no-test" + flags + more + " --model-dir " + (dir / name),
                       900);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair{saved_weights(dir.path() / name / "model.safetensors"), number_after(r.output, "10/10 [", " loss: ")};
  };
  const auto [one, one_loss] = weights_and_loss("one", 1, " --sync-batch-norm --batch-size 128");
  const auto [two, two_loss] = weights_and_loss("two", 2, " --sync-batch-norm --batch-size 64");
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(one.size(), 275162u);  // ResNet-20 (TF variant): trained parameters + moving statistics
  std::size_t differing = 0;
  for (std::size_t i = 0; i < one.size(); ++i) differing += one[i] != two[i] ? 1 : 0;
  EXPECT_EQ(differing, 0u) << "worst relative difference " << worst_relative(one, two);
  EXPECT_GT(one_loss, 0);
  EXPECT_EQ(one_loss, two_loss);  // the epoch's mean training loss, as printed
  // Plain batch norm normalises each worker's 64 on their own: a different computation.
  const auto [plain, plain_loss] = weights_and_loss("plain", 2, " --batch-size 64");
  EXPECT_GT(worst_relative(one, plain), 1e-2);
}

TEST(cifar10_resnet_example_release, two_workers_train_resnet20_well_above_chance) {
  if (!have_cifar()) GTEST_SKIP() << "no CIFAR-10 in " << cifar_dir << " (scripts/fetch-cifar10 puts it there)";
  // A fixed number of steps (a full epoch took ~11 min on the shared 2-core machine): 100 global steps of 2 × 128.
  // Batch norm momentum 0.9 instead of TF's 0.997: after 100 steps 0.997's moving statistics are still 74% their
  // initial 0 and 1, and the test set (inference mode) scores near chance although training accuracy is ~32%.
  // Measured (seed 1): test accuracy 0.3664 after the 100 steps; threshold 0.25, chance is 0.10.
  const auto r = run(launcher + " -n 2 -- " + resnet_example + " --data-dir " + cifar_dir +
                         " --depth 20 --epochs 1 --steps-per-epoch 100 --bn-momentum 0.9 --seed 1",
                     900);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Layer (type)"), std::string::npos);  // the chief's summary
  EXPECT_NE(r.output.find("val_accuracy:"), std::string::npos);
  const double accuracy = number_after(r.output, "test: loss=", " accuracy=");
  EXPECT_GT(accuracy, MWSTRAT_RESNET20_100_STEPS_MIN_ACCURACY) << r.output;
}

}  // namespace
