// detail::shard_walk, the one walk behind distributed_batches and record_batches, on its own: docs/sharding.md's
// worked example, number for number (C = 10, G = 4, seed 7), through plan_walk as both callers build it. And
// detail::worker_pool, which decodes record batches: every item runs once, on several threads, and a failure is
// the smallest failing item's, whatever the scheduling.
#include <mwstrat/data/detail/shard_walk.hpp>
#include <mwstrat/data/detail/worker_pool.hpp>
#include <mwstrat/data/sharding.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shard_walk_test {

using namespace mwstrat;
using data::data_cursor;

detail::shard_walk walk(data::any_shard_policy policy, std::vector<std::size_t> files, int n, int w,
                        bool drop_remainder = true) {
  detail::walk_shape s = detail::plan_walk(policy, files, 4, n, w);
  s.drop_remainder = drop_remainder;
  return detail::shard_walk(std::move(s));
}

std::vector<std::size_t> at(detail::shard_walk& walk, std::uint64_t epoch, std::uint64_t step) {
  const auto s = walk.slice({epoch, step, 7});
  return {s.begin(), s.end()};
}

using v = std::vector<std::size_t>;

TEST(shard_walk, data_sharding_walks_the_worked_example) {
  auto w0 = walk(data::data_shard{}, {10}, 2, 0);
  auto w1 = walk(data::data_shard{}, {10}, 2, 1);
  ASSERT_EQ(w0.steps_per_pass(), 2U);
  EXPECT_EQ(at(w0, 0, 0), (v{8, 4}));
  EXPECT_EQ(at(w1, 0, 0), (v{1, 3}));
  EXPECT_EQ(at(w0, 0, 1), (v{9, 0}));
  EXPECT_EQ(at(w1, 0, 1), (v{5, 2}));
  EXPECT_EQ(at(w0, 1, 0), (v{8, 3}));
  EXPECT_EQ(at(w1, 1, 1), (v{0, 4}));
  EXPECT_EQ(at(w0, 0, 2), (v{8, 3})) << "a step past the pass reads on into the next pass";
  EXPECT_EQ(w0.normalised({0, 5, 7}), (data_cursor{2, 1, 7}));
  EXPECT_EQ(w0.global_count({0, 1, 7}), 4U);
  // Restarted on 4 workers at cursor {0, 1}: the same global batch 9 0 5 2, one example each.
  const v next = {9, 0, 5, 2};
  for (int w = 0; w < 4; ++w) {
    auto four = walk(data::data_shard{}, {10}, 4, w);
    EXPECT_EQ(at(four, 0, 1), (v{next[static_cast<std::size_t>(w)]}));
  }
}

TEST(shard_walk, the_kept_remainder_and_off_sharding_walk_the_worked_example) {
  auto w0 = walk(data::data_shard{}, {10}, 2, 0, false);
  auto w1 = walk(data::data_shard{}, {10}, 2, 1, false);
  ASSERT_EQ(w0.steps_per_pass(), 3U);
  EXPECT_EQ(at(w0, 0, 2), (v{6}));
  EXPECT_EQ(at(w1, 0, 2), (v{7}));
  EXPECT_EQ(w0.global_count({0, 2, 7}), 2U);
  auto off = walk(data::off_shard{}, {10}, 2, 1);
  ASSERT_EQ(off.steps_per_pass(), 5U);
  EXPECT_EQ(at(off, 0, 4), (v{6, 7}));
  EXPECT_EQ(off.global_count({0, 4, 7}), 4U);  // both workers read the same 2
}

TEST(shard_walk, file_sharding_walks_the_worked_example) {
  auto w0 = walk(data::file_shard{}, {4, 3, 3}, 2, 0);
  auto w1 = walk(data::file_shard{}, {4, 3, 3}, 2, 1);
  ASSERT_EQ(w0.steps_per_pass(), 1U);
  EXPECT_EQ(at(w0, 0, 0), (v{2, 9}));
  EXPECT_EQ(at(w1, 0, 0), (v{4, 5}));
  auto k0 = walk(data::file_shard{}, {4, 3, 3}, 2, 0, false);
  auto k1 = walk(data::file_shard{}, {4, 3, 3}, 2, 1, false);
  ASSERT_EQ(k0.steps_per_pass(), 4U);
  EXPECT_EQ(at(k0, 0, 3), (v{8}));
  EXPECT_EQ(at(k1, 0, 2), (v{}));
  EXPECT_EQ(k1.global_count({0, 2, 7}), 2U);  // worker 0's 1 7, worker 1's nothing
}

TEST(shard_walk, a_shape_with_no_step_and_a_policy_choosing_a_missing_file_are_refused) {
  EXPECT_THROW(walk(data::data_shard{}, {3}, 2, 0), data_error);  // 3 examples, G = 4
  struct beyond {
    std::string_view name() const { return "beyond"; }
    data::shard_plan resolve(const data::shard_request&) const { return {data::shard_mode::file, {5}}; }
  };
  EXPECT_THROW(walk(beyond{}, {4, 4}, 1, 0), config_error);
  EXPECT_THROW((void)detail::checked_per_worker_batch(6, 4, 0), config_error);
  EXPECT_THROW((void)detail::checked_per_worker_batch(8, 2, 2), config_error);
  EXPECT_EQ(detail::checked_per_worker_batch(8, 2, 1), 4U);
}

TEST(worker_pool, runs_every_item_once_on_more_than_one_thread) {
  detail::worker_pool pool(3);
  ASSERT_EQ(pool.threads(), 3U);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::atomic<int>> runs(257);
    std::mutex m;
    std::set<std::thread::id> threads;
    pool.for_each(runs.size(), [&](std::size_t i) {
      runs[i].fetch_add(1);
      const std::lock_guard lock(m);
      threads.insert(std::this_thread::get_id());
      if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // others take the rest meanwhile
    });
    for (std::size_t i = 0; i < runs.size(); ++i) {
      ASSERT_EQ(runs[i].load(), 1) << "item " << i;
    }
    if (round == 0) {
      EXPECT_GT(threads.size(), 1U);
    }
  }
  pool.for_each(0, [](std::size_t) { FAIL() << "no item"; });
}

TEST(worker_pool, a_failure_is_the_smallest_failing_items_and_the_pool_goes_on) {
  detail::worker_pool pool(2);
  for (int round = 0; round < 20; ++round) {
    try {
      pool.for_each(64, [](std::size_t i) {
        if (i == 40 || i == 9 || i == 63) throw std::runtime_error("item " + std::to_string(i));
      });
      FAIL() << "no failure reported";
    } catch (const std::runtime_error& e) {
      ASSERT_STREQ(e.what(), "item 9");
    }
  }
  std::atomic<std::size_t> sum{0};
  pool.for_each(100, [&](std::size_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 4950U);
}

}  // namespace shard_walk_test
