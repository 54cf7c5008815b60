// The ring's and the front-end's small parts, each alone: the operation pool behind every asynchronous collective
// (slots reused, never while a handle names them, in issue order across a growth), its in-place task, and the
// wire field lists that give each message its size, encoder and decoder.
#include <mwstrat/collective/detail/front_end.hpp>
#include <mwstrat/collective/detail/op_pool.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/collective/ring/detail/wire_fields.hpp>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <span>
#include <thread>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace seams_test {

using namespace mwstrat::detail;

// ---------------------------------------------------------------------------------------------------- op_pool

// Takes a slot for a no-op task and queues it, as op_queue::push does.
std::uint32_t queue_noop(op_pool& pool) {
  const std::uint32_t i = pool.take([] {});
  pool.enqueue(i);
  return i;
}

// Runs the oldest queued slot, finishes it and drops its one handle, as the worker and a waiting handle do.
std::uint32_t run_oldest(op_pool& pool) {
  std::uint32_t i = 0;
  EXPECT_TRUE(pool.dequeue(i));
  pool.task(i)();
  pool.finish(i, nullptr);
  pool.drop_handle(i);
  return i;
}

TEST(op_pool, a_finished_slot_is_taken_again_instead_of_a_new_one) {
  op_pool pool(2);
  const std::lock_guard lock(pool.mutex);
  const std::uint32_t first = queue_noop(pool);
  EXPECT_EQ(run_oldest(pool), first);
  for (int k = 0; k < 100; ++k) {
    EXPECT_EQ(queue_noop(pool), first) << "round " << k << ": the released slot comes back first";
    run_oldest(pool);
  }
}

TEST(op_pool, a_slot_named_by_a_handle_is_not_reused_until_the_handle_goes) {
  op_pool pool(2);
  const std::lock_guard lock(pool.mutex);
  const std::uint32_t held = pool.take([] {});
  pool.enqueue(held);
  pool.add_handle(held);  // a second handle: the caller's, beside the queue's
  std::uint32_t i = 0;
  ASSERT_TRUE(pool.dequeue(i));
  pool.task(i)();
  pool.finish(i, std::make_exception_ptr(std::runtime_error("lost peer")));
  pool.drop_handle(i);
  EXPECT_TRUE(pool.done(held));
  ASSERT_TRUE(pool.failure(held)) << "the failure waits for the handle that has not looked yet";
  const std::uint32_t other = queue_noop(pool);
  EXPECT_NE(other, held);
  run_oldest(pool);
  pool.drop_handle(held);  // released last, so taken first (the free list is a stack)
  EXPECT_EQ(queue_noop(pool), held) << "free once its last handle has gone";
}

TEST(op_pool, operations_leave_in_issue_order_also_across_a_growth) {
  op_pool pool(2);
  const std::lock_guard lock(pool.mutex);
  std::vector<std::uint32_t> issued;
  for (int k = 0; k < 9; ++k) issued.push_back(queue_noop(pool));  // 2 slots: grows while 2, 4, 8 are queued
  EXPECT_EQ(pool.pending, 9U);
  std::vector<std::uint32_t> ran;
  for (int k = 0; k < 9; ++k) ran.push_back(run_oldest(pool));
  EXPECT_EQ(ran, issued);
  std::uint32_t none = 0;
  EXPECT_FALSE(pool.dequeue(none));
}

TEST(inline_task, runs_its_callable_and_destroys_it_on_reset_and_on_replacement) {
  auto alive = std::make_shared<int>(0);
  int calls = 0;
  inline_task task;
  task.emplace([alive, &calls] { ++calls; });
  EXPECT_EQ(alive.use_count(), 2);
  task();
  task();
  EXPECT_EQ(calls, 2);
  task.emplace([&calls] { calls += 10; });
  EXPECT_EQ(alive.use_count(), 1) << "the replaced callable was destroyed";
  task();
  EXPECT_EQ(calls, 12);
  task.emplace([alive] {});
  task.reset();
  EXPECT_EQ(alive.use_count(), 1);
}

// ------------------------------------------------------------------------------------------------- front_end

// A backend that only records what reaches it: the front-end's own work (argument checks, draining the
// asynchronous queue first) is all that is under test.
class recording_backend : public front_end<recording_backend> {
 public:
  static constexpr const char* component = "fake";
  ~recording_backend() { queue_.stop(); }
  int rank() const { return 0; }
  int size() const { return 3; }
  bool fail_next = false;

  std::vector<std::string> calls() {
    const std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  friend class front_end<recording_backend>;
  template <class T>
  void all_reduce_now(std::span<T>, mwstrat::reduce_op, mwstrat::op_options) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // still running when the caller moves on
    record("all_reduce");
    if (fail_next) throw mwstrat::peer_lost_error({"fake", 0}, 1, "127.0.0.1:1", "went away");
  }
  template <class T>
  void broadcast_now(std::span<T>, int, mwstrat::op_options) { record("broadcast"); }
  template <class T>
  void all_gather_now(std::span<const T>, std::span<T>, mwstrat::op_options) { record("all_gather"); }
  void barrier_now(mwstrat::op_options) { record("barrier"); }
  void record(const char* what) {
    const std::lock_guard lock(mutex_);
    calls_.emplace_back(what);
  }
  std::mutex mutex_;
  std::vector<std::string> calls_;
};

TEST(front_end, a_synchronous_call_waits_for_the_asynchronous_ones_issued_before_it) {
  recording_backend b;
  std::vector<float> v(4);
  auto h = b.all_reduce_async(std::span<float>(v), mwstrat::reduce_op::sum);
  b.barrier();
  EXPECT_EQ(b.calls(), (std::vector<std::string>{"all_reduce", "barrier"}));
  h.wait();
}

TEST(front_end, an_asynchronous_failure_is_rethrown_by_wait) {
  recording_backend b;
  b.fail_next = true;
  std::vector<float> v(4);
  auto h = b.all_reduce_async(std::span<float>(v), mwstrat::reduce_op::sum);
  EXPECT_THROW(h.wait(), mwstrat::peer_lost_error);
}

TEST(front_end, bad_arguments_are_refused_with_the_backends_name_before_reaching_it) {
  recording_backend b;
  std::vector<float> mine(2), all(5);
  try {
    b.broadcast(std::span<float>(mine), 3);
    ADD_FAILURE() << "a root out of range was accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("[mwstrat.fake] rank 0: broadcast: root 3 is out of range for 3 ranks"),
              std::string::npos)
        << e.what();
  }
  try {
    b.all_gather(std::span<const float>(mine), std::span<float>(all));
    ADD_FAILURE() << "a wrong output size was accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather: output holds 5 elements, expected size() * mine.size() = 6"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(b.calls().empty());
}

// ------------------------------------------------------------------------------------------------ wire_fields

enum class colour : std::uint8_t { red = 1, green, blue };

struct sample {
  std::uint32_t count = 0;
  colour hue = colour::red;
  std::int64_t offset = 0;
  std::array<std::uint8_t, 4> tag{};
  std::string name;
};

}  // namespace seams_test

template <>
struct mwstrat::detail::enum_range<seams_test::colour> {
  static constexpr seams_test::colour first = seams_test::colour::red, last = seams_test::colour::blue;
  static constexpr const char* unknown = "unknown colour";
};
template <>
struct mwstrat::detail::wire_fields<seams_test::sample> {
  using sample = seams_test::sample;
  using type = field_list<field<&sample::count>, field<&sample::hue>, pad<3>, signed_field<&sample::offset>,
                          field<&sample::tag>, fixed_string<&sample::name, 8>>;
};

namespace seams_test {

static_assert(fields_size<sample> == 4 + 1 + 3 + 8 + 4 + 8, "the size comes from the list");

std::array<std::uint8_t, fields_size<sample>> encoded(const sample& s) {
  std::array<std::uint8_t, fields_size<sample>> bytes{};
  byte_writer w(bytes);
  encode_fields(s, w);
  return bytes;
}

TEST(wire_fields, a_message_round_trips_little_endian_with_zero_padding) {
  sample s;
  s.count = 0x01020304;
  s.hue = colour::blue;
  s.offset = -2;
  s.tag = {9, 8, 7, 6};
  s.name = "ring";
  const auto bytes = encoded(s);
  EXPECT_EQ(bytes[0], 0x04);  // little-endian
  EXPECT_EQ(bytes[3], 0x01);
  EXPECT_EQ(bytes[4], 3);  // blue
  EXPECT_EQ(bytes[5] | bytes[6] | bytes[7], 0) << "padding is written as zeros";

  sample back;
  byte_reader r(bytes);
  const char* why = nullptr;
  ASSERT_TRUE(decode_fields(back, r, why)) << why;
  EXPECT_EQ(back.count, s.count);
  EXPECT_EQ(back.hue, s.hue);
  EXPECT_EQ(back.offset, s.offset);
  EXPECT_EQ(back.tag, s.tag);
  EXPECT_EQ(back.name, s.name);
}

TEST(wire_fields, an_enum_outside_its_range_and_dirty_padding_are_refused) {
  auto bytes = encoded(sample{});
  for (const std::uint8_t bad : {std::uint8_t{0}, std::uint8_t{4}, std::uint8_t{255}}) {
    bytes[4] = bad;
    sample back;
    byte_reader r(bytes);
    const char* why = nullptr;
    EXPECT_FALSE(decode_fields(back, r, why)) << int{bad};
    EXPECT_STREQ(why, "unknown colour");
  }
  bytes = encoded(sample{});
  bytes[6] = 1;
  sample back;
  byte_reader r(bytes);
  const char* why = nullptr;
  EXPECT_FALSE(decode_fields(back, r, why));
  EXPECT_NE(why, nullptr);
}

}  // namespace seams_test
