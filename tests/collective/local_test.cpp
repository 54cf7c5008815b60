// local_collective: failure semantics (the sweep lives in typed_suite_test.cpp).

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace local_test {

using namespace mwstrat;
using namespace std::chrono_literals;

// Runs `body` and ends the test program if it has not returned within `limit`: a hang is the defect some tests
// look for, and a thread stuck in a collective cannot be cancelled.
template <class Body>
void within(std::chrono::seconds limit, Body&& body) {
  auto done = std::async(std::launch::async, std::forward<Body>(body));
  if (done.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "%s: still running after %lld s (a hang)\n",
                 ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                 static_cast<long long>(limit.count()));
    std::abort();
  }
  done.get();
}

// The detail of each rank's protocol_error, "" where the rank threw none.
struct protocol_errors {
  std::mutex mutex;
  std::vector<std::string> detail;
  explicit protocol_errors(int n) : detail(static_cast<std::size_t>(n)) {}
  template <class Op>
  void record(int rank, Op&& op) {
    try {
      op();
    } catch (const protocol_error& e) {
      const std::lock_guard lock(mutex);
      detail[static_cast<std::size_t>(rank)] = e.detail();
    }
  }
};

TEST(local_collective, a_failing_rank_makes_the_others_fail_fast_naming_it) {
  std::array<std::atomic<int>, 4> lost_peer{};
  for (auto& p : lost_peer) p = -2;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(spawn_ranks(
                   4,
                   [&](local_collective& c) {
                     std::vector<float> g(1000, 1.0f);
                     c.all_reduce(std::span<float>(g), reduce_op::sum);
                     if (c.rank() == 2) throw std::runtime_error("rank 2 exploded");
                     try {
                       for (int i = 0; i < 1000; ++i) c.all_reduce(std::span<float>(g), reduce_op::sum);
                     } catch (const peer_lost_error& e) {
                       lost_peer[static_cast<std::size_t>(c.rank())] = e.peer_rank();
                       EXPECT_NE(std::string(e.what()).find("rank 2 exploded"), std::string::npos) << e.what();
                       throw;
                     }
                   },
                   local_options{30s}),
               std::runtime_error);
  for (int r : {0, 1, 3}) EXPECT_EQ(lost_peer[static_cast<std::size_t>(r)], 2) << "rank " << r;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);  // far below the 30 s deadline: not a timeout
}

TEST(local_collective, spawn_ranks_rethrows_the_original_failure) {
  try {
    spawn_ranks(3, [](local_collective& c) {
      if (c.rank() == 1) throw std::logic_error("the root cause");
      c.barrier();
    });
    FAIL() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "the root cause");
  }
}

TEST(local_collective, a_silent_rank_makes_the_others_time_out_naming_it) {
  std::array<std::atomic<int>, 3> timed_out_on{};
  for (auto& p : timed_out_on) p = -2;
  EXPECT_ANY_THROW(spawn_ranks(
      3,
      [&](local_collective& c) {
        std::vector<double> g(10, 1.0);
        if (c.rank() == 1) std::this_thread::sleep_for(400ms);
        try {
          c.all_reduce(std::span<double>(g), reduce_op::sum, op_options{100ms});
        } catch (const timeout_error& e) {
          timed_out_on[static_cast<std::size_t>(c.rank())] = e.peer_rank().value_or(-1);
          throw;
        }
      },
      local_options{60s}));
  EXPECT_EQ(timed_out_on[0], 1);
  EXPECT_EQ(timed_out_on[2], 1);
}

TEST(local_collective, a_rank_that_returns_early_is_reported_not_waited_for) {
  EXPECT_THROW(spawn_ranks(2,
                           [](local_collective& c) {
                             if (c.rank() == 0) return;
                             c.barrier();
                           },
                           local_options{30s}),
               peer_lost_error);
}

TEST(local_collective, ranks_disagreeing_on_the_operation_get_a_protocol_error) {
  EXPECT_THROW(spawn_ranks(2,
                           [](local_collective& c) {
                             std::vector<float> g(static_cast<std::size_t>(10 + c.rank()));
                             c.all_reduce(std::span<float>(g), reduce_op::sum);
                           }),
               protocol_error);
}

TEST(local_collective, bad_arguments_are_config_errors) {
  EXPECT_THROW(local_group(0), config_error);
  EXPECT_THROW(spawn_ranks(1,
                           [](local_collective& c) {
                             std::vector<float> d(3);
                             c.all_reduce(std::span<float>(d), static_cast<reduce_op>(9));
                           }),
               config_error);
  // A timeout of zero or less is refused by name, not taken for a deadline already past.
  for (const auto bad : {std::chrono::milliseconds(0), std::chrono::milliseconds(-5)}) {
    try {
      local_group refused(2, local_options{bad});
      ADD_FAILURE() << "accepted op_timeout " << bad.count() << " ms";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("local_options.op_timeout is " + std::to_string(bad.count()) + " ms"),
                std::string::npos) << e.what();
    }
  }
  local_group g(2);
  EXPECT_THROW(local_collective(g, 2), config_error);
  EXPECT_THROW(spawn_ranks(1,
                           [](local_collective& c) {
                             std::vector<float> mine(3), all(4);
                             c.all_gather(std::span<const float>(mine), std::span<float>(all));
                           }),
               config_error);
  EXPECT_THROW(spawn_ranks(1,
                           [](local_collective& c) {
                             std::vector<float> d(3);
                             c.broadcast(std::span<float>(d), 1);
                           }),
               config_error);
}

TEST(local_collective, a_rank_unwinding_with_queued_async_work_fails_the_others_at_once) {
  std::atomic<bool> peer_lost_seen{false};
  EXPECT_THROW(spawn_ranks(
                   2,
                   [&](local_collective& c) {
                     std::vector<float> g(100, 1.0f);
                     if (c.rank() == 0) {
                       auto h = c.all_reduce_async(std::span<float>(g), reduce_op::sum);
                       throw std::runtime_error("rank 0 gives up with an all-reduce queued");
                     }
                     std::this_thread::sleep_for(300ms);
                     try {
                       c.all_reduce(std::span<float>(g), reduce_op::sum);
                     } catch (const peer_lost_error& e) {
                       peer_lost_seen = e.peer_rank() == 0;
                       throw;
                     }
                   },
                   local_options{30s}),
               std::runtime_error);
  EXPECT_TRUE(peer_lost_seen);
}

TEST(local_collective, async_failure_surfaces_on_wait) {
  EXPECT_ANY_THROW(spawn_ranks(
      2,
      [](local_collective& c) {
        std::vector<float> g(100, 1.0f);
        if (c.rank() == 1) throw std::runtime_error("gone");
        auto h = c.all_reduce_async(std::span<float>(g), reduce_op::sum, op_options{10s});
        EXPECT_THROW(h.wait(), peer_lost_error);
        throw std::runtime_error("rank 0 saw the failure");
      },
      local_options{30s}));
}

TEST(local_collective, a_barrier_against_another_operation_fails_every_rank_with_the_same_protocol_error) {
  // Rank 1 calls barrier while the others all-reduce: the barrier used not to look at the others' calls, so it
  // returned, and the count of reading ranks went wrong, so its next failure waited forever.
  protocol_errors first(3), later(3);
  within(30s, [&] {
    spawn_ranks(
        3,
        [&](local_collective& c) {
          std::vector<float> g(8, 1.0f);
          first.record(c.rank(), [&] {
            if (c.rank() == 1)
              c.barrier();
            else
              c.all_reduce(std::span<float>(g), reduce_op::sum);
          });
          // The others return (and leave): rank 1 fails at once, not at a deadline, and does not hang.
          if (c.rank() == 1) later.record(1, [&] { c.all_reduce(std::span<float>(g), reduce_op::sum, op_options{2s}); });
        },
        local_options{20s});
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(first.detail[static_cast<std::size_t>(r)], first.detail[0]) << "rank " << r;
    EXPECT_NE(first.detail[static_cast<std::size_t>(r)].find("all_reduce<float>(8 elements, sum) #0"),
              std::string::npos)
        << "rank " << r << ": " << first.detail[static_cast<std::size_t>(r)];
    EXPECT_NE(first.detail[static_cast<std::size_t>(r)].find("rank 1 called barrier #0"), std::string::npos)
        << "rank " << r << ": " << first.detail[static_cast<std::size_t>(r)];
  }
  EXPECT_EQ(later.detail[1], first.detail[0]);
}

TEST(local_collective, a_disagreement_breaks_the_group_for_every_later_operation) {
  protocol_errors first(2), later(2);
  within(30s, [&] {
    spawn_ranks(
        2,
        [&](local_collective& c) {
          std::vector<float> g(static_cast<std::size_t>(4 + 4 * c.rank()), 1.0f);
          first.record(c.rank(), [&] { c.all_reduce(std::span<float>(g), reduce_op::sum); });
          // The same call on both ranks now, but the group stays failed, as a ring does.
          std::vector<float> h(4, 1.0f);
          later.record(c.rank(), [&] { c.all_reduce(std::span<float>(h), reduce_op::sum); });
        },
        local_options{20s});
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(first.detail[static_cast<std::size_t>(r)].find("rank 1 called all_reduce<float>(8 elements"),
              std::string::npos)
        << "rank " << r << ": " << first.detail[static_cast<std::size_t>(r)];
    EXPECT_EQ(later.detail[static_cast<std::size_t>(r)], first.detail[0]) << "rank " << r;
  }
}

TEST(local_collective, a_dropped_async_handle_s_failure_surfaces_on_the_next_operation) {
  // handle.hpp's promise: nobody waits for the mismatched all-reduce, so the barrier after it must fail.
  protocol_errors next(2);
  within(30s, [&] {
    spawn_ranks(
        2,
        [&](local_collective& c) {
          std::vector<float> g(static_cast<std::size_t>(4 + 4 * c.rank()), 1.0f);
          { auto dropped = c.all_reduce_async(std::span<float>(g), reduce_op::sum); }
          next.record(c.rank(), [&] { c.barrier(); });
        },
        local_options{20s});
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(next.detail[static_cast<std::size_t>(r)].find("ranks disagree"), std::string::npos)
        << "rank " << r << ": " << next.detail[static_cast<std::size_t>(r)];
}

TEST(local_collective, the_longest_timeout_waits_rather_than_expiring_at_once) {
  // now + milliseconds::max() used to wrap into the past: the first rank to arrive timed out at once.
  for (const bool per_op : {true, false}) {
    std::array<float, 2> sums{};
    const auto run = [&] {
      spawn_ranks(
          2,
          [&](local_collective& c) {
            if (c.rank() == 1) std::this_thread::sleep_for(200ms);
            std::vector<float> g(4, 1.0f);
            c.all_reduce(std::span<float>(g), reduce_op::sum,
                         per_op ? op_options{std::chrono::milliseconds::max()} : op_options{});
            sums[static_cast<std::size_t>(c.rank())] = g[3];
          },
          per_op ? local_options{20s} : local_options{std::chrono::milliseconds::max()});
    };
    EXPECT_NO_THROW(within(30s, run));
    for (float s : sums) EXPECT_EQ(s, 2.0f) << (per_op ? "op_options" : "local_options");
  }
}

}  // namespace local_test
