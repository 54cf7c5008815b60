#include <mwstrat/checkpoint/background_writer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace background_writer_test {

using namespace mwstrat;
using namespace std::chrono_literals;

TEST(background_writer, runs_jobs_one_at_a_time_in_order_off_the_calling_thread) {
  std::vector<int> done;  // written by the jobs only; read once every job is waited for
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::atomic<bool> on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  background_writer writer;
  for (int i = 0; i < 4; ++i) {
    writer.submit([&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      if (std::this_thread::get_id() == caller) on_caller = true;
      std::this_thread::sleep_for(20ms);
      done.push_back(i);
      running.fetch_sub(1);
    });
    EXPECT_TRUE(writer.pending());
  }
  writer.wait();
  EXPECT_FALSE(writer.pending());
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(overlapped) << "a job started before the one before it ended";
  EXPECT_FALSE(on_caller);
}

TEST(background_writer, submit_returns_while_the_job_still_runs) {
  std::atomic<bool> release{false};
  std::atomic<bool> finished{false};
  background_writer writer;
  writer.submit([&] {
    while (!release) std::this_thread::sleep_for(1ms);
    finished = true;
  });
  EXPECT_FALSE(finished) << "the job cannot end before it is released";
  release = true;
  writer.wait();
  EXPECT_TRUE(finished);
}

TEST(background_writer, a_failure_is_rethrown_once_by_wait) {
  background_writer writer;
  writer.submit([] { throw std::runtime_error("disk full"); });
  try {
    writer.wait();
    ADD_FAILURE() << "wait did not rethrow the job's failure";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "disk full");
  }
  EXPECT_NO_THROW(writer.wait()) << "the failure was reported already";
}

TEST(background_writer, a_failure_is_rethrown_by_the_next_submit_which_then_starts_nothing) {
  background_writer writer;
  writer.submit([] { throw std::runtime_error("write failed"); });
  bool second_ran = false;
  EXPECT_THROW(writer.submit([&] { second_ran = true; }), std::runtime_error);
  EXPECT_FALSE(writer.pending());
  EXPECT_FALSE(second_ran);
  writer.submit([&] { second_ran = true; });  // the writer is usable again
  writer.wait();
  EXPECT_TRUE(second_ran);
}

TEST(background_writer, finish_hands_the_failure_back_without_throwing) {
  background_writer writer;
  EXPECT_EQ(writer.finish(), nullptr);
  writer.submit([] { throw std::logic_error("bad state"); });
  const std::exception_ptr failure = writer.finish();
  ASSERT_NE(failure, nullptr);
  EXPECT_THROW(std::rethrow_exception(failure), std::logic_error);
  EXPECT_EQ(writer.finish(), nullptr);
}

TEST(background_writer, the_destructor_waits_for_the_job_in_flight) {
  std::atomic<bool> finished{false};
  {
    background_writer writer;
    writer.submit([&] {
      std::this_thread::sleep_for(50ms);
      finished = true;
    });
  }
  EXPECT_TRUE(finished);
  {
    background_writer failing;  // a failure nobody collected does not escape the destructor
    failing.submit([] { throw std::runtime_error("lost"); });
  }
}

}  // namespace background_writer_test
