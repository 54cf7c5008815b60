#pragma once
// A per-rank FIFO worker thread for asynchronous collectives: operations run one at a time, in issue order,
// on one thread, so the wire sees them in the same order on every rank. Synchronous calls drain it first.

#include <mwstrat/collective/handle.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace mwstrat::detail {

class op_queue {
 public:
  op_queue() = default;
  op_queue(const op_queue&) = delete;
  op_queue& operator=(const op_queue&) = delete;
  ~op_queue() { stop(); }

  // Queues `task` (run on the worker thread) and returns a handle for it.
  op_handle push(std::function<void()> task) {
    auto state = std::make_shared<op_state>();
    {
      const std::lock_guard lock(mutex_);
      if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
      tasks_.push_back({std::move(task), state});
      ++pending_;
    }
    cv_.notify_all();
    return op_handle(state);
  }

  // Blocks until every queued task has run.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [&] { return pending_ == 0; });
  }

  void stop() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

 private:
  struct item {
    std::function<void()> task;
    std::shared_ptr<op_state> state;
  };

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything queued has run
      item next = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      std::exception_ptr failure;
      try {
        next.task();
      } catch (...) {
        failure = std::current_exception();
      }
      next.state->finish(failure);
      lock.lock();
      if (--pending_ == 0) idle_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<item> tasks_;
  std::size_t pending_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace mwstrat::detail
