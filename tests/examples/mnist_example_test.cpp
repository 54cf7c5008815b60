// examples/mnist_multiworker in short configurations (any build type).
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace mnist_example_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

TEST(mnist_example, two_ring_workers_train_and_only_the_chief_writes) {
  scratch_dir dir;
  const auto r = run(launcher + " -n 2 -- " + example + " --data-dir " + mnist_dir +
                         " --epochs 1 --steps-per-epoch 2 --batch-size 8 --no-test --model-dir " + (dir / "model") +
                         " --backup-dir " + (dir / "backup") + " --save-freq 1",
                     240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[worker 0] [mwstrat.ring] rank 0: started: tcp://127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", waiting for 2 workers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ring of 2 ranks connected"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] Total params: 2770634"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] Epoch 1/1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] 2/2 [==============================] - "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[worker 1] Epoch"), std::string::npos) << "non-chief workers print nothing";
  EXPECT_TRUE(fs::exists(dir.path() / "model" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path() / "backup")) << "the backup is removed after a successful fit";
  EXPECT_EQ(saved_weights(dir.path() / "model" / "model.safetensors").size(), 2770634u);
}

// The chief names the kernels once (nn/kernels/isa.hpp: chosen at run time, whatever the example's build flags);
// a path the CPU cannot run, or no path at all, is refused before training with the CPU's features named.
TEST(mnist_example, the_chief_names_the_kernels_and_a_bad_request_is_refused) {
  const std::string job = " -- " + example + " --data-dir " + mnist_dir +
                          " --epochs 1 --steps-per-epoch 1 --batch-size 8 --no-test";
  const auto r = run(launcher + " -n 2" + job, 240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string line = "[worker 0] [mwstrat] kernels: ";
  const auto at = r.output.find(line);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[mwstrat] kernels: ", at + line.size()), std::string::npos) << "said once, by the chief";
  const auto bad = run("MWSTRAT_KERNEL_ISA=avx3 " + launcher + " -n 1" + job, 240);
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("[mwstrat.nn] MWSTRAT_KERNEL_ISA=avx3: expected avx512, avx2, baseline or native (CPU: "),
            std::string::npos)
      << bad.output;
}

TEST(mnist_example, a_bad_tf_config_is_a_clear_error_at_once) {
  const auto r = run("TF_CONFIG='{\"cluster\":{\"worker\":[\"127.0.0.1:1\"]},\"task\":{\"type\":\"worker\",\"index\":3}}' " +
                     example + " --data-dir " + mnist_dir, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("[mwstrat.cluster] TF_CONFIG: task.index: 3 is out of range"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30);
}

TEST(mnist_example, missing_data_names_the_file) {
  const auto r = run("TF_CONFIG= " + example + " --data-dir /nonexistent/mnist --epochs 1 --steps-per-epoch 1", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/mnist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[mwstrat."), std::string::npos) << r.output;
}

TEST(mnist_example, bad_flags_are_named) {
  const auto r = run(example + " --optimizer rmsprop", 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--optimizer: 'rmsprop' is not sgd or adam"), std::string::npos) << r.output;
  // Checked with the other flags, before the data is read or anything connects.
  const auto f = run("TF_CONFIG= " + example + " --data-dir " + mnist_dir + " --backup-dir /tmp/x --save-freq 0", 60);
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_NE(f.output.find("--save-freq: '0' is neither 'epoch' nor a positive number of steps"), std::string::npos)
      << f.output;
}

}  // namespace mnist_example_test
