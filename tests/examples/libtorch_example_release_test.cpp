// examples/libtorch_mnist, run for real: a libtorch module (the MNIST tutorial's CNN) trained by fit with
// MultiWorkerMirroredStrategy over the ring, worker processes on 127.0.0.1 — 2 workers × 64 against 1 × 128, a
// worker killed and the job resumed byte-identical (from a backup, and from the survivors' memory), a fault
// campaign survived byte-identical, the saved model evaluated by PyTorch in Python, and a model that is not a
// classifier.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace libtorch_example_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string program = MWSTRAT_EXAMPLE_LIBTORCH_MNIST;

std::string job(int workers, const std::string& flags) {
  return launcher + " -n " + std::to_string(workers) + " -- " + program + " --data-dir " + mnist_dir + " " + flags;
}

std::vector<float> floats(const fs::path& p) {
  const std::string bytes = read_file(p);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::copy_n(bytes.data(), v.size() * sizeof(float), reinterpret_cast<char*>(v.data()));
  return v;
}

// "step loss" lines of --losses-out.
std::vector<double> losses(const fs::path& p) {
  std::istringstream in(read_file(p));
  std::vector<double> out;
  unsigned long long step = 0;
  double loss = 0;
  while (in >> step >> loss) out.push_back(loss);
  return out;
}

TEST(libtorch_example_release, two_workers_of_64_train_what_one_worker_of_128_trains) {
  scratch_dir dir;
  const auto one = run(job(1, "--batch 128 --steps-per-epoch 40 --weights-out " + (dir / "one_5.f32") +
                                  " --losses-out " + (dir / "one.txt")),
                       300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run(job(2, "--batch 64 --steps-per-epoch 40 --weights-out " + (dir / "two_5.f32") +
                                  " --losses-out " + (dir / "two.txt")),
                       300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  // The chief alone shows Keras's progress.
  EXPECT_NE(two.output.find("[worker 0] 40/40 [==============================]"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find(" - accuracy: "), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("[worker 1] Epoch"), std::string::npos) << two.output;
  // The loss curves agree to 1e-4 relative step by step (only the order of the additions differs).
  const std::vector<double> a = losses(dir.path() / "one.txt"), b = losses(dir.path() / "two.txt");
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::abs(a[i])) << "step " << i + 1;
  EXPECT_LT(a.back(), 0.5 * a.front()) << "it learns";

  // After 5 steps the weights agree to 1e-5 relative.
  const auto five = [&](int workers, int batch, const std::string& out) {
    const auto r = run(job(workers, "--batch " + std::to_string(batch) + " --steps-per-epoch 5 --weights-out " + (dir / out)),
                       300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return floats(dir.path() / out);
  };
  const std::vector<float> w1 = five(1, 128, "w1.f32"), w2 = five(2, 64, "w2.f32");
  ASSERT_EQ(w1.size(), w2.size());
  ASSERT_EQ(w1.size(), 32u * 9 + 32 + 21632u * 128 + 128 + 1280 + 10);
  double largest = 0, worst = 0;
  for (const float v : w1) largest = std::max(largest, std::abs(static_cast<double>(v)));
  for (std::size_t i = 0; i < w1.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(w1[i]) - w2[i]));
  EXPECT_LT(worst / largest, 1e-5) << "largest difference " << worst << " of weights up to " << largest;
}

TEST(libtorch_example_release, a_killed_worker_restarts_and_the_job_resumes_byte_identical) {
  scratch_dir dir;
  const std::string common = "--steps-per-epoch 12 --epochs 2 --save-freq 4 ";
  const auto reference = run(job(2, common + "--backup-dir " + (dir / "backup_ref") + " --weights-out " +
                                        (dir / "reference.f32") + " --model-dir " + (dir / "reference")),
                             300);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto r = run(launcher + " -n 2 --max-restarts 1 -- " + program + " --data-dir " + mnist_dir + " " + common +
                         "--backup-dir " + (dir / "backup") + " --weights-out " + (dir / "resumed.f32") +
                         " --model-dir " + (dir / "resumed") + " --kill-at-step 16",
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting the group (restart 1 of 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resuming at epoch 2, step 4 (global step 16)"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir.path() / "resumed.f32"), read_file(dir.path() / "reference.f32"))
      << "the resumed job's weights are byte-identical to the uninterrupted one's";
  EXPECT_EQ(read_file(dir.path() / "resumed" / "model.safetensors"), read_file(dir.path() / "reference" / "model.safetensors"));
}

// In-memory recovery with a libtorch module: the lost worker alone is replaced, the survivors hand it the module's
// parameters from their arenas, and the job ends with the uninterrupted job's bits.
TEST(libtorch_example_release, a_killed_worker_is_replaced_alone_from_the_survivors_memory_byte_identical) {
  scratch_dir dir;
  const std::string common = "--steps-per-epoch 6 --epochs 2 --batch 32 ";
  const auto reference = run(job(3, common + "--weights-out " + (dir / "reference.f32")), 300);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto r = run(launcher + " -n 3 --max-restarts 1 --replace-lost -- " + program + " --data-dir " + mnist_dir +
                         " " + common + "--weights-out " + (dir / "recovered.f32") + " --kill-at-step 8",
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("starting a replacement (restart 1 of 1, ring generation 1)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << "the survivors never restarted\n" << r.output;
  EXPECT_NE(r.output.find("'s memory: "), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir.path() / "recovered.f32"), read_file(dir.path() / "reference.f32"))
      << "the recovered job's weights are byte-identical to the uninterrupted one's";
}

// The fault campaign, unchanged, on a libtorch module: a seeded schedule of SIGKILL, SIGSTOP then SIGKILL and
// SIGTERM over 2 workers, each survived, and the final model byte-identical to the fault-free run's.
TEST(libtorch_example_release, a_fault_campaign_is_survived_and_the_model_is_byte_identical) {
  scratch_dir dir;
  const std::string seed = "5", kinds = "kill,stop,term";
  const auto plan = run(std::string(MWSTRAT_FAULT_CAMPAIGN) + " --faults 3 --seed " + seed + " --kinds " + kinds +
                            " --print-schedule",
                        30);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const std::string backup = dir / "backup";
  std::filesystem::create_directories(backup);
  const std::string job = launcher + " -n 2 --max-restarts 20 -- " + program + " --data-dir " + mnist_dir +
                          " --epochs 2 --steps-per-epoch 60 --batch 32 --save-freq 5 --backup-dir " + backup +
                          " --model-dir " + (dir / "model");
  const auto r = run(std::string(MWSTRAT_FAULT_CAMPAIGN) + " --faults 3 --seed " + seed + " --kinds " + kinds +
                         " --model " + (dir / "model") + "/model.safetensors --clean " + backup + " --work-dir " +
                         (dir / "work") + " --timeout 200 -- " + job,
                     420);
  EXPECT_EQ(r.exit_code, 0) << plan.output << r.output;
  EXPECT_NE(r.output.find("faults injected: 3\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("faults survived: 3\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final model byte-identical to the fault-free run: yes"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("NOT survived"), std::string::npos) << r.output;
}

TEST(libtorch_example_release, pytorch_reads_the_saved_model_under_the_modules_own_names) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no torch (python3-torch)";
  }
  scratch_dir dir;
  const auto trained = run(job(2, "--steps-per-epoch 60 --model-dir " + (dir / "model")), 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const double cpp = number_after(trained.output, "test: loss=", " accuracy=");
  const double cpp_accuracy = number_after(trained.output, " accuracy=", " examples=");
  const auto py = run("/usr/bin/python3 " + std::string(MWSTRAT_TEST_SOURCE_DIR) +
                          "/examples/python/evaluate_libtorch_model.py " + (dir / "model") + "/model.safetensors" + " " +
                          mnist_dir,
                      300);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  // The same network on the same weights: the numbers agree up to float summation order.
  EXPECT_NEAR(number_after(py.output, "loss=", " accuracy="), cpp, 1e-4) << py.output << trained.output;
  EXPECT_NEAR(number_after(py.output, " accuracy=", " examples="), cpp_accuracy, 2e-4) << py.output;
  EXPECT_GT(cpp_accuracy, 0.8);
}

TEST(libtorch_example_release, an_autoencoder_trains_and_reports_its_metric_not_an_accuracy) {
  const auto r = run(job(2, "--task autoencoder --epochs 3 --steps-per-epoch 40"), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("accuracy"), std::string::npos) << r.output;
  std::vector<double> per_epoch;
  for (std::size_t at = r.output.find(" - mean_squared_error: "); at != std::string::npos;
       at = r.output.find(" - mean_squared_error: ", at + 1)) {
    per_epoch.push_back(std::strtod(r.output.c_str() + at + 23, nullptr));
  }
  ASSERT_EQ(per_epoch.size(), 3u) << r.output;
  EXPECT_LT(per_epoch[2], per_epoch[0]) << r.output;
  EXPECT_LT(per_epoch[2], 0.1) << r.output;
  EXPECT_NE(r.output.find("test: loss="), std::string::npos);
}

TEST(libtorch_example_release, a_bad_task_is_refused_with_status_2) {
  const auto r = run(program + " --task segmentation", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--task: 'segmentation' is not classifier or autoencoder"), std::string::npos) << r.output;
}

}  // namespace libtorch_example_release_test
