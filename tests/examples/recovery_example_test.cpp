// Issue 20, in-memory recovery, with real worker processes of examples/mnist_multiworker on 127.0.0.1 and real
// MNIST: a lost worker is replaced alone (mwstrat-launch --replace-lost), the survivors never restart, the
// replacement receives the training state from a survivor's memory (no backup exists), and the final model is
// byte-identical to an uninterrupted run's. Short runs (batch 4), so that an unoptimised build runs them too.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <filesystem>
#include <string>

namespace recovery_example_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

// 16 examples in global batches of 12: one step a pass; 3 epochs of 3 steps.
std::string short_job(const std::string& optimizer) {
  return " --data-dir " + mnist_dir + " --seed 7 --no-test --optimizer " + optimizer +
         " --batch-size 4 --train-examples 16 --epochs 3 --steps-per-epoch 3 --op-timeout 30";
}

std::string reference_model(const scratch_dir& dir, const std::string& optimizer) {
  const auto r =
      run(launcher + " -n 3 -- " + example + short_job(optimizer) + " --model-dir " + (dir / "reference"), 600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_file(dir.path() / "reference" / "model.safetensors");
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// What every recovered run must show: worker `lost` alone was started again (one more pid line), the others
// never (their pid lines once, no group restart), both survivors waited for it, no backup was read, and the model
// is the uninterrupted one.
void expect_recovered(const process_result& r, int lost, const fs::path& model, const std::string& reference) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int w = 0; w < 3; ++w) {
    const std::string pid_line = "mwstrat-launch: worker " + std::to_string(w) + ": pid ";
    EXPECT_EQ(count(r.output, pid_line), w == lost ? 2u : 1u) << pid_line << "\n" << r.output;
    if (w == lost) continue;
    EXPECT_NE(r.output.find("[worker " + std::to_string(w) + "] [mwstrat.recovery] rank " + std::to_string(w) +
                            ": rank " + std::to_string(lost) + " (127.0.0.1:"),
              std::string::npos)
        << "survivor " << w << " waited for the replacement\n" << r.output;
  }
  EXPECT_NE(r.output.find("starting a replacement (restart 1 of 1, ring generation 1)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[mwstrat.train.backup]"), std::string::npos) << "no backup was read" << r.output;
  EXPECT_NE(r.output.find("'s memory: "), std::string::npos) << r.output;
  EXPECT_EQ(read_file(model), reference) << "the recovered model is byte-identical to the uninterrupted one";
}

TEST(recovery_example, a_killed_worker_is_replaced_alone_and_the_survivors_finish_byte_identical) {
  scratch_dir dir;
  const std::string reference = reference_model(dir, "sgd");
  // Rank 1 SIGKILLs itself after global step 4 (mid-epoch 2); no --backup-dir: there is nothing to read.
  const auto r = run(launcher + " -n 3 --max-restarts 1 --replace-lost -- " + example + short_job("sgd") +
                         " --kill-at-step 4 --kill-rank 1 --model-dir " + (dir / "model"),
                     600);
  expect_recovered(r, 1, dir.path() / "model" / "model.safetensors", reference);
  EXPECT_NE(r.output.find("fault injection: rank 1 kills itself after global step 4"), std::string::npos) << r.output;
}

TEST(recovery_example, a_killed_chief_is_replaced_and_gets_adams_slots_from_a_survivor) {
  scratch_dir dir;
  const std::string reference = reference_model(dir, "adam");
  const auto r = run(launcher + " -n 3 --max-restarts 1 --replace-lost -- " + example + short_job("adam") +
                         " --kill-at-step 5 --kill-rank 0 --model-dir " + (dir / "model"),
                     600);
  expect_recovered(r, 0, dir.path() / "model" / "model.safetensors", reference);
  // The state comes from the lowest survivor (rank 1), and the new chief saves the model.
  EXPECT_NE(r.output.find("[worker 0] [mwstrat.recovery] rank 0: training state of global step 4 (epoch 2, step 1) "
                          "received from rank 1's memory"),
            std::string::npos)
      << r.output;
}

TEST(recovery_example, a_stopped_worker_is_reported_by_the_survivors_ended_by_the_launcher_and_replaced) {
  scratch_dir dir;
  const std::string reference = reference_model(dir, "sgd");
  // Rank 1 SIGSTOPs itself: it never exits. The survivors name it after the 2 s liveness timeout and tell the
  // launcher (MWSTRAT_LAUNCH_REPORT_FD), which kills it and starts the replacement.
  const auto r = run("MWSTRAT_RING_LIVENESS_MS=2000 " + launcher + " -n 3 --max-restarts 1 --replace-lost -- " +
                         example + short_job("sgd") + " --kill-at-step 4 --fault-signal stop --model-dir " +
                         (dir / "model"),
                     600);
  expect_recovered(r, 1, dir.path() / "model" / "model.safetensors", reference);
  EXPECT_NE(r.output.find("fault injection: rank 1 stops itself after global step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: the survivors report worker 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 (127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(") was lost: silent for "), std::string::npos) << r.output;
}

TEST(recovery_example, without_a_replacement_the_survivors_exit_69_within_the_bound_naming_the_lost_rank) {
  // Three workers by hand (no launcher: nobody replaces the lost one), recovery on with a 3 s bound.
  scratch_dir dir;
  const auto ports = free_ports(3);
  const std::string job = example + short_job("sgd") + " --kill-at-step 2 --in-memory-recovery --recovery-timeout 3";
  std::string script;
  const std::array<std::string, 3> logs{dir / "w0.log", dir / "w1.log", dir / "w2.log"};
  const std::array<std::string, 3> pids{"p0", "p1", "p2"};
  for (int w = 0; w < 3; ++w) {  // (appended piece by piece: GCC 12 -O3 misjudges "literal" + string as overlapping)
    script += "TF_CONFIG='";
    script += tf_config(ports, w);
    script += "' " + job + " > ";
    script += logs[static_cast<std::size_t>(w)];
    script += " 2>&1 & ";
    script += pids[static_cast<std::size_t>(w)];
    script += "=$!; ";
  }
  script += "wait $p1; e1=$?; t0=$(date +%s.%N); wait $p0; e0=$?; wait $p2; e2=$?; t1=$(date +%s.%N); "
            "echo \"codes $e0 $e1 $e2\"; echo \"survivors exited within $(awk \"BEGIN{print $t1 - $t0}\") s\"; "
            "cat " + (dir / "w0.log") + " " + (dir / "w2.log");
  const auto r = run(script, 300);
  EXPECT_NE(r.output.find("codes 69 137 69"), std::string::npos) << r.output;
  const double waited = number_after(r.output, "survivors exited within ");
  EXPECT_GE(waited, 2.0) << "they waited for a replacement" << r.output;
  EXPECT_LT(waited, 10.0) << "3 s bound, plus start-up" << r.output;
  const std::string named = "rank 1 (127.0.0.1:" + std::to_string(ports[1]) + ") was lost: its connection closed";
  EXPECT_EQ(count(r.output, named), 4u) << "each survivor names it when it is lost and when it gives up" << r.output;
  EXPECT_EQ(count(r.output, "no replacement joined within 3000 ms"), 2u) << r.output;
}

}  // namespace recovery_example_test
