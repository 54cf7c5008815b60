// The hierarchical all-reduce with real processes on 127.0.0.1, hosts told apart by their host identity: the same
// bits on every rank and every run, within 1e-5 (relative to the sum of magnitudes) of the flat ring on one host
// and of the exact sum (what one worker holding the global batch computes, up to its own rounding), and every
// operation of the typed sweep on a ring of two hosts of two ranks.

#include "hierarchy.hpp"
#include "process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace hierarchy_test {

using namespace std::chrono_literals;
namespace test = mwstrat::test;

// Every rank of a "dump" run over `hosts` (one identity per rank): their results, after checking that they ran
// with the expected arrangement and finished.
std::vector<std::vector<float>> dump_run(const std::string& hosts, std::size_t count, const std::string& op,
                                         const std::string& arrangement, std::string* chief_log = nullptr,
                                         const std::vector<std::string>& extra = {}) {
  const int n = static_cast<int>(std::count(hosts.begin(), hosts.end(), ',')) + 1;
  test::temp_dir files{"mwstrat-hier"};
  const std::string out = (files.path() / "r").string();
  std::vector<std::string> args = {"hosts=" + hosts, "count=" + std::to_string(count), "op=" + op, "out=" + out,
                                   "chunk=65536"};
  args.insert(args.end(), extra.begin(), extra.end());
  test::ring_run ring(n, "dump", args);
  EXPECT_TRUE(ring.wait_all(120s)) << ring.report();
  std::vector<std::vector<float>> results;
  for (int r = 0; r < n; ++r) {
    const auto& w = ring.workers[static_cast<std::size_t>(r)];
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    EXPECT_NE(w.stderr_text().find(arrangement), std::string::npos) << "expected '" << arrangement << "'\n" << ring.report();
    if (w.exit_code != 0) return {};
    results.push_back(test::read_floats(out + std::to_string(r) + ".bin"));
  }
  if (chief_log) *chief_log = ring.workers[0].stderr_text();
  return results;
}

// The exact sum (or mean) over `ranks` ranks, and the sum of magnitudes that bounds its rounding.
void exact(int ranks, std::size_t i, bool mean, double& value, double& magnitude) {
  value = magnitude = 0;
  for (int r = 0; r < ranks; ++r) {
    const double x = test::varied_input(r, i);
    value += x;
    magnitude += std::fabs(x);
  }
  if (mean) {
    value /= ranks;
    magnitude /= ranks;
  }
}

void expect_same_bits_everywhere(const std::vector<std::vector<float>>& ranks, const std::string& what) {
  for (std::size_t r = 1; r < ranks.size(); ++r)
    EXPECT_TRUE(ranks[r] == ranks[0]) << what << ": rank " << r << " differs from rank 0";
}

void expect_close(const std::vector<float>& got, const std::vector<float>& other, int ranks, bool mean,
                  const std::string& what) {
  ASSERT_EQ(got.size(), other.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double value = 0, magnitude = 0;
    exact(ranks, i, mean, value, magnitude);
    const double bound = 1e-5 * magnitude;
    if (std::fabs(got[i] - value) > bound || std::fabs(got[i] - other[i]) > bound) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", flat " << other[i] << ", exact " << value;
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(hierarchical_all_reduce, two_hosts_of_two_ranks_same_bits_everywhere_every_run_and_close_to_flat_and_exact) {
  for (const std::string op : {"sum", "mean"}) {
    const std::size_t count = 300007;  // odd: uneven segments and chunks
    std::string chief;
    const auto hier = dump_run("a,a,b,b", count, op, "hierarchical=1 hosts=2", &chief);
    const auto again = dump_run("a,a,b,b", count, op, "hierarchical=1 hosts=2");
    const auto flat = dump_run("a,a,a,a", count, op, "hierarchical=0 hosts=1");
    ASSERT_EQ(hier.size(), 4u);
    ASSERT_EQ(again.size(), 4u);
    ASSERT_EQ(flat.size(), 4u);
    expect_same_bits_everywhere(hier, "2 hosts x 2, " + op);
    expect_same_bits_everywhere(flat, "1 host x 4, " + op);
    EXPECT_TRUE(hier[0] == again[0]) << "two runs of the same job differ (" << op << ")";
    expect_close(hier[0], flat[0], 4, op == "mean", "2 hosts x 2 vs 1 host x 4 and the exact " + op);
    if (op == "sum") {
      const std::string line = "[mwstrat] 4 workers on 2 hosts (127.0.0.1 #0: ranks 0,1 shared memory; 127.0.0.1 #1: "
                               "ranks 2,3 shared memory); tcp ring between hosts";
      const bool shm_here = test::have_dev_shm();
      if (shm_here) EXPECT_NE(chief.find(line), std::string::npos) << chief;
      else EXPECT_NE(chief.find("4 workers on 2 hosts"), std::string::npos) << chief;
    }
  }
}

TEST(hierarchical_all_reduce, three_hosts_of_two_ranks_match_the_exact_sum_and_agree) {
  const auto hier = dump_run("x,x,y,y,z,z", 10007, "sum", "hierarchical=1 hosts=3");
  ASSERT_EQ(hier.size(), 6u);
  expect_same_bits_everywhere(hier, "3 hosts x 2");
  expect_close(hier[0], hier[5], 6, false, "3 hosts x 2 vs the exact sum");
}

TEST(hierarchical_all_reduce, hosts_of_unequal_size_use_one_flat_ring_and_say_so) {
  std::string chief;
  const auto flat = dump_run("a,a,b", 1001, "sum", "hierarchical=0 hosts=2", &chief);
  ASSERT_EQ(flat.size(), 3u);
  expect_same_bits_everywhere(flat, "hosts of 2 and 1");
  expect_close(flat[0], flat[1], 3, false, "hosts of 2 and 1 vs the exact sum");
  EXPECT_NE(chief.find("3 workers on 2 hosts"), std::string::npos) << chief;
  EXPECT_NE(chief.find("unequal numbers of ranks"), std::string::npos) << chief;
}

TEST(hierarchical_all_reduce, the_flat_topology_option_keeps_one_ring) {
  const auto flat = dump_run("a,a,b,b", 1001, "sum", "hierarchical=0 hosts=2", nullptr, {"topology=flat"});
  ASSERT_EQ(flat.size(), 4u);
  expect_close(flat[0], flat[3], 4, false, "flat over 2 hosts x 2 vs the exact sum");
}

// Every operation, type and count of the typed sweep (exact references) on a hierarchical ring.
TEST(hierarchical_all_reduce, the_typed_sweep_passes_on_two_hosts_of_two_ranks) {
  test::ring_run ring(4, "sweep", {"hosts=a,a,b,b"});
  ASSERT_TRUE(ring.wait_all(240s)) << ring.report();
  for (const auto& w : ring.workers) {
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    EXPECT_NE(w.stdout_text().find("OK"), std::string::npos) << ring.report();
  }
  EXPECT_NE(ring.workers[0].stderr_text().find("tcp ring between hosts (each host's ranks carry a part)"),
            std::string::npos)
      << ring.report();
}

}  // namespace hierarchy_test
