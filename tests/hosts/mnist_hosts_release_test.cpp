// A host lost for good and the job relaunched: it resumes from its backup and ends with the very bytes of an
// uninterrupted run. Optimised builds only (label "release").
#include "mnist_hosts.hpp"

#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace mnist_hosts_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string resumable = " --data-dir " + mnist_dir + " --seed 7 --no-test --epochs 2 --steps-per-epoch 40" +
                              " --optimizer adam --batch-size 32 --save-freq 4 --op-timeout 10";

TEST(mnist_hosts_release, a_dead_host_is_named_and_the_relaunched_job_resumes_byte_identically) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::string launch_on_hosts =
      launcher + " --hosts h1:2,h2:2 --simhosts " + hosts.name() + " --simhosts-script " + simhosts_script + " -- ";
  const auto reference = run(launch_on_hosts + example + resumable + " --backup-dir " + (dir / "backup_ref") +
                                 " --model-dir " + (dir / "reference"),
                             600);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  // The job, its workers started by hand on their hosts; once a backup is on disk, h2 dies (both its workers
  // SIGKILLed at once).
  const std::string job = example + resumable + " --backup-dir " + (dir / "backup") + " --model-dir " + (dir / "model");
  auto workers = start_two_by_two(hosts, two_by_two(hosts), job);
  ASSERT_TRUE(wait_for(dir.path() / "backup" / "backup.index.json", 300)) << "training never wrote a backup";
  hosts.kill_all(2);
  for (int rank = 0; rank < 4; ++rank) {
    const auto r = workers[static_cast<std::size_t>(rank)]->finish();
    if (rank >= 2) {
      EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
      continue;
    }
    EXPECT_EQ(r.exit_code, mwstrat::peer_lost_exit_code) << r.output;
    EXPECT_TRUE(r.output.find("(10.77.0.2:2000") != std::string::npos) << "rank " << rank << ":\n" << r.output;
  }
  ASSERT_FALSE(fs::exists(dir.path() / "model")) << "the job finished before h2 died: nothing was tested";
  ASSERT_TRUE(fs::exists(dir.path() / "backup"));

  // Relaunched on the same hosts: it resumes from the backup and saves the reference's bytes.
  const auto again = run(launch_on_hosts + job, 600);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("[worker 0] [mwstrat.train.backup] rank 0: restored "), std::string::npos) << again.output;
  EXPECT_NE(again.output.find(": resuming at epoch "), std::string::npos) << again.output;
  EXPECT_EQ(read_file(dir.path() / "model" / "model.safetensors"),
            read_file(dir.path() / "reference" / "model.safetensors"))
      << "the resumed job's model differs from the uninterrupted one's";
  EXPECT_FALSE(fs::exists(dir.path() / "backup")) << "the backup is removed after a successful fit";
}

}  // namespace mnist_hosts_release_test
