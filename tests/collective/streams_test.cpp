// Several TCP connections per link between hosts (ring_options::streams_per_peer), with real processes on 127.0.0.1
// and hosts told apart by their host identity: the same bits as one connection for 1, 2 and 4 streams, flat and
// hierarchical, float32 and bf16 on the wire; every operation of the typed sweep where a rank's two links have
// different numbers of connections; refusals when the ends disagree or the value is out of range.

#include "hierarchy.hpp"
#include "process.hpp"

#include <mwstrat/collective.hpp>
#include <mwstrat/strategy/communication_options.hpp>

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace streams_test {

using namespace std::chrono_literals;
namespace test = mwstrat::test;

// Every rank's result of one "dump" all-reduce (sum of test::varied_input) with `streams` connections per link
// between hosts; `chief` gets rank 0's log.
std::vector<std::vector<float>> striped_run(const std::string& hosts, const std::string& topology,
                                            const std::string& compression, int streams, std::size_t count,
                                            const std::string& scenario = "dump", std::string* chief = nullptr) {
  const int n = static_cast<int>(std::count(hosts.begin(), hosts.end(), ',')) + 1;
  test::temp_dir files{"mwstrat-streams"};
  const std::string out = (files.path() / "r").string();
  test::ring_run ring(n, scenario,
                      {"hosts=" + hosts, "count=" + std::to_string(count), "op=sum", "out=" + out, "chunk=65536",
                       "topology=" + topology, "compression=" + compression, "streams=" + std::to_string(streams)});
  EXPECT_TRUE(ring.wait_all(120s)) << ring.report();
  std::vector<std::vector<float>> results;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ring.workers[static_cast<std::size_t>(r)].exit_code, 0) << ring.report();
    if (ring.workers[static_cast<std::size_t>(r)].exit_code != 0) return {};
    results.push_back(test::read_floats(out + std::to_string(r) + ".bin"));
  }
  if (chief) *chief = ring.workers[0].stderr_text();
  return results;
}

// 1, 2 and 4 streams give the same bits on every rank; more than one is named in the chief's topology line.
void expect_same_bits_for_1_2_4_streams(const std::string& hosts, const std::string& topology,
                                        const std::string& compression, const std::string& scenario = "dump") {
  // Odd: uneven segments, and 64 KiB chunks leave each segment ~10 chunks (so 4 streams carry 2 or 3 each).
  const std::size_t count = 600007;
  const std::string what = hosts + " " + topology + " " + compression + " " + scenario;
  const auto one = striped_run(hosts, topology, compression, 1, count, scenario);
  ASSERT_FALSE(one.empty()) << what;
  for (std::size_t r = 1; r < one.size(); ++r) EXPECT_TRUE(one[r] == one[0]) << what << ": rank " << r << " differs";
  for (const int streams : {2, 4}) {
    std::string chief;
    const auto many = striped_run(hosts, topology, compression, streams, count, scenario, &chief);
    ASSERT_EQ(many.size(), one.size()) << what;
    for (std::size_t r = 0; r < many.size(); ++r)
      EXPECT_TRUE(many[r] == one[0]) << what << ": rank " << r << " with " << streams << " streams differs from 1";
    EXPECT_NE(chief.find(std::to_string(streams) + " tcp streams per link between hosts"), std::string::npos) << chief;
  }
}

TEST(ring_streams, flat_two_hosts_float32_same_bits_for_1_2_4_streams) {
  expect_same_bits_for_1_2_4_streams("a,b", "flat", "none");
}

TEST(ring_streams, flat_two_hosts_bf16_same_bits_for_1_2_4_streams) {
  expect_same_bits_for_1_2_4_streams("a,b", "flat", "bf16");
}

TEST(ring_streams, hierarchical_two_hosts_of_two_float32_same_bits_for_1_2_4_streams) {
  expect_same_bits_for_1_2_4_streams("a,a,b,b", "hierarchical", "none");
}

TEST(ring_streams, hierarchical_two_hosts_of_two_bf16_same_bits_for_1_2_4_streams) {
  expect_same_bits_for_1_2_4_streams("a,a,b,b", "hierarchical", "bf16");
}

TEST(ring_streams, all_reduce_update_on_three_hosts_same_bits_for_1_2_4_streams) {
  expect_same_bits_for_1_2_4_streams("a,b,c", "flat", "none", "dump_update");
}

// Hosts a, a, b on a flat ring: rank 0 -> 1 is one connection, 1 -> 2 and 2 -> 0 are three, so rank 1 receives on
// one and sends on three, rank 0 the other way round. Every operation, type and count of the typed sweep.
TEST(ring_streams, the_typed_sweep_passes_where_the_two_links_have_different_connections) {
  test::ring_run ring(3, "sweep", {"hosts=a,a,b", "topology=flat", "streams=3"});
  ASSERT_TRUE(ring.wait_all(240s)) << ring.report();
  for (const auto& w : ring.workers) {
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    EXPECT_NE(w.stdout_text().find("OK"), std::string::npos) << ring.report();
  }
  EXPECT_NE(ring.workers[0].stderr_text().find("3 tcp streams per link between hosts"), std::string::npos)
      << ring.report();
}

// A rank killed mid-all-reduce while every link carries 3 connections (each rank on a host of its own): every other
// rank reports peer_lost naming it, well inside the 60 s operation deadline (found, not timed out).
TEST(ring_streams, sigkill_of_one_rank_mid_all_reduce_gives_every_other_rank_peer_lost_naming_it) {
  test::ring_run ring(4, "loop", {"timeout_ms=60000", "hosts=a,b,c,d", "topology=flat", "streams=3"});
  ASSERT_TRUE(test::wait_for_output(ring.workers[2], "ready", 30s)) << ring.report();
  std::this_thread::sleep_for(20ms);
  ::kill(ring.workers[2].pid, SIGKILL);
  ASSERT_TRUE(ring.wait_all(30s)) << ring.report();
  EXPECT_EQ(ring.workers[2].signal, SIGKILL);
  for (int r : {0, 1, 3}) {
    const auto& w = ring.workers[static_cast<std::size_t>(r)];
    EXPECT_NE(w.exit_code, 0) << ring.report();
    EXPECT_NE(w.stdout_text().find("ERROR peer_lost 2"), std::string::npos) << "rank " << r << ":\n" << ring.report();
  }
  EXPECT_NE(ring.workers[0].stderr_text().find("3 tcp streams per link between hosts"), std::string::npos)
      << ring.report();
}

TEST(ring_streams, ends_that_disagree_are_refused_naming_the_option) {
  test::ring_run ring(2, "pair", {"hosts=a,b", "streams=2,1", "connect_ms=5000"});
  ASSERT_TRUE(ring.wait_all(60s)) << ring.report();
  bool named = false;
  for (const auto& w : ring.workers) {
    EXPECT_NE(w.exit_code, 0) << ring.report();
    named = named || w.stdout_text().find("streams per peer differ") != std::string::npos ||
            w.stderr_text().find("streams per peer differ") != std::string::npos;
  }
  EXPECT_TRUE(named) << ring.report();
}

TEST(ring_streams, out_of_range_values_are_refused) {
  for (const int bad : {0, -1, 17}) {
    mwstrat::ring_options o;
    o.addresses = {"127.0.0.1:1", "127.0.0.1:2"};
    o.streams_per_peer = bad;
    EXPECT_THROW(mwstrat::ring_collective{o}, mwstrat::config_error) << bad;
  }
  using mwstrat::environment;
  EXPECT_EQ(mwstrat::with_environment_defaults({}, environment{{"MWSTRAT_RING_STREAMS", "4"}}).streams_per_peer,
            std::optional<int>(4));
  mwstrat::communication_options set;
  set.streams_per_peer = 2;
  EXPECT_EQ(mwstrat::with_environment_defaults(set, environment{{"MWSTRAT_RING_STREAMS", "4"}}).streams_per_peer,
            std::optional<int>(2));
  for (const char* bad : {"0", "17", "two", "2x", ""})
    EXPECT_THROW((void)mwstrat::with_environment_defaults({}, environment{{"MWSTRAT_RING_STREAMS", bad}}),
                 mwstrat::config_error)
        << bad;
}

}  // namespace streams_test
