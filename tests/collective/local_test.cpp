// local_collective: failure semantics (the sweep lives in typed_suite_test.cpp).

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace mwstrat;
using namespace std::chrono_literals;

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

}  // namespace
