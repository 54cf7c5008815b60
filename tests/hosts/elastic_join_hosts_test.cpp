// Issue 48, a fault during a resize, across simulated hosts: three MNIST workers on h1..h3 (--min-workers 2
// --max-workers 4) take a joiner from h4 in at a step boundary, and h4's link is slow (20 mbit/s), so the training
// state takes seconds to reach it. Midway through that transfer (h4 has taken in a part of the state):
// - the joiner's host dies: the members find it lost inside the join, shrink back to the three and train on — the
//   very model of three workers that never saw a joiner, bit for bit;
// - a member's host dies: the joiner, with a part of the state, and the two other members agree on the three of
//   them, the state comes again from a member that holds it, and the three train to the end.
// Either way one group trains on, and no worker is left waiting.
#include "mnist_hosts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace elastic_join_hosts_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

constexpr int steps = 10;

// The bytes host k has received on its link so far (-1 when it cannot be read).
long long received_bytes(const simulated_hosts& hosts, int k) {
  const auto r = run(hosts.on(k, "cat /sys/class/net/eth0/statistics/rx_bytes"), 30);
  return r.exit_code == 0 ? std::atoll(r.output.c_str()) : -1;
}

class elastic_join_hosts : public ::testing::Test {
 protected:
  // Three members on h1..h3 and a joiner on h4; `kill_host` is SIGKILLed once h4 has received `midway` bytes of
  // the state. Returns the four workers' results (the joiner last).
  std::vector<process_result> join_with_a_death(const std::string& name, int kill_host) {
    hosts_ = std::make_unique<simulated_hosts>(4, "1gbit,1gbit,1gbit,20mbit");
    std::vector<std::string> cluster;
    for (int k = 1; k <= 4; ++k) cluster.push_back(hosts_->address(k) + ":20000");
    const std::string desk = hosts_->address(1) + ":20100";
    const std::string env = "MWSTRAT_RING_LIVENESS_MS=2000 MWSTRAT_JOB_TOKEN=elastic ";
    const std::string elastic = " --min-workers 2 --max-workers 4 --recovery-timeout 30";
    std::vector<std::unique_ptr<process>> workers;
    const std::vector<std::string> members(cluster.begin(), cluster.begin() + 3);
    for (int w = 0; w < 3; ++w) {
      workers.push_back(std::make_unique<process>(
          hosts_->on(w + 1, env + "MWSTRAT_JOIN_LISTEN=" + desk + " TF_CONFIG='" + tf_config(members, w) + "' " +
                                job(name) + elastic + " --await-joiner-at-step 3"),
          300));
    }
    const long long before = received_bytes(*hosts_, 4);
    workers.push_back(std::make_unique<process>(
        hosts_->on(4, env + "MWSTRAT_JOIN=" + desk + " TF_CONFIG='" + tf_config(cluster, 3) + "' " + job(name) +
                          elastic + " --connect-timeout 120"),
        300));
    // Until h4 has received a part of the state (bounded: 120 s). The ring's handshakes and beats are a few KB.
    long long got = 0;
    for (int waited = 0; waited < 6000 && got < midway; ++waited) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      got = received_bytes(*hosts_, 4) - before;
    }
    EXPECT_GE(got, midway) << "the state never began to flow to the joiner";
    hosts_->kill_all(kill_host);
    std::vector<process_result> results;
    for (auto& w : workers) results.push_back(w->finish());
    return results;
  }

  std::string job(const std::string& name) const {
    return example + " --data-dir " + mnist_dir + " --seed 7 --epochs 1 --steps-per-epoch " + std::to_string(steps) +
           " --batch-size 4 --train-examples 600 --no-test --optimizer sgd --learning-rate 0.05 --op-timeout 60"
           " --step-log " + (dir_ / name) + " --model-dir " + (dir_ / name);
  }

  static constexpr long long midway = 2'000'000;  // of the state's 11.1 MB (the tutorial CNN)
  scratch_dir dir_;
  std::unique_ptr<simulated_hosts> hosts_;
};

TEST_F(elastic_join_hosts, a_joiner_that_dies_while_it_receives_the_state_leaves_the_members_training_as_before) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  const auto r = join_with_a_death("joiner_died", 4);
  for (int w = 0; w < 3; ++w) EXPECT_EQ(r[w].exit_code, 0) << "worker " << w << ":\n" << r[w].output;
  EXPECT_EQ(r[3].exit_code, 137) << r[3].output;
  EXPECT_NE(r[0].output.find("lost; going on without it: 3 workers"), std::string::npos) << r[0].output;
  EXPECT_EQ(r[0].output.find("joined: 4 workers"), std::string::npos) << "the join completed: " << r[0].output;
  hosts_.reset();

  // The three workers alone, on the same hosts' addresses: no joiner, no shrink.
  simulated_hosts hosts(3, "1gbit");
  std::vector<std::string> cluster;
  for (int k = 1; k <= 3; ++k) cluster.push_back(hosts.address(k) + ":20000");
  std::vector<std::unique_ptr<process>> workers;
  for (int w = 0; w < 3; ++w) {
    workers.push_back(
        std::make_unique<process>(hosts.on(w + 1, "TF_CONFIG='" + tf_config(cluster, w) + "' " + job("alone")), 300));
  }
  for (auto& w : workers) {
    const auto done = w->finish();
    ASSERT_EQ(done.exit_code, 0) << done.output;
  }
  const std::string model = read_file(dir_.path() / "alone" / "model.safetensors");
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(read_file(dir_.path() / "joiner_died" / "model.safetensors"), model)
      << "the members' model is not the one three workers train without a joiner";
}

TEST_F(elastic_join_hosts, a_member_that_dies_while_a_joiner_receives_the_state_leaves_three_training_to_the_end) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  const auto r = join_with_a_death("member_died", 2);
  EXPECT_EQ(r[0].exit_code, 0) << r[0].output;
  EXPECT_EQ(r[1].exit_code, 137) << r[1].output;
  EXPECT_EQ(r[2].exit_code, 0) << r[2].output;
  EXPECT_EQ(r[3].exit_code, 0) << "the joiner:\n" << r[3].output;
  EXPECT_NE(r[0].output.find("lost; going on without it: 3 workers"), std::string::npos) << r[0].output;
  EXPECT_NE(r[3].output.find("received from rank 0's memory"), std::string::npos) << r[3].output;
  EXPECT_TRUE(fs::exists(dir_.path() / "member_died" / "model.safetensors")) << r[0].output;
  // Every worker of the three logged the last step, trained by three.
  for (const int w : {0, 2, 3}) {
    std::istringstream lines(read_file(dir_ / ("member_died.w" + std::to_string(w))));
    std::string line, last;
    while (std::getline(lines, line)) last = line;
    EXPECT_NE(last.find("step " + std::to_string(steps - 1) + " "), std::string::npos)
        << "worker " << w << ": " << last;
    EXPECT_NE(last.find(" workers 3 "), std::string::npos) << "worker " << w << ": " << last;
  }
}

}  // namespace elastic_join_hosts_test
