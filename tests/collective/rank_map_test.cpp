// detail::rank_map: the one value that names a ring's ranks in its failures — this ring's "rank k (address)", and,
// for a ring inside a hierarchical one, the job's rank and address in what it reports and throws.
#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

namespace rank_map_test {

using namespace mwstrat;
using detail::rank_map;
using detail::ring_failure;

const std::vector<std::string> job_addresses = {"10.9.0.1:7000", "10.9.0.1:7001", "10.9.0.2:7000", "10.9.0.2:7001"};

// The host ring of the second host: its ranks 0 and 1 are the job's 2 and 3, on ports the kernel picked.
rank_map second_host_ring() {
  return rank_map("host ring", {"10.9.0.2:41000", "10.9.0.2:41001"}, {2, 3}, rank_map(job_addresses));
}

TEST(rank_map, the_jobs_ring_names_its_own_ranks_and_leaves_failures_as_they_are) {
  const rank_map job(job_addresses);
  EXPECT_FALSE(job.inner());
  EXPECT_EQ(job.size(), 4);
  EXPECT_EQ(job.peer(2), "rank 2 (10.9.0.2:7000)");
  EXPECT_EQ(job.job_rank(3), 3);
  EXPECT_EQ(job.job_address(1), "10.9.0.1:7001");
  const auto f = job.in_job_terms(ring_failure{error_kind::peer_lost, 1, "gone"});
  EXPECT_EQ(f.culprit, 1);
  EXPECT_EQ(f.text, "gone");
}

TEST(rank_map, a_ring_inside_names_its_peers_by_its_own_addresses_and_reports_in_the_jobs_terms) {
  const rank_map host = second_host_ring();
  EXPECT_TRUE(host.inner());
  EXPECT_EQ(host.size(), 2);
  EXPECT_EQ(host.peer(1), "rank 1 (10.9.0.2:41001)");  // what its data path says
  EXPECT_EQ(host.job_rank(0), 2);
  EXPECT_EQ(host.job_address(3), "10.9.0.2:7001");
  const auto f = host.in_job_terms(ring_failure{error_kind::timeout, 1, "no data from rank 1 (10.9.0.2:41001)"});
  EXPECT_EQ(f.culprit, 3);
  EXPECT_EQ(f.text, "host ring, whose rank k is rank [2,3]: no data from rank 1 (10.9.0.2:41001)");
  // A culprit that is none of this ring's ranks (-1: "it gave up") stays as it is.
  EXPECT_EQ(host.in_job_terms(ring_failure{error_kind::protocol, -1, "x"}).culprit, -1);
}

TEST(rank_map, the_error_a_rank_throws_names_the_jobs_rank_and_address) {
  const rank_map host = second_host_ring();
  const auto lost = host.in_job_terms(ring_failure{error_kind::peer_lost, 0, "recv from rank 0: reset"});
  try {
    std::rethrow_exception(detail::ring_error(host, 1, lost));
    FAIL() << "no exception";
  } catch (const peer_lost_error& e) {
    EXPECT_EQ(e.rank(), 3);  // this process is the job's rank 3
    EXPECT_EQ(e.peer_rank(), 2);
    EXPECT_EQ(e.peer_address(), "10.9.0.2:7000");
    EXPECT_EQ(e.detail(), "host ring, whose rank k is rank [2,3]: recv from rank 0: reset");
  }
  try {
    std::rethrow_exception(detail::ring_error(rank_map(job_addresses), 2, ring_failure{error_kind::timeout, 1, "late"}));
    FAIL() << "no exception";
  } catch (const timeout_error& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.detail(), "late");
  }
}

}  // namespace rank_map_test
