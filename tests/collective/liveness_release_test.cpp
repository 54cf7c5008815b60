// Release stage: the long variant of the alive-but-slow check (ring_test.cpp has the short one).

#include "liveness_checks.hpp"

#include <gtest/gtest.h>

namespace liveness_release_test {

// A rank SIGSTOPped for 2 s then SIGCONTed for 2 s, over about 30 s of training: never declared lost (5 s liveness
// timeout), and every rank finishes with the right results.
TEST(ring_liveness_release, a_rank_stopped_and_continued_every_two_seconds_for_thirty_seconds_is_slow_not_lost) {
  EXPECT_GE(mwstrat::test::stopped_and_continued_finishes(150), 7);
}

}  // namespace liveness_release_test
