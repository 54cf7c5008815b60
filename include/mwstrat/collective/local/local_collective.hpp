#pragma once
/// \file
/// `local_collective`: N ranks as threads of one process, sharing one `local_group` (MirroredStrategy's case,
/// and the test harness); `spawn_ranks(n, fn)` runs `fn` on N such ranks and rethrows the first failure.
///
/// Ranks meet at a rendezvous and reduce each other's buffers directly (rank r reduces slice r of every buffer,
/// in rank order, and writes the result to every buffer): no copies, deterministic bits. Failure semantics are
/// the ring's: when a rank fails (`spawn_ranks` reports it, or its `local_collective` is destroyed by an
/// exception) every other rank's current and later operations throw `peer_lost_error` naming it; a rank that
/// does not arrive by the deadline makes the others throw `timeout_error` naming it; ranks that call different
/// operations (kind, element type, count, op or root) all throw the same `protocol_error` naming both calls. A
/// failed group stays failed: every later operation on every rank throws its first error.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/detail/front_end.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat {

/// Options of the in-process backend.
struct local_options {
  /// Default deadline of an operation (see `op_options`).
  std::chrono::milliseconds op_timeout{std::chrono::seconds(60)};
};

class local_collective;

/// The shared meeting point of the N ranks of a `local_collective` group. Outlives the ranks' collectives.
class local_group {
 public:
  /// A group of `size` ranks (>= 1).
  explicit local_group(int size, local_options options = {})
      : size_(size), options_(check_options(options)), slots_(check_size(size)), entered_(slots_.size(), 0),
        left_(slots_.size(), false) {}

  local_group(const local_group&) = delete;
  local_group& operator=(const local_group&) = delete;

  /// The number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The options every rank of the group uses.
  [[nodiscard]] const local_options& options() const noexcept { return options_; }

  /// Reports that `rank` has failed (`reason` says why): every rank waiting in, or later entering, an
  /// operation throws `peer_lost_error` naming it. Only the first report counts.
  void abort(int rank, std::string_view reason) {
    {
      const std::lock_guard lock(mutex_);
      if (!failed_) failed_ = failure{error_kind::peer_lost, rank, std::string(reason)};
    }
    cv_.notify_all();
  }

  /// The rank whose failure (or missed deadline) broke the group, if any.
  [[nodiscard]] std::optional<int> failed_rank() {
    const std::lock_guard lock(mutex_);
    return failed_ ? std::optional<int>(failed_->rank) : std::nullopt;
  }

  /// Reports that `rank` has finished and will call no more operations; ranks waiting for it fail fast.
  void leave(int rank) {
    {
      const std::lock_guard lock(mutex_);
      left_[static_cast<std::size_t>(rank)] = true;
    }
    cv_.notify_all();
  }

 private:
  friend class local_collective;

  // A timeout of zero or less would fail every operation at once as a "timeout": refused by name instead (as the
  // ring refuses its own); milliseconds::max() is the way to ask for no deadline.
  static local_options check_options(const local_options& o) {
    if (o.op_timeout.count() <= 0)
      throw config_error({"local"}, "local_options.op_timeout is " + std::to_string(o.op_timeout.count()) +
                                        " ms: expected a positive time");
    return o;
  }
  static std::size_t check_size(int size) {
    if (size < 1) throw config_error({"local"}, "a local group needs at least one rank, got " + std::to_string(size));
    return static_cast<std::size_t>(size);
  }

  struct slot {
    const void* in = nullptr;
    void* out = nullptr;
    std::size_t count = 0;
    detail::wire_dtype type{};
    detail::op_kind kind{};
    reduce_op op{};
    int root = 0;
    std::uint64_t seq = 0;
  };
  struct failure {
    error_kind kind;
    int rank;
    std::string reason;
  };

  int size_;
  local_options options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<slot> slots_;
  std::vector<std::uint64_t> entered_;  // per rank: the last phase it arrived at, plus one
  std::vector<bool> left_;
  std::uint64_t phase_ = 0;
  int arrived_ = 0;
  int computing_ = 0;  // ranks between the two rendezvous of an operation that reads others' buffers
  // The first failure; set under `mutex_` and never cleared, so every later operation throws it.
  std::optional<failure> failed_;
};

/// One rank's end of a `local_group`. Use from one thread at a time (plus its own asynchronous worker).
class local_collective : public detail::front_end<local_collective> {
 public:
  /// The component named in this backend's errors.
  static constexpr const char* component = "local";

  /// Rank `rank` of `group`; the group must outlive this object.
  local_collective(local_group& group, int rank)
      : group_(&group), rank_(rank), uncaught_(std::uncaught_exceptions()) {
    if (rank < 0 || rank >= group.size())
      throw config_error({"local"}, "rank " + std::to_string(rank) + " is out of range for a group of " +
                                        std::to_string(group.size()));
  }

  local_collective(const local_collective&) = delete;
  local_collective& operator=(const local_collective&) = delete;

  /// Waits for this rank's queued asynchronous operations. When destroyed by an exception, first reports this
  /// rank as failed, so those operations and the other ranks fail fast instead of waiting for their deadline.
  ~local_collective() {
    if (std::uncaught_exceptions() > uncaught_) group_->abort(rank_, "its thread is unwinding an exception");
    queue_.stop();
  }

  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks in the group.
  [[nodiscard]] int size() const noexcept { return group_->size(); }

  // all_reduce, all_reduce_async, broadcast, all_gather, barrier: see detail::front_end.
  //
  // all_reduce_update(gradients, op, params, update): all-reduce fused with an elementwise update, as
  // `ring_collective`'s: rank r reduces slice r of every rank's gradients into its own, calls `update(first,
  // count)` for each block of it (which must update params[first, first + count) from gradients[first, first +
  // count), touch nothing else, and not throw) and copies that part of its updated parameters to every other rank.
  // Every rank ends with the same `params`.

 private:
  friend class detail::front_end<local_collective>;

  template <class T, class Update>
  void all_reduce_update_now(std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                             op_options options) {
    const auto seq = next_seq_++;
    const auto deadline = deadline_of(options);
    post(gradients.data(), params.data(), gradients.size(), detail::dtype_of<T>(), detail::op_kind::all_reduce_update,
         op, 0, seq);
    rendezvous(deadline, seq, detail::op_kind::all_reduce_update, stage::before_reading);
    const std::size_t count = gradients.size();
    const auto n = static_cast<std::size_t>(size());
    const std::size_t begin = count * static_cast<std::size_t>(rank_) / n;
    const std::size_t end = count * static_cast<std::size_t>(rank_ + 1) / n;
    constexpr std::size_t block = 2048;
    T acc[block];
    for (std::size_t b = begin; b < end; b += block) {
      const std::size_t len = std::min(block, end - b);
      combine_slice(acc, b, len, op);
      std::copy(acc, acc + len, gradients.data() + b);  // only this rank writes this slice of its own gradients
      update(b, len);
      for (std::size_t k = 0; k < n; ++k)
        if (k != static_cast<std::size_t>(rank_))
          std::copy(params.data() + b, params.data() + b + len, static_cast<T*>(group_->slots_[k].out) + b);
    }
    finish_compute();
    rendezvous(deadline, seq, detail::op_kind::all_reduce_update, stage::after_reading);
  }

  template <class T>
  void broadcast_now(std::span<T> data, int root, op_options options) {
    const auto seq = next_seq_++;
    const auto deadline = deadline_of(options);
    post(data.data(), data.data(), data.size(), detail::dtype_of<T>(), detail::op_kind::broadcast, {}, root, seq);
    rendezvous(deadline, seq, detail::op_kind::broadcast, stage::before_reading);
    const auto& s = group_->slots_[static_cast<std::size_t>(root)];
    if (rank_ != root && !data.empty()) std::memcpy(data.data(), s.in, data.size_bytes());
    finish_compute();
    rendezvous(deadline, seq, detail::op_kind::broadcast, stage::after_reading);
  }

  template <class T>
  void all_gather_now(std::span<const T> mine, std::span<T> all, op_options options) {
    const auto n = static_cast<std::size_t>(size());
    const auto seq = next_seq_++;
    const auto deadline = deadline_of(options);
    post(mine.data(), all.data(), mine.size(), detail::dtype_of<T>(), detail::op_kind::all_gather, {}, 0, seq);
    rendezvous(deadline, seq, detail::op_kind::all_gather, stage::before_reading);
    for (std::size_t k = 0; k < n; ++k) {
      const auto& s = group_->slots_[k];
      if (!mine.empty() && all.data() + k * mine.size() != s.in)
        std::memmove(all.data() + k * mine.size(), s.in, mine.size_bytes());
    }
    finish_compute();
    rendezvous(deadline, seq, detail::op_kind::all_gather, stage::after_reading);
  }

  void barrier_now(op_options options) {
    const auto seq = next_seq_++;
    post(nullptr, nullptr, 0, detail::wire_dtype::i32, detail::op_kind::barrier, {}, 0, seq);
    rendezvous(deadline_of(options), seq, detail::op_kind::barrier, stage::barrier);
  }

  using clock = std::chrono::steady_clock;

  // Saturates: a timeout too long to add to now (milliseconds::max() for "no deadline") must not wrap into the past.
  clock::time_point deadline_of(op_options options) const {
    return detail::deadline_after(options.timeout.count() > 0 ? options.timeout : group_->options().op_timeout);
  }

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    const auto seq = next_seq_++;
    const auto deadline = deadline_of(options);
    const int n = size();
    post(data.data(), data.data(), data.size(), detail::dtype_of<T>(), detail::op_kind::all_reduce, op, 0, seq);
    rendezvous(deadline, seq, detail::op_kind::all_reduce, stage::before_reading);
    // Rank r owns slice r of every buffer: combine in rank order, then write the result everywhere.
    const std::size_t count = data.size();
    const std::size_t begin = count * static_cast<std::size_t>(rank_) / static_cast<std::size_t>(n);
    const std::size_t end = count * static_cast<std::size_t>(rank_ + 1) / static_cast<std::size_t>(n);
    constexpr std::size_t block = 2048;
    T acc[block];
    for (std::size_t b = begin; b < end; b += block) {
      const std::size_t len = std::min(block, end - b);
      combine_slice(acc, b, len, op);
      for (int k = 0; k < n; ++k)
        std::copy(acc, acc + len, static_cast<T*>(group_->slots_[static_cast<std::size_t>(k)].out) + b);
    }
    finish_compute();
    rendezvous(deadline, seq, detail::op_kind::all_reduce, stage::after_reading);
  }

  // acc[0, len) = the reduction, in rank order, of elements [b, b + len) of every rank's posted input (then / n
  // for mean).
  template <class T>
  void combine_slice(T* acc, std::size_t b, std::size_t len, reduce_op op) const {
    const int n = size();
    const auto* first = static_cast<const T*>(group_->slots_[0].in) + b;
    std::copy(first, first + len, acc);
    for (int k = 1; k < n; ++k)
      detail::reduce_into(acc, static_cast<const T*>(group_->slots_[static_cast<std::size_t>(k)].in) + b, len, op);
    detail::finish_reduce(acc, len, op, n);
  }

  void post(const void* in, void* out, std::size_t count, detail::wire_dtype type, detail::op_kind kind, reduce_op op,
            int root, std::uint64_t seq) {
    const std::lock_guard lock(group_->mutex_);
    group_->slots_[static_cast<std::size_t>(rank_)] = {in, out, count, type, kind, op, root, seq};
  }

  void finish_compute() {
    {
      const std::lock_guard lock(group_->mutex_);
      --group_->computing_;
    }
    group_->cv_.notify_all();
  }

  [[noreturn]] void throw_failure(const local_group::failure& f, std::uint64_t seq, detail::op_kind kind) const {
    // A disagreement is about the operation that met it, not this one: every rank throws the same text.
    if (f.kind == error_kind::protocol) throw protocol_error({"local", rank_}, f.reason);
    const std::string where = std::string(detail::op_name(kind)) + " #" + std::to_string(seq);
    const std::string peer = "local/" + std::to_string(f.rank);
    if (f.kind == error_kind::timeout)
      throw timeout_error({"local", rank_},
                          "rank " + std::to_string(f.rank) + " did not arrive in time for " + where + " (" +
                              f.reason + ")",
                          f.rank);
    throw peer_lost_error({"local", rank_}, f.rank, peer,
                          "rank " + std::to_string(f.rank) + " (" + peer + ") failed before " + where + ": " +
                              f.reason);
  }

  // What a rendezvous ends. `before_reading`: the ranks have posted an operation and read each other's buffers
  // next, so the following rendezvous may not be left by a deadline while another rank still reads ours.
  // `barrier`: posted, nothing to read. `after_reading`: the reading is over.
  enum class stage { before_reading, barrier, after_reading };

  // Waits until every rank has reached this rendezvous. The last to arrive judges for all (under the lock, so every
  // rank sees one verdict): at a posting stage it checks that every rank posted the same operation, and only a
  // phase that completes without a failure lets the ranks read. A failure marks the group failed for good.
  void rendezvous(clock::time_point deadline, std::uint64_t seq, detail::op_kind kind, stage at) {
    auto& g = *group_;
    std::unique_lock lock(g.mutex_);
    if (g.failed_) fail(lock, seq, kind);
    const auto me = static_cast<std::size_t>(rank_);
    const std::uint64_t phase = g.phase_;
    g.entered_[me] = phase + 1;
    const auto missing = [&]() -> int {
      for (std::size_t k = 0; k < g.entered_.size(); ++k)
        if (g.entered_[k] <= phase) return static_cast<int>(k);
      return -1;
    };
    const auto departed = [&]() -> int {
      for (std::size_t k = 0; k < g.entered_.size(); ++k)
        if (g.entered_[k] <= phase && g.left_[k]) return static_cast<int>(k);
      return -1;
    };
    if (++g.arrived_ == g.size_) {
      // No rank reads now: each arrived here after its reading for the previous operation.
      g.arrived_ = 0;
      if (at != stage::after_reading) g.failed_ = disagreement();
      if (!g.failed_) {
        ++g.phase_;
        if (at == stage::before_reading) g.computing_ = g.size_;
      }
      g.cv_.notify_all();
    } else {
      const bool met = g.cv_.wait_until(lock, deadline, [&] {
        return g.phase_ != phase || g.failed_.has_value() || departed() >= 0;
      });
      if (g.phase_ == phase && !g.failed_) {
        if (const int gone = departed(); gone >= 0)
          g.failed_ = local_group::failure{error_kind::peer_lost, gone, "it left the group"};
        else if (!met)
          g.failed_ = local_group::failure{error_kind::timeout, missing(),
                                           "deadline passed while rank " + std::to_string(rank_) + " waited"};
        g.cv_.notify_all();
      }
    }
    if (g.phase_ != phase) return;  // met: read (or return), even if a failure was reported meanwhile
    fail(lock, seq, kind);
  }

  // Throws the group's failure once no rank reads the buffers posted for the previous operation: leaving earlier
  // would let it touch freed memory. Not bounded by the deadline on purpose; the count is exact (set only when all
  // ranks read next, dropped once by each) and reading waits on nobody, so the wait ends.
  [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, std::uint64_t seq, detail::op_kind kind) const {
    auto& g = *group_;
    g.cv_.wait(lock, [&] { return g.computing_ == 0; });
    throw_failure(*g.failed_, seq, kind);
  }

  // The failure to report when the ranks did not all post the same operation (the seq too: one rank may be an
  // operation ahead), naming rank 0's call and the first that differs.
  [[nodiscard]] std::optional<local_group::failure> disagreement() const {
    const auto& slots = group_->slots_;
    const auto& first = slots[0];
    for (std::size_t k = 1; k < slots.size(); ++k) {
      const auto& s = slots[k];
      if (s.kind != first.kind || s.type != first.type || s.count != first.count || s.op != first.op ||
          s.root != first.root || s.seq != first.seq)
        return local_group::failure{error_kind::protocol, static_cast<int>(k),
                                    "ranks disagree on operation #" + std::to_string(first.seq) + ": rank 0 called " +
                                        describe(first) + ", rank " + std::to_string(k) + " called " + describe(s)};
    }
    return std::nullopt;
  }

  static std::string describe(const local_group::slot& s) {
    std::string text = detail::op_name(s.kind);
    if (s.kind != detail::op_kind::barrier) {
      text += "<";
      text += detail::dtype_name(s.type);
      text += ">(" + std::to_string(s.count) + " elements";
      if (s.kind == detail::op_kind::all_reduce || s.kind == detail::op_kind::all_reduce_update)
        text += ", " + std::string(to_string(s.op));
      if (s.kind == detail::op_kind::broadcast) text += ", root " + std::to_string(s.root);
      text += ")";
    }
    text += " #" + std::to_string(s.seq);
    return text;
  }

  local_group* group_;
  int rank_;
  int uncaught_;
  std::uint64_t next_seq_ = 0;
};

/// Runs `fn(local_collective&)` on `n` threads, one per rank of a fresh `local_group`, and rethrows the first
/// failure (the earliest in time: the others' `peer_lost_error`s are its consequences).
template <class Fn>
void spawn_ranks(int n, Fn&& fn, local_options options = {}) {
  local_group group(n, options);
  std::mutex first_mutex;
  std::exception_ptr first;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::exception_ptr failure;
      std::string reason = "unknown exception";
      try {
        local_collective c(group, r);
        try {
          fn(c);
        } catch (const std::exception& e) {
          reason = e.what();
          failure = std::current_exception();
        } catch (...) {
          failure = std::current_exception();
        }
        if (failure) group.abort(r, reason);  // before c's destructor joins its worker
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
      if (!failure) {
        group.leave(r);
        return;
      }
      group.abort(r, reason);
      const std::lock_guard lock(first_mutex);
      errors[static_cast<std::size_t>(r)] = failure;
      if (!first) first = failure;
    });
  }
  for (auto& t : threads) t.join();
  if (const auto culprit = group.failed_rank(); culprit && errors[static_cast<std::size_t>(*culprit)])
    std::rethrow_exception(errors[static_cast<std::size_t>(*culprit)]);
  if (first) std::rethrow_exception(first);
}

static_assert(collective<local_collective>);

}  // namespace mwstrat
