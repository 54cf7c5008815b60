// The CIFAR-10 ResNet example's refusals (any build): bad flags and a missing data set are errors that say what
// was wrong, before any training.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

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

TEST(cifar10_resnet_example, a_missing_data_set_is_an_error_naming_the_file) {
  scratch_dir dir;
  const auto r = run(resnet_example + " --data-dir " + (dir / "nothing-here") + " --epochs 1", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("nothing-here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data_batch_1.bin"), std::string::npos) << r.output;
}

}  // namespace
