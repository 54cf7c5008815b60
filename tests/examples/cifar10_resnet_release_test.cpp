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

fs::path resnet_job(const scratch_dir& dir, const std::string& name, int workers, const std::string& flags) {
  const auto r = run(launcher + " -n " + std::to_string(workers) + " -- " + resnet_example + " --data-dir " +
                         cifar_dir + " --seed 7 --no-test" + flags + " --model-dir " + (dir / name),
                     900);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir.path() / name / "model.safetensors";
}

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
  // One step of ResNet-20 (SGD momentum 0.9, lr 0.1): measured 2.6e-6. Issue 17's 1e-5 after 10 steps is not
  // met in float, and cannot be by any float implementation of this model: from step 2 on the two runs' weights
  // differ by float rounding (~1e-7 relative), so their activations do too, and a ReLU whose input lies within
  // that rounding of zero passes its gradient in one run and blocks it in the other. A batch of 128 has ~24 M ReLU
  // inputs, a few of them that close to zero every step, so from step 2 each batch-norm layer's beta/gamma
  // gradient and everything below it differs by one element's gradient (measured in-process, 2 replica threads × 4
  // vs 1 × 8 on ResNet-20: step 1 3.8e-7, step 2 3.7e-4 — one ReLU input 1.7e-7 in float, 0 in double, dy
  // -3.7e-4 — then growing as momentum and lr carry it: 0.05 after 10 steps at lr 0.001; ~1 at lr 0.1, which
  // also doubles any difference every step). Not a defect of the cross-replica sums or of the step >= 2 state:
  // the same comparison in double stays within 1e-10 over 10 steps at lr 0.1 (tests/nn/graph_model_test.cpp,
  // NnGraphModel.SyncBatchNormTwoReplicasMatchOneOverTenMomentumSteps), and each float gradient matches its
  // double counterpart to 2e-6. So in float one step is held to 1e-5 and 10 steps to the loss.
  const std::string flags = " --depth 20 --epochs 1 --validation-steps 1";
  const auto one = saved_weights(resnet_job(dir, "one", 1, flags + " --steps-per-epoch 1 --sync-batch-norm --batch-size 128"));
  const auto two = saved_weights(resnet_job(dir, "two", 2, flags + " --steps-per-epoch 1 --sync-batch-norm --batch-size 64"));
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(one.size(), 275162u);  // ResNet-20 (TF variant): trained parameters + moving statistics
  EXPECT_LT(worst_relative(one, two), 1e-5);
  // Plain batch norm normalises each worker's 64 on their own: a different computation (measured 0.61).
  const auto plain = saved_weights(resnet_job(dir, "plain", 2, flags + " --steps-per-epoch 1 --batch-size 64"));
  EXPECT_GT(worst_relative(one, plain), 1e-2);
  // Ten steps: the mean training loss of the epoch within 1e-3 (measured 3.3110 vs 3.3101).
  auto loss_of = [&](int workers, const std::string& batch) {
    const auto r = run(launcher + " -n " + std::to_string(workers) + " -- " + resnet_example + " --data-dir " +
                           cifar_dir + " --seed 7 --no-test" + flags + " --steps-per-epoch 10 --sync-batch-norm" + batch,
                       900);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return number_after(r.output, "10/10 [", " loss: ");
  };
  const double l1 = loss_of(1, " --batch-size 128");
  const double l2 = loss_of(2, " --batch-size 64");
  ASSERT_GT(l1, 0);
  EXPECT_LT(std::abs(l1 - l2) / l1, 1e-3) << l1 << " vs " << l2;
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
