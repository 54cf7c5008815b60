// The guarantees of synchronous data parallelism and of fault tolerance, checked with real worker processes on
// 127.0.0.1 training the reference CNN on real MNIST. Optimised builds only (label "release").
#include "example_support.hpp"

#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

namespace mnist_example_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

std::string common_flags() { return " --data-dir " + mnist_dir + " --seed 7 --no-test"; }

// A whole job through the launcher; returns the saved model's path.
fs::path train_job(const scratch_dir& dir, const std::string& name, int workers, const std::string& flags) {
  const auto r = run(launcher + " -n " + std::to_string(workers) + " -- " + example + common_flags() + flags +
                         " --model-dir " + (dir / name),
                     600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir.path() / name / "model.safetensors";
}

TEST(mnist_example_release, two_workers_of_64_equal_one_worker_of_128) {
  scratch_dir dir;
  const std::string flags = " --epochs 1 --steps-per-epoch 20 --optimizer sgd --learning-rate 0.05";
  const auto one = saved_weights(train_job(dir, "one", 1, flags + " --batch-size 128"));
  const auto two = saved_weights(train_job(dir, "two", 2, flags + " --batch-size 64"));
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(one.size(), 2770634u);
  float scale = 0;
  for (const float w : one) scale = std::max(scale, std::abs(w));
  double worst = 0;
  std::size_t differing = 0;
  for (std::size_t i = 0; i < one.size(); ++i) {
    const double d = std::abs(double(one[i]) - double(two[i]));
    worst = std::max(worst, d / std::max(std::abs(double(one[i])), 1e-2 * double(scale)));
    differing += d != 0 ? 1 : 0;
  }
  EXPECT_LT(worst, 1e-5) << differing << " weights differ at all";
}

TEST(mnist_example_release, same_world_size_and_seed_give_byte_identical_models) {
  scratch_dir dir;
  const std::string flags = " --epochs 1 --steps-per-epoch 15 --optimizer adam --batch-size 32";
  const auto a = train_job(dir, "a", 2, flags);
  const auto b = train_job(dir, "b", 2, flags);
  EXPECT_EQ(read_file(a), read_file(b));
  EXPECT_GT(fs::file_size(a), 2770634u * 4);
}

TEST(mnist_example_release, two_workers_reach_97_percent_in_one_epoch_with_adam) {
  const auto r = run(launcher + " -n 2 -- " + example + " --data-dir " + mnist_dir +
                         " --epochs 1 --steps-per-epoch 0 --optimizer adam --batch-size 64 --seed 1",
                     900);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(number_after(r.output, "[worker 0] test: loss=", " accuracy="), 0.97) << r.output;
}

// Flags of the fault-tolerance runs: backups every 5 steps, 2 epochs of 12 steps.
const std::string resumable = " --epochs 2 --steps-per-epoch 12 --optimizer adam --batch-size 32 --save-freq 5"
                              " --op-timeout 10";

TEST(mnist_example_release, a_killed_worker_is_named_and_the_relaunched_job_resumes_exactly) {
  scratch_dir dir;
  const auto reference = train_job(dir, "reference", 2, resumable + " --backup-dir " + (dir / "backup_ref"));

  // The job, started by hand: worker 1 SIGKILLs itself after global step 17 (mid epoch 2). Both workers get the
  // flag: they meet at that step, after the chief's step-15 backup (written in the background) is on disk.
  const auto ports = free_ports(2);
  const std::string job = example + common_flags() + resumable + " --backup-dir " + (dir / "backup") +
                          " --model-dir " + (dir / "model");
  process w1("TF_CONFIG='" + tf_config(ports, 1) + "' " + job + " --kill-at-step 17", 300);
  process w0("TF_CONFIG='" + tf_config(ports, 0) + "' " + job + " --kill-at-step 17", 300);
  const auto r1 = w1.finish();
  const auto r0 = w0.finish();
  EXPECT_EQ(r1.exit_code, 128 + 9) << r1.output;
  EXPECT_EQ(r0.exit_code, mwstrat::peer_lost_exit_code) << r0.output;
  // Worker 0 fails fast (well within twice the 10 s operation timeout) and names worker 1.
  EXPECT_LT(r0.seconds - r1.seconds, 20.0);
  EXPECT_NE(r0.output.find("rank 1 (127.0.0.1:" + std::to_string(ports[1]) + ")"), std::string::npos) << r0.output;
  EXPECT_TRUE(fs::exists(dir.path() / "backup")) << "the backup survives the failure";

  // Relaunched by hand, with the same TF_CONFIG: it resumes from the step-15 backup.
  process again1("TF_CONFIG='" + tf_config(ports, 1) + "' " + job, 300);
  process again0("TF_CONFIG='" + tf_config(ports, 0) + "' " + job, 300);
  const auto a1 = again1.finish();
  const auto a0 = again0.finish();
  ASSERT_EQ(a0.exit_code, 0) << a0.output;
  ASSERT_EQ(a1.exit_code, 0) << a1.output;
  EXPECT_NE(a0.output.find("resuming at epoch 2, step 3 (global step 15)"), std::string::npos) << a0.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"), read_file(reference))
      << "the resumed job's model is byte-identical to the uninterrupted one's";
  EXPECT_FALSE(fs::exists(dir.path() / "backup"));
}

TEST(mnist_example_release, the_launcher_restarts_a_failed_job_which_resumes_by_itself) {
  scratch_dir dir;
  const auto reference = train_job(dir, "reference", 2, resumable + " --backup-dir " + (dir / "backup_ref"));
  const auto r = run(launcher + " -n 2 --max-restarts 1 -- " + example + common_flags() + resumable +
                         " --backup-dir " + (dir / "backup") + " --model-dir " + (dir / "model") +
                         " --kill-at-step 8",
                     600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("worker 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting the group (restart 1 of 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resuming at epoch 1, step 5 (global step 5)"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"), read_file(reference));
}

}  // namespace mnist_example_release_test
