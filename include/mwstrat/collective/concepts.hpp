#pragma once
/// \file
/// The `collective` concept: what the strategy asks of a communication backend.
///
/// A collective is one rank's end of a group of `size()` ranks that call the same operations in the same order.
/// A type `C` models `collective` when, for `c` an lvalue of `C`, `o` an `op_options`, `op` a `reduce_op`,
/// `root` an `int` and each `T` of float, double, std::int32_t, std::int64_t:
///
///   1. `c.rank()` and `c.size()` are callable on a const `C` and return `int` (0 <= rank < size);
///   2. `c.all_reduce(std::span<T>, op)` and `c.all_reduce(std::span<T>, op, o)` reduce in place: afterwards
///      every rank holds the same reduction of all ranks' inputs;
///   3. `c.broadcast(std::span<T>, root)` and `c.broadcast(std::span<T>, root, o)` copy root's buffer to all;
///   4. `c.all_gather(std::span<const T> mine, std::span<T> all)` and its `o` form fill `all`
///      (`size() * mine.size()` elements) with every rank's `mine`, in rank order;
///   5. `c.barrier()` and `c.barrier(o)` return once every rank has entered the barrier;
///   6. `c.all_reduce_async(std::span<T>, op)` and its `o` form start an all-reduce and return a
///      `collective_handle`: operations complete in the order they were issued, and `wait()` rethrows the
///      operation's error. The buffer must stay alive and untouched until `wait()` returns.
///
/// Every operation has a deadline (the `o` form's, or the backend's default); a lost peer raises
/// `peer_lost_error`, a missed deadline `timeout_error`; nothing waits forever.
///
/// Opting in: write the members; the concept is checked structurally.
///
///     struct my_backend {                      // e.g. a wrapper over a vendor library
///       int rank() const; int size() const;
///       template <mwstrat::collective_element T> void all_reduce(std::span<T>, mwstrat::reduce_op,
///                                                                mwstrat::op_options = {});
///       ... broadcast, all_gather, barrier, all_reduce_async ...
///     };
///     static_assert(mwstrat::collective<my_backend>);

#include <mwstrat/collective/types.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace mwstrat {

/// What `all_reduce_async` returns: something to wait on that rethrows the operation's failure.
template <class H>
concept collective_handle = std::movable<H> && requires(H& h) { h.wait(); };

/// Requirements 2–6 of `collective` for one element type `T`.
template <class C, class T>
concept collective_for = requires(C& c, std::span<T> data, std::span<const T> mine, reduce_op op, op_options o,
                                  int root) {
  c.all_reduce(data, op);
  c.all_reduce(data, op, o);
  c.broadcast(data, root);
  c.broadcast(data, root, o);
  c.all_gather(mine, data);
  c.all_gather(mine, data, o);
  { c.all_reduce_async(data, op) } -> collective_handle;
  { c.all_reduce_async(data, op, o) } -> collective_handle;
};

/// A communication backend for synchronous data parallelism; see the requirements at the top of this header.
template <class C>
concept collective = requires(const C& cc, C& c, op_options o) {
  { cc.rank() } -> std::same_as<int>;
  { cc.size() } -> std::same_as<int>;
  c.barrier();
  c.barrier(o);
} && collective_for<C, float> && collective_for<C, double> && collective_for<C, std::int32_t> &&
                     collective_for<C, std::int64_t>;

// ------------------------------------------------------------------------------------------ optional capabilities
// What a collective may offer beyond the concept; the gradient synchroniser (strategy/gradient_sync.hpp) uses each
// where present and takes another path, with the same bits, where not.

namespace detail {
// An elementwise update of parameters[first, first + count) from their mean gradients.
struct update_probe {
  void operator()(std::size_t, std::size_t) const {}
};
}  // namespace detail

/// Capability: `c.all_reduce_update(values, reduce_op::mean, params, update)` — an all-reduce fused with a sharded
/// elementwise update: each rank calls `update(first, count)` on the part it finished reducing, and the updated
/// `params` are gathered (the ring and the local collective offer it).
template <class C>
concept fused_update_collective = requires(C& c, std::span<float> v, detail::update_probe update) {
  c.all_reduce_update(v, reduce_op::mean, v, update);
};

/// Capability: `c.all_reduce_streamed(values, reduce_op::mean, on_final)` — an all-reduce that calls
/// `on_final(first, count)` as each part of the result is final on this rank and no longer read by the collective,
/// so the caller can update from it while the rest still travels (the ring offers it).
template <class C>
concept streamed_reduce_collective = requires(C& c, std::span<float> v, detail::update_probe on_final) {
  c.all_reduce_streamed(v, reduce_op::mean, on_final);
};

/// Capability: `make_host_arena(c, count, why)`, found by argument-dependent lookup, returns an optional region that
/// every rank maps — one parameter copy and each rank's gradients (`host_arena`, collective/ring/host_arena.hpp,
/// for a ring whose ranks share one host); nullopt on every rank where it cannot be made.
template <class C>
concept host_arena_collective = requires(C& c, std::size_t n, std::string* why) {
  make_host_arena(c, n, why)->parameters();
};

}  // namespace mwstrat
