#pragma once
/// \file
/// `worker_pool`: a few threads that run `fn(i)` for every i of [0, n) together with the caller, for decoding a
/// batch's examples in parallel. The data component needs no oneTBB (a program that brings its own tensors links
/// core + data), hence this small pool rather than `tbb::parallel_for`. Each i writes its own part of the output,
/// so the result does not depend on which thread ran which i, nor on how many threads there are.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mwstrat::detail {

/// Threads that share the items of one `for_each` call at a time with the calling thread.
class worker_pool {
 public:
  /// A pool in which `threads` threads in all (the caller counts as one) run each call; 0 or 1: the caller alone.
  explicit worker_pool(std::size_t threads) {
    for (std::size_t t = 1; t < threads; ++t) helpers_.emplace_back([this] { serve(); });
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : helpers_) t.join();
  }

  /// Threads that run a call, the caller included.
  [[nodiscard]] std::size_t threads() const noexcept { return helpers_.size() + 1; }

  /// Runs `fn(i)` for each i in [0, n), returning when all have; if any threw, rethrows the exception of the
  /// smallest i that did (the same one whatever the scheduling). One call at a time.
  void for_each(std::size_t n, const std::function<void(std::size_t)>& fn) {
    if (n == 0) return;
    if (helpers_.empty() || n == 1) {
      for (std::size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      const std::lock_guard lock(mutex_);
      job_ = &fn;
      size_ = n;
      next_.store(0, std::memory_order_relaxed);
      failed_at_ = SIZE_MAX;
      failure_ = nullptr;
      busy_ = helpers_.size();
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    job_ = nullptr;
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  void serve() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      work();
      {
        const std::lock_guard lock(mutex_);
        --busy_;
      }
      done_.notify_one();
    }
  }

  // Takes items until none is left.
  void work() {
    const std::function<void(std::size_t)>* fn = nullptr;
    std::size_t n = 0;
    {
      const std::lock_guard lock(mutex_);
      fn = job_;
      n = size_;
    }
    for (std::size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next_.fetch_add(1, std::memory_order_relaxed)) {
      try {
        (*fn)(i);
      } catch (...) {
        const std::lock_guard lock(mutex_);
        if (i < failed_at_) {
          failed_at_ = i;
          failure_ = std::current_exception();
        }
      }
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t size_ = 0;
  std::atomic<std::size_t> next_{0};
  std::size_t busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::size_t failed_at_ = SIZE_MAX;
  std::exception_ptr failure_;
};

}  // namespace mwstrat::detail
