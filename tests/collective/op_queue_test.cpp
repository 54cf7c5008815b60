// The per-rank worker thread behind asynchronous collectives: issue order, errors delivered to the right handle,
// drain, and a stop that still runs what was queued.
#include <mwstrat/collective/detail/op_queue.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace op_queue_test {

using mwstrat::op_handle;
using mwstrat::detail::op_queue;

TEST(op_queue, runs_tasks_one_at_a_time_in_issue_order) {
  op_queue q;
  std::vector<int> order;
  std::atomic<int> running{0};
  bool overlapped = false;
  std::vector<op_handle> handles;
  for (int i = 0; i < 200; ++i) {
    handles.push_back(q.push([&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      order.push_back(i);  // only the worker thread touches it
      running.fetch_sub(1);
    }));
  }
  for (auto& h : handles) h.wait();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_FALSE(overlapped);
}

TEST(op_queue, a_failure_reaches_its_own_handle_and_later_tasks_still_run) {
  op_queue q;
  std::atomic<int> after{0};
  op_handle ok1 = q.push([] {});
  op_handle bad = q.push([] { throw std::runtime_error("rank 3 went away"); });
  op_handle ok2 = q.push([&] { ++after; });
  EXPECT_NO_THROW(ok1.wait());
  try {
    bad.wait();
    FAIL() << "the task's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 3 went away");
  }
  EXPECT_NO_THROW(ok2.wait());
  EXPECT_EQ(after.load(), 1);
  EXPECT_NO_THROW(bad.wait()) << "a second wait returns at once";
  EXPECT_TRUE(bad.ready());
}

TEST(op_queue, drain_waits_for_everything_queued) {
  op_queue q;
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) {
    (void)q.push([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++done;
    });
  }
  q.drain();
  EXPECT_EQ(done.load(), 5);
  q.drain();  // nothing queued: returns at once
}

TEST(op_queue, stopping_runs_what_was_already_queued) {
  std::atomic<int> done{0};
  op_handle last;
  {
    op_queue q;
    for (int i = 0; i < 10; ++i) {
      last = q.push([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++done;
      });
    }
  }  // the destructor stops the worker
  EXPECT_EQ(done.load(), 10);
  EXPECT_TRUE(last.ready());
  EXPECT_NO_THROW(last.wait());
}

TEST(op_queue, an_empty_handle_is_ready_and_waits_for_nothing) {
  op_handle none;
  EXPECT_FALSE(none.valid());
  EXPECT_TRUE(none.ready());
  EXPECT_NO_THROW(none.wait());
}

}  // namespace op_queue_test
