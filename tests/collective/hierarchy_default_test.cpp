// The hierarchical all-reduce is the default where hosts run several workers each (real processes on 127.0.0.1,
// hosts told apart by their host identity, the ring's options left at their defaults): the chief logs the topology
// it found, large all-reduces take the hierarchical schedule (the same bits as asking for it), small ones the flat
// ring (the same bits as the flat ring), and both are within 1e-5 (relative to the sum of magnitudes) of the exact
// sum that one worker holding the global batch computes.

#include "hierarchy.hpp"
#include "process.hpp"

#include <mwstrat/collective/ring/options.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace hierarchy_default_test {

using namespace std::chrono_literals;
namespace test = mwstrat::test;

std::vector<std::vector<float>> run_topology(const std::string& topology, std::size_t count, std::string* chief = nullptr) {
  test::temp_dir files{"mwstrat-topology"};
  const std::string out = (files.path() / "r").string();
  test::ring_run ring(4, "dump", {"hosts=a,a,b,b", "count=" + std::to_string(count), "op=sum", "out=" + out,
                                  "chunk=65536", "topology=" + topology});
  EXPECT_TRUE(ring.wait_all(120s)) << ring.report();
  std::vector<std::vector<float>> results;
  for (int r = 0; r < 4; ++r) {
    const auto& w = ring.workers[static_cast<std::size_t>(r)];
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    if (w.exit_code != 0) return {};
    results.push_back(test::read_floats(out + std::to_string(r) + ".bin"));
  }
  if (chief) *chief = ring.workers[0].stderr_text();
  return results;
}

void expect_near_exact(const std::vector<float>& got, const std::string& what) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double value = 0, magnitude = 0;
    for (int r = 0; r < 4; ++r) {
      value += test::varied_input(r, i);
      magnitude += std::fabs(test::varied_input(r, i));
    }
    if (std::fabs(got[i] - value) > 1e-5 * magnitude && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", exact " << value;
  }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(hierarchical_default, two_hosts_of_two_workers_go_hierarchical_and_say_so) {
  EXPECT_EQ(mwstrat::ring_options{}.topology, mwstrat::ring_topology::hierarchical);
  const std::size_t count = 300007;  // 1.2 MB: above the flat ring's size threshold
  ASSERT_GE(count * sizeof(float), mwstrat::ring_options{}.hierarchical_min_bytes);
  std::string chief;
  const auto by_default = run_topology("default", count, &chief);
  const auto asked = run_topology("hierarchical", count);
  const auto flat = run_topology("flat", count);
  ASSERT_EQ(by_default.size(), 4u);
  ASSERT_EQ(asked.size(), 4u);
  ASSERT_EQ(flat.size(), 4u);
  EXPECT_NE(chief.find("hierarchical=1 hosts=2"), std::string::npos) << chief;
  EXPECT_NE(chief.find("[mwstrat] 4 workers on 2 hosts (127.0.0.1 #0: ranks 0,1"), std::string::npos) << chief;
  EXPECT_NE(chief.find("tcp ring between hosts (each host's ranks carry a part)"), std::string::npos) << chief;
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(by_default[r] == asked[0]) << "rank " << r << ": the default differs from asking for hierarchical";
    EXPECT_TRUE(flat[r] == flat[0]) << "rank " << r << ": flat ranks disagree";
  }
  EXPECT_FALSE(asked[0] == flat[0]) << "the two schedules sum in different orders: equal bits would mean the "
                                       "hierarchical run was not hierarchical";
  expect_near_exact(by_default[0], "default topology, 2 hosts x 2");
  expect_near_exact(flat[0], "flat ring, 2 hosts x 2");
}

TEST(hierarchical_default, small_all_reduces_take_the_flat_ring) {
  const std::size_t count = 1000;  // 4000 bytes: below the threshold
  ASSERT_LT(count * sizeof(float), mwstrat::ring_options{}.hierarchical_min_bytes);
  const auto by_default = run_topology("default", count);
  const auto flat = run_topology("flat", count);
  const auto hierarchical = run_topology("hierarchical", count);  // forced at any size
  ASSERT_EQ(by_default.size(), 4u);
  ASSERT_EQ(flat.size(), 4u);
  ASSERT_EQ(hierarchical.size(), 4u);
  // Without this the test would pass even if the threshold did nothing, wherever the two schedules agree.
  ASSERT_FALSE(hierarchical[0] == flat[0]) << "at this size the schedules' bits must differ for the test to mean anything";
  for (std::size_t r = 0; r < 4; ++r)
    EXPECT_TRUE(by_default[r] == flat[0]) << "rank " << r << ": a small all-reduce did not take the flat ring";
  expect_near_exact(by_default[0], "default topology, 4000 bytes");
}

}  // namespace hierarchy_default_test
