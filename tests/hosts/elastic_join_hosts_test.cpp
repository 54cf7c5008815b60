// Issue 48, a fault during a resize, across simulated hosts: three MNIST workers on h1..h3 (--min-workers 2
// --max-workers 4, the global batch 12 whatever the count) take a joiner from h4 in at a step boundary, and h4's link
// is slow (20 mbit/s), so the training state (11.1 MB) takes seconds to reach it. When the joiner says the state is
// on its way, and a second later (a part of it has arrived):
// - the joiner's host dies: the members find it lost inside the join (or in the first step after it, which never
//   completes), shrink back to the three and train on — the very model of three workers that never saw a joiner,
//   bit for bit;
// - a member's host dies: the joiner, holding a part of the state, and the two other members agree on the three of
//   them, the state comes again whole from a member that holds it, and the three train to the end.
// Either way one group trains on, and no worker is left waiting.
#include "mnist_hosts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace elastic_join_hosts_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

constexpr int steps = 5;  // the join at 3: two steps after it, each seconds long on the slow link
constexpr const char* receiving = "receiving the training state from rank ";

// The lines of one file (none while it does not exist).
std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

class elastic_join_hosts : public ::testing::Test {
 protected:
  struct outcome {
    std::vector<process_result> members;  // h1..h3
    process_result joiner;                // h4 (its output is its log file's)
  };

  // Three members on h1..h3 and a joiner on h4; every process on `kill_host` is SIGKILLed a second after the joiner
  // logs that the state is on its way.
  outcome join_with_a_death(const std::string& name, int kill_host) {
    hosts_ = std::make_unique<simulated_hosts>(4, "1gbit,1gbit,1gbit,20mbit");
    std::vector<std::string> cluster;
    for (int k = 1; k <= 4; ++k) cluster.push_back(hosts_->address(k) + ":20000");
    const std::string desk = hosts_->address(1) + ":20100";
    const std::string env = "MWSTRAT_RING_LIVENESS_MS=2000 MWSTRAT_JOB_TOKEN=elastic ";
    const std::string elastic = " --min-workers 2 --max-workers 4 --recovery-timeout 60";
    std::vector<std::unique_ptr<process>> members;
    const std::vector<std::string> first_three(cluster.begin(), cluster.begin() + 3);
    for (int w = 0; w < 3; ++w) {
      members.push_back(std::make_unique<process>(
          hosts_->on(w + 1, env + "MWSTRAT_JOIN_LISTEN=" + desk + " TF_CONFIG='" + tf_config(first_three, w) + "' " +
                                job(name) + elastic + " --await-joiner-at-step 3"),
          400));
    }
    // The joiner's output goes to a file the test reads as it runs.
    const fs::path joiner_log = dir_.path() / (name + ".joiner.log");
    auto joiner = std::make_unique<process>(
        hosts_->on(4, env + "MWSTRAT_JOIN=" + desk + " TF_CONFIG='" + tf_config(cluster, 3) + "' " + job(name) +
                          elastic + " --connect-timeout 120 > '" + joiner_log.string() + "' 2>&1"),
        400);
    bool under_way = false;
    for (int waited = 0; waited < 6000 && !under_way; ++waited) {  // bounded: 300 s
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (const auto& line : lines_of(joiner_log)) under_way = under_way || line.find(receiving) != std::string::npos;
    }
    EXPECT_TRUE(under_way) << "the state never began to flow to the joiner:\n" << read_file(joiner_log);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // 2.5 MB at 20 mbit/s: well inside the 4.4 s it takes
    hosts_->kill_all(kill_host);
    outcome out;
    for (auto& m : members) out.members.push_back(m->finish());
    out.joiner = joiner->finish();
    out.joiner.output = read_file(joiner_log);
    return out;
  }

  std::string job(const std::string& name) const {
    return example + " --data-dir " + mnist_dir + " --seed 7 --epochs 1 --steps-per-epoch " + std::to_string(steps) +
           " --global-batch 12 --train-examples 600 --no-test --optimizer sgd --learning-rate 0.05 --op-timeout 60"
           " --step-log " + (dir_ / name) + " --model-dir " + (dir_ / name);
  }

  scratch_dir dir_;
  std::unique_ptr<simulated_hosts> hosts_;
};

TEST_F(elastic_join_hosts, a_joiner_that_dies_while_it_receives_the_state_leaves_the_members_training_as_before) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  const auto r = join_with_a_death("joiner_died", 4);
  for (int w = 0; w < 3; ++w) EXPECT_EQ(r.members[w].exit_code, 0) << "worker " << w << ":\n" << r.members[w].output;
  EXPECT_NE(r.joiner.exit_code, 0) << r.joiner.output;
  EXPECT_EQ(count_of(r.joiner.output, receiving), 1u) << r.joiner.output;
  EXPECT_EQ(r.joiner.output.find("received from"), std::string::npos) << "the state arrived whole:\n"
                                                                       << r.joiner.output;
  // The members may have sent their part and called the join done (a ring broadcast leaves the source before the
  // last rank has it); then the joiner is lost in the first step on four, which never completes. Either way they
  // shrink back from the boundary of the join, and no step is trained by four.
  EXPECT_NE(r.members[0].output.find("worker 3) lost; going on without it: 3 workers"), std::string::npos)
      << r.members[0].output;
  for (int w = 0; w < 3; ++w) {
    for (const auto& line : lines_of(dir_ / ("joiner_died.w" + std::to_string(w)))) {
      EXPECT_EQ(line.find(" workers 4 "), std::string::npos) << "worker " << w << ": " << line;
    }
  }
  hosts_.reset();

  // The three workers alone, on three hosts: no joiner, no shrink.
  simulated_hosts hosts(3, "1gbit");
  std::vector<std::string> cluster;
  for (int k = 1; k <= 3; ++k) cluster.push_back(hosts.address(k) + ":20000");
  std::vector<std::unique_ptr<process>> workers;
  for (int w = 0; w < 3; ++w) {
    workers.push_back(
        std::make_unique<process>(hosts.on(w + 1, "TF_CONFIG='" + tf_config(cluster, w) + "' " + job("alone")), 400));
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
  EXPECT_EQ(r.members[0].exit_code, 0) << r.members[0].output;
  EXPECT_NE(r.members[1].exit_code, 0) << r.members[1].output;
  EXPECT_EQ(r.members[2].exit_code, 0) << r.members[2].output;
  EXPECT_EQ(r.joiner.exit_code, 0) << "the joiner:\n" << r.joiner.output;
  EXPECT_NE(r.members[0].output.find("worker 1) lost; going on without it: 3 workers"), std::string::npos)
      << r.members[0].output;
  // The first receipt broke off; the second came whole, from the chief.
  EXPECT_EQ(count_of(r.joiner.output, receiving), 2u) << r.joiner.output;
  EXPECT_NE(r.joiner.output.find("received from rank 0's memory"), std::string::npos) << r.joiner.output;
  EXPECT_TRUE(fs::exists(dir_.path() / "member_died" / "model.safetensors")) << r.members[0].output;
  // Every one of the three logged the last step, trained by three.
  for (const int w : {0, 2, 3}) {
    const auto lines = lines_of(dir_ / ("member_died.w" + std::to_string(w)));
    ASSERT_FALSE(lines.empty()) << "worker " << w;
    EXPECT_NE(lines.back().find("step " + std::to_string(steps - 1) + " "), std::string::npos)
        << "worker " << w << ": " << lines.back();
    EXPECT_NE(lines.back().find(" workers 3 "), std::string::npos) << "worker " << w << ": " << lines.back();
  }
}

}  // namespace elastic_join_hosts_test
