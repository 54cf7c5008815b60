// mwstrat-fault-campaign across two simulated hosts: besides killed, hung and preempted workers, the link between
// the hosts is cut (scripts/simhosts cut, restored after 3 s). Every fault must be survived and the final model
// byte-identical to the fault-free run's. Optimised builds only (label "release"); needs root (simulated hosts).
#include "mnist_hosts.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace fault_campaign_hosts_release_test {

using namespace mwstrat::test;

const std::string campaign_tool = MWSTRAT_FAULT_CAMPAIGN;

TEST(fault_campaign_hosts_release, cut_links_kills_hangs_and_preemptions_are_survived_byte_identically) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::string common = " --faults 5 --seed 3 --kinds cut,kill,stop,term";
  const auto plan = run(campaign_tool + common + " --print-schedule", 30);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  for (const char* k : {": cut ", ": kill ", ": stop ", ": term "}) {
    EXPECT_NE(plan.output.find(k), std::string::npos) << plan.output;
  }

  const std::string backup = dir / "backup";
  std::filesystem::create_directories(backup);
  // --op-timeout 5: a cut longer than that fails the step and the launcher restarts the group; a shorter one is
  // ridden out by TCP.
  const std::string job = launcher + " --hosts h1:1,h2:1 --simhosts " + hosts.name() + " --simhosts-script " +
                          simhosts_script + " --max-restarts 30 -- " + example + " --data-dir " + mnist_dir +
                          " --seed 7 --epochs 3 --steps-per-epoch 100 --save-freq 10 --no-test --op-timeout 5" +
                          " --backup-dir " + backup + " --model-dir " + (dir / "model");
  const auto r = run(campaign_tool + common + " --simhosts " + hosts.name() + " --simhosts-script " + simhosts_script +
                         " --cut-hosts h1,h2 --model " + (dir / "model") + "/model.safetensors --clean " + backup +
                         " --work-dir " + (dir / "work") + " --timeout 130 -- " + job,
                     290);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("faults injected: 5\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("faults survived: 5\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": cut host h"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restore failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final model byte-identical to the fault-free run: yes"), std::string::npos) << r.output;
}

}  // namespace fault_campaign_hosts_release_test
