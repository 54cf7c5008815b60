#pragma once
// The storage behind asynchronous operations, reused so that the steady state allocates nothing: a pool of slots
// (each an operation's task, stored in place, and its completion) and a FIFO of the slots queued to run. A slot is
// free again once its operation has finished and no handle refers to it; the pool grows (allocates) only when more
// operations are outstanding at once than ever before.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// A `void()` callable stored in place (no heap): the backends' tasks are a pointer and a few values.
class inline_task {
 public:
  static constexpr std::size_t capacity = 64;

  inline_task() = default;
  inline_task(const inline_task&) = delete;
  inline_task& operator=(const inline_task&) = delete;
  ~inline_task() { reset(); }

  template <class F>
  void emplace(F&& f) {
    using D = std::decay_t<F>;
    static_assert(sizeof(D) <= capacity && alignof(D) <= alignof(std::max_align_t),
                  "an asynchronous task must fit in inline_task::capacity bytes");
    reset();
    ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
    invoke_ = [](void* p) { (*static_cast<D*>(p))(); };
    destroy_ = [](void* p) { static_cast<D*>(p)->~D(); };
  }
  void operator()() { invoke_(storage_); }
  void reset() noexcept {
    if (destroy_ != nullptr) destroy_(storage_);
    invoke_ = nullptr;
    destroy_ = nullptr;
  }

 private:
  alignas(std::max_align_t) unsigned char storage_[capacity];
  void (*invoke_)(void*) = nullptr;
  void (*destroy_)(void*) = nullptr;
};

class op_pool {
 public:
  explicit op_pool(std::size_t initial = 16) { grow(initial); }

  std::mutex mutex;
  std::condition_variable done_cv;  // some slot finished
  std::condition_variable work_cv;  // a slot was queued, or stopping
  std::condition_variable idle_cv;  // nothing pending
  std::size_t pending = 0;          // queued or running
  bool stopping = false;

  // Caller holds `mutex`. A free slot (growing the pool when none is), its task set, one handle counted.
  template <class F>
  std::uint32_t take(F&& task) {
    if (free_.empty()) grow(slots_.size());
    const std::uint32_t i = free_.back();
    free_.pop_back();
    slot& s = *slots_[i];
    s.done = false;
    s.failure = nullptr;
    s.handles = 1;
    s.task.emplace(std::forward<F>(task));
    return i;
  }
  // Caller holds `mutex`: queue slot i to run (after everything queued before it).
  void enqueue(std::uint32_t i) {
    fifo_[(head_ + queued_) % fifo_.size()] = i;
    ++queued_;
    ++pending;
  }
  // Caller holds `mutex`: the oldest queued slot, if any.
  bool dequeue(std::uint32_t& i) {
    if (queued_ == 0) return false;
    i = fifo_[head_];
    head_ = (head_ + 1) % fifo_.size();
    --queued_;
    return true;
  }
  // Caller holds `mutex`: slot i's task, to run without the mutex (its address is stable; nobody else touches it
  // until the slot is finished).
  inline_task& task(std::uint32_t i) { return slots_[i]->task; }
  // Caller holds `mutex`: slot i has finished with `failure`.
  void finish(std::uint32_t i, std::exception_ptr failure) {
    slot& s = *slots_[i];
    s.failure = std::move(failure);
    s.done = true;
    if (s.handles == 0) release_slot(i);
  }
  // Caller holds `mutex`.
  bool done(std::uint32_t i) const { return slots_[i]->done; }
  const std::exception_ptr& failure(std::uint32_t i) const { return slots_[i]->failure; }
  void add_handle(std::uint32_t i) { ++slots_[i]->handles; }
  void drop_handle(std::uint32_t i) {
    slot& s = *slots_[i];
    if (--s.handles == 0 && s.done) release_slot(i);
  }

 private:
  struct slot {
    inline_task task;
    std::exception_ptr failure;
    std::uint32_t handles = 0;
    bool done = true;
  };

  void release_slot(std::uint32_t i) {
    slots_[i]->failure = nullptr;
    free_.push_back(i);  // never allocates: capacity is the number of slots
  }

  void grow(std::size_t more) {
    if (more == 0) more = 1;
    const std::size_t old = slots_.size();
    std::vector<std::uint32_t> fifo(old + more);
    for (std::size_t k = 0; k < queued_; ++k) fifo[k] = fifo_[(head_ + k) % fifo_.size()];
    fifo_ = std::move(fifo);
    head_ = 0;
    free_.reserve(old + more);
    for (std::size_t k = 0; k < more; ++k) {
      slots_.push_back(std::make_unique<slot>());
      free_.push_back(static_cast<std::uint32_t>(old + more - 1 - k));
    }
  }

  std::vector<std::unique_ptr<slot>> slots_;  // stable addresses: a running task is not moved by a growth
  std::vector<std::uint32_t> free_;
  std::vector<std::uint32_t> fifo_;  // circular: head_, queued_
  std::size_t head_ = 0, queued_ = 0;
};

}  // namespace mwstrat::detail
