// Host identity (ring_options::host_identity, MWSTRAT_HOST_ID) and the shared-memory proof: real processes on
// 127.0.0.1. Ranks that say they are on different hosts talk TCP; ranks on one host use shared memory only when
// both reach the same region, and otherwise fall back to TCP with a log line instead of failing.

#include "process.hpp"

#include <mwstrat/collective.hpp>
#include <mwstrat/strategy/communication_options.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace host_identity_test {

using namespace mwstrat;
using namespace std::chrono_literals;

struct pair_run {
  test::temp_dir dir{"mwstrat-hostid"};
  std::vector<test::worker> workers;

  // Two ranks running the "pair" scenario (an all-reduce checked against its expected sum, then a barrier), rank r
  // with host identity hosts[r] (empty: derived) and wrapped in prefixes[r] (empty: none).
  pair_run(const std::vector<std::string>& hosts, const std::vector<std::vector<std::string>>& prefixes = {{}, {}}) {
    const auto ports = test::join_ports(test::free_ports(2));
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> args = {"pair", std::to_string(r), ports, "chunk=4096"};
      if (!hosts[static_cast<std::size_t>(r)].empty()) args.push_back("host=" + hosts[static_cast<std::size_t>(r)]);
      workers.push_back(test::spawn_worker(dir.path(), "rank" + std::to_string(r), args, {},
                                           prefixes[static_cast<std::size_t>(r)]));
    }
  }
  ~pair_run() { wait(0ms); }
  bool wait(std::chrono::milliseconds limit) {
    std::vector<test::worker*> ws;
    for (auto& w : workers) ws.push_back(&w);
    return test::wait_workers(ws, limit);
  }
  [[nodiscard]] std::string report() const {
    std::string s;
    for (std::size_t r = 0; r < workers.size(); ++r)
      s += "--- rank " + std::to_string(r) + " exit " + std::to_string(workers[r].exit_code) + "\n" +
           workers[r].stdout_text() + workers[r].stderr_text();
    return s;
  }
  void expect_ok_with(const std::string& transport) const {
    for (const auto& w : workers) {
      EXPECT_EQ(w.exit_code, 0) << report();
      EXPECT_NE(w.stdout_text().find("transport=" + transport), std::string::npos) << report();
      EXPECT_NE(w.stdout_text().find("OK"), std::string::npos) << report();
    }
  }
};

TEST(host_identity, ranks_with_different_host_ids_talk_tcp_even_on_one_kernel) {
  pair_run run({"host-a", "host-b"});
  ASSERT_TRUE(run.wait(60s)) << run.report();
  run.expect_ok_with("tcp");
}

TEST(host_identity, ranks_with_the_same_host_id_use_proven_shared_memory) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm: the shared-memory transport cannot be tested";
  pair_run run({"host-a", "host-a"});
  ASSERT_TRUE(run.wait(60s)) << run.report();
  run.expect_ok_with("shm");
}

// Rank 1 in its own mount namespace with a private tmpfs on /dev/shm (a container on the same kernel): both claim
// the same host, rank 0's region is not there for rank 1, and the link falls back to TCP, saying why.
TEST(host_identity, a_peer_with_a_separate_dev_shm_falls_back_to_tcp_with_a_log_line) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: unshare -m and a private tmpfs on /dev/shm";
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/unshare (util-linux)";
  if (std::system("/usr/bin/unshare -m /bin/sh -c 'mount -t tmpfs tmpfs /dev/shm' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "cannot make a mount namespace with a private /dev/shm here (unshare -m or mount refused)";
  const std::vector<std::string> isolated = {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
                                             "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\""};
  // Both directions: rank 0 offers to rank 1 (isolated), rank 1 offers to rank 0.
  pair_run run({"same-host", "same-host"}, {{}, isolated});
  ASSERT_TRUE(run.wait(60s)) << run.report();
  run.expect_ok_with("tcp");
  const auto logs = run.workers[0].stderr_text() + run.workers[1].stderr_text();
  EXPECT_NE(logs.find("over TCP"), std::string::npos) << run.report();
}

TEST(host_identity, an_empty_host_identity_is_refused) {
  ring_options o;
  o.addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  o.host_identity = "";
  EXPECT_THROW(ring_collective{o}, config_error);
}

TEST(host_identity, mwstrat_host_id_fills_the_option_only_when_the_code_left_it_unset) {
  const environment env{{"MWSTRAT_HOST_ID", "rack7-node3"}};
  EXPECT_EQ(with_environment_defaults({}, env).host_identity, std::optional<std::string>("rack7-node3"));
  communication_options set;
  set.host_identity = "from-code";
  EXPECT_EQ(with_environment_defaults(set, env).host_identity, std::optional<std::string>("from-code"));
  EXPECT_EQ(with_environment_defaults({}, environment(environment_map{})).host_identity, std::nullopt);
  EXPECT_EQ(with_environment_defaults({}, environment{{"MWSTRAT_HOST_ID", ""}}).host_identity, std::nullopt);
}

TEST(host_identity, topology_and_compression_come_from_the_environment_when_unset) {
  const environment env{{"MWSTRAT_RING_TOPOLOGY", "hierarchical"}, {"MWSTRAT_RING_COMPRESSION", "bf16"}};
  const auto o = with_environment_defaults({}, env);
  EXPECT_EQ(o.topology, std::optional<ring_topology>(ring_topology::hierarchical));
  EXPECT_EQ(o.compression, std::optional<wire_compression>(wire_compression::bf16));
  const auto d = with_environment_defaults({}, environment(environment_map{}));
  EXPECT_EQ(d.topology, std::optional<ring_topology>(ring_topology::hierarchical));  // the default
  EXPECT_EQ(with_environment_defaults({}, environment{{"MWSTRAT_RING_TOPOLOGY", "flat"}}).topology,
            std::optional<ring_topology>(ring_topology::flat));
  EXPECT_EQ(d.compression, std::optional<wire_compression>(wire_compression::none));
  EXPECT_THROW((void)with_environment_defaults({}, environment{{"MWSTRAT_RING_COMPRESSION", "int8"}}), config_error);
  EXPECT_THROW((void)with_environment_defaults({}, environment{{"MWSTRAT_RING_TOPOLOGY", "tree"}}), config_error);
}

}  // namespace host_identity_test
