// Issue 18, with real worker processes of examples/mnist_multiworker on 127.0.0.1 and real MNIST: preemption by
// SIGTERM (by hand and through mwstrat-launch), epochs longer than a pass over the data, a stop decided by the
// chief alone, and evaluation where some workers get no example. Short runs (a few steps of batch 4), so that an
// unoptimised build runs them too.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace preemption_example_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

// 16 examples in global batches of 8: a pass is 2 steps; 3 epochs of 3 steps are 1.5 passes each.
const std::string short_job = " --data-dir " + mnist_dir +
                              " --seed 7 --no-test --optimizer adam --batch-size 4 --train-examples 16"
                              " --epochs 3 --steps-per-epoch 3 --op-timeout 30";

fs::path reference_model(const scratch_dir& dir) {
  const auto r = run(launcher + " -n 2 -- " + example + short_job + " --backup-dir " + (dir / "backup_ref") +
                         " --model-dir " + (dir / "reference"),
                     600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir.path() / "reference" / "model.safetensors";
}

// The jobs that get a signal pause 2 s after global step 2 (every worker), so the signal lands mid-epoch however
// fast the build is; the model does not depend on it, so the reference runs without the pause.
const std::string pause = " --pause-at-step 2";

// Shell: waits (bounded, 60 s) until `log` shows the chief pausing, so that fit is running and has steps left.
std::string wait_for_training(const std::string& log) {
  return "i=0; while ! grep -q 'pausing at step' " + log + " 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; "
         "i=$((i+1)); done; ";
}

TEST(preemption_example, sigterm_to_worker_1_stops_both_with_the_preemption_code_and_the_relaunch_is_byte_identical) {
  scratch_dir dir;
  const fs::path reference = reference_model(dir);

  // Two workers started by hand; once the chief trains, worker 1 gets SIGTERM. Both must stop after the same
  // step and exit with 75 within seconds (not wait for the 30 s operation timeout).
  const auto ports = free_ports(2);
  const std::string job =
      example + short_job + pause + " --backup-dir " + (dir / "backup") + " --model-dir " + (dir / "model");
  const std::string log0 = dir / "w0.log", log1 = dir / "w1.log";
  const std::string script =
      "TF_CONFIG='" + tf_config(ports, 0) + "' " + job + " > " + log0 + " 2>&1 & p0=$!; " +
      "TF_CONFIG='" + tf_config(ports, 1) + "' " + job + " > " + log1 + " 2>&1 & p1=$!; " + wait_for_training(log0) +
      "t0=$(date +%s.%N); kill -TERM $p1; wait $p1; e1=$?; wait $p0; e0=$?; t1=$(date +%s.%N); " +
      "echo \"codes $e0 $e1\"; echo \"stopped within $(awk \"BEGIN{print $t1 - $t0}\") s\"; cat " + log0 + " " + log1;
  const auto r = run(script, 300);
  EXPECT_NE(r.output.find("codes 75 75"), std::string::npos) << r.output;
  EXPECT_LT(number_after(r.output, "stopped within "), 15.0) << r.output;
  EXPECT_NE(r.output.find("preempted by signal 15: stopped after global step"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.path() / "backup")) << "the chief backed up before exiting";
  EXPECT_FALSE(fs::exists(dir.path() / "model")) << "a preempted job saves no final model";

  // Relaunched with the same TF_CONFIG: it resumes from the preemption's backup and ends byte-identical.
  process again1("TF_CONFIG='" + tf_config(ports, 1) + "' " + job, 300);
  process again0("TF_CONFIG='" + tf_config(ports, 0) + "' " + job, 300);
  const auto a1 = again1.finish();
  const auto a0 = again0.finish();
  ASSERT_EQ(a0.exit_code, 0) << a0.output;
  ASSERT_EQ(a1.exit_code, 0) << a1.output;
  EXPECT_NE(a0.output.find("resuming at epoch"), std::string::npos) << a0.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"), read_file(reference))
      << "the resumed job's model is byte-identical to the uninterrupted one's";
  EXPECT_FALSE(fs::exists(dir.path() / "backup"));
}

TEST(preemption_example, the_launcher_restarts_a_preempted_job_without_counting_it_and_it_resumes_exactly) {
  scratch_dir dir;
  const fs::path reference = reference_model(dir);
  // --max-restarts 0: only a preemption may restart the job. Worker 1's pid is the launcher's "worker 1: pid N"
  // line of the first attempt.
  const std::string log = dir / "launch.log";
  const std::string script =
      launcher + " -n 2 --max-restarts 0 -- " + example + short_job + pause + " --backup-dir " + (dir / "backup") +
      " --model-dir " + (dir / "model") + " > " + log + " 2>&1 & l=$!; " + wait_for_training(log) +
      "kill -TERM $(sed -n 's/^mwstrat-launch: worker 1: pid \\([0-9]*\\)$/\\1/p' " + log + " | head -1); " +
      "wait $l; echo \"launcher exit $?\"; cat " + log;
  const auto r = run(script, 600);
  EXPECT_NE(r.output.find("launcher exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped for preemption (exit 75)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting the preempted group (not counted against --max-restarts)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 0] [mwstrat.train.backup] rank 0: restored"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"), read_file(reference));
}

TEST(preemption_example, a_stop_decided_by_the_chief_alone_stops_both_workers_after_the_same_step) {
  scratch_dir dir;
  const auto r = run(launcher + " -n 2 -- " + example + short_job + " --stop-at-step 4 --model-dir " + (dir / "m"),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Epoch 2 stops after its first step (global step 4) on both: no worker waits for a partner that stopped.
  EXPECT_NE(r.output.find("[worker 0] 1/3 ["), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[worker 0] Epoch 3/3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("timed out"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.path() / "m" / "model.safetensors"));
}

TEST(preemption_example, evaluation_where_some_workers_get_nothing_equals_one_worker) {
  // 10 test images in global batches of 9 over 3 workers: the second step has 1 image, so workers 0 and 1 get
  // none. The untrained model (same seed) evaluated by one worker with batch 9 must give the same numbers.
  const std::string flags = " --data-dir " + mnist_dir + " --seed 7 --epochs 0 --train-examples 64 --test-examples 10";
  const auto three = run(launcher + " -n 3 -- " + example + flags + " --batch-size 3", 300);
  const auto one = run(launcher + " -n 1 -- " + example + flags + " --batch-size 9", 300);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const double loss3 = number_after(three.output, "[worker 0] test: loss=");
  const double loss1 = number_after(one.output, "[worker 0] test: loss=");
  ASSERT_GT(loss1, 0) << one.output;
  EXPECT_NEAR(loss3, loss1, 2e-6) << three.output;
  EXPECT_EQ(number_after(three.output, "[worker 0] test: loss=", " accuracy="),
            number_after(one.output, "[worker 0] test: loss=", " accuracy="));
  EXPECT_EQ(number_after(three.output, "[worker 0] test: loss=", " examples="), 10.0) << three.output;
}

TEST(preemption_example, early_stopping_flag_stops_both_workers_when_the_loss_stops_improving) {
  // A rate of 0.5 makes this seed's loss rise in epoch 2: with patience 1 the job stops there, restoring epoch 1.
  const auto r = run(launcher + " -n 2 -- " + example + " --data-dir " + mnist_dir +
                         " --seed 7 --no-test --batch-size 4 --train-examples 16 --epochs 6 --steps-per-epoch 2"
                         " --learning-rate 0.5 --early-stopping 1",
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[worker 0] Epoch 2: early stopping (loss did not improve for 1 epoch); restoring the "
                          "weights of epoch 1"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Epoch 3/6"), std::string::npos) << r.output;
  // The example's own metric is shown by name, and is 1 - accuracy.
  const double accuracy = number_after(r.output, "[worker 0] 2/2 [", " - accuracy: ");
  const double error = number_after(r.output, "[worker 0] 2/2 [", " - error_rate: ");
  ASSERT_GE(error, 0) << r.output;
  EXPECT_NEAR(error, 1.0 - accuracy, 1.5e-4) << r.output;
}

TEST(preemption_example, tensorboard_flag_writes_event_files_of_the_chief_that_tensorboard_reads_back) {
  // The flag's files, read with the tensorboard package's own reader (EventAccumulator checks the TFRecord CRCs)
  // from the environment scripts/test makes; skipped, saying so, without it.
  const std::string python = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/.cache/py-venv/bin/python";
  if (run(python + " -c 'import tensorboard'", 60).exit_code != 0)
    GTEST_SKIP() << "SKIPPED: no tensorboard in " << python << " (scripts/test makes it)";
  scratch_dir dir;
  const fs::path logs = dir.path() / "tb";
  const auto r = run(launcher + " -n 2 -- " + example + " --data-dir " + mnist_dir +
                         " --seed 7 --no-test --batch-size 4 --train-examples 160 --epochs 2 --steps-per-epoch 10"
                         " --tensorboard " + logs.string(),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(logs)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1u) << "one train file, from the chief alone (no validation data in this run)";

  const fs::path script = dir.path() / "read.py";
  std::ofstream(script) << "import sys\n"
                           "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
                           "acc = EventAccumulator(sys.argv[1] + '/train', size_guidance={'scalars': 0})\n"
                           "acc.Reload()\n"
                           "for tag in acc.Tags()['scalars']:\n"
                           "    for e in acc.Scalars(tag): print(tag, e.step, repr(e.value))\n";
  const auto read = run(python + " " + script.string() + " " + logs.string(), 120);
  ASSERT_EQ(read.exit_code, 0) << read.output;
  std::map<std::string, std::map<long, double>> scalars;  // tag -> step -> value
  std::istringstream lines(read.output);
  std::string tag;
  long step = 0;
  double value = 0;
  while (lines >> tag >> step >> value) scalars[tag][step] = value;
  // Epoch scalars for epochs 0 and 1; batch scalars every 10 global steps (10 and 20).
  for (const char* t : {"epoch_loss", "epoch_accuracy", "epoch_learning_rate", "epoch_error_rate"})
    EXPECT_EQ(scalars[t].size(), 2u) << t << "\n" << read.output;
  for (const char* t : {"batch_loss", "batch_accuracy", "batch_learning_rate", "batch_error_rate"}) {
    ASSERT_EQ(scalars[t].size(), 2u) << t << "\n" << read.output;
    EXPECT_EQ(scalars[t].begin()->first, 10) << t;
    EXPECT_EQ(scalars[t].rbegin()->first, 20) << t;
  }
  for (long e = 0; e < 2; ++e)
    EXPECT_NEAR(scalars["epoch_error_rate"][e], 1.0 - scalars["epoch_accuracy"][e], 1e-6) << read.output;
  // The first epoch's loss is the one its progress line printed (to its 4 digits).
  EXPECT_NEAR(scalars["epoch_loss"][0], number_after(r.output, "[worker 0] 10/10 [", " - loss: "), 6e-5)
      << r.output << read.output;
}

}  // namespace preemption_example_test
