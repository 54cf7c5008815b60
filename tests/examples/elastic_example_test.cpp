// Issue 48, elastic training, with real worker processes of examples/mnist_multiworker on 127.0.0.1 and real MNIST:
// three workers, one lost for good (SIGKILL, or SIGSTOP past the liveness timeout) and nobody to replace it. The two
// survivors shrink the job in memory (--min-workers 2) and go on from the last step boundary with the same global
// batch: every step trains on exactly the examples of the uninterrupted three-worker run, its loss agrees with that
// run's to 1e-4 (only the order of additions differs), and a second run with the same fault gives a byte-identical
// model. A global batch of 15 over two workers is 7 + 8: uneven shares, weighted by examples, and each computed in
// micro-batches of at most the per-worker batch of 5. Also: a lost chief succeeded by the lowest survivor, a stopped
// worker that finds itself removed (exit 78), the launcher's --min-workers, the floor of min_workers, and a backup
// written after the shrink resuming on two workers and on one. Growing: a joiner the launcher starts in a lost
// worker's place, taken in at a step boundary (byte-identical twice), the launcher growing a job of two past its -n
// (--grow-after), a spare within --spare-wait, and joiners the job refuses (another job token, other data) while it
// goes on unchanged. Short runs, so that an unoptimised build runs them too.
#include "example_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace elastic_example_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

// 40 examples in global batches of 15 (5 per worker): two steps a pass; 3 epochs of 3 steps (9 steps).
const std::string job = example + " --data-dir " + mnist_dir +
                        " --seed 7 --no-test --optimizer sgd --learning-rate 0.05 --batch-size 5 --train-examples 40"
                        " --epochs 3 --steps-per-epoch 3 --op-timeout 30";
constexpr std::size_t steps = 9;

// Three workers started by hand (no launcher: nobody replaces a lost one), `flags` added to each. Waits for workers 0
// and 2, then continues worker 1 (stopped by --fault-signal stop; a dead one ignores it) and waits for it. The output
// has "codes E0 E1 E2" and the workers' logs.
// `meanwhile`: shell run once all three are started, before the waits (their pids are $p0 $p1 $p2).
process_result three_workers(const scratch_dir& dir, const std::string& name, const std::string& flags,
                             const std::string& env = "", const std::string& meanwhile = "") {
  const auto ports = free_ports(3);
  std::string script;
  for (int w = 0; w < 3; ++w) {  // (appended piece by piece: GCC 12 -O3 misjudges "literal" + string as overlapping)
    script += env + " TF_CONFIG='";
    script += tf_config(ports, w);
    script += "' " + job + " --step-log " + (dir / name) + " --model-dir " + (dir / name) + " " + flags + " > ";
    script += dir / (name + ".log" + std::to_string(w));
    script += " 2>&1 & p" + std::to_string(w) + "=$!; ";
  }
  script += meanwhile;
  script += "wait $p0; e0=$?; wait $p2; e2=$?; kill -CONT $p1 2>/dev/null; wait $p1; e1=$?; "
            "echo \"codes $e0 $e1 $e2\"; for w in 0 1 2; do sed \"s/^/[worker $w] /\" " +
            (dir / (name + ".log")) + "$w; done";
  return run(script, 300);
}

// One worker's line of the step log: the step's loss over all workers, how many workers trained it, and this
// worker's examples.
struct step_line {
  double loss = 0;
  int workers = 0;
  std::vector<std::size_t> examples;
};

// Every worker's last line of each step (a step run again after the shrink replaces the one before it).
std::vector<std::map<std::size_t, step_line>> read_step_logs(const scratch_dir& dir, const std::string& name) {
  std::vector<std::map<std::size_t, step_line>> all;
  for (int w = 0; w < 3; ++w) {
    std::istringstream in(read_file(dir.path() / (name + ".w" + std::to_string(w))));
    std::map<std::size_t, step_line> mine;
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string word;
      std::size_t step = 0;
      step_line s;
      words >> word >> step >> word >> s.loss >> word >> s.workers >> word;
      for (std::size_t e; words >> e;) s.examples.push_back(e);
      mine[step] = s;
    }
    all.push_back(std::move(mine));
  }
  return all;
}

// Step `step` as the group that finally trained it: the lines with the fewest workers (only a shrink runs steps
// again: a join comes at a boundary and runs none again),
// their examples together in a sorted list; `workers` 0 when no complete group logged it.
step_line final_step(const std::vector<std::map<std::size_t, step_line>>& logs, std::size_t step) {
  int fewest = 0;
  for (const auto& mine : logs) {
    const auto it = mine.find(step);
    if (it != mine.end() && (fewest == 0 || it->second.workers < fewest)) fewest = it->second.workers;
  }
  step_line out;
  int lines = 0;
  for (const auto& mine : logs) {
    const auto it = mine.find(step);
    if (it == mine.end() || it->second.workers != fewest) continue;
    ++lines;
    out.loss = it->second.loss;
    out.examples.insert(out.examples.end(), it->second.examples.begin(), it->second.examples.end());
  }
  std::sort(out.examples.begin(), out.examples.end());
  out.workers = lines == fewest ? fewest : 0;
  return out;
}

// Every step of `name`'s run against the reference run: the same examples, the loss to 1e-4 relative, and three
// workers before `shrunk_from` (a global step), two from there on — until `grown_at`, three again from there.
void expect_same_steps(const scratch_dir& dir, const std::string& name, std::size_t shrunk_from,
                       std::size_t grown_at = steps, int shrunk_to = 2) {
  const auto reference = read_step_logs(dir, "reference");
  const auto run_logs = read_step_logs(dir, name);
  for (std::size_t s = 0; s < steps; ++s) {
    const step_line want = final_step(reference, s), got = final_step(run_logs, s);
    ASSERT_EQ(want.workers, 3) << "step " << s << " of the reference run";
    EXPECT_EQ(got.workers, s < shrunk_from || s >= grown_at ? 3 : shrunk_to) << "step " << s;
    EXPECT_EQ(got.examples.size(), 15u) << "step " << s;
    EXPECT_EQ(got.examples, want.examples) << "step " << s << " trained on other examples";
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * std::abs(want.loss)) << "step " << s;
  }
}

class elastic_example : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new scratch_dir;
    const auto r = three_workers(*dir_, "reference", "");
    reference_ok_ = r.output.find("codes 0 0 0") != std::string::npos;
    EXPECT_TRUE(reference_ok_) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static scratch_dir* dir_;
  static bool reference_ok_;
};
scratch_dir* elastic_example::dir_ = nullptr;
bool elastic_example::reference_ok_ = false;

TEST_F(elastic_example, a_killed_worker_is_dropped_and_the_survivors_train_the_same_steps_byte_identical_twice) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  // Rank 1 SIGKILLs itself after global step 4 (at the end of step 3, before that step's boundary): the survivors
  // take the state of the boundary before it and train steps 3 to 8 as two.
  const std::string fault = "--min-workers 2 --kill-at-step 4 --kill-rank 1";
  const auto first = three_workers(dir, "first", fault);
  ASSERT_NE(first.output.find("codes 0 137 0"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("fault injection: rank 1 kills itself after global step 4"), std::string::npos)
      << first.output;
  for (const int w : {0, 2}) {
    EXPECT_NE(first.output.find("[worker " + std::to_string(w) + "] [mwstrat.recovery] rank " + std::to_string(w) +
                                ": rank 1 (127.0.0.1:"),
              std::string::npos)
        << first.output;
  }
  EXPECT_NE(first.output.find(", worker 1) lost; going on without it: 2 workers, ring generation 1"),
            std::string::npos)
      << first.output;
  EXPECT_NE(first.output.find("[worker 0] [mwstrat.recovery] rank 0: the 2 survivors' ring is up in "),
            std::string::npos)
      << first.output;
  expect_same_steps(dir, "first", 3);

  const auto second = three_workers(dir, "second", fault);
  ASSERT_NE(second.output.find("codes 0 137 0"), std::string::npos) << second.output;
  const std::string model = read_file(dir.path() / "first" / "model.safetensors");
  EXPECT_FALSE(model.empty());
  EXPECT_EQ(read_file(dir.path() / "second" / "model.safetensors"), model)
      << "the same fault schedule gives the same bits";
}

TEST_F(elastic_example, two_workers_lost_at_once_leave_the_last_to_train_the_same_steps_alone) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  // Ranks 1 and 2 stop themselves after global step 4 and are then SIGKILLed together, so that neither can pass a
  // verdict on: worker 0 finds both its neighbours dead, agrees with nobody but itself (one of the three, but the
  // only one not known dead) and trains steps 3 to 8 alone, on the same examples.
  const std::string both_stopped_then_killed =
      "for i in $(seq 600); do s1=$(ps -o stat= -p $p1); s2=$(ps -o stat= -p $p2); "
      "case \"$s1$s2\" in T*T*) break;; esac; sleep 0.05; done; kill -KILL $p1 $p2; ";
  const auto r = three_workers(dir, "two_lost", "--min-workers 1 --kill-at-step 4 --kill-rank 1 --kill-rank 2 "
                               "--fault-signal stop", "", both_stopped_then_killed);
  ASSERT_NE(r.output.find("codes 0 137 137"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lost; going on without them: 1 worker, ring generation 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("regrouped as ranks 0 (ranks 0 of 3 answered; dead: 1,2)"), std::string::npos) << r.output;
  expect_same_steps(dir, "two_lost", 3, steps, 1);
}

TEST_F(elastic_example, a_lost_chief_is_replaced_by_the_lowest_survivor_which_saves_the_model) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto r = three_workers(dir, "chief", "--min-workers 2 --kill-at-step 5 --kill-rank 0");
  ASSERT_NE(r.output.find("codes 137 0 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] [mwstrat.recovery] rank 0: the 2 survivors' ring is up in "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("this rank is the chief now (it was rank 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] saved "), std::string::npos) << "the new chief saves the model\n" << r.output;
  EXPECT_TRUE(fs::exists(dir.path() / "chief" / "model.safetensors")) << r.output;
  expect_same_steps(dir, "chief", 4);
}

TEST_F(elastic_example, a_stopped_worker_is_dropped_and_when_continued_finds_itself_removed) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  // Rank 1 SIGSTOPs itself: the survivors name it after the 2 s liveness timeout and go on as two; continued once
  // they have finished, it reads their verdict naming it and exits with mwstrat::removed_exit_code (78).
  const auto r = three_workers(dir, "stopped", "--min-workers 2 --kill-at-step 4 --fault-signal stop",
                               "MWSTRAT_RING_LIVENESS_MS=2000");
  ASSERT_NE(r.output.find("codes 0 78 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(") was lost: silent for "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("removed from the elastic job"), std::string::npos) << r.output;
  expect_same_steps(dir, "stopped", 3);
}

TEST_F(elastic_example, under_the_launcher_a_lost_worker_is_not_replaced_and_the_job_ends_well) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto r = run(launcher + " -n 3 --min-workers 2 -- " + job + " --kill-at-step 4 --kill-rank 2 --step-log " +
                         (dir / "launched") + " --model-dir " + (dir / "launched"),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the job goes on without it (2 workers, --min-workers 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("starting a replacement"), std::string::npos) << r.output;
  expect_same_steps(dir, "launched", 3);
}

// BackupAndRestore after a shrink: the chief is killed (so the new chief writes the backups), the two survivors are
// preempted later (SIGTERM during a pause: exit 75, a backup of the step they stopped at), and the job resumes from
// that backup on two workers — byte-identical to the shrunk job that was never interrupted — and on one worker (the
// same steps: equal up to the order of additions). A fixed global batch of 12 (--global-batch), so that every count
// trains the same steps.
TEST_F(elastic_example, a_backup_written_after_the_shrink_resumes_on_two_workers_exactly_and_on_one) {
  const scratch_dir& dir = *dir_;
  const std::string fixed = " --global-batch 12 --batch-size 4 --train-examples 36";
  const std::string fault = fixed + " --min-workers 2 --kill-at-step 4 --kill-rank 0";
  const auto whole = three_workers(dir, "whole", fault);
  ASSERT_NE(whole.output.find("codes 137 0 0"), std::string::npos) << whole.output;

  const auto ports = free_ports(3);
  std::string script;
  const std::string backup = dir / "backup";
  for (int w = 0; w < 3; ++w) {  // (appended piece by piece: GCC 12 -O3 misjudges "literal" + string as overlapping)
    script += "TF_CONFIG='";
    script += tf_config(ports, w);
    script += "' " + job + fault + " --backup-dir " + backup + " --save-freq 1 --pause-at-step 6 > ";
    script += dir / ("paused.log" + std::to_string(w));
    script += " 2>&1 & p" + std::to_string(w) + "=$!; ";
  }
  // The new chief (worker 1) says when it pauses; SIGTERM then lands mid-training whatever the build's speed.
  script += "for i in $(seq 1200); do grep -q 'pausing at step 6' " + (dir / "paused.log1") +
            " && break; sleep 0.1; done; kill -TERM $p1; wait $p0; e0=$?; wait $p1; e1=$?; wait $p2; e2=$?; "
            "echo \"codes $e0 $e1 $e2\"; cat " + (dir / "paused.log1");
  const auto paused = run(script, 300);
  ASSERT_NE(paused.output.find("codes 137 75 75"), std::string::npos) << paused.output;
  ASSERT_TRUE(fs::exists(backup)) << paused.output;
  fs::copy(backup, dir.path() / "backup_for_one", fs::copy_options::recursive);

  // On two workers, from the backup.
  const auto two_ports = free_ports(2);
  std::string two;
  for (int w = 0; w < 2; ++w) {
    two += "TF_CONFIG='";
    two += tf_config(two_ports, w);
    two += "' " + job + fixed + " --backup-dir " + backup + " --model-dir " + (dir / "two") + " > ";
    two += dir / ("two.log" + std::to_string(w));
    two += " 2>&1 & q" + std::to_string(w) + "=$!; ";
  }
  two += "wait $q0; e0=$?; wait $q1; e1=$?; echo \"codes $e0 $e1\"; cat " + (dir / "two.log0");
  const auto resumed = run(two, 300);
  ASSERT_NE(resumed.output.find("codes 0 0"), std::string::npos) << resumed.output;
  // From the backup the new chief wrote when the two stopped: past the pause at step 6, after the shrink at 4.
  EXPECT_GE(number_after(resumed.output, "[mwstrat.train.backup] rank 0: restored ", "(global step "), 6.0)
      << resumed.output;
  const std::string shrunk = read_file(dir.path() / "whole" / "model.safetensors");
  ASSERT_FALSE(shrunk.empty());
  EXPECT_EQ(read_file(dir.path() / "two" / "model.safetensors"), shrunk)
      << "resumed on two workers, the model is the uninterrupted shrunk job's";

  // On one worker, from the same backup.
  const auto one = run("TF_CONFIG= " + job + fixed + " --backup-dir " + (dir / "backup_for_one") + " --model-dir " +
                           (dir / "one"),
                       300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto a = saved_weights(dir.path() / "whole" / "model.safetensors");
  const auto b = saved_weights(dir.path() / "one" / "model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  float largest = 0;
  double worst = 0;
  for (const float v : a) largest = std::max(largest, std::abs(v));
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  EXPECT_LT(worst / largest, 1e-4) << "resumed on one worker, the same steps up to the order of additions";
}

TEST_F(elastic_example, below_min_workers_the_survivors_exit_69_naming_the_lost_rank) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto r = three_workers(dir, "floor", "--min-workers 3 --kill-at-step 2 --kill-rank 1");
  ASSERT_NE(r.output.find("codes 69 137 69"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 worker(s) would remain, fewer than min_workers 3"), std::string::npos) << r.output;
}

// Growing: the launcher starts a joiner in the killed worker's place at once (--max-workers 3); the two survivors
// train steps 3 to 5 and take it in where every worker awaits it, after step 6 (--await-joiner-at-step, so that the
// join lands on the same step in every run); from there three train again. Every step trains on the reference run's
// examples, and a second run with the same schedule gives a byte-identical model.
TEST_F(elastic_example, a_joiner_takes_a_lost_workers_place_and_the_three_train_the_same_steps_byte_identical_twice) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto grown = [&](const std::string& name) {
    return run(launcher + " -n 3 --min-workers 2 --max-workers 3 --max-restarts 2 --spare-wait 0 -- " + job +
                   " --kill-at-step 4 --kill-rank 2 --await-joiner-at-step 6 --recovery-timeout 120 --step-log " +
                   (dir / name) + " --model-dir " + (dir / name),
               300);
  };
  const auto first = grown("grown");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("a joiner takes worker 2's place"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("waiting to be admitted at a step boundary"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("[worker 0] [mwstrat.recovery] rank 0: worker 2 joined: 3 workers from global step 6"),
            std::string::npos)
      << first.output;
  expect_same_steps(dir, "grown", 3, 6);

  const auto second = grown("grown_again");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const std::string model = read_file(dir.path() / "grown" / "model.safetensors");
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(read_file(dir.path() / "grown_again" / "model.safetensors"), model)
      << "the same fault and join schedule gives the same bits";
}

// Growing past -n: the launcher starts two workers and, at once (--grow-after 0), a third in the slot after them
// (--max-workers 3); the two train steps 0 to 3 on a global batch of 12 (6 + 6, in micro-batches of at most 5) and
// take it in where every worker awaits it, after step 4; from there three train the same global batch (4 + 4 + 4).
// (A job must start on a multiple of its workers: the reference run's 15 cannot start on two.)
TEST_F(elastic_example, the_launcher_grows_a_job_past_its_workers_keeping_the_global_batch) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto r = run(launcher + " -n 2 --min-workers 1 --max-workers 3 --max-restarts 1 --grow-after 0 -- " + job +
                         " --global-batch 12 --await-joiner-at-step 4 --recovery-timeout 120 --step-log " +
                         (dir / "grown_past") + " --model-dir " + (dir / "grown_past"),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the job grows to 3 workers in 0 ms"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] [mwstrat.recovery] rank 0: worker 2 joined: 3 workers from global step 4"),
            std::string::npos)
      << r.output;
  const auto logs = read_step_logs(dir, "grown_past");
  for (std::size_t s = 0; s < steps; ++s) {
    const step_line got = final_step(logs, s);
    EXPECT_EQ(got.workers, s < 4 ? 2 : 3) << "step " << s;
    EXPECT_EQ(got.examples.size(), 12u) << "step " << s;
  }
}

// A spare that arrives within --spare-wait takes the lost worker's place at the boundary the survivors shrank at:
// no step is trained by fewer than three.
TEST_F(elastic_example, a_spare_within_the_spare_wait_joins_where_the_job_shrank_and_no_step_runs_on_two) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto r = run(launcher + " -n 3 --min-workers 2 --max-workers 3 --max-restarts 2 --spare-wait 60000 -- " +
                         job + " --kill-at-step 4 --kill-rank 1 --step-log " + (dir / "spare") + " --model-dir " +
                         (dir / "spare"),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("joined: 3 workers from global step 3"), std::string::npos) << r.output;
  expect_same_steps(dir, "spare", steps, 0);
}

// Shell lines that start three members by hand on `members`' ports (the job token "right"), hearing joiners at
// `desk` while chief and awaiting one at step 3; the model goes to DIR/name, worker w's log to DIR/name.logW, and
// $p0 $p1 $p2 are their pids.
std::string members_awaiting_a_joiner(const scratch_dir& dir, const std::vector<int>& members, const std::string& desk,
                                      const std::string& name) {
  const std::string env = "MWSTRAT_JOB_TOKEN=right MWSTRAT_JOIN_LISTEN=" + desk;
  std::string script;
  for (int w = 0; w < 3; ++w) {  // (appended piece by piece: GCC 12 -O3 misjudges "literal" + string as overlapping)
    script += env + " TF_CONFIG='";
    script += tf_config(members, w);
    script += "' " + job + " --min-workers 2 --max-workers 4 --await-joiner-at-step 3 --recovery-timeout 30";
    script += " --model-dir " + (dir / name) + " > " + (dir / (name + ".log" + std::to_string(w)));
    script += " 2>&1 & p" + std::to_string(w) + "=$!; ";
  }
  return script;
}

// Joiners the job must not take: one with another job token is refused as it asks (the chief's desk checks its
// proof), one with other data (20 examples: one step a pass, where the job has two) is admitted into the ring,
// found to differ and refused, and the ring shrinks back. Either way the joiner says why, and the three members
// train on exactly as if nobody had asked: the reference run's model, bit for bit.
TEST_F(elastic_example, joiners_with_another_job_token_or_other_data_are_refused_and_the_job_goes_on_unchanged) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto ports = free_ports(6);
  const std::vector<int> members(ports.begin(), ports.begin() + 3);
  const std::string desk = "127.0.0.1:" + std::to_string(ports[5]);
  std::string script = members_awaiting_a_joiner(dir, members, desk, "refusing");
  const auto joiner = [&](int port, const std::string& token, const std::string& extra, const std::string& log) {
    std::vector<int> slots = members;
    slots.push_back(port);
    std::string line = "MWSTRAT_JOB_TOKEN=" + token + " MWSTRAT_JOIN=" + desk + " TF_CONFIG='";
    line += tf_config(slots, 3);
    line += "' " + job + " --min-workers 2 --max-workers 4" + extra + " --connect-timeout 60 > " + (dir / log) +
            " 2>&1; ";
    return line;
  };
  script += "(" + joiner(ports[3], "wrong", "", "stranger.log") + "echo \"stranger $?\" > " + (dir / "stranger.code") +
            ") & ";
  script += joiner(ports[4], "right", " --train-examples 20", "other_data.log") + "echo \"other data $?\"; ";
  script += "wait $p0; e0=$?; wait $p1; e1=$?; wait $p2; e2=$?; wait; echo \"codes $e0 $e1 $e2\"; cat " +
            (dir / "stranger.code") + " " + (dir / "stranger.log") + " " + (dir / "other_data.log") + " " +
            (dir / "refusing.log0");
  const auto r = run(script, 300);
  ASSERT_NE(r.output.find("codes 0 0 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stranger 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("refused this worker: its job token proof (HMAC-SHA256) does not verify"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("other data 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the job refused this worker as it joined: its steps in a pass over the data: 1, the "
                          "job's 2"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("refused the joiner at rank 3"), std::string::npos) << r.output;
  const std::string model = read_file(dir.path() / "reference" / "model.safetensors");
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(read_file(dir.path() / "refusing" / "model.safetensors"), model);
}

// A joiner that refuses the job itself once admitted (a global batch of 3 over what would be four workers leaves one
// without an example): it is lost between its admission and the state, while the members check who it is. The
// members shrink back around it and train on as if nobody had asked: the reference run's model, bit for bit. (The
// members' map of ranks to workers once lacked the joiner there: a heap overflow, found by a late node's joiner.)
TEST_F(elastic_example, a_joiner_that_refuses_the_job_after_its_admission_leaves_the_members_training_unchanged) {
  ASSERT_TRUE(reference_ok_);
  const scratch_dir& dir = *dir_;
  const auto ports = free_ports(5);
  const std::vector<int> members(ports.begin(), ports.begin() + 3);
  const std::string desk = "127.0.0.1:" + std::to_string(ports[4]);
  std::string script = members_awaiting_a_joiner(dir, members, desk, "self_refusing");
  std::vector<int> slots = members;
  slots.push_back(ports[3]);
  script += "MWSTRAT_JOB_TOKEN=right MWSTRAT_JOIN=" + desk + " TF_CONFIG='";
  script += tf_config(slots, 3);
  script += "' " + job + " --min-workers 2 --max-workers 4 --global-batch 3 --connect-timeout 60 > " +
            (dir / "self_refusing_joiner.log") + " 2>&1; echo \"joiner $?\"; ";
  script += "wait $p0; e0=$?; wait $p1; e1=$?; wait $p2; e2=$?; echo \"codes $e0 $e1 $e2\"; cat " +
            (dir / "self_refusing_joiner.log") + " " + (dir / "self_refusing.log0");
  const auto r = run(script, 300);
  ASSERT_NE(r.output.find("codes 0 0 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("joiner 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a global batch of 3 over 4 workers leaves a worker without an example"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("worker 3) lost; going on without it: 3 workers"), std::string::npos) << r.output;
  const std::string model = read_file(dir.path() / "reference" / "model.safetensors");
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(read_file(dir.path() / "self_refusing" / "model.safetensors"), model);
}

}  // namespace elastic_example_test
