// examples/custom_loop and examples/custom_tensor, run for real in short configurations.
#include "example_support.hpp"

#include <mwstrat/checkpoint/training_state.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

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
  // tensor_model's fingerprint names every tensor and shape, then the model's own.
  EXPECT_EQ(s.model_fingerprint,
            "tensor_model(dense/kernel[64,784],dense/bias[64,1],dense_1/kernel[10,64],dense_1/bias[10,1]) "
            "mlp(784-64-10)");
}

// The Eigen model has no arena, only separate tensors: two replicas × 32 must train what one replica × 64 trains
// (the same global batches), up to the order of the additions in the gradient mean.
TEST(custom_tensor_example, separate_tensors_on_two_replicas_match_one_replica_with_the_whole_batch) {
  scratch_dir dir;
  const auto train = [&](int replicas, int batch, const std::string& out) {
    const auto r = run(std::string(MWSTRAT_EXAMPLE_CUSTOM_TENSOR) + " --data-dir " + mnist_dir + " --replicas " +
                           std::to_string(replicas) + " --batch " + std::to_string(batch) +
                           " --steps 5 --weights-out " + (dir / out),
                       240);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(dir.path() / out, std::ios::binary);
    std::vector<float> w((784 * 64 + 64 + 640 + 10));
    in.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
    EXPECT_TRUE(in.good()) << out;
    return w;
  };
  const std::vector<float> one = train(1, 64, "one.f32"), two = train(2, 32, "two.f32");
  ASSERT_EQ(one.size(), two.size());
  double largest = 0, worst = 0;
  for (const float v : one) largest = std::max(largest, std::abs(static_cast<double>(v)));
  for (std::size_t i = 0; i < one.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(one[i]) - two[i]));
  EXPECT_LT(worst / largest, 1e-5) << "largest difference " << worst << " of weights up to " << largest;
}
#endif

}  // namespace other_examples_test
