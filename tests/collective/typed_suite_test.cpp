// One typed suite for every backend: the same sweep (element types × ops × sizes {0, 1, odd, large}, broadcast,
// all_gather, barrier, asynchronous buckets) for world sizes {1, 2, 3, 4, 7}; local ranks are threads, ring
// ranks are processes on 127.0.0.1, once with payloads over TCP and once through shared memory.

#include "process.hpp"
#include "sweep.hpp"

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

namespace typed_suite_test {

using namespace mwstrat;

struct local_backend {
  static void run(int n, bool large) {
    spawn_ranks(n, [&](local_collective& c) { test::run_sweep(c, large); });
  }
};

template <bool SharedMemory>
struct ring_backend {
  static void run(int n, bool large) {
    if (SharedMemory && !test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
    test::ring_run ring(n, "sweep", {large ? "large=1" : "large=0", SharedMemory ? "transport=auto" : "transport=tcp"});
    const bool finished = ring.wait_all(std::chrono::seconds(240));
    ASSERT_TRUE(finished) << "ring of " << n << " did not finish\n" << ring.report();
    for (auto& w : ring.workers) ASSERT_EQ(w.exit_code, 0) << ring.report();
    // The transport really was the one under test (one rank has no links at all).
    const std::string want = n > 1 && SharedMemory ? "transport=shm" : "transport=tcp";
    for (auto& w : ring.workers) EXPECT_NE(w.stdout_text().find(want), std::string::npos) << ring.report();
    EXPECT_EQ(test::shm_leftovers(ring.pids()), std::vector<std::string>{});
  }
};
using ring_tcp_backend = ring_backend<false>;
using ring_shm_backend = ring_backend<true>;

template <class Backend>
class collective_suite : public ::testing::Test {};

using backends = ::testing::Types<local_backend, ring_tcp_backend, ring_shm_backend>;
TYPED_TEST_SUITE(collective_suite, backends);

TYPED_TEST(collective_suite, world_1_with_8m_floats) { TypeParam::run(1, true); }
TYPED_TEST(collective_suite, world_2_with_8m_floats) { TypeParam::run(2, true); }
TYPED_TEST(collective_suite, world_3) { TypeParam::run(3, false); }
TYPED_TEST(collective_suite, world_4_with_8m_floats) { TypeParam::run(4, true); }
TYPED_TEST(collective_suite, world_7) { TypeParam::run(7, false); }

}  // namespace typed_suite_test
