// Faults of a job started over ssh on two nodes (ssh_nodes.hpp), with the resumable MNIST run of
// mnist_hosts_release_test.cpp: a remote worker SIGKILLed is named, the group restarted over ssh resumes from its
// backup; SIGTERM to the launcher stops every remote worker with the preemption code and a relaunch resumes. Both end
// with the bytes of an uninterrupted run of 4 local workers. Optimised builds only (label "release").
#include "ssh_nodes.hpp"

#include <mwstrat/error.hpp>
#include <mwstrat/train/preemption.hpp>

#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ssh_launch_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string resumable = " --data-dir " + mnist_dir + " --seed 7 --no-test --epochs 2 --steps-per-epoch 40" +
                              " --optimizer adam --batch-size 32 --save-freq 4 --op-timeout 10";

// The uninterrupted run, 4 local workers on the flat ring (the ring over ssh is flat too: the same sums).
std::string reference_model(const scratch_dir& dir) {
  const auto r = run("MWSTRAT_RING_TOPOLOGY=flat " + launcher + " -n 4 -- " + example + resumable + " --backup-dir " +
                         (dir / "backup_ref") + " --model-dir " + (dir / "reference"),
                     600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_file(dir.path() / "reference" / "model.safetensors");
}

TEST(ssh_launch_release, a_remote_worker_killed_is_named_restarted_over_ssh_and_resumes_byte_identically) {
  MWSTRAT_REQUIRE_SSHD();
  scratch_dir dir;
  const std::string reference = reference_model(dir);
  ASSERT_FALSE(reference.empty());
  ssh_nodes nodes;
  const fs::path log = dir.path() / "launch.log";
  process job("MWSTRAT_RING_TOPOLOGY=flat " +
                  nodes.launch("--max-restarts 1 " + nodes.two_nodes(2) + " -- " + example + resumable +
                               " --backup-dir " + (dir / "backup") + " --model-dir " + (dir / "model")) +
                  " > " + log.string() + " 2>&1",
              600);
  ASSERT_TRUE(wait_for(dir.path() / "backup" / "backup.index.json", 300)) << read_file(log);
  const pid_t victim = remote_worker_pid(read_file(log), 3);
  ASSERT_GT(victim, 0) << read_file(log);
  ASSERT_EQ(::kill(victim, SIGKILL), 0) << "worker 3 (pid " << victim << " on h2) is not running";
  const auto r = job.finish();
  const std::string output = read_file(log);
  ASSERT_EQ(r.exit_code, 0) << output;
  EXPECT_NE(output.find("mwstrat-launch: worker 3 (pid " + std::to_string(victim) +
                        " on 10.77.0.2) was killed by signal 9 (Killed) on host 10.77.0.2"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("mwstrat-launch: restarting the group (restart 1 of 1)"), std::string::npos) << output;
  EXPECT_NE(output.find("[worker 0] [mwstrat.train.backup] rank 0: restored "), std::string::npos) << output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"), reference)
      << "the job restarted over ssh ends with another model than the uninterrupted one";
}

TEST(ssh_launch_release, sigterm_to_the_launcher_stops_every_remote_worker_with_75_and_a_relaunch_resumes_exactly) {
  MWSTRAT_REQUIRE_SSHD();
  scratch_dir dir;
  const std::string reference = reference_model(dir);
  ASSERT_FALSE(reference.empty());
  ssh_nodes nodes;
  const std::string command = "env MWSTRAT_RING_TOPOLOGY=flat " +
                              nodes.launch(nodes.two_nodes(2) + " -- " + example + resumable + " --backup-dir " +
                                           (dir / "backup") + " --model-dir " + (dir / "model"));
  process job("echo $$ > " + (dir / "launcher.pid") + "; exec " + command, 600);
  ASSERT_TRUE(wait_for(dir.path() / "backup" / "backup.index.json", 300)) << "training never wrote a backup";
  pid_t launcher_pid = 0;
  std::ifstream(dir.path() / "launcher.pid") >> launcher_pid;
  ASSERT_GT(launcher_pid, 0);
  ASSERT_EQ(::kill(launcher_pid, SIGTERM), 0);
  const auto stopped = job.finish();
  EXPECT_EQ(stopped.exit_code, mwstrat::preempted_exit_code) << stopped.output;
  for (int i = 0; i < 4; ++i) {
    const std::string host = i < 2 ? "10.77.0.1" : "10.77.0.2";
    const std::string marker = "mwstrat-launch: worker " + std::to_string(i) + " (pid ";
    const std::size_t at = stopped.output.find(marker);
    ASSERT_NE(at, std::string::npos) << stopped.output;
    const std::string line = stopped.output.substr(at, stopped.output.find('\n', at) - at);
    EXPECT_NE(line.find("exited with status 75 on host " + host), std::string::npos) << line << "\n" << stopped.output;
  }
  ASSERT_FALSE(fs::exists(dir.path() / "model")) << "the job finished before the launcher was stopped";
  EXPECT_TRUE(nodes.nodes_empty_within(std::chrono::seconds(5))) << "processes left on the nodes";
  const auto again = run(command, 600);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("[worker 0] [mwstrat.train.backup] rank 0: restored "), std::string::npos)
      << again.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"), reference)
      << "the relaunched job ends with another model than the uninterrupted one";
}

}  // namespace ssh_launch_release_test
