// examples/custom_loop and examples/custom_tensor, run for real in short configurations.
#include "example_support.hpp"

#include <mwstrat/checkpoint/training_state.hpp>

#include <gtest/gtest.h>

#include <string>

namespace other_examples_test {

using namespace mwstrat::test;

TEST(custom_loop_example, two_ring_workers_learn_with_the_strategy_used_directly) {
  const auto r = run(launcher + " -n 2 -- " + std::string(MWSTRAT_EXAMPLE_CUSTOM_LOOP) + " --data-dir " + mnist_dir +
                         " --steps 50",
                     240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(number_after(r.output, "[worker 0] step 50: loss=", " accuracy="), 0.6) << r.output;
  EXPECT_EQ(r.output.find("[worker 1] step"), std::string::npos) << "only the chief prints";
}

#ifdef MWSTRAT_EXAMPLE_CUSTOM_TENSOR
TEST(custom_tensor_example, an_eigen_model_trains_on_local_replicas_and_checkpoints_named_tensors) {
  scratch_dir dir;
  const auto r = run(std::string(MWSTRAT_EXAMPLE_CUSTOM_TENSOR) + " --data-dir " + mnist_dir +
                         " --replicas 2 --steps 40 --checkpoint-dir " + (dir / "ckpt"),
                     240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(number_after(r.output, "test: loss=", " accuracy="), 0.6) << r.output;
  const mwstrat::training_state s = mwstrat::load_training_state(dir.path() / "ckpt" / "mlp-40.safetensors");
  ASSERT_EQ(s.weights.size(), 4u);
  EXPECT_EQ(s.weights[0].name, "dense/kernel");
  EXPECT_EQ(s.weights[0].shape, (std::vector<std::int64_t>{64, 784}));
  EXPECT_EQ(s.weights[3].name, "dense_1/bias");
  EXPECT_EQ(s.model_fingerprint, "mlp(784-64-10)");
}
#endif

}  // namespace other_examples_test
