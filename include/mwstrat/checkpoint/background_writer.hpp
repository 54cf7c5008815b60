#pragma once
/// \file
/// `background_writer`: runs one job at a time (writing a checkpoint, say) on a thread of its own, so the caller
/// carries on at once.
///
/// Contract:
///   - at most one job is in flight: `submit` first waits for the one before;
///   - a job's failure is kept and rethrown by the next `submit` or `wait` (the next job is then not started), or
///     handed back by `finish` to a caller that cannot throw (an owner's destructor, say, which should report it);
///   - the thread never outlives the writer: the destructor waits for the job in flight (and drops a failure
///     nobody collected, so owners call `finish` first).
/// A job ends by returning; it is not interrupted, so a job must not wait for its submitter.

#include <exception>
#include <functional>
#include <thread>
#include <utility>

namespace mwstrat {

/// Runs submitted jobs one at a time on a background thread; see the file comment.
class background_writer {
 public:
  background_writer() = default;
  background_writer(const background_writer&) = delete;
  background_writer& operator=(const background_writer&) = delete;
  ~background_writer() { (void)finish(); }

  /// Waits for the job in flight (rethrowing its failure, in which case `job` is not started), then starts `job`.
  void submit(std::function<void()> job) {
    wait();
    // The thread writes failure_ before it ends; join() in finish() orders that write before the read.
    thread_ = std::thread([this, job = std::move(job)] {
      try {
        job();
      } catch (...) {
        failure_ = std::current_exception();
      }
    });
  }

  /// Waits until no job is in flight, then rethrows the failure of the job that was, if it failed (once).
  void wait() {
    if (std::exception_ptr failure = finish()) std::rethrow_exception(failure);
  }

  /// Waits until no job is in flight; returns the failure of the job that was (null if none) and forgets it.
  [[nodiscard]] std::exception_ptr finish() noexcept {
    if (thread_.joinable()) thread_.join();
    return std::exchange(failure_, nullptr);
  }

  /// Whether a job was submitted and not yet waited for (it may have finished already).
  [[nodiscard]] bool pending() const noexcept { return thread_.joinable(); }

 private:
  std::thread thread_;
  std::exception_ptr failure_;
};

}  // namespace mwstrat
