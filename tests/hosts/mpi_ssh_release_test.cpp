// Debian's Open MPI across two simulated hosts through their real sshd (ssh_nodes.hpp: the system's /usr/sbin/sshd
// on h1 and h2, keys and client configuration in the test's own folder), not through a shim: mpirun runs on h3, so
// both hosts are remote to it and its ssh launch agent (`plm_rsh_agent "ssh -F DIR/ssh_config"`) starts every ORTE
// daemon. The MNIST example finds its peers through mpi_resolver (the rendezvous on h1) and trains on the ring, giving
// the bits of the same job on one machine; so does the example's MPI collective (btl tcp between the hosts). A refused
// key or a silent node fails mpirun in time. Release only (label "release"); every wait is bounded.
#include "ssh_nodes.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace mpi_ssh_release_test {

using namespace mwstrat::test;
using namespace std::chrono_literals;

// Two epochs, so that the loss of the second can be held against the first.
const std::string flags = " --data-dir " + mnist_dir + " --seed 7 --no-test --epochs 2 --steps-per-epoch 10" +
                          " --optimizer sgd --learning-rate 0.05 --batch-size 32";

// mpirun on h3, ranks_each on h1 and on h2, every daemon started over ssh from h3 (no tree spawn: h1's daemon does not
// start h2's), the out-of-band and MPI traffic on the simulated network only.
// `ssh` is the launch agent (its client configuration by default the nodes' own, ssh_nodes::ssh_config()).
std::string mpirun_over_ssh(const ssh_nodes& nodes, int ranks_each, const std::string& ssh = "") {
  const std::string n = std::to_string(ranks_each);
  return nodes.hosts().script() + " exec h3 -- env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " +
         MWSTRAT_MPIEXEC + " -np " + std::to_string(2 * ranks_each) + " --host " + nodes.hosts().address(1) + ":" + n +
         "," + nodes.hosts().address(2) + ":" + n + " --mca plm_rsh_agent \"" +
         (ssh.empty() ? "ssh -F " + nodes.ssh_config() : ssh) + "\"" +
         " --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include 10.77.0.0/24 --mca btl tcp,self" +
         " --mca btl_tcp_if_include 10.77.0.0/24 ";
}

// The loss at the end of epoch 1 and of epoch 2 (the last "10/10 [====...] - ... loss: X" line before "Epoch 2/2",
// and after it).
std::pair<double, double> epoch_losses(const std::string& output) {
  const std::size_t second = output.find("Epoch 2/2");
  if (second == std::string::npos) return {-1, -1};
  return {number_after(output.substr(0, second), "10/10 [", " loss: "),
          number_after(output.substr(second), "10/10 [", " loss: ")};
}

TEST(mpi_ssh_release, mpirun_starts_its_daemons_through_each_hosts_sshd_and_the_ring_trains_mnist) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  const std::string mpirun = mpirun_over_ssh(nodes, 2);
  // Where each rank runs and under what: its host's address, a child of the ORTE daemon; the daemons through ssh.
  const auto where = run(mpirun + "--mca plm_base_verbose 10 sh -c 'echo rank $OMPI_COMM_WORLD_RANK at $(hostname -I)"
                                  " under $(cat /proc/$PPID/comm), $OMPI_COMM_WORLD_LOCAL_SIZE on its host'",
                         120);
  ASSERT_EQ(where.exit_code, 0) << where.output;
  EXPECT_NE(where.output.find("plm:rsh: final template argv:\n\t/usr/bin/ssh -F " + nodes.ssh_config() + " <template>"),
            std::string::npos)
      << where.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(where.output.find("rank " + std::to_string(rank) + " at " + nodes.hosts().address(rank < 2 ? 1 : 2) +
                                " under orted, 2 on its host"),
              std::string::npos)
        << where.output;
  }
  for (int k = 1; k <= 2; ++k) {  // sshd's own log (LogLevel INFO): the daemon's session, from mpirun's host
    const std::string log = read_file(nodes.keys().path() / "ssh" / ("sshd.h" + std::to_string(k) + ".log"));
    EXPECT_NE(log.find("Accepted publickey for root from " + nodes.hosts().address(3) + " port "), std::string::npos)
        << "h" << k << "'s sshd:\n" << log;
  }
  EXPECT_TRUE(nodes.nodes_empty_within(10s)) << "an ORTE daemon or a rank was left on a node";

  // The MNIST example on the flat ring (as 4 workers on one machine sum), meeting at the rendezvous on h1.
  const auto m = run(mpirun + "-x MWSTRAT_RENDEZVOUS=" + nodes.hosts().address(1) +
                         ":29400 -x MWSTRAT_RING_TOPOLOGY=flat " + example + flags + " --model-dir " + (dir / "mpirun"),
                     600);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("[mwstrat.ring] rank 0: started: tcp://" + nodes.hosts().address(1) + ":"), std::string::npos)
      << m.output;
  EXPECT_NE(m.output.find("ring of 4 ranks connected"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("[mwstrat] 4 workers on 2 hosts (" + nodes.hosts().address(1) +
                          ": ranks 0,1 shared memory; " + nodes.hosts().address(2) + ": ranks 2,3 shared memory)"),
            std::string::npos)
      << m.output;
  const auto [first, last] = epoch_losses(m.output);
  ASSERT_GT(first, 0) << m.output;
  ASSERT_GT(last, 0) << m.output;
  EXPECT_LT(last, first) << "the loss did not fall:\n" << m.output;
  std::printf("[ mpi/ssh ] 2 hosts x 2 ranks under mpirun over sshd: %.1f s, loss %.4f after epoch 1, %.4f after 2\n",
              m.seconds, first, last);
  EXPECT_TRUE(nodes.nodes_empty_within(10s)) << "an ORTE daemon or a rank was left on a node";

  expect_model_of_four_local_workers(dir, flags, dir.path() / "mpirun" / "model.safetensors",
                                     "mpirun over ssh on 2 hosts");
}

// The gradients through MPI itself (mpi_collective: btl tcp between the hosts), one rank on each host: Open MPI's sum
// of two is the ring's, so the weights are the ring's on one machine bit for bit.
TEST(mpi_ssh_release, the_mpi_collective_trains_mnist_between_hosts_whose_daemons_came_through_sshd) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  scratch_dir dir;
  const auto m = run(mpirun_over_ssh(nodes, 1) + example_mpi + " --collective mpi" + flags + " --model-dir " +
                         (dir / "mpi"),
                     600);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_EQ(m.output.find("[mwstrat.ring]"), std::string::npos) << "the ring was used:\n" << m.output;
  const auto [first, last] = epoch_losses(m.output);
  ASSERT_GT(first, 0) << m.output;
  EXPECT_LT(last, first) << "the loss did not fall:\n" << m.output;
  for (int k = 1; k <= 2; ++k) {
    const std::string log = read_file(nodes.keys().path() / "ssh" / ("sshd.h" + std::to_string(k) + ".log"));
    EXPECT_NE(log.find("Accepted publickey for root from " + nodes.hosts().address(3) + " port "), std::string::npos)
        << "h" << k << "'s sshd:\n" << log;
  }
  EXPECT_TRUE(nodes.nodes_empty_within(10s)) << "an ORTE daemon or a rank was left on a node";
  const auto r = run(launcher + " -n 2 -- " + example + flags + " --model-dir " + (dir / "ring"), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto over_mpi = saved_weights(dir.path() / "mpi" / "model.safetensors");
  ASSERT_EQ(over_mpi.size(), 2770634u);
  EXPECT_TRUE(over_mpi == saved_weights(dir.path() / "ring" / "model.safetensors"))
      << "MPI between 2 hosts and the ring on one machine give different weights";
}

// The failures a user meets first, as Open MPI reports them: a node that refuses the key (ssh's own reason, at once)
// and a node that does not answer (ssh's ConnectTimeout): mpirun exits 255 within the timeout and leaves no daemon
// on the node that did answer.
TEST(mpi_ssh_release, a_refused_key_or_a_silent_node_fails_mpirun_in_time_leaving_no_daemon) {
  MWSTRAT_REQUIRE_SSHD();
  ssh_nodes nodes;
  const auto refused = run(mpirun_over_ssh(nodes, 1, "ssh -F " + nodes.stranger_config()) + "true", 60);
  EXPECT_EQ(refused.exit_code, 255) << refused.output;
  EXPECT_NE(refused.output.find("root@10.77.0."), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("Permission denied (publickey)"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("ORTE was unable to reliably start one or more daemons"), std::string::npos)
      << refused.output;
  EXPECT_LT(refused.seconds, 10.0) << refused.output;
  EXPECT_TRUE(nodes.nodes_empty_within(10s)) << "a daemon was left on a node";

  nodes.hosts().cut(2);
  const int timeout_s = 3;
  const auto silent = run(mpirun_over_ssh(nodes, 1, "ssh -F " + nodes.ssh_config() + " -o ConnectTimeout=" +
                                                        std::to_string(timeout_s)) +
                              "sleep 60",
                          60);
  EXPECT_EQ(silent.exit_code, 255) << silent.output;
  EXPECT_NE(silent.output.find("ssh: connect to host " + nodes.hosts().address(2) + " port 22: Connection timed out"),
            std::string::npos)
      << silent.output;
  EXPECT_LT(silent.seconds, timeout_s + 5.0) << silent.output;
  std::printf("[ mpi/ssh ] refused key: mpirun failed after %.2f s; silent node: after %.2f s (ConnectTimeout %d s)\n",
              refused.seconds, silent.seconds, timeout_s);
  EXPECT_TRUE(nodes.nodes_empty_within(10s)) << "a daemon or a rank was left on h1";
}

}  // namespace mpi_ssh_release_test
