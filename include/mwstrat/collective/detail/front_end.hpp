#pragma once
// The public face every backend shares (local, ring, mpi): synchronous calls drain the asynchronous queue first,
// arguments are checked with the same messages everywhere, and `all_reduce_async` queues the backend's own
// all-reduce on the worker thread. A backend derives from front_end<Backend> (CRTP) and provides
//   static constexpr const char* component;   // "local", "ring", "mpi": error messages' component
//   int rank() const; int size() const;
//   all_reduce_now(std::span<T>, reduce_op, op_options), broadcast_now(std::span<T>, int root, op_options),
//   all_gather_now(std::span<const T>, std::span<T>, op_options), barrier_now(op_options),
//   and optionally all_reduce_update_now(std::span<T>, reduce_op, std::span<T>, Update&, op_options),
//   all_reduce_streamed_now(std::span<T>, reduce_op, OnFinal&, op_options) and
//   bool async_on_worker() const (false: all_reduce_async completes on the calling thread).
// Its destructor must stop `queue_` first, so the worker is joined before the backend's members go.

#include <mwstrat/collective/detail/op_queue.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace mwstrat::detail {

template <class Backend>
class front_end {
 public:
  /// In-place all-reduce: every rank ends with the reduction of all ranks' `data`.
  template <collective_element T>
  void all_reduce(std::span<T> data, reduce_op op, op_options options = {}) {
    queue_.drain();
    check_op("all_reduce", op);
    self().all_reduce_now(data, op, options);
  }

  /// Starts an all-reduce on this rank's worker thread; operations complete in issue order. `data` must stay
  /// alive and untouched until the handle's `wait()` returns.
  template <collective_element T>
  [[nodiscard]] op_handle all_reduce_async(std::span<T> data, reduce_op op, op_options options = {}) {
    check_op("all_reduce_async", op);
    Backend* b = &self();
    auto task = [b, data, op, options] { b->all_reduce_now(data, op, options); };
    if constexpr (requires(const Backend& c) { c.async_on_worker(); }) {
      if (!self().async_on_worker()) return queue_.run_here(task);
    }
    return queue_.push(task);
  }

  /// All-reduce fused with an elementwise update (see the backend's documentation of `all_reduce_update_now`):
  /// `update(first, count)` must update params[first, first + count) from gradients[first, first + count), touch
  /// nothing else, and not throw. Every rank ends with the same `params`.
  // `B` is `Backend`, named through the member template so that the constraint is checked at the call, where the
  // backend is complete (clang 14 otherwise reports an incomplete type when `Update` is a local lambda).
  template <collective_element T, class Update, class B = Backend>
    requires requires(B& c, std::span<T> g, Update& u) { c.all_reduce_update_now(g, reduce_op::sum, g, u, op_options{}); }
  void all_reduce_update(std::span<T> gradients, reduce_op op, std::span<T> params, Update&& update,
                         op_options options = {}) {
    queue_.drain();
    check_op("all_reduce_update", op);
    if (params.size() != gradients.size())
      throw config_error({Backend::component, self().rank()},
                         "all_reduce_update: " + std::to_string(params.size()) + " parameters but " +
                             std::to_string(gradients.size()) + " gradients");
    self().all_reduce_update_now(gradients, op, params, update, options);
  }

  /// All-reduce that reports each part of the result as soon as this rank is done with it (see the backend's
  /// `all_reduce_streamed_now`): `on_final(first, count)` is called once for every element, when data[first,
  /// first + count) is final on this rank and the collective will not read it again; it may change that part, and
  /// must not throw.
  template <collective_element T, class OnFinal, class B = Backend>
    requires requires(B& c, std::span<T> v, OnFinal& f) { c.all_reduce_streamed_now(v, reduce_op::sum, f, op_options{}); }
  void all_reduce_streamed(std::span<T> data, reduce_op op, OnFinal&& on_final, op_options options = {}) {
    queue_.drain();
    check_op("all_reduce_streamed", op);
    self().all_reduce_streamed_now(data, op, on_final, options);
  }

  /// Copies `root`'s `data` into every rank's `data`.
  template <collective_element T>
  void broadcast(std::span<T> data, int root, op_options options = {}) {
    queue_.drain();
    if (root < 0 || root >= self().size())
      throw config_error({Backend::component, self().rank()},
                         "broadcast: root " + std::to_string(root) + " is out of range for " +
                             std::to_string(self().size()) + " ranks");
    self().broadcast_now(data, root, options);
  }

  /// Gathers every rank's `mine` into `all` (size() * mine.size() elements), in rank order.
  template <collective_element T>
  void all_gather(std::span<const T> mine, std::span<T> all, op_options options = {}) {
    queue_.drain();
    const auto n = static_cast<std::size_t>(self().size());
    if (all.size() != n * mine.size())
      throw config_error({Backend::component, self().rank()},
                         "all_gather: output holds " + std::to_string(all.size()) +
                             " elements, expected size() * mine.size() = " + std::to_string(n * mine.size()));
    self().all_gather_now(mine, all, options);
  }

  /// Returns once every rank has entered the barrier.
  void barrier(op_options options = {}) {
    queue_.drain();
    self().barrier_now(options);
  }

 protected:
  // A reduce_op that is none of the four (a cast from a bad integer) would leave the data unreduced.
  void check_op(const char* call, reduce_op op) {
    if (op != reduce_op::sum && op != reduce_op::mean && op != reduce_op::min && op != reduce_op::max)
      throw config_error({Backend::component, self().rank()},
                         std::string(call) + ": reduce_op " + std::to_string(static_cast<int>(op)) +
                             " is not sum, mean, min or max");
  }

  front_end() = default;
  ~front_end() = default;
  front_end(const front_end&) = delete;
  front_end& operator=(const front_end&) = delete;

  op_queue queue_;

 private:
  Backend& self() { return static_cast<Backend&>(*this); }
  const Backend& self() const { return static_cast<const Backend&>(*this); }
};

}  // namespace mwstrat::detail
