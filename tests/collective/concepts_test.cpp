// The collective concept: both backends model it; one near miss per requirement does not.

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace concepts_test {

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

// Optional capabilities: one type per missing or wrong member.
struct fused_update_complete {
  template <class F>
  void all_reduce_update(std::span<float>, reduce_op, std::span<float>, F&&) {}
};
struct fused_update_missing {};
struct fused_update_without_the_update {
  void all_reduce_update(std::span<float>, reduce_op, std::span<float>) {}
};
static_assert(fused_update_collective<fused_update_complete>);
static_assert(!fused_update_collective<fused_update_missing>);
static_assert(!fused_update_collective<fused_update_without_the_update>);
static_assert(fused_update_collective<local_collective> && fused_update_collective<ring_collective>);

struct streamed_complete {
  template <class F>
  void all_reduce_streamed(std::span<float>, reduce_op, F&&) {}
};
struct streamed_missing {};
struct streamed_without_the_callback {
  void all_reduce_streamed(std::span<float>, reduce_op) {}
};
static_assert(streamed_reduce_collective<streamed_complete>);
static_assert(!streamed_reduce_collective<streamed_missing>);
static_assert(!streamed_reduce_collective<streamed_without_the_callback>);
static_assert(streamed_reduce_collective<ring_collective>, "the ring reports each final part");
static_assert(!streamed_reduce_collective<local_collective>, "the local collective reduces in one pass");

struct arena_region {
  std::span<float> parameters() { return {}; }
};
struct with_arena {};
std::optional<arena_region> make_host_arena(with_arena&, std::size_t, std::string*) { return std::nullopt; }
struct arena_without_parameters {};
std::optional<int> make_host_arena(arena_without_parameters&, std::size_t, std::string*) { return std::nullopt; }
struct without_arena {};
static_assert(host_arena_collective<with_arena>);
static_assert(!host_arena_collective<arena_without_parameters>, "the region has no parameters()");
static_assert(!host_arena_collective<without_arena>);
static_assert(host_arena_collective<ring_collective>, "the ring offers one (collective/ring/host_arena.hpp)");
static_assert(!host_arena_collective<local_collective>, "threads share memory already");

// collective_handle: movable, and wait() callable on an lvalue.
struct handle_not_movable {
  handle_not_movable() = default;
  handle_not_movable(handle_not_movable&&) = delete;
  void wait() {}
};
struct handle_with_const_only_wait_is_fine {
  void wait() const {}
};
struct handle_with_rvalue_only_wait {
  void wait() && {}
};
static_assert(collective_handle<good_handle>);
static_assert(collective_handle<handle_with_const_only_wait_is_fine>);
static_assert(!collective_handle<handle_without_wait>, "handle: wait()");
static_assert(!collective_handle<handle_not_movable>, "handle: movable");
static_assert(!collective_handle<handle_with_rvalue_only_wait>, "handle: wait() on the handle the caller keeps");

// collective_for<C, T>: requirements 2-6 for one element type, each removed in turn.
template <class T, bool AllReduce = true, bool AllReduceOptions = true, bool Broadcast = true,
          bool BroadcastOptions = true, bool AllGather = true, bool AllGatherOptions = true, bool Async = true,
          bool AsyncOptions = true, class Handle = good_handle>
struct one_type_backend {
  void all_reduce(std::span<T>, reduce_op)
    requires AllReduce
  {}
  void all_reduce(std::span<T>, reduce_op, op_options)
    requires AllReduceOptions
  {}
  void broadcast(std::span<T>, int)
    requires Broadcast
  {}
  void broadcast(std::span<T>, int, op_options)
    requires BroadcastOptions
  {}
  void all_gather(std::span<const T>, std::span<T>)
    requires AllGather
  {}
  void all_gather(std::span<const T>, std::span<T>, op_options)
    requires AllGatherOptions
  {}
  Handle all_reduce_async(std::span<T>, reduce_op)
    requires Async
  {
    return {};
  }
  Handle all_reduce_async(std::span<T>, reduce_op, op_options)
    requires AsyncOptions
  {
    return {};
  }
};
template <bool... On>
using float_backend = one_type_backend<float, On...>;
static_assert(collective_for<float_backend<>, float>);
static_assert(!collective_for<float_backend<>, double>, "only the element type it was written for");
static_assert(!collective_for<float_backend<false>, float>, "2: all_reduce");
static_assert(!collective_for<float_backend<true, false>, float>, "2: all_reduce with op_options");
static_assert(!collective_for<float_backend<true, true, false>, float>, "3: broadcast");
static_assert(!collective_for<float_backend<true, true, true, false>, float>, "3: broadcast with op_options");
static_assert(!collective_for<float_backend<true, true, true, true, false>, float>, "4: all_gather");
static_assert(!collective_for<float_backend<true, true, true, true, true, false>, float>,
              "4: all_gather with op_options");
static_assert(!collective_for<float_backend<true, true, true, true, true, true, false>, float>,
              "6: all_reduce_async");
static_assert(!collective_for<float_backend<true, true, true, true, true, true, true, false>, float>,
              "6: all_reduce_async with op_options");
static_assert(!collective_for<one_type_backend<float, true, true, true, true, true, true, true, true,
                                               handle_without_wait>,
                              float>,
              "6: all_reduce_async returns a handle");
static_assert(collective_for<local_collective, std::int32_t> && collective_for<ring_collective, double>);


TEST(collective_concept, backends_and_near_misses_are_checked_at_compile_time) { SUCCEED(); }

TEST(collective_concept, reduce_op_names_are_stable) {
  EXPECT_EQ(to_string(reduce_op::sum), "sum");
  EXPECT_EQ(to_string(reduce_op::mean), "mean");
  EXPECT_EQ(to_string(reduce_op::min), "min");
  EXPECT_EQ(to_string(reduce_op::max), "max");
}

}  // namespace concepts_test
