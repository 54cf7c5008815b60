// Per-node agents (mwstrat-launch --nnodes N --node-rank K --rendezvous HOST:PORT -n W), one per simulated host, as a
// scheduler starts them: they meet at node 0's rendezvous and train together; a node that never comes is named on
// every node that did, at the deadline; under Slurm (an srun step) and a Kubernetes Indexed Job the node's rank and
// the node count come from the environment; an elastic job shrinks and takes joiners across them, and grows by a
// node that arrives later. Every wait is bounded.
#include "mnist_hosts.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace node_agents_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string short_run = " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 2 --batch-size 8 --no-test";

std::string agent(const std::string& flags) { return launcher + " " + flags; }

// An agent's worker part of an elastic MNIST job: `per_node` workers, 8 steps of a global batch of 8 (whatever the
// count), `flags` for the faults and joins, the model saved in `model_dir`.
std::string elastic_mnist_job(int per_node, const std::string& flags, const std::string& model_dir) {
  return " -n " + std::to_string(per_node) + " -- " + example + " --data-dir " + mnist_dir +
         " --epochs 1 --steps-per-epoch 8 --global-batch 8 --train-examples 400 --no-test " + flags +
         " --recovery-timeout 120 --model-dir " + model_dir;
}

TEST(node_agents, two_agents_on_two_hosts_meet_and_train_the_bits_of_four_local_workers) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::string job = " -n 2 -- " + example + short_run + " --model-dir " + (dir / "agents");
  const std::string rendezvous = " --nnodes 2 --rendezvous " + hosts.address(1) + ":29500";
  // Node 1 first: it waits for node 0's rendezvous to listen.
  process node1(hosts.on(2, "MWSTRAT_RING_TOPOLOGY=flat " + agent(rendezvous + " --node-rank 1" + job)), 300);
  process node0(hosts.on(1, "MWSTRAT_RING_TOPOLOGY=flat " + agent(rendezvous + " --node-rank 0" + job)), 300);
  const auto r0 = node0.finish();
  const auto r1 = node1.finish();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r0.output.find("mwstrat-launch: node 0 of 2 met the others at 10.77.0.1:29500: nodes 10.77.0.1, "
                           "10.77.0.2; workers 0..1 are this node's"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r1.output.find("workers 2..3 are this node's"), std::string::npos) << r1.output;
  EXPECT_NE(r0.output.find("[worker 0] [mwstrat.ring] rank 0: started: tcp://10.77.0.1:20000, waiting for 4 workers"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r1.output.find("mwstrat-launch: worker 3: pid "), std::string::npos) << r1.output;  // (only rank 0 logs)
  const auto local = run("MWSTRAT_RING_TOPOLOGY=flat " + launcher + " -n 4 -- " + example + short_run +
                             " --model-dir " + (dir / "local"),
                         300);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const std::string agents = read_file(dir.path() / "agents" / "model.safetensors");
  ASSERT_FALSE(agents.empty());
  EXPECT_EQ(agents, read_file(dir.path() / "local" / "model.safetensors"));
}

TEST(node_agents, a_node_that_never_arrives_is_named_on_every_node_at_the_deadline) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  simulated_hosts hosts(2);
  const std::string flags = " --nnodes 3 --rendezvous " + hosts.address(1) + ":29500 --rendezvous-timeout 4 -n 2";
  process node1(hosts.on(2, agent(flags + " --node-rank 1 -- echo trained")), 60);
  process node0(hosts.on(1, agent(flags + " --node-rank 0 -- echo trained")), 60);
  const auto r0 = node0.finish();
  const auto r1 = node1.finish();
  EXPECT_EQ(r0.exit_code, 1) << r0.output;
  EXPECT_EQ(r1.exit_code, 1) << r1.output;
  EXPECT_NE(r0.output.find("mwstrat-launch: node 0 of 3: [mwstrat.cluster] rank 0: node rendezvous at "
                           "10.77.0.1:29500: node(s) 2 did not register within the deadline"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r1.output.find("node 1 of 3: [mwstrat.cluster] rank 1: node rendezvous at 10.77.0.1:29500: node 0 "
                           "refused: node(s) 2 did not register within the deadline"),
            std::string::npos)
      << r1.output;
  EXPECT_LT(r0.seconds, 4.0 + 5.0) << r0.output;
  EXPECT_EQ(r0.output.find("trained"), std::string::npos) << "a worker started without the missing node";
  EXPECT_EQ(r1.output.find("trained"), std::string::npos) << "a worker started without the missing node";
}

// The same command line on every node: Slurm's variables in an srun step (node 0 here) and a Kubernetes Indexed
// Job's completion index with the count and the rendezvous on the command line (node 1).
TEST(node_agents, slurm_and_kubernetes_environments_give_the_node_rank_and_count) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  simulated_hosts hosts(2);
  const std::string program = " -n 1 -- sh -c 'echo \"$TF_CONFIG\"'";
  process node1(hosts.on(2, "JOB_COMPLETION_INDEX=1 " +
                                agent("--nnodes 2 --rendezvous " + hosts.address(1) + ":29500" + program)),
                60);
  process node0(hosts.on(1, "SLURM_STEP_ID=0 SLURM_NNODES=2 SLURM_NODEID=0 SLURM_JOB_NODELIST='10.77.0.[1-2]' " +
                                agent(program)),
                60);
  const auto r0 = node0.finish();
  const auto r1 = node1.finish();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const std::string cluster = "{\"cluster\": {\"worker\": [\"10.77.0.1:20000\", \"10.77.0.2:20001\"]}";
  EXPECT_NE(r0.output.find("[worker 0] " + cluster + ", \"task\": {\"type\": \"worker\", \"index\": 0}}"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r1.output.find("[worker 1] " + cluster + ", \"task\": {\"type\": \"worker\", \"index\": 1}}"),
            std::string::npos)
      << r1.output;
  // Missing pieces are named.
  const auto no_rank = run(agent("--nnodes 2 --rendezvous 127.0.0.1:29500 -n 1 -- true"), 30);
  EXPECT_EQ(no_rank.exit_code, 2);
  EXPECT_NE(no_rank.output.find("--node-rank K is needed (or SLURM_NODEID, or JOB_COMPLETION_INDEX)"),
            std::string::npos)
      << no_rank.output;
  const auto bad = run(agent("--nnodes 2 --node-rank 2 --rendezvous 127.0.0.1:29500 -n 1 -- true"), 30);
  EXPECT_NE(bad.output.find("--node-rank 2 is not below --nnodes 2"), std::string::npos) << bad.output;
}

// Elastic under per-node agents: --min-workers and --max-workers count the whole job's workers. Worker 3 (node 1's
// second) kills itself after global step 2: node 1's agent does not end its other worker, the three survivors on
// both nodes shrink the job and go on, and the agent starts worker 3's joiner in its slot, which the job takes in at
// step 5; four train to the end and both agents exit 0. Bounds that no agent-wide count could judge are refused
// with the job's count: --min-workers above the 4 workers of 2 nodes × 2.
TEST(node_agents, an_elastic_job_shrinks_and_a_nodes_agent_starts_the_joiner_in_its_lost_workers_place) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::string elastic = " --min-workers 3 --max-workers 4 --max-restarts 1 --spare-wait 0 --join-delay 0";
  const std::string job =
      elastic_mnist_job(2, "--kill-at-step 2 --kill-rank 3 --await-joiner-at-step 5", dir / "elastic");
  const std::string rendezvous = " --nnodes 2 --rendezvous " + hosts.address(1) + ":29500" + elastic;
  process node1(hosts.on(2, agent(rendezvous + " --node-rank 1" + job)), 300);
  process node0(hosts.on(1, agent(rendezvous + " --node-rank 0" + job)), 300);
  const auto r0 = node0.finish();
  const auto r1 = node1.finish();
  ASSERT_EQ(r0.exit_code, 0) << r0.output << r1.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output << r0.output;
  EXPECT_NE(r1.output.find("; the job goes on without it (1 of this node's workers run; the survivors hold it to "
                           "--min-workers 3)"),
            std::string::npos)
      << r1.output;
  EXPECT_NE(r1.output.find("mwstrat-launch: a joiner takes worker 3's place in 0 ms (restart 1 of 1)"),
            std::string::npos)
      << r1.output;
  EXPECT_NE(r1.output.find("mwstrat-launch: worker 3: pid "), std::string::npos) << r1.output;
  EXPECT_NE(r0.output.find(", worker 3) lost; going on without it: 3 workers, ring generation 1"), std::string::npos)
      << r0.output;
  EXPECT_NE(r0.output.find("[mwstrat.recovery] rank 0: worker 3 joined: 4 workers from global step 5"),
            std::string::npos)
      << r0.output;
  EXPECT_EQ(r0.output.find("ending the other workers"), std::string::npos) << r0.output;
  EXPECT_EQ(r1.output.find("ending the other workers"), std::string::npos) << r1.output;
  EXPECT_TRUE(fs::exists(dir.path() / "elastic" / "model.safetensors")) << r0.output;

  // A worker that fails by itself (an error exit, not a signal) is no loss to shrink around: its agent fails.
  const std::string failing = " --nnodes 2 --rendezvous " + hosts.address(1) + ":29501 --min-workers 1 -n 1";
  const std::string fails = " -- sh -c 'exit 3'";
  process fail1(hosts.on(2, agent(failing + " --node-rank 1" + fails)), 60);
  process fail0(hosts.on(1, agent(failing + " --node-rank 0" + fails)), 60);
  for (auto* p : {&fail0, &fail1}) {
    const auto f = p->finish();
    EXPECT_EQ(f.exit_code, 3) << f.output;
    EXPECT_NE(f.output.find("exited with status 3; ending the other workers"), std::string::npos) << f.output;
    EXPECT_EQ(f.output.find("the job goes on without it"), std::string::npos) << f.output;
  }

  const auto too_many = run(agent("--nnodes 2 --node-rank 0 --rendezvous 127.0.0.1:29500 --min-workers 5 -n 2 -- true"),
                            30);
  EXPECT_EQ(too_many.exit_code, 2);
  EXPECT_NE(too_many.output.find("--min-workers: more than the job's 4 workers"), std::string::npos)
      << too_many.output;
}

// Growing by a node that arrives later (launch/late_nodes.hpp): two nodes of one worker start the job (--nnodes 2,
// --max-workers 3), and a third node's agent, given --node-rank 2, registers at node 0's late desk while they train.
// Its worker joins the running job at a step boundary (step 4, where the members await it), the three train the same
// global batch of 8 to the end (4 + 4, then the uneven 2 + 3 + 3, which the joiner takes up as the members do), and
// all three agents exit 0. A late node the job has no room for is refused before it starts anything.
TEST(node_agents, a_node_that_arrives_later_registers_at_node_0s_late_desk_and_its_worker_joins_the_job) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(3, "1gbit");
  const std::string elastic = " --min-workers 2 --max-workers 3 --max-restarts 1 --spare-wait 0";
  const std::string job = elastic_mnist_job(1, "--await-joiner-at-step 4", dir / "grown");
  const std::string rendezvous = " --nnodes 2 --rendezvous " + hosts.address(1) + ":29500" + elastic;
  process node1(hosts.on(2, agent(rendezvous + " --node-rank 1" + job)), 300);
  process node0(hosts.on(1, agent(rendezvous + " --node-rank 0" + job)), 300);
  process late(hosts.on(3, agent(rendezvous + " --node-rank 2" + job)), 300);
  const auto r0 = node0.finish();
  const auto r1 = node1.finish();
  const auto r2 = late.finish();
  ASSERT_EQ(r0.exit_code, 0) << r0.output << r1.output << r2.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output << r0.output;
  ASSERT_EQ(r2.exit_code, 0) << r2.output << r0.output;
  EXPECT_NE(r0.output.find("mwstrat-launch: node 0: late nodes 2..2 may join at port 29501 (--max-workers 3)"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r0.output.find("mwstrat-launch: node 0: late node 2 registered from " + hosts.address(3)),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r2.output.find("mwstrat-launch: node 2 (late: the job has 2 nodes) registered at node 0's late desk: "
                           "nodes " + hosts.address(1) + ", " + hosts.address(2) + ", " + hosts.address(3) +
                           "; workers 2..2 are this node's and join the running job"),
            std::string::npos)
      << r2.output;
  EXPECT_NE(r0.output.find("[mwstrat.recovery] rank 0: worker 2 joined: 3 workers from global step 4"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r2.output.find("[worker 2] "), std::string::npos) << r2.output;
  EXPECT_TRUE(fs::exists(dir.path() / "grown" / "model.safetensors")) << r0.output;

  // No room for a node 3 (its worker would be the job's fourth of at most 3): refused before it starts anything.
  const auto no_room = run(agent(rendezvous + " --node-rank 3" + job), 30);
  EXPECT_EQ(no_room.exit_code, 2) << no_room.output;
  EXPECT_NE(no_room.output.find("--node-rank 3 is not below --nnodes 2 (a late node, whose workers join the running "
                                "job, needs --min-workers and --max-workers of at least 4)"),
            std::string::npos)
      << no_room.output;
  // The late desk is on the port after the rendezvous's: there must be one.
  const auto last_port = run(agent(" --nnodes 2 --rendezvous 127.0.0.1:65535" + elastic + " --node-rank 2" + job), 30);
  EXPECT_EQ(last_port.exit_code, 2) << last_port.output;
  EXPECT_NE(last_port.output.find("--rendezvous port 65535 leaves no port after it for the late desk"),
            std::string::npos)
      << last_port.output;
}

}  // namespace node_agents_test
