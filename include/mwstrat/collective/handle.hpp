#pragma once
/// \file
/// `op_handle`: the result of an asynchronous collective operation.

#include <mwstrat/collective/detail/op_pool.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

namespace mwstrat {

/// A started collective operation. `wait()` blocks until it has completed and rethrows its error; the wait is
/// bounded because the operation itself has a deadline. Dropping a handle without waiting does not cancel the
/// operation (it still completes in order); its error then surfaces on the collective's next operation.
///
/// A handle names a reused slot of its collective's pool (no allocation per operation); copies name the same
/// operation, and the slot is reused only once the operation has finished and no handle names it.
class op_handle {
 public:
  op_handle() = default;
  /// Slot `slot` of `pool`, with one reference already counted for this handle (see `detail::op_pool::take`).
  op_handle(std::shared_ptr<detail::op_pool> pool, std::uint32_t slot) noexcept
      : pool_(std::move(pool)), slot_(slot) {}
  op_handle(const op_handle& o) : pool_(o.pool_), slot_(o.slot_) {
    if (pool_) {
      const std::lock_guard lock(pool_->mutex);
      pool_->add_handle(slot_);
    }
  }
  op_handle(op_handle&& o) noexcept : pool_(std::move(o.pool_)), slot_(o.slot_) {}
  op_handle& operator=(op_handle o) noexcept {
    std::swap(pool_, o.pool_);
    std::swap(slot_, o.slot_);
    return *this;
  }
  ~op_handle() { release(); }

  /// True when this handle refers to an operation.
  [[nodiscard]] bool valid() const noexcept { return pool_ != nullptr; }

  /// True once the operation has completed (successfully or not); never blocks.
  [[nodiscard]] bool ready() const {
    if (!pool_) return true;
    const std::lock_guard lock(pool_->mutex);
    return pool_->done(slot_);
  }

  /// Blocks until the operation has completed; rethrows its error. A second call returns at once.
  void wait() {
    if (!pool_) return;
    std::exception_ptr failure;
    {
      std::unique_lock lock(pool_->mutex);
      pool_->done_cv.wait(lock, [&] { return pool_->done(slot_); });
      failure = pool_->failure(slot_);
      pool_->drop_handle(slot_);
    }
    pool_.reset();
    if (failure) std::rethrow_exception(failure);
  }

 private:
  void release() noexcept {
    if (!pool_) return;
    {
      const std::lock_guard lock(pool_->mutex);
      pool_->drop_handle(slot_);
    }
    pool_.reset();
  }

  std::shared_ptr<detail::op_pool> pool_;
  std::uint32_t slot_ = 0;
};

}  // namespace mwstrat
