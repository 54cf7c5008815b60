// mwstrat-launch across nodes over ssh, for real: two simulated hosts each running the system's sshd, the launcher
// on a third (ssh_nodes.hpp). MNIST over ssh against four local workers, the job token kept off every command line,
// the failures a user meets first (a node that does not answer, a key it refuses, a program it lacks) and the
// lifetime rules (a killed launcher or a dropped connection leaves no process on any node), and elastic jobs that
// take a joiner in a lost worker's place or grow onto another node. Every wait is bounded.
#include "ssh_nodes.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace ssh_launch_test {

using namespace mwstrat::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string short_run = " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 2 --batch-size 8 --no-test";

TEST(ssh_launch, two_nodes_with_two_workers_each_train_the_bits_of_four_local_workers) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  // How long one command takes to have 4 workers running on 2 nodes and back (the program: `true`).
  const auto empty = run(nodes.launch(nodes.two_nodes(2) + " -- true"), 120);
  ASSERT_EQ(empty.exit_code, 0) << empty.output;
  std::printf("[ ssh ] 4 workers on 2 nodes over ssh: started and ended in %.2f s\n", empty.seconds);
  // The flat ring, as for 4 local workers (the hierarchical default sums in another order across hosts).
  const auto r = run("MWSTRAT_RING_TOPOLOGY=flat " + nodes.launch(nodes.two_nodes(2) + " -- " + example + short_run +
                                                                  " --model-dir " + (dir / "nodes")),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[worker 0] [mwstrat.ring] rank 0: started: tcp://10.77.0.1:20000, waiting for 4 workers"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("made a job token for this job"), std::string::npos) << r.output;
  for (int i = 0; i < 4; ++i) {
    const std::string host = i < 2 ? "10.77.0.1" : "10.77.0.2";
    EXPECT_NE(r.output.find("mwstrat-launch: worker " + std::to_string(i) + ": pid "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" on " + host + ") exited with status 0 on host " + host), std::string::npos) << r.output;
  }
  expect_model_of_four_local_workers(dir, short_run, dir.path() / "nodes" / "model.safetensors",
                                     "2 nodes x 2 workers over ssh");
}

// Each remote worker has its TF_CONFIG, host id and the job token, in the launcher's directory (or --workdir), and no
// process on any host shows the token on its command line while the job runs.
TEST(ssh_launch, remote_workers_get_their_environment_and_the_token_is_on_no_command_line) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  const std::string token = "tok-" + std::to_string(::getpid()) + "-never-on-a-command-line";
  fs::create_directories(dir.path() / "work");
  {
    std::ofstream script(dir.path() / "worker.sh");
    script << "echo \"id=$MWSTRAT_HOST_ID token=$MWSTRAT_JOB_TOKEN pwd=$(pwd) attempt=$MWSTRAT_LAUNCH_ATTEMPT\"\n"
           << "echo \"$TF_CONFIG\"\n"
           << "echo \"setting=$MY_SETTING\"\n"
           << "touch \"" << (dir / "ready") << ".$$\"\n"
           << "sleep 10\n";
  }
  // In the environment, not on the test's own command line (its shell's would show it).
  ::setenv("MWSTRAT_JOB_TOKEN", token.c_str(), 1);
  process job(nodes.launch(nodes.two_nodes(1) + " --workdir " + (dir / "work") + " --env MY_SETTING=42 -- sh " +
                           (dir / "worker.sh")),
              120);
  ::unsetenv("MWSTRAT_JOB_TOKEN");
  // Both workers are running: look at every process's command line on the machine (the hosts share its pids).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  int ready = 0;
  while (ready < 2 && std::chrono::steady_clock::now() < deadline) {
    ready = 0;
    for (const auto& e : fs::directory_iterator(dir.path())) {
      ready += e.path().filename().string().rfind("ready.", 0) == 0;
    }
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(ready, 2) << "the workers did not start";
  int looked_at = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = read_file(e.path() / "cmdline");
    ++looked_at;
    EXPECT_EQ(cmdline.find(token), std::string::npos) << "pid " << name << " shows the token: " << cmdline;
  }
  EXPECT_GT(looked_at, 10);
  const auto r = job.finish();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[worker 0] id=10.77.0.1 token=" + token + " pwd=" + (dir / "work") + " attempt=0"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 1] id=10.77.0.2 token=" + token + " pwd=" + (dir / "work") + " attempt=0"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 1] {\"cluster\": {\"worker\": [\"10.77.0.1:20000\", \"10.77.0.2:20001\"]}, "
                          "\"task\": {\"type\": \"worker\", \"index\": 1}}"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 1] setting=42"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("made a job token"), std::string::npos) << "the user's token was replaced:\n" << r.output;
}

// A node that does not answer (its link cut: no reply at all): the launch fails within the connect timeout, naming
// the host with ssh's own reason, and the worker already started on the other node is ended.
TEST(ssh_launch, an_unreachable_node_fails_the_launch_within_the_connect_timeout_naming_it) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  nodes.hosts().cut(2);
  const int timeout_s = 3;
  const auto r = run(nodes.launch("--ssh-connect-timeout " + std::to_string(timeout_s) + " " + nodes.two_nodes(1) +
                                  " -- sleep 60"),
                     60);
  EXPECT_EQ(r.exit_code, 255) << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: worker 1 could not be started on host 10.77.0.2 over ssh: ssh: connect to "
                          "host 10.77.0.2 port 22: Connection timed out"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, timeout_s + 3.0) << r.output;
  std::printf("[ ssh ] an unreachable node failed the launch after %.2f s (connect timeout %d s)\n", r.seconds,
              timeout_s);
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "a process was left on a node";
}

// A node that refuses the key: at once, naming the host and ssh's reason; nothing left on the other node.
TEST(ssh_launch, a_refused_key_fails_the_launch_naming_the_host_and_the_reason) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  const auto r = run(nodes.hosts().script() + " exec h3 -- " + launcher + " --ssh-config " + nodes.stranger_config() +
                         " --ssh-connect-timeout 5 " + nodes.two_nodes(1) + " -- sleep 60",
                     60);
  EXPECT_EQ(r.exit_code, 255) << r.output;
  EXPECT_NE(r.output.find("could not be started on host 10.77.0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("over ssh: root@10.77.0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Permission denied (publickey)"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 5.0 + 3.0) << r.output;
  // --ssh-option reaches ssh as -o: no sshd listens on port 2222.
  const auto port = run(nodes.launch("--ssh-option Port=2222 " + nodes.two_nodes(1) + " -- true"), 60);
  EXPECT_EQ(port.exit_code, 255) << port.output;
  EXPECT_NE(port.output.find("port 2222: Connection refused"), std::string::npos) << port.output;
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "a process was left on a node";
}

TEST(ssh_launch, a_program_missing_on_a_node_fails_the_launch_naming_the_host) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  const auto r = run(nodes.launch(nodes.two_nodes(1) + " -- /nonexistent/program --flag"), 60);
  EXPECT_EQ(r.exit_code, 127) << r.output;
  EXPECT_NE(r.output.find("over ssh: cannot run '/nonexistent/program': No such file or directory"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("could not be started on host 10.77.0."), std::string::npos) << r.output;
  // And a launcher that is not where --remote-launcher says: the remote shell's reason.
  const auto no_launcher = run(nodes.launch("--remote-launcher /nonexistent/mwstrat-launch " + nodes.two_nodes(1) +
                                            " -- true"),
                               60);
  EXPECT_EQ(no_launcher.exit_code, 127) << no_launcher.output;  // the login shell's "command not found"
  EXPECT_NE(no_launcher.output.find(" over ssh: "), std::string::npos) << no_launcher.output;
  EXPECT_NE(no_launcher.output.find("/nonexistent/mwstrat-launch: "), std::string::npos) << no_launcher.output;
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "a process was left on a node";
}

// A worker script that ignores SIGTERM and leaves a child in its group: the hardest orphan to end.
std::string stubborn_worker(const scratch_dir& dir) {
  std::ofstream(dir.path() / "stubborn.sh") << "trap '' TERM\nsleep 300 &\ntouch \"" << (dir / "ready") << ".$$\"\n"
                                            << "sleep 300\n";
  return "sh " + (dir / "stubborn.sh");
}

bool wait_ready(const scratch_dir& dir, int n) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    int ready = 0;
    for (const auto& e : fs::directory_iterator(dir.path())) {
      ready += e.path().filename().string().rfind("ready.", 0) == 0;
    }
    if (ready >= n) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

// The launcher SIGKILLed (no chance to forward anything): its ssh clients die with it (parent-death signal), each
// agent sees its stdin close and ends its worker's group (SIGTERM, SIGKILL after --grace-ms). Within a few seconds
// nothing but sshd runs on either node.
TEST(ssh_launch, a_killed_launcher_leaves_no_process_on_any_node) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  process job("echo $$ > " + (dir / "launcher.pid") + "; exec " +
                  nodes.launch("--grace-ms 2000 " + nodes.two_nodes(2) + " -- " + stubborn_worker(dir)),
              120);
  ASSERT_TRUE(wait_ready(dir, 4)) << "the workers did not start";
  pid_t launcher_pid = 0;
  std::ifstream(dir.path() / "launcher.pid") >> launcher_pid;
  ASSERT_GT(launcher_pid, 0);
  ASSERT_FALSE(nodes.processes_on(1).empty());
  ASSERT_EQ(::kill(launcher_pid, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(nodes.nodes_empty_within(10s)) << "processes left on the nodes";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("[ ssh ] launcher SIGKILLed: no process left on either node after %.2f s (grace 2 s)\n", seconds);
  EXPECT_EQ(job.finish().exit_code, 128 + SIGKILL);
}

// The connection to the launcher's machine hangs (its link cut: no EOF, no reset): each agent hears no ping for the
// liveness timeout and ends its worker; the launcher's ssh gives up too, and the launch fails naming the lost link.
TEST(ssh_launch, a_silent_connection_ends_the_nodes_workers_within_the_liveness_timeout) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  process job(nodes.launch("--grace-ms 1000 --liveness-timeout 3 " + nodes.two_nodes(1) + " -- " +
                           stubborn_worker(dir)),
              120);
  ASSERT_TRUE(wait_ready(dir, 2)) << "the workers did not start";
  nodes.hosts().cut(3);
  const auto cut_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(nodes.nodes_empty_within(15s)) << "processes left on the nodes";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count();
  std::printf("[ ssh ] launcher's link cut: no process left on either node after %.2f s (liveness 3 s)\n", seconds);
  EXPECT_GT(seconds, 2.0) << "the workers ended before the liveness timeout could have passed";
  const auto r = job.finish();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("lost its ssh connection to host 10.77.0."), std::string::npos) << r.output;
}

}  // namespace ssh_launch_test

namespace ssh_launch_test {

// SIGHUP to the launcher (its terminal or its own ssh session closed) reaches every remote worker as SIGTERM, through
// its agent; each stops with the preemption code, which comes back per worker and as the launcher's status.
TEST(ssh_launch, sighup_to_the_launcher_reaches_every_remote_worker_as_sigterm) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  std::ofstream(dir.path() / "w.sh") << "trap 'echo got TERM; exit 75' TERM\ntouch \"" << (dir / "ready")
                                     << ".$$\"\nsleep 300 &\nwait\n";
  process job("echo $$ > " + (dir / "launcher.pid") + "; exec " +
                  nodes.launch(nodes.two_nodes(2) + " -- sh " + (dir / "w.sh")),
              120);
  ASSERT_TRUE(wait_ready(dir, 4)) << "the workers did not start";
  pid_t launcher_pid = 0;
  std::ifstream(dir.path() / "launcher.pid") >> launcher_pid;
  ASSERT_GT(launcher_pid, 0);
  ASSERT_EQ(::kill(launcher_pid, SIGHUP), 0);
  const auto r = job.finish();
  EXPECT_EQ(r.exit_code, 75) << r.output;
  for (int i = 0; i < 4; ++i) {
    const std::string host = i < 2 ? "10.77.0.1" : "10.77.0.2";
    EXPECT_NE(r.output.find("[worker " + std::to_string(i) + "] got TERM"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("on " + host + ") exited with status 75 on host " + host), std::string::npos) << r.output;
  }
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "processes left on the nodes";
}

// --replace-lost across nodes: a remote worker that dies is replaced alone over ssh, in the next ring generation;
// a survivor's "lost RANK GENERATION" report (written to the descriptor its agent gave it, relayed over ssh) ends
// a hung remote replacement, which is replaced in turn.
TEST(ssh_launch, replace_lost_replaces_a_remote_worker_and_relays_the_survivors_reports) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  const std::string d = dir.path().string();
  std::ofstream(dir.path() / "w.sh")
      << "i=${TF_CONFIG##*\\\"index\\\": }; i=${i%%\\}*}\n"
      << "g=$MWSTRAT_RECOVERY_GENERATION\n"
      << "echo \"rank $i generation $g replace=$MWSTRAT_REPLACE_LOST\"\n"
      << "if [ $i = 1 ] && [ $g = 0 ]; then kill -9 $$; fi\n"
      << "if [ $i = 1 ] && [ $g = 1 ]; then touch " << d << "/hung; sleep 300; fi\n"
      << "if [ $i = 1 ] && [ $g = 2 ]; then touch " << d << "/replaced; fi\n"
      << "if [ $i = 0 ]; then\n"
      << "  for n in $(seq 600); do [ -f " << d << "/hung ] && break; sleep 0.1; done\n"
      << "  eval \"echo 'lost 1 1' >&$MWSTRAT_LAUNCH_REPORT_FD\"\n"
      << "  for n in $(seq 600); do [ -f " << d << "/replaced ] && break; sleep 0.1; done\n"
      << "fi\n";
  const auto r = run(nodes.launch("--replace-lost --max-restarts 2 " + nodes.two_nodes(1) + " -- bash " + d + "/w.sh"),
                     120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9 (Killed) on host 10.77.0.2; starting a replacement (restart 1 of 2, "
                          "ring generation 1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: the survivors report worker 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(restart 2 of 2, ring generation 2)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] rank 1 generation 2 replace=1"), std::string::npos) << r.output;
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "processes left on the nodes";
}

// An elastic job across nodes (--min-workers, --max-workers): a remote worker that dies is not replaced; the three
// others shrink the job at once, and after --join-delay the launcher starts a joiner in its place over ssh, which the
// members take in at a step boundary (--await-joiner-at-step) with the state from memory. The job ends as four, and
// nothing is left on the nodes.
TEST(ssh_launch, an_elastic_job_takes_a_joiner_in_over_ssh_in_a_lost_workers_place) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  const auto r = run(nodes.launch("--min-workers 3 --max-workers 4 --max-restarts 2 --spare-wait 0 --join-delay 0 " +
                                  nodes.two_nodes(2) + " -- " + example + " --data-dir " + mnist_dir +
                                  " --epochs 1 --steps-per-epoch 8 --global-batch 8 --train-examples 400 --no-test"
                                  " --kill-at-step 2 --kill-rank 3 --await-joiner-at-step 5 --recovery-timeout 120"
                                  " --model-dir " + (dir / "elastic")),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the job goes on without it (3 workers, --min-workers 3)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: worker 3: a joiner started over ssh on 10.77.0.2"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[mwstrat.recovery] rank 0: worker 3 joined: 4 workers from global step 5"), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(dir.path() / "elastic" / "model.safetensors")) << r.output;
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "processes left on the nodes";
}

// Growing across nodes (--grow-after with --grow-hosts): one worker on each node starts the job, and at once a third
// slot, on node 2, is started over ssh as a joiner; the two members take it in at step 3 (--await-joiner-at-step)
// and the three train the same global batch of 12 to the end (6 + 6, then 4 + 4 + 4). Nothing is left on the nodes.
// Growing onto hosts the launcher was not told of is refused.
TEST(ssh_launch, the_launcher_grows_a_job_onto_another_node_over_ssh) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  const auto r = run(nodes.launch("--min-workers 2 --max-workers 3 --max-restarts 1 --spare-wait 0 --grow-after 0 " +
                                  nodes.two_nodes(1) + " --grow-hosts " + nodes.hosts().address(2) + ":1 -- " +
                                  example + " --data-dir " + mnist_dir +
                                  " --epochs 1 --steps-per-epoch 8 --global-batch 12 --train-examples 400 --no-test"
                                  " --await-joiner-at-step 3 --recovery-timeout 120 --model-dir " + (dir / "grown")),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: the job grows to 3 workers in 0 ms (--grow-after)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: worker 2: a joiner started over ssh on " + nodes.hosts().address(2)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[mwstrat.recovery] rank 0: worker 2 joined: 3 workers from global step 3"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(dir.path() / "grown" / "model.safetensors")) << r.output;
  EXPECT_TRUE(nodes.nodes_empty_within(5s)) << "processes left on the nodes";

  const auto nowhere = run(launcher + " --min-workers 2 --max-workers 3 --max-restarts 1 --grow-after 0 " +
                               nodes.two_nodes(1) + " -- true",
                           30);
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_NE(nowhere.output.find("--grow-after with --hosts or --hostfile needs --grow-hosts NAME:N,...: where the "
                                "slots it grows into are"),
            std::string::npos)
      << nowhere.output;
  const auto too_many = run(launcher + " --min-workers 2 --max-workers 3 --max-restarts 1 --grow-after 0 " +
                                nodes.two_nodes(1) + " --grow-hosts " + nodes.hosts().address(2) + ":2 -- true",
                            30);
  EXPECT_EQ(too_many.exit_code, 2);
  EXPECT_NE(too_many.output.find("--grow-hosts: 2 workers and 2 to grow into are more than --max-workers 3"),
            std::string::npos)
      << too_many.output;
}

}  // namespace ssh_launch_test
