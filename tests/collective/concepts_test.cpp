// The collective concept: both backends model it; one near miss per requirement does not.

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <span>

namespace {

using namespace mwstrat;

struct good_handle {
  void wait() {}
};
struct handle_without_wait {};

// A complete backend; each near miss below removes one requirement.
template <bool Rank = true, bool Size = true, bool AllReduce = true, bool Int64 = true, bool Broadcast = true,
          bool AllGather = true, bool Barrier = true, bool Async = true, bool Options = true, class Handle = good_handle>
struct fake {
  int rank() const
    requires Rank
  {
    return 0;
  }
  int size() const
    requires Size
  {
    return 1;
  }
  template <collective_element T>
    requires(AllReduce && (Int64 || !std::is_same_v<T, std::int64_t>))
  void all_reduce(std::span<T>, reduce_op) {}
  template <collective_element T>
    requires(AllReduce && Options && (Int64 || !std::is_same_v<T, std::int64_t>))
  void all_reduce(std::span<T>, reduce_op, op_options) {}
  template <collective_element T>
    requires Broadcast
  void broadcast(std::span<T>, int, op_options = {}) {}
  template <collective_element T>
    requires AllGather
  void all_gather(std::span<const T>, std::span<T>, op_options = {}) {}
  void barrier(op_options = {})
    requires Barrier
  {}
  template <collective_element T>
    requires Async
  Handle all_reduce_async(std::span<T>, reduce_op, op_options = {}) {
    return {};
  }
};

static_assert(collective<local_collective>);
static_assert(collective<ring_collective>);
static_assert(collective_handle<op_handle>);
static_assert(collective<fake<>>);
static_assert(!collective<fake<false>>, "1: rank()");
static_assert(!collective<fake<true, false>>, "1: size()");
static_assert(!collective<fake<true, true, false>>, "2: all_reduce");
static_assert(!collective<fake<true, true, true, false>>, "2: all_reduce for int64");
static_assert(!collective<fake<true, true, true, true, false>>, "3: broadcast");
static_assert(!collective<fake<true, true, true, true, true, false>>, "4: all_gather");
static_assert(!collective<fake<true, true, true, true, true, true, false>>, "5: barrier");
static_assert(!collective<fake<true, true, true, true, true, true, true, false>>, "6: all_reduce_async");
static_assert(!collective<fake<true, true, true, true, true, true, true, true, false>>, "2: op_options overload");
static_assert(!collective<fake<true, true, true, true, true, true, true, true, true, handle_without_wait>>,
              "6: handle without wait()");
static_assert(!collective<int>);

TEST(collective_concept, backends_and_near_misses_are_checked_at_compile_time) { SUCCEED(); }

TEST(collective_concept, reduce_op_names_are_stable) {
  EXPECT_EQ(to_string(reduce_op::sum), "sum");
  EXPECT_EQ(to_string(reduce_op::mean), "mean");
  EXPECT_EQ(to_string(reduce_op::min), "min");
  EXPECT_EQ(to_string(reduce_op::max), "max");
}

}  // namespace
