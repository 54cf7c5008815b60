// The examples' command lines (examples/common/flags.hpp), run for real: a value that is not a number, does not fit
// the flag's type or lies outside its range is refused at once with status 2 and a message naming the flag and the
// value; --help prints the usage with status 0. And the exit statuses the examples promise (docs/fault-tolerance.md):
// 69 for a lost peer, 75 for preemption, never an uncaught exception.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flags_example_test {

using namespace mwstrat::test;
constexpr auto npos = std::string::npos;

// Runs `command` as worker 0 of two whose other worker never comes: a program that got past its flags would wait
// for its peer (a short --connect-timeout, given before the flag under test, bounds that) and then fail with
// status 1, so a refusal here is one that came before anything connected.
process_result run_before_connecting(const std::string& command) {
  const auto ports = free_ports(2);
  return run("TF_CONFIG='" + tf_config(ports, 0) + "' " + command, 30);
}

// `program FLAG VALUE` is refused with status 2 and a message "FLAG: 'VALUE' ...".
void expect_refused(const std::string& program, const std::string& flag, const std::string& value) {
  SCOPED_TRACE(flag + " " + value);
  const auto r = run_before_connecting(program + " " + flag + " " + value);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(flag + ": '" + value + "'"), npos) << r.output;
  EXPECT_NE(r.output.find("usage: "), npos) << r.output;
}

// `program --help` prints its usage on stdout (stderr is dropped here) and exits with 0.
void expect_help(const std::string& command, const std::string& program) {
  for (const std::string h : {" --help", " -h"}) {
    SCOPED_TRACE(h);
    const auto r = run_before_connecting(command + h + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("usage: " + program), npos) << r.output;
  }
}

const std::string mnist = example + " --connect-timeout 3";

TEST(mnist_example_flags, counts_that_do_not_fit_their_type_are_refused_not_narrowed) {
  expect_refused(mnist, "--epochs", "3000000000");         // was negative: nothing trained, exit 0
  expect_refused(mnist, "--early-stopping", "4294967296");  // was a patience of 0
  expect_refused(mnist, "--kill-rank", "4294967296");       // was rank 0
  expect_refused(mnist, "--threads", "4294967297");         // was 1 thread
  expect_refused(mnist, "--steps-per-epoch", "-1");
  expect_refused(mnist, "--batch-size", "1e3");             // whole numbers are written as such
  expect_refused(mnist, "--seed", "18446744073709551616");
  expect_refused(mnist, "--seed", "1.5");
}

TEST(mnist_example_flags, real_numbers_must_be_finite_and_in_range) {
  for (const std::string bad : {"nan", "inf", "-1", "0", "x"}) expect_refused(mnist, "--learning-rate", bad);
  for (const std::string flag : {"--connect-timeout", "--op-timeout", "--recovery-timeout"}) {
    for (const std::string bad : {"inf", "nan", "1e300", "0", "-5"}) expect_refused(mnist, flag, bad);
  }
}

TEST(mnist_example_flags, the_environment_s_recovery_timeout_is_checked_too) {
  const auto r = run_before_connecting("MWSTRAT_RECOVERY_TIMEOUT_MS=nan " + mnist);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("MWSTRAT_RECOVERY_TIMEOUT_MS: 'nan'"), npos) << r.output;
}

TEST(mnist_example_flags, a_bad_save_frequency_is_refused_before_connecting_with_or_without_a_backup) {
  expect_refused(mnist, "--save-freq", "bogus");  // was ignored without --backup-dir
  expect_refused(mnist + " --backup-dir /tmp/mwstrat-never-written", "--save-freq", "bogus");
  expect_refused(mnist, "--save-freq", "18446744073709551616");
}

TEST(mnist_example_flags, the_largest_seed_is_accepted) {
  // Refused for another flag after it: the seed itself passed.
  const auto r = run_before_connecting(mnist + " --seed 18446744073709551615 --optimizer rmsprop");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--optimizer: 'rmsprop' is not sgd or adam"), npos) << r.output;
  EXPECT_EQ(r.output.find("--seed"), r.output.find("--seed S")) << "only the usage mentions --seed: " << r.output;
}

TEST(mnist_example_flags, seeds_keep_every_digit) {
  // 2^53 and 2^53 + 1 are one double: read through one, both seeds gave the same model.
  scratch_dir dir;
  std::vector<float> weights[2];
  const std::string seeds[2] = {"9007199254740992", "9007199254740993"};
  for (int k = 0; k < 2; ++k) {
    const std::string model = dir / ("model" + std::to_string(k));
    const auto r = run("TF_CONFIG= " + example + " --data-dir " + mnist_dir + " --seed " + seeds[k] +
                           " --train-examples 8 --batch-size 4 --epochs 1 --steps-per-epoch 1 --no-test --model-dir " +
                           model,
                       120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    weights[k] = saved_weights(dir.path() / ("model" + std::to_string(k)) / "model.safetensors");
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  EXPECT_NE(weights[0], weights[1]);
}

TEST(mnist_example_flags, a_flag_without_its_value_is_named) {
  const auto r = run_before_connecting(mnist + " --epochs");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--epochs needs a value"), npos) << r.output;
}

TEST(mnist_example_flags, help_prints_the_usage_and_succeeds) { expect_help(mnist, "mnist_multiworker"); }

#ifndef MWSTRAT_EXAMPLE_MNIST_WITH_MPI
TEST(mnist_example_flags, the_mpi_collective_in_a_build_without_mpi_is_refused_saying_so) {
  const auto r = run_before_connecting(mnist + " --collective mpi");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--collective mpi: this build has no MPI"), npos) << r.output;
}
#endif

#ifdef MWSTRAT_EXAMPLE_CIFAR10_RESNET
const std::string resnet_example_path = MWSTRAT_EXAMPLE_CIFAR10_RESNET;
const std::string resnet = resnet_example_path + " --connect-timeout 3";

TEST(cifar10_resnet_example_flags, counts_that_do_not_fit_their_type_are_refused_not_narrowed) {
  expect_refused(resnet, "--epochs", "3000000000");
  expect_refused(resnet, "--threads", "4294967297");
  expect_refused(resnet, "--validation-freq", "4294967297");
  expect_refused(resnet, "--seed", "-1");
}

TEST(cifar10_resnet_example_flags, zero_epochs_is_refused_as_such) {
  expect_refused(resnet, "--epochs", "0");  // was "--warmup-epochs must be fewer than --epochs"
  const auto r = run_before_connecting(resnet + " --epochs 0");
  EXPECT_EQ(r.output.find("--warmup-epochs"), r.output.find("--warmup-epochs E")) << r.output;
}

TEST(cifar10_resnet_example_flags, real_numbers_must_be_finite_and_in_range) {
  for (const std::string bad : {"nan", "inf", "0", "-0.1"}) expect_refused(resnet, "--learning-rate", bad);
  for (const std::string bad : {"nan", "-1", "inf"}) expect_refused(resnet, "--warmup-epochs", bad);
  for (const std::string flag : {"--bn-momentum", "--label-smoothing"}) {
    for (const std::string bad : {"nan", "1.5", "-0.5", "inf"}) expect_refused(resnet, flag, bad);
  }
  for (const std::string flag : {"--connect-timeout", "--op-timeout"}) {
    for (const std::string bad : {"inf", "nan", "1e300", "0"}) expect_refused(resnet, flag, bad);
  }
  expect_refused(resnet, "--save-freq", "0");
}

TEST(cifar10_resnet_example_flags, the_largest_seed_is_accepted) {
  const auto r = run_before_connecting(resnet + " --seed 18446744073709551615 --variant keras");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--variant: 'keras' is not tf or he"), npos) << r.output;
}

TEST(cifar10_resnet_example_flags, help_prints_the_usage_and_succeeds) { expect_help(resnet, "cifar10_resnet"); }

// Worker 1 is SIGKILLed once the ring is up; worker 0 meets the loss at its first collective operation (after
// loading the data) and must exit with mwstrat::peer_lost_exit_code, naming rank 1, like mnist_multiworker.
TEST(cifar10_resnet_example, a_lost_peer_exits_with_the_peer_lost_code) {
  scratch_dir dir;
  const auto ports = free_ports(2);
  const std::string job = resnet_example_path + " --data-dir " + std::string(MWSTRAT_TEST_CIFAR10_DIR) +
                          " --depth 8 --epochs 1 --steps-per-epoch 1000 --batch-size 2 --no-test --op-timeout 30";
  const std::string log0 = dir / "w0.log", log1 = dir / "w1.log";
  const std::string script =
      "TF_CONFIG='" + tf_config(ports, 0) + "' " + job + " > " + log0 + " 2>&1 & p0=$!; " +
      "TF_CONFIG='" + tf_config(ports, 1) + "' " + job + " > " + log1 + " 2>&1 & p1=$!; " +
      "i=0; while ! grep -q 'connected' " + log0 + " 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; " +
      "kill -KILL $p1; wait $p0; echo \"worker 0 exit $?\"; cat " + log0;
  const auto r = run(script, 180);
  EXPECT_NE(r.output.find("worker 0 exit 69"), npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 (127.0.0.1:" + std::to_string(ports[1]) + ") was lost"), npos) << r.output;
}
#endif

// custom_loop read --steps with atol ("abc" was 0 steps, "-1" about 2^64) and ignored a trailing flag.
const std::string custom_loop = std::string(MWSTRAT_EXAMPLE_CUSTOM_LOOP) + " --data-dir /nonexistent/mnist";

TEST(custom_loop_example_flags, values_are_read_strictly_and_a_flag_needs_its_value) {
  expect_refused(custom_loop, "--steps", "abc");
  expect_refused(custom_loop, "--steps", "-1");
  expect_refused(custom_loop, "--steps", "0");
  const auto r = run_before_connecting(custom_loop + " --steps");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--steps needs a value"), npos) << r.output;
}

TEST(custom_loop_example_flags, help_prints_the_usage_and_succeeds) { expect_help(custom_loop, "custom_loop"); }

#ifdef MWSTRAT_EXAMPLE_CUSTOM_TENSOR
const std::string custom_tensor = std::string(MWSTRAT_EXAMPLE_CUSTOM_TENSOR) + " --data-dir /nonexistent/mnist";

TEST(custom_tensor_example_flags, values_are_read_strictly) {
  expect_refused(custom_tensor, "--steps", "abc");  // was 0
  expect_refused(custom_tensor, "--steps", "-1");   // was 2^64 - 1
  expect_refused(custom_tensor, "--steps", "0");
  expect_refused(custom_tensor, "--replicas", "1x");
  expect_refused(custom_tensor, "--replicas", "4294967297");
  expect_refused(custom_tensor, "--replicas", "0");
}

TEST(custom_tensor_example_flags, unknown_flags_and_a_flag_without_its_value_are_named) {
  auto r = run(custom_tensor + " --steps", 30);  // was ignored
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--steps needs a value"), npos) << r.output;
  r = run(custom_tensor + " --epochs 3", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown flag '--epochs'"), npos) << r.output;
}

TEST(custom_tensor_example_flags, help_prints_the_usage_and_succeeds) { expect_help(custom_tensor, "custom_tensor"); }

// SIGTERM stops every replica at the next step (fit's preemption); `preempted` is no mwstrat::error, and once
// escaped spawn_ranks uncaught (std::terminate, 134). It must end the program with mwstrat::preempted_exit_code.
TEST(custom_tensor_example, sigterm_exits_with_the_preemption_code) {
  scratch_dir dir;
  const std::string log = dir / "out.log";
  const std::string script = std::string(MWSTRAT_EXAMPLE_CUSTOM_TENSOR) + " --data-dir " + mnist_dir +
                             " --replicas 2 --steps 1000000 > " + log + " 2>&1 & p=$!; " +
                             "i=0; while ! grep -q 'Epoch 1/' " + log +
                             " 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; sleep 0.5; " +
                             "kill -TERM $p; wait $p; echo \"exit $?\"; cat " + log;
  const auto r = run(script, 120);
  EXPECT_NE(r.output.find("exit 75"), npos) << r.output;
  EXPECT_NE(r.output.find("preempted"), npos) << r.output;
}
#endif

}  // namespace flags_example_test
