// Issue 48, elastic training across simulated hosts: three hosts, one MNIST worker each (--min-workers 2). Host 3's
// link is cut mid-training: the two others name its worker after the liveness timeout, shrink the job and finish it
// as two. The cut-off worker draws a verdict of its own (a neighbour silent); in the survivors' regroup it reaches
// nobody, and alone it is not a majority of the three (none is known dead: the cut closed no connection), so it
// exits 69 (peer lost) — never a second group training apart: it trains no step after the cut. The chief's host
// cut the same way: the lowest survivor becomes chief, and only it writes backups from then on.
#include "mnist_hosts.hpp"

#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace elastic_hosts_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

// The step lines of one worker's --step-log file.
std::vector<std::string> step_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Three MNIST workers, one on each host (--min-workers 2, 40 steps); `extra(w)`: more flags for worker w.
std::string elastic_job(const scratch_dir& dir, const std::string& steps, const std::string& extra) {
  return "MWSTRAT_RING_LIVENESS_MS=2000 " + example + " --data-dir " + mnist_dir +
         " --epochs 1 --steps-per-epoch 40 --batch-size 4 --train-examples 1200 --no-test --op-timeout 60"
         " --min-workers 2 --recovery-timeout 4 --step-log " + steps + " --model-dir " + (dir / "model") + extra;
}

template <class Job>
std::vector<std::unique_ptr<process>> start_on_three_hosts(const simulated_hosts& hosts,
                                                           const std::vector<std::string>& cluster, Job job) {
  std::vector<std::unique_ptr<process>> workers;
  for (int w = 0; w < 3; ++w) {
    workers.push_back(
        std::make_unique<process>(hosts.on(w + 1, "TF_CONFIG='" + tf_config(cluster, w) + "' " + job(w)), 240));
  }
  return workers;
}

// Until `file` holds 3 step lines (bounded: 180 s); then true.
bool trained_a_few_steps(const fs::path& file) {
  for (int waited = 0; waited < 1800 && step_lines(file).size() < 3; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return step_lines(file).size() >= 3;
}

TEST(elastic_hosts, a_cut_off_host_is_dropped_and_only_the_survivors_train_on) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(3, "1gbit");
  const std::vector<std::string> cluster = {hosts.address(1) + ":20000", hosts.address(2) + ":20000",
                                            hosts.address(3) + ":20000"};
  const std::string steps = dir / "steps";
  auto workers = start_on_three_hosts(hosts, cluster, [&](int) { return elastic_job(dir, steps, ""); });
  const fs::path third = steps + ".w2";
  ASSERT_TRUE(trained_a_few_steps(third)) << "training never started";
  hosts.cut(3);
  const std::size_t trained_before_cut = step_lines(third).size();
  const auto r0 = workers[0]->finish();
  const auto r1 = workers[1]->finish();
  hosts.restore(3);
  const auto r2 = workers[2]->finish();
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_EQ(r2.exit_code, mwstrat::peer_lost_exit_code) << r2.output;
  EXPECT_NE(r2.output.find("not a majority of the 3 not known dead"), std::string::npos) << r2.output;
  EXPECT_NE(r0.output.find("rank 2 (" + cluster[2] + ") was lost: silent for 2.0 s"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("lost; going on without it: 2 workers, ring generation 1"), std::string::npos)
      << r0.output;
  EXPECT_TRUE(fs::exists(dir.path() / "model" / "model.safetensors")) << r0.output;
  // The survivors trained all 40 steps, the last ones as two; the cut-off worker none after the cut (at most the
  // one it was finishing when the link went).
  const auto first = step_lines(steps + ".w0");
  ASSERT_FALSE(first.empty());
  EXPECT_NE(first.back().find("step 39 "), std::string::npos) << first.back();
  EXPECT_NE(first.back().find(" workers 2 "), std::string::npos) << first.back();
  const auto cut_off = step_lines(third);
  EXPECT_LE(cut_off.size(), trained_before_cut + 1) << "the cut-off worker trained on alone";
  for (const auto& line : cut_off) EXPECT_EQ(line.find(" workers 2 "), std::string::npos) << line;
}


// The chief's host cut off: the two others shrink the job and the lowest of them becomes its chief — it writes the
// backups from then on and the model at the end. Each worker is given a backup folder of its own (only the chief
// writes one), so the test sees who wrote: the cut-off chief nothing after its last step, the third worker never.
// Exactly one group writes backups.
TEST(elastic_hosts, a_cut_off_chief_is_dropped_and_only_the_new_chief_writes_backups) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(3, "1gbit");
  const std::vector<std::string> cluster = {hosts.address(1) + ":20000", hosts.address(2) + ":20000",
                                            hosts.address(3) + ":20000"};
  const std::string steps = dir / "steps";
  const auto backups = [&](int w) { return dir.path() / ("backup.w" + std::to_string(w)); };
  // The newest backup's global step in a folder (-1: none).
  const auto newest_backup = [](const fs::path& folder) {
    long newest = -1;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("backup-") && name.ends_with(".safetensors")) {
        newest = std::max(newest, std::stol(name.substr(7)));
      }
    }
    return newest;
  };
  auto workers = start_on_three_hosts(hosts, cluster, [&](int w) {
    return elastic_job(dir, steps, " --save-freq 1 --backup-dir " + backups(w).string());
  });
  const fs::path chief_steps = steps + ".w0";
  ASSERT_TRUE(trained_a_few_steps(chief_steps)) << "training never started";
  hosts.cut(1);
  const std::size_t trained_before_cut = step_lines(chief_steps).size();
  // The new chief's first backup (bounded: it is written within seconds of the shrink, and the folder stays until
  // the job ends, when a finished job's backups are deleted).
  long new_chief_backup = -1;
  for (int waited = 0; waited < 3000 && new_chief_backup < 0; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    new_chief_backup = newest_backup(backups(1));
  }
  const auto r1 = workers[1]->finish();
  const auto r2 = workers[2]->finish();
  hosts.restore(1);
  const auto r0 = workers[0]->finish();
  EXPECT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_EQ(r0.exit_code, mwstrat::peer_lost_exit_code) << r0.output;
  EXPECT_NE(r1.output.find("lost; going on without it: 2 workers"), std::string::npos) << r1.output;
  EXPECT_GT(new_chief_backup, static_cast<long>(trained_before_cut) - 2) << "worker 1 wrote no backup as chief";
  EXPECT_LE(newest_backup(backups(0)), static_cast<long>(trained_before_cut) + 1)
      << "the cut-off chief went on writing backups";
  EXPECT_FALSE(fs::exists(backups(2))) << "a worker that never was chief wrote backups";
  EXPECT_TRUE(fs::exists(dir.path() / "model" / "model.safetensors")) << r1.output;
  const auto second = step_lines(steps + ".w1");
  ASSERT_FALSE(second.empty());
  EXPECT_NE(second.back().find("step 39 "), std::string::npos) << second.back();
  EXPECT_NE(second.back().find(" workers 2 "), std::string::npos) << second.back();
  EXPECT_LE(step_lines(chief_steps).size(), trained_before_cut + 1) << "the cut-off chief trained on alone";
}

}  // namespace elastic_hosts_test
