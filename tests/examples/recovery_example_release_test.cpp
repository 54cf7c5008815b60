// Issue 20, in-memory recovery at full size (release stage): 3 workers of examples/mnist_multiworker (batch 64 per
// worker, 3 epochs of 40 steps, real MNIST, 127.0.0.1) under mwstrat-launch --replace-lost, and two SIGKILLs sent
// from outside at moments the job does not choose (most likely inside a step's all-reduce): worker 1, then, once its
// replacement has the state, the chief. Each is replaced alone; worker 2 runs from start to end in one process; no
// backup exists; the final model is byte-identical to an uninterrupted run's.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <string>

namespace recovery_example_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string job =
    " --data-dir " + mnist_dir + " --seed 3 --no-test --epochs 3 --steps-per-epoch 40 --op-timeout 30";

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Shell: waits (bounded, 120 s) until `log` holds `text`.
std::string wait_for(const std::string& log, const std::string& text) {
  return "i=0; while ! grep -qF '" + text + "' " + log +
         " 2>/dev/null && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; ";
}

// Shell: the process group of worker `w`'s first pid line.
std::string pid_of(const std::string& log, int w) {
  return "$(sed -n 's/^mwstrat-launch: worker " + std::to_string(w) + ": pid \\([0-9]*\\)$/\\1/p' " + log +
         " | head -1)";
}

TEST(recovery_example_release, two_workers_killed_from_outside_mid_step_are_replaced_alone_byte_identical) {
  scratch_dir dir;
  const auto ref = run(launcher + " -n 3 -- " + example + job + " --model-dir " + (dir / "reference"), 900);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  const std::string log = dir / "launch.log";
  const std::string script =
      launcher + " -n 3 --max-restarts 2 --replace-lost -- " + example + job + " --model-dir " + (dir / "model") +
      " > " + log + " 2>&1 & l=$!; " + wait_for(log, "[worker 0] Epoch 2/3") + "sleep 0.7; kill -KILL -" +
      pid_of(log, 1) + "; " + wait_for(log, "sent from rank") + "sleep 1.3; kill -KILL -" + pid_of(log, 0) +
      "; wait $l; echo \"launcher exit $?\"; cat " + log;
  const auto r = run(script, 900);
  ASSERT_NE(r.output.find("launcher exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("worker 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("starting a replacement (restart 1 of 2, ring generation 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("starting a replacement (restart 2 of 2, ring generation 2)"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "mwstrat-launch: worker 0: pid "), 2u) << r.output;
  EXPECT_EQ(count(r.output, "mwstrat-launch: worker 1: pid "), 2u) << r.output;
  EXPECT_EQ(count(r.output, "mwstrat-launch: worker 2: pid "), 1u) << "worker 2 never restarted" << r.output;
  EXPECT_EQ(count(r.output, "[worker 2] [mwstrat.recovery] rank 2: rank "), 2u) << "it waited twice" << r.output;
  EXPECT_EQ(count(r.output, " sent from rank "), 2u) << r.output;
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[mwstrat.train.backup]"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"),
            read_file(dir.path() / "reference" / "model.safetensors"))
      << "the recovered model is byte-identical to the uninterrupted one";
}

}  // namespace recovery_example_release_test
