// The CIFAR-10 ResNet example (the multi-node tutorial's program) run for real: worker processes on 127.0.0.1,
// the real CIFAR-10 (scripts/fetch-cifar10 puts it in .cache/cifar10), real files. Optimised builds only.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cifar10_resnet_release_test {

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
  // — far inside the issue's 1e-5. (Before those sums, one step agreed to 2.6e-6 and ten drifted apart to ~1: a
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

#ifdef MWSTRAT_TFRECORD_CONVERT
TEST(cifar10_resnet_example_release, training_from_png_shards_gives_the_bits_of_the_binary_files_and_file_sharding_opens_only_own_shards) {
  if (!have_cifar()) GTEST_SKIP() << "no CIFAR-10 in " << cifar_dir << " (scripts/fetch-cifar10 puts it there)";
  scratch_dir dir;
  // The training set as 8 shards of PNG-encoded tf.train.Examples, written by the converter (contiguous runs of the
  // set's order), then streamed by the example: same order, same augmentation, so the same bits.
  const auto convert = run(std::string(MWSTRAT_TFRECORD_CONVERT) + " cifar10 " + cifar_dir + " " + (dir / "shards") +
                               " --split train --shards 8 --image png",
                           600);
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  const std::string shards = " --data 'tfrecord:" + (dir / "shards") + "/cifar10-train.tfrecord-*'";
  const std::string flags = " --depth 8 --epochs 1 --validation-steps 1 --steps-per-epoch 4 --batch-size 32 --seed 7"
                            " --no-test";
  auto train = [&](const std::string& name, const std::string& source) {
    const auto r = run(launcher + " -n 2 -- " + resnet_example + " --data-dir " + cifar_dir + flags + source +
                           " --model-dir " + (dir / name),
                       900);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair{saved_weights(dir.path() / name / "model.safetensors"), r.output};
  };
  const auto [binary, binary_log] = train("binary", "");
  const auto [records, records_log] = train("records", shards);
  ASSERT_FALSE(binary.empty());
  EXPECT_EQ(binary, records) << "worst relative difference " << worst_relative(binary, records);
  EXPECT_NE(records_log.find("[mwstrat.data] data sharding of 8 file(s) over 2 worker(s): data"), std::string::npos)
      << records_log;
  // Auto sharding with 8 files for 2 workers is file sharding: each worker process opens its 4 shards only.
  const auto [by_file, by_file_log] = train("by_file", shards + " --shard-policy auto");
  EXPECT_NE(by_file_log.find("auto sharding of 8 file(s) over 2 worker(s): file"), std::string::npos) << by_file_log;
  EXPECT_NE(by_file_log.find("rank 0 opened 4 of 8 training shards: cifar10-train.tfrecord-00000-of-00008 "
                             "cifar10-train.tfrecord-00002-of-00008 cifar10-train.tfrecord-00004-of-00008 "
                             "cifar10-train.tfrecord-00006-of-00008"),
            std::string::npos)
      << by_file_log;
  EXPECT_NE(by_file_log.find("rank 1 opened 4 of 8 training shards: cifar10-train.tfrecord-00001-of-00008 "),
            std::string::npos)
      << by_file_log;
  EXPECT_NE(binary, by_file);  // another split of the examples: another computation
}
#endif

// Where two saved models differ, for the failure message: each tensor (weights, moving statistics, optimizer
// slots) whose values differ, with how many and by how much, and any differing metadata. Empty when none do.
std::string differences(const fs::path& a_path, const fs::path& b_path) {
  const mwstrat::training_state a = mwstrat::load_training_state(a_path);
  const mwstrat::training_state b = mwstrat::load_training_state(b_path);
  std::ostringstream out;
  auto compare = [&](const char* what, const std::vector<mwstrat::float_tensor>& x,
                     const std::vector<mwstrat::float_tensor>& y) {
    if (x.size() != y.size()) out << what << ": " << x.size() << " tensors against " << y.size() << "\n";
    for (std::size_t t = 0; t < std::min(x.size(), y.size()); ++t) {
      if (x[t].name != y[t].name || x[t].values.size() != y[t].values.size()) {
        out << what << " " << t << ": " << x[t].name << " against " << y[t].name << "\n";
        continue;
      }
      std::size_t n = 0;
      double worst = 0;
      for (std::size_t i = 0; i < x[t].values.size(); ++i) {
        if (x[t].values[i] == y[t].values[i]) continue;
        ++n;
        worst = std::max(worst, std::abs(double(x[t].values[i]) - double(y[t].values[i])));
      }
      if (n) out << what << " " << x[t].name << ": " << n << " of " << x[t].values.size() << " differ, by up to " << worst << "\n";
    }
  };
  compare("weight", a.weights, b.weights);
  compare("optimizer slot", a.optimizer_slots, b.optimizer_slots);
  if (a.step != b.step || a.optimizer_iterations != b.optimizer_iterations) {
    out << "step " << a.step << " / " << b.step << ", optimizer iterations " << a.optimizer_iterations << " / "
        << b.optimizer_iterations << "\n";
  }
  if (a.extra != b.extra) out << "the metadata differs\n";
  return out.str();
}

// Short ResNet-20 jobs of 2 workers × 64 through the launcher, for the determinism tests.
const std::string short_job = " --depth 20 --batch-size 64 --seed 11 --no-test --validation-steps 1";

// Returns the saved model's path; the job's output goes to `output` when given.
fs::path resnet_job(const scratch_dir& dir, const std::string& name, const std::string& flags,
                    std::string* output = nullptr) {
  const auto r = run(launcher + " -n 2 -- " + resnet_example + " --data-dir " + cifar_dir + short_job + flags +
                         " --model-dir " + (dir / name),
                     600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (output) *output = r.output;
  return dir.path() / name / "model.safetensors";
}

// The chief's end-of-epoch lines of a job of 8 steps per epoch, from "loss: " on ("loss: 2.8806 - accuracy: ...").
std::vector<std::string> epoch_results(const std::string& output) {
  std::vector<std::string> lines;
  const std::string marker = "[worker 0] 8/8 [";
  for (std::size_t at = output.find(marker); at != std::string::npos; at = output.find(marker, at + 1)) {
    const std::size_t end = output.find('\n', at);
    const std::string line = output.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const std::size_t loss = line.find("loss: ");
    if (loss != std::string::npos) lines.push_back(line.substr(loss));
  }
  return lines;
}

TEST(cifar10_resnet_example_release, same_seed_gives_byte_identical_models_for_any_thread_count) {
  if (!have_cifar()) GTEST_SKIP() << "no CIFAR-10 in " << cifar_dir << " (scripts/fetch-cifar10 puts it there)";
  scratch_dir dir;
  // Four steps of 2 workers × 64 (SGD with momentum: its slots are in the file too), with synchronised batch norm
  // and without, each run twice; and once more with two threads per worker, since results are the same bits for
  // any thread count (fixed partitions of every reduction).
  const std::string steps = " --epochs 1 --steps-per-epoch 4";
  for (const bool sync : {true, false}) {
    const std::string bn = sync ? " --sync-batch-norm" : "";
    const std::string kind = sync ? "sync" : "plain";
    SCOPED_TRACE(kind + " batch norm");
    const auto a = resnet_job(dir, kind + "-a", steps + bn);
    const auto b = resnet_job(dir, kind + "-b", steps + bn);
    ASSERT_TRUE(fs::exists(a) && fs::exists(b));
    EXPECT_EQ(saved_weights(a).size(), 275162u);  // trained parameters + moving statistics
    EXPECT_TRUE(read_file(a) == read_file(b)) << differences(a, b);
    if (sync) {
      const auto threads = resnet_job(dir, kind + "-threads", steps + bn + " --threads 2");
      ASSERT_TRUE(fs::exists(threads));
      EXPECT_TRUE(read_file(a) == read_file(threads)) << differences(a, threads);
    }
  }
  // The flag changes the computation (the pairs above are of two different trainings).
  EXPECT_FALSE(read_file(dir.path() / "sync-a" / "model.safetensors") ==
               read_file(dir.path() / "plain-a" / "model.safetensors"));
}

TEST(cifar10_resnet_example_release, a_worker_killed_or_preempted_mid_epoch_resumes_to_the_same_bytes) {
  if (!have_cifar()) GTEST_SKIP() << "no CIFAR-10 in " << cifar_dir << " (scripts/fetch-cifar10 puts it there)";
  scratch_dir dir;
  // Two epochs of 8 global steps, a backup every 3 (global steps 3, 6, 9, 12, 15). Batch norm momentum 0.9, so
  // that the moving statistics move visibly in 16 steps and a resume that lost them would show.
  const std::string resumable = " --epochs 2 --steps-per-epoch 8 --save-freq 3 --bn-momentum 0.9 --op-timeout 30";
  std::string reference_output;
  const auto reference =
      resnet_job(dir, "reference", resumable + " --backup-dir " + (dir / "backup-reference"), &reference_output);
  const auto expected = epoch_results(reference_output);
  ASSERT_EQ(expected.size(), 2u) << reference_output;

  // The same job under a launcher that may restart the group once; its output goes to a file read as it grows.
  // Once the chief's backup of global step 6 is on disk (written in the background, renamed into place when
  // complete), worker 1 gets `signal`, mid epoch 1, two steps before its end. Returns the job's output.
  auto interrupted_job = [&](const std::string& name, int signal) {
    const fs::path log = dir.path() / (name + ".log");
    const fs::path backup = dir.path() / (name + "-backup");
    process job(launcher + " -n 2 --max-restarts 1 -- " + resnet_example + " --data-dir " + cifar_dir + short_job +
                    resumable + " --backup-dir " + backup.string() + " --model-dir " + (dir / name) + " > " +
                    log.string() + " 2>&1",
                600);
    long victim = -1;
    bool sent = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(400);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string out = read_file(log);
      if (victim <= 0) victim = static_cast<long>(number_after(out, "mwstrat-launch: worker 1: pid "));
      if (victim > 0 && fs::exists(backup / "backup-6.safetensors")) {
        sent = ::kill(static_cast<pid_t>(victim), signal) == 0;
        break;
      }
      // The job ended (or failed) before that backup: nothing to wait for.
      if (out.find("[worker 0] saved ") != std::string::npos || out.find(") was killed") != std::string::npos ||
          out.find(") exited") != std::string::npos) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto r = job.finish();
    const std::string out = read_file(log);
    EXPECT_TRUE(sent) << "worker 1 (pid " << victim << ") got no signal after the step-6 backup\n" << out;
    EXPECT_EQ(r.exit_code, 0) << out;
    const fs::path model = dir.path() / name / "model.safetensors";
    EXPECT_TRUE(fs::exists(model)) << out;
    if (fs::exists(model)) {
      EXPECT_TRUE(read_file(model) == read_file(reference))
          << "the resumed job's model differs from the uninterrupted one's:\n" << differences(reference, model);
    }
    EXPECT_FALSE(fs::exists(backup / "backup.index.json")) << "removed after the successful fit";
    // Both epochs report what the uninterrupted job reported: the resumed epoch's sums came back with the backup,
    // and every worker's own batch norm statistics (which its validation uses).
    EXPECT_EQ(epoch_results(out), expected) << out;
    return "worker 1 (pid " + std::to_string(victim) + ") ";  // how the launcher names it
  };

  {
    SCOPED_TRACE("SIGKILL: a lost machine");
    const std::string worker = interrupted_job("killed", SIGKILL);
    const std::string out = read_file(dir.path() / "killed.log");
    EXPECT_NE(out.find(worker + "was killed by signal 9"), std::string::npos) << out;
    EXPECT_NE(out.find("restarting the group (restart 1 of 1)"), std::string::npos) << out;
    // The restarted group resumed from that backup (mid epoch 1, so it then crossed the epoch boundary itself);
    // the next backup (step 9) is three steps after the kill, so it cannot be on disk yet.
    EXPECT_NE(out.find("resuming at epoch 1, step 6 (global step 6)"), std::string::npos) << out;
  }
  {
    SCOPED_TRACE("SIGTERM: a preemption notice");
    interrupted_job("preempted", SIGTERM);
    const std::string out = read_file(dir.path() / "preempted.log");
    // Every worker stops for the notice at the same step, so the launcher names whichever exits first.
    const std::regex stopped(R"(worker [01] \(pid [0-9]+\) stopped for preemption \(exit 75\))");
    EXPECT_TRUE(std::regex_search(out, stopped)) << out;
    EXPECT_NE(out.find("restarting the preempted group (not counted against --max-restarts)"), std::string::npos)
        << out;
    // Every worker stopped after the same step, where the chief wrote a backup; the group resumed there.
    EXPECT_NE(out.find("resuming at epoch 1, step "), std::string::npos) << out;
  }
}

TEST(cifar10_resnet_example_release, two_workers_train_resnet20_well_above_chance) {
  if (!have_cifar()) GTEST_SKIP() << "no CIFAR-10 in " << cifar_dir << " (scripts/fetch-cifar10 puts it there)";
  // A fixed number of steps (a full epoch took ~11 min on the shared 2-core machine): 100 global steps of 2 × 128.
  // Batch norm momentum 0.9 instead of TF's 0.997: after 100 steps 0.997's moving statistics are still 74% their
  // initial 0 and 1, and the test set (inference mode) scores near chance although training accuracy is ~32%.
  // Measured (seed 1): test accuracy 0.3664 after the 100 steps; threshold 0.25, chance is 0.10.
  scratch_dir dir;
  const auto r = run(launcher + " -n 2 -- " + resnet_example + " --data-dir " + cifar_dir +
                         " --depth 20 --epochs 1 --steps-per-epoch 100 --bn-momentum 0.9 --seed 1 --step-times " +
                         (dir / "times"),
                     900);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // --step-times: each worker's line per step, "step N workers 2 at T", in order (the goodput benchmark's timeline).
  for (const int w : {0, 1}) {
    std::istringstream lines(read_file(dir.path() / ("times.w" + std::to_string(w))));
    std::string line;
    int steps = 0;
    while (std::getline(lines, line)) {
      EXPECT_EQ(line.rfind("step " + std::to_string(steps) + " workers 2 at ", 0), 0u) << "worker " << w << ": " << line;
      ++steps;
    }
    EXPECT_EQ(steps, 100) << "worker " << w;
  }
  EXPECT_NE(r.output.find("Layer (type)"), std::string::npos);  // the chief's summary
  EXPECT_NE(r.output.find("val_accuracy:"), std::string::npos);
  const double accuracy = number_after(r.output, "test: loss=", " accuracy=");
  EXPECT_GT(accuracy, MWSTRAT_RESNET20_100_STEPS_MIN_ACCURACY) << r.output;
}

}  // namespace cifar10_resnet_release_test
