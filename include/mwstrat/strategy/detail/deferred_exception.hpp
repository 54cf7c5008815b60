#pragma once
// An exception held back until a collective has returned. The collectives call an update back in the middle of an
// operation (all_reduce_update, all_reduce_streamed, a host arena's mean): there the callback must not throw, since
// the other ranks of an in-process group may still be reading this rank's buffers, and a ring is between frames. An
// optimizer's or regularizer's exception is therefore kept, the parts after it are left alone, and it is thrown once
// the collective is done, so the step fails clearly instead of hanging the group or freeing memory a peer reads.

#include <exception>
#include <utility>

namespace mwstrat::detail {

class deferred_exception {
 public:
  /// Runs `f` unless an earlier call threw; keeps what it throws.
  template <class F>
  void run(F&& f) noexcept {
    if (held_) return;
    try {
      std::forward<F>(f)();
    } catch (...) {
      held_ = std::current_exception();
    }
  }

  /// Throws what a call threw, if one did.
  void rethrow_if_any() {
    if (held_) std::rethrow_exception(std::exchange(held_, nullptr));
  }

 private:
  std::exception_ptr held_;
};

}  // namespace mwstrat::detail
