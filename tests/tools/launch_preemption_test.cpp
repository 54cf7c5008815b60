// mwstrat-launch and preemption, run for real with shell workers: exit code 75 (mwstrat::preempted_exit_code) is a
// preemption, restarted without counting against --max-restarts; SIGTERM to the launcher reaches every worker.
#include <support/process.hpp>
#include <tools/launcher_path.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <string>

namespace launch_preemption_test {

using mwstrat::test::run;

using mwstrat::test::launcher;

TEST(launch_preemption, a_preempted_group_is_restarted_without_counting_against_max_restarts) {
  // Attempt 0: worker 1 is "preempted" at once, worker 0 a moment later (they stop at the same step); attempt 1
  // finishes. --max-restarts 0 would allow no restart after a failure.
  const auto r = run(launcher + " -n 2 --max-restarts 0 -- sh -c 'if [ \"$MWSTRAT_LAUNCH_ATTEMPT\" = 0 ]; then "
                                "case \"$TF_CONFIG\" in *\"index\\\": 0\"*) sleep 0.3;; esac; exit 75; fi; echo done'",
                     60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stopped for preemption (exit 75)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting the preempted group (not counted against --max-restarts)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 0] done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] done"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ending the other workers"), std::string::npos) << "a preemption is not a failure";
}

TEST(launch_preemption, a_real_failure_still_counts) {
  const auto r = run(launcher + " -n 2 --max-restarts 0 --grace-ms 300 -- sh -c 'exit 3'", 60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.output.find("restarting"), std::string::npos) << r.output;
}

TEST(launch_preemption, sigterm_to_the_launcher_reaches_every_worker_and_their_preemption_code_is_returned) {
  mwstrat::test::temp_dir dir("mwstrat-launch");
  const std::string log = (dir.path() / "log").string();
  // Each worker says "ready", then waits; on SIGTERM it says so and exits with the preemption code. The launcher
  // is signalled once both are ready (a bounded wait), and must not restart them.
  const std::string worker = "trap \"echo got TERM; exit 75\" TERM; echo ready; i=0; while [ $i -lt 300 ]; do "
                             "sleep 0.1; i=$((i+1)); done; exit 9";
  const std::string script =
      // The log exists before the wait reads it (grep on a missing file made the wait end at once: a flaky test).
      ": > " + log + "; " + launcher + " -n 2 --max-restarts 3 -- sh -c '" + worker + "' > " + log +
      " 2>&1 & l=$!; i=0; " +
      "while [ $(grep -c ready " + log + ") -lt 2 ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done; " +
      "kill -TERM $l; wait $l; echo launcher exit $?; cat " + log;
  const auto r = run(script, 60);
  EXPECT_NE(r.output.find("launcher exit 75"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("forwarding SIGTERM to the workers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] got TERM"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] got TERM"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0);
}

}  // namespace launch_preemption_test
