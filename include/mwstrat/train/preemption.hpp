#pragma once
/// \file
/// Preemption (spot VMs, Kubernetes evictions, Slurm's SIGTERM before its SIGKILL): a SIGTERM or SIGINT to any
/// worker ends the whole job cleanly at the next step boundary, and says "resume me".
///
/// While `fit` runs it catches SIGTERM and SIGINT (`fit_options::catch_preemption_signals`); the handler only sets
/// a flag. At the end of every step the workers agree on their stop votes (train/fit.hpp), so a signal to any one
/// of them stops every one of them after the same step. Then the chief writes a backup when a BackupAndRestore is
/// among the callbacks (waiting until it is durable: no half-written backup), `on_train_end` runs, and `fit`
/// throws `preempted` on every worker. A program's `main` turns it into `preempted_exit_code` (75, sysexits'
/// EX_TEMPFAIL: "a temporary failure, try again"); `mwstrat-launch` restarts a job whose workers exit with it
/// without counting the restart against `--max-restarts`, and the restarted job resumes from the backup.
///
/// A signal that arrives outside `fit` (start-up, final evaluation) keeps its previous disposition (by default,
/// the process ends with 128 + signal). `request_preemption()` raises the flag from the program itself (a
/// scheduler's notice read from a metadata endpoint, say).

#include <atomic>
#include <csignal>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include <signal.h>

namespace mwstrat {

/// The exit status of a worker that stopped for preemption and wants to be restarted (sysexits' EX_TEMPFAIL).
/// Distinct from 143 (128 + SIGTERM, a worker killed before it could stop cleanly) and from 1 (an error).
inline constexpr int preempted_exit_code = 75;

/// Thrown by `fit` on every worker after a preemption stopped the job at a step boundary (and the chief's backup,
/// if any, is durable). Not an `mwstrat::error`: nothing went wrong, the job is to be resumed.
class preempted : public std::exception {
 public:
  preempted(int signal_number, int epoch, std::uint64_t global_step)
      : signal_(signal_number), epoch_(epoch), global_step_(global_step),
        what_("[mwstrat.train] preempted" +
              (signal_number > 0 ? " by signal " + std::to_string(signal_number) : std::string()) +
              ": stopped after global step " + std::to_string(global_step) + " (epoch " + std::to_string(epoch + 1) +
              "); exit with mwstrat::preempted_exit_code (" + std::to_string(preempted_exit_code) +
              ") and restart the job to resume") {}
  /// The signal this worker received (SIGTERM, SIGINT), or 0 when another worker was the one signalled.
  [[nodiscard]] int signal_number() const noexcept { return signal_; }
  /// The epoch the job stopped in (0-based) and the global steps done.
  [[nodiscard]] int epoch() const noexcept { return epoch_; }
  [[nodiscard]] std::uint64_t global_step() const noexcept { return global_step_; }
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }

 private:
  int signal_;
  int epoch_;
  std::uint64_t global_step_;
  std::string what_;
};

namespace detail {
// The flag the signal handler sets: the signal's number, or -1 for request_preemption(). Lock-free, so the
// handler may touch it.
inline std::atomic<int> preemption_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" inline void on_preemption_signal(int sig) { preemption_signal.store(sig, std::memory_order_relaxed); }
}  // namespace detail

/// Asks the running `fit` to stop for preemption at its next step boundary, as a SIGTERM would.
inline void request_preemption() noexcept { detail::preemption_signal.store(-1, std::memory_order_relaxed); }

/// Whether a preemption was requested (by a signal or `request_preemption`) and not yet acted on.
[[nodiscard]] inline bool preemption_requested() noexcept {
  return detail::preemption_signal.load(std::memory_order_relaxed) != 0;
}

/// The signal that asked for preemption (0 when none, -1 for `request_preemption`).
[[nodiscard]] inline int preemption_signal_number() noexcept {
  return detail::preemption_signal.load(std::memory_order_relaxed);
}

/// Clears the request (`fit` does once it has acted on it, so that a later `fit` in the same process runs).
inline void clear_preemption_request() noexcept { detail::preemption_signal.store(0, std::memory_order_relaxed); }

/// While alive, SIGTERM and SIGINT set the preemption flag instead of ending the process; the previous handlers
/// come back when the last guard alive is destroyed (replicas run as threads of one process each hold one).
/// `fit` holds one for its duration.
class preemption_signal_guard {
 public:
  explicit preemption_signal_guard(bool enabled = true) : enabled_(enabled) {
    if (!enabled_) return;
    const std::lock_guard lock(state().mutex);
    if (state().holders++ > 0) return;
    struct sigaction sa {};
    sa.sa_handler = detail::on_preemption_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a blocking read or write in the collective continues; its deadline still holds
    ::sigaction(SIGTERM, &sa, &state().old_term);
    ::sigaction(SIGINT, &sa, &state().old_int);
  }
  preemption_signal_guard(const preemption_signal_guard&) = delete;
  preemption_signal_guard& operator=(const preemption_signal_guard&) = delete;
  ~preemption_signal_guard() {
    if (!enabled_) return;
    const std::lock_guard lock(state().mutex);
    if (--state().holders > 0) return;
    ::sigaction(SIGTERM, &state().old_term, nullptr);
    ::sigaction(SIGINT, &state().old_int, nullptr);
  }

 private:
  struct shared {
    std::mutex mutex;
    int holders = 0;
    struct sigaction old_term {};
    struct sigaction old_int {};
  };
  static shared& state() {
    static shared s;
    return s;
  }
  bool enabled_;
};

}  // namespace mwstrat
