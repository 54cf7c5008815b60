#pragma once
/// \file
/// `op_handle`: the result of an asynchronous collective operation.

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

namespace mwstrat {

namespace detail {
struct op_state {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr failure;

  void finish(std::exception_ptr e) {
    {
      const std::lock_guard lock(mutex);
      failure = std::move(e);
      done = true;
    }
    done_cv.notify_all();
  }
};
}  // namespace detail

/// A started collective operation. `wait()` blocks until it has completed and rethrows its error; the wait is
/// bounded because the operation itself has a deadline. Dropping a handle without waiting does not cancel the
/// operation (it still completes in order); its error then surfaces on the collective's next operation.
class op_handle {
 public:
  op_handle() = default;
  explicit op_handle(std::shared_ptr<detail::op_state> state) : state_(std::move(state)) {}

  /// True when this handle refers to an operation.
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }

  /// True once the operation has completed (successfully or not); never blocks.
  [[nodiscard]] bool ready() const {
    if (!state_) return true;
    const std::lock_guard lock(state_->mutex);
    return state_->done;
  }

  /// Blocks until the operation has completed; rethrows its error. A second call returns at once.
  void wait() {
    if (!state_) return;
    std::unique_lock lock(state_->mutex);
    state_->done_cv.wait(lock, [&] { return state_->done; });
    auto failure = state_->failure;
    lock.unlock();
    state_.reset();
    if (failure) std::rethrow_exception(failure);
  }

 private:
  std::shared_ptr<detail::op_state> state_;
};

}  // namespace mwstrat
