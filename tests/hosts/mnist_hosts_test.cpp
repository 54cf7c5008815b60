// examples/mnist_multiworker across simulated hosts: the same model as on 127.0.0.1, mwstrat-launch --hosts, and
// faults that only hosts have (a cut link, a host whose workers all die at once). Short runs (any build type).
#include "mnist_hosts.hpp"

#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

namespace mnist_hosts_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string short_run = " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 2 --batch-size 8 --no-test";

TEST(mnist_hosts, two_hosts_with_a_worker_each_train_the_same_model_as_loopback_bit_for_bit) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::vector<std::string> cluster = {hosts.address(1) + ":20000", hosts.address(2) + ":20000"};
  // Each worker started by hand on its host, with TF_CONFIG naming the hosts' addresses.
  process w1(hosts.on(2, "TF_CONFIG='" + tf_config(cluster, 1) + "' " + example + short_run), 240);
  process w0(hosts.on(1, "TF_CONFIG='" + tf_config(cluster, 0) + "' " + example + short_run + " --model-dir " +
                             (dir / "hosts")),
             240);
  const auto r0 = w0.finish();
  const auto r1 = w1.finish();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r0.output.find("rank 0: started: tcp://10.77.0.1:20000"), std::string::npos) << r0.output;
  const auto loopback = run(launcher + " -n 2 -- " + example + short_run + " --model-dir " + (dir / "loopback"), 240);
  ASSERT_EQ(loopback.exit_code, 0) << loopback.output;
  EXPECT_EQ(read_file(dir.path() / "hosts" / "model.safetensors"), read_file(dir.path() / "loopback" / "model.safetensors"))
      << "two simulated hosts and one machine give different models";
}

// As mpirun on two machines would start them: Open MPI's variables and no TF_CONFIG; the workers meet through
// mpi_resolver's rendezvous on h1 and train with the ring, as they would with TF_CONFIG.
TEST(mnist_hosts, workers_started_as_by_mpirun_meet_through_the_rendezvous_on_the_first_host) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  auto mpi_env = [&](int rank) {
    return "env -u TF_CONFIG OMPI_COMM_WORLD_RANK=" + std::to_string(rank) +
           " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=1 MWSTRAT_RENDEZVOUS=" + hosts.address(1) + ":29400 ";
  };
  process w1(hosts.on(2, mpi_env(1) + example + short_run), 240);
  process w0(hosts.on(1, mpi_env(0) + example + short_run + " --model-dir " + (dir / "mpi")), 240);
  const auto r0 = w0.finish();
  const auto r1 = w1.finish();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r0.output.find("rank 0: started: tcp://10.77.0.1:"), std::string::npos) << r0.output;
  const auto loopback = run(launcher + " -n 2 -- " + example + short_run + " --model-dir " + (dir / "loopback"), 240);
  ASSERT_EQ(loopback.exit_code, 0) << loopback.output;
  EXPECT_EQ(read_file(dir.path() / "mpi" / "model.safetensors"), read_file(dir.path() / "loopback" / "model.safetensors"));
}

TEST(mnist_hosts, launch_places_two_workers_on_each_of_two_hosts) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  // The flat ring (the hierarchical default sums in another order: hierarchical_default_hosts_test.cpp), so the model
  // is the loopback one's bit for bit.
  const auto r = run("MWSTRAT_RING_TOPOLOGY=flat " + launcher + " --hosts h1:2,h2:2 --simhosts " + hosts.name() +
                         " --simhosts-script " + simhosts_script + " -- " + example + short_run + " --model-dir " +
                         (dir / "hosts"),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[worker 0] [mwstrat.ring] rank 0: started: tcp://10.77.0.1:20000, waiting for 4 workers"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ring of 4 ranks connected"), std::string::npos) << r.output;
  const auto loopback = run(launcher + " -n 4 -- " + example + short_run + " --model-dir " + (dir / "loopback"), 300);
  ASSERT_EQ(loopback.exit_code, 0) << loopback.output;
  EXPECT_EQ(read_file(dir.path() / "hosts" / "model.safetensors"), read_file(dir.path() / "loopback" / "model.safetensors"));
}

TEST(mnist_hosts, launch_hosts_gives_each_worker_its_host_and_address) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  simulated_hosts hosts(2);
  const auto r = run(launcher + " --hosts h2:1,h1:2 --simhosts " + hosts.name() + " --simhosts-script " +
                         simhosts_script + " -- sh -c 'echo \"$MWSTRAT_HOST_ID $(ip -o -4 addr show dev eth0 | " +
                         "cut -d\" \" -f7) $TF_CONFIG\"'",
                     60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string workers = "{\"cluster\": {\"worker\": [\"10.77.0.2:20000\", \"10.77.0.1:20001\", \"10.77.0.1:20002\"]}";
  EXPECT_NE(r.output.find("[worker 0] h2 10.77.0.2/24 " + workers + ", \"task\": {\"type\": \"worker\", \"index\": 0}}"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 2] h1 10.77.0.1/24 " + workers + ", \"task\": {\"type\": \"worker\", \"index\": 2}}"),
            std::string::npos)
      << r.output;
}

TEST(mnist_hosts, launch_hosts_refuses_bad_entries_by_name) {
  const auto both = run(launcher + " -n 2 --hosts 127.0.0.1:2 -- true", 30);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.output.find("-n and --hosts exclude each other"), std::string::npos) << both.output;
  const auto entry = run(launcher + " --hosts 127.0.0.1 -- true", 30);
  EXPECT_NE(entry.output.find("--hosts: '127.0.0.1' is not NAME:WORKERS"), std::string::npos) << entry.output;
  // A name that is no local address is a node reached over ssh (ssh_launch_test.cpp); one that is no host name at all
  // is refused before anything starts.
  const auto name = run(launcher + " --hosts 'h 1:2' -- true", 30);
  EXPECT_EQ(name.exit_code, 2);
  EXPECT_NE(name.output.find("--hosts: 'h 1' is not a host name or IPv4 address"), std::string::npos) << name.output;
  const auto ssh_and_simhosts = run(launcher + " --hosts h1:2 --simhosts s --ssh -- true", 30);
  EXPECT_NE(ssh_and_simhosts.output.find("--simhosts and --ssh exclude each other"), std::string::npos)
      << ssh_and_simhosts.output;
  const auto count = run(launcher + " --hosts 127.0.0.1:0 -- true", 30);
  EXPECT_NE(count.output.find("--hosts 127.0.0.1: '0' is not a number in [1, 1024]"), std::string::npos) << count.output;
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  simulated_hosts hosts(1);
  const auto missing = run(launcher + " --hosts h1:1,h3:1 --simhosts " + hosts.name() + " --simhosts-script " +
                               simhosts_script + " -- true",
                           60);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--hosts: no address for host 'h3' of simulated set '" + hosts.name() + "'"),
            std::string::npos)
      << missing.output;
}

TEST(mnist_hosts, launch_hosts_on_loopback_addresses_sets_the_host_identity) {
  scratch_dir dir;
  const auto r = run(launcher + " --hosts 127.0.0.1:1,127.0.0.2:1 --base-port " + std::to_string(free_ports(1)[0]) +
                         " -- " + example + short_run + " --model-dir " + (dir / "m"),
                     240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ring of 2 ranks connected"), std::string::npos) << r.output;
  const auto env = run(launcher + " --hosts 127.0.0.1:1,127.0.0.2:1 -- sh -c 'echo id=$MWSTRAT_HOST_ID'", 30);
  EXPECT_NE(env.output.find("[worker 1] id=127.0.0.2"), std::string::npos) << env.output;
}

// A link cut in the middle of a step: nothing closes, no packet passes. Every worker names the rank and address it
// lost, "silent for 5.0 s", within the liveness timeout (5 s, the default) plus a margin — not after the operation
// timeout (60 s here) — and exits with the peer-lost status; none finishes the epoch (no model is saved), and the
// backup written before the cut survives.
TEST(mnist_hosts, a_cut_link_mid_step_ends_every_worker_naming_its_peer) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::vector<std::string> cluster = {hosts.address(1) + ":20000", hosts.address(2) + ":20000"};
  const std::string job = example + " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 500 --batch-size 8" +
                          " --no-test --op-timeout 60 --save-freq 1 --backup-dir " + (dir / "backup") +
                          " --model-dir " + (dir / "model");
  process w1(hosts.on(2, "TF_CONFIG='" + tf_config(cluster, 1) + "' " + job), 240);
  process w0(hosts.on(1, "TF_CONFIG='" + tf_config(cluster, 0) + "' " + job), 240);
  ASSERT_TRUE(wait_for(dir.path() / "backup", 180)) << "training never reached its first backup";
  hosts.cut(2);
  const auto cut_at = std::chrono::steady_clock::now();
  const auto r0 = w0.finish();
  const auto r1 = w1.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count();
  EXPECT_EQ(r0.exit_code, mwstrat::peer_lost_exit_code) << r0.output;
  EXPECT_EQ(r1.exit_code, mwstrat::peer_lost_exit_code) << r1.output;
  EXPECT_LT(seconds, 5.0 + 3.0) << "the workers took longer than the liveness timeout to fail";
  std::printf("[ liveness ] a cut link between 2 simulated hosts: both workers named their peer after %.2f s\n",
              seconds);
  EXPECT_NE(r0.output.find("rank 0: rank 1 (10.77.0.2:20000) was lost: silent for 5.0 s"), std::string::npos)
      << r0.output;
  EXPECT_NE(r1.output.find("rank 1: rank 0 (10.77.0.1:20000) was lost: silent for 5.0 s"), std::string::npos)
      << r1.output;
  EXPECT_FALSE(fs::exists(dir.path() / "model")) << "a worker finished the epoch alone";
  EXPECT_TRUE(fs::exists(dir.path() / "backup"));
}

// Every worker of one host killed at once: the other host's workers fail, naming a rank of the dead host and its
// address, and none finishes alone.
TEST(mnist_hosts, a_dead_hosts_workers_are_named_by_the_others) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const auto cluster = two_by_two(hosts);
  const std::string job = example + " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 500 --batch-size 8" +
                          " --no-test --op-timeout 5 --save-freq 1 --backup-dir " + (dir / "backup") +
                          " --model-dir " + (dir / "model");
  auto workers = start_two_by_two(hosts, cluster, job);
  ASSERT_TRUE(wait_for(dir.path() / "backup", 180)) << "training never reached its first backup";
  hosts.kill_all(2);
  for (int rank = 0; rank < 4; ++rank) {
    const auto r = workers[static_cast<std::size_t>(rank)]->finish();
    if (rank >= 2) {
      EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
      continue;
    }
    EXPECT_EQ(r.exit_code, mwstrat::peer_lost_exit_code) << r.output;
    const bool names_dead_rank = r.output.find("rank 2 (10.77.0.2:20000)") != std::string::npos ||
                                 r.output.find("rank 3 (10.77.0.2:20001)") != std::string::npos;
    EXPECT_TRUE(names_dead_rank) << "rank " << rank << " does not name a rank of the dead host:\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "model")) << "a worker finished the epoch alone";
}

}  // namespace mnist_hosts_test
