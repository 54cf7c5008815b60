// The CIFAR-10 ResNet example's refusals (any build): bad flags and a missing data set are errors that say what
// was wrong, before any training. And its learning rates (examples/cifar10_resnet/tutorial_schedule.hpp).
#include "example_support.hpp"

#include "../../examples/cifar10_resnet/tutorial_schedule.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace cifar10_resnet_test {

using namespace mwstrat::test;
const std::string resnet_example = MWSTRAT_EXAMPLE_CIFAR10_RESNET;

TEST(cifar10_resnet_example, refuses_a_depth_that_is_not_6n_plus_2) {
  const auto r = run(resnet_example + " --depth 21", 60);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--depth: 21 is not 6n + 2"), std::string::npos) << r.output;
}

TEST(cifar10_resnet_example, refuses_an_unknown_variant) {
  const auto r = run(resnet_example + " --variant keras", 60);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--variant: 'keras' is not tf or he"), std::string::npos) << r.output;
}

TEST(cifar10_resnet_example, refuses_an_unknown_schedule_and_a_warm_up_as_long_as_the_run) {
  auto r = run(resnet_example + " --schedule linear", 60);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--schedule: 'linear' is not piecewise or cosine"), std::string::npos) << r.output;
  r = run(resnet_example + " --schedule cosine --epochs 3 --warmup-epochs 3", 60);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--warmup-epochs must be fewer than --epochs"), std::string::npos) << r.output;
}

TEST(cifar10_resnet_example, refuses_a_validation_frequency_of_zero) {
  const auto r = run(resnet_example + " --validation-freq 0", 60);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--validation-freq: '0' is not a whole number in [1, 1000000]"), std::string::npos) << r.output;
}

// The tutorial trains epochs 1-30 at the rate, 31-45 at a tenth, 46-60 at a hundredth (`epoch >= 30` with Keras's
// 0-based epoch index, which is what LearningRateScheduler passes: fit_test checks that). The by-epoch schedule and
// the by-step one (at the first and the last step of every epoch) agree with it; the by-epoch one once dropped one
// epoch late.
TEST(cifar10_resnet_example, the_tutorial_schedule_drops_the_rate_after_epochs_30_and_45_by_epoch_and_by_step) {
  const double lr = 0.1;
  const std::int64_t steps_per_epoch = 195;  // 50 000 examples, global batch 256
  const auto by_epoch = cifar10_resnet::tutorial_rate_by_epoch(lr);
  const mwstrat::nn::learning_rate by_step = cifar10_resnet::tutorial_rate_by_step(lr, steps_per_epoch, 0);
  for (int epoch = 1; epoch <= 60; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    const double want = epoch <= 30 ? lr : epoch <= 45 ? lr * 0.1 : lr * 0.01;
    EXPECT_EQ(by_epoch(epoch - 1, lr), want);
    EXPECT_EQ(by_step.at((epoch - 1) * steps_per_epoch), want);
    EXPECT_EQ(by_step.at(epoch * steps_per_epoch - 1), want);
  }
  // A warm-up rises linearly from 0 to the rate over its steps, then hands over to the same drops.
  const mwstrat::nn::learning_rate warm = cifar10_resnet::tutorial_rate_by_step(lr, steps_per_epoch, 100);
  EXPECT_EQ(warm.at(0), 0.0);
  EXPECT_NEAR(warm.at(50), lr / 2, 1e-12);
  EXPECT_EQ(warm.at(30 * steps_per_epoch - 1), lr);
  EXPECT_EQ(warm.at(30 * steps_per_epoch), lr * 0.1);
}

TEST(cifar10_resnet_example, a_missing_data_set_is_an_error_naming_the_file) {
  scratch_dir dir;
  const auto r = run(resnet_example + " --data-dir " + (dir / "nothing-here") + " --epochs 1", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("nothing-here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data_batch_1.bin"), std::string::npos) << r.output;
}

}  // namespace cifar10_resnet_test
