#pragma once
// A per-rank FIFO worker thread for asynchronous collectives: operations run one at a time, in issue order,
// on one thread, so the wire sees them in the same order on every rank. Synchronous calls drain it first.
// Tasks and their completions live in a reused pool (op_pool.hpp): the steady state allocates nothing.

#include <mwstrat/collective/detail/op_pool.hpp>
#include <mwstrat/collective/handle.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace mwstrat::detail {

class op_queue {
 public:
  op_queue() : pool_(std::make_shared<op_pool>()) {}
  op_queue(const op_queue&) = delete;
  op_queue& operator=(const op_queue&) = delete;
  ~op_queue() { stop(); }

  // Queues `task` (a `void()` callable of at most inline_task::capacity bytes, run on the worker thread) and
  // returns a handle for it.
  template <class F>
  op_handle push(F&& task) {
    std::uint32_t slot = 0;
    {
      const std::lock_guard lock(pool_->mutex);
      if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
      slot = pool_->take(std::forward<F>(task));
      pool_->enqueue(slot);
    }
    pool_->work_cv.notify_all();
    return op_handle(pool_, slot);
  }

  // Runs `task` on the calling thread, after draining the queue, and returns a completed handle for it.
  template <class F>
  op_handle run_here(F&& task) {
    drain();
    std::uint32_t slot = 0;
    inline_task* t = nullptr;
    {
      const std::lock_guard lock(pool_->mutex);
      slot = pool_->take(std::forward<F>(task));
      t = &pool_->task(slot);
    }
    auto failure = invoke(*t);
    {
      const std::lock_guard lock(pool_->mutex);
      pool_->finish(slot, std::move(failure));
    }
    return op_handle(pool_, slot);
  }

  // Blocks until every queued task has run.
  void drain() {
    std::unique_lock lock(pool_->mutex);
    pool_->idle_cv.wait(lock, [&] { return pool_->pending == 0; });
  }

  void stop() {
    {
      const std::lock_guard lock(pool_->mutex);
      pool_->stopping = true;
    }
    pool_->work_cv.notify_all();
    if (worker_.joinable()) worker_.join();
  }

 private:
  static std::exception_ptr invoke(inline_task& t) {
    std::exception_ptr failure;
    try {
      t();
    } catch (...) {
      failure = std::current_exception();
    }
    t.reset();
    return failure;
  }

  void run() {
    op_pool& pool = *pool_;
    std::unique_lock lock(pool.mutex);
    for (;;) {
      std::uint32_t slot = 0;
      pool.work_cv.wait(lock, [&] { return pool.stopping || pool.pending > 0; });
      if (!pool.dequeue(slot)) return;  // stopping, and everything queued has run
      inline_task& t = pool.task(slot);
      lock.unlock();
      auto failure = invoke(t);
      lock.lock();
      pool.finish(slot, std::move(failure));
      pool.done_cv.notify_all();
      if (--pool.pending == 0) pool.idle_cv.notify_all();
    }
  }

  std::shared_ptr<op_pool> pool_;  // shared with the handles, which may outlive the queue
  std::thread worker_;
};

}  // namespace mwstrat::detail
