#pragma once
// One flat ring: this rank's links to its two neighbours and the operations over them. What an operation is comes
// from the schedule (schedule.hpp) and its plan (plan.hpp), how its bytes move from the data path (data_path.hpp); a
// flat ring decides what a failure does — the verdict (liveness.hpp), the abort to both neighbours (abort.hpp), and
// the ring broken for good — and names ranks as its rank map says (rank_map.hpp). The builder (builder.hpp) makes
// the job's ring and, for a hierarchical one, the two rings inside it (hierarchy.hpp); ring_collective is the front
// end over them.

#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/compress.hpp>
#include <mwstrat/collective/ring/detail/data_path.hpp>
#include <mwstrat/collective/ring/detail/failure.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/liveness.hpp>
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/plan.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace mwstrat::detail {

class flat_ring {
 public:
  // A world of one: no links.
  flat_ring(std::shared_ptr<const ring_options> options, rank_map ranks, std::size_t chunk_bytes)
      : options_(std::move(options)), ranks_(std::move(ranks)), n_(ranks_.size()), rank_(options_->rank),
        chunk_bytes_(chunk_bytes) {}

  // Over the data connections start-up made (`links`; its liveness connections stay there).
  flat_ring(std::shared_ptr<const ring_options> options, rank_map ranks, std::size_t chunk_bytes, ring_links& links)
      : flat_ring(std::move(options), std::move(ranks), chunk_bytes) {
    data_ = ring_data_path(links, rank_, n_, chunk_bytes_, options_->spin, ranks_);
  }

  flat_ring(flat_ring&&) noexcept = default;
  flat_ring& operator=(flat_ring&&) noexcept = default;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return n_; }
  [[nodiscard]] const ring_options& options() const noexcept { return *options_; }
  [[nodiscard]] const rank_map& ranks() const noexcept { return ranks_; }
  [[nodiscard]] int next() const { return (rank_ + 1) % n_; }
  [[nodiscard]] int prev() const { return (rank_ + n_ - 1) % n_; }

  // Whether both (either) of this rank's links carry payloads through shared memory.
  [[nodiscard]] bool uses_shared_memory() const noexcept { return data_.out_through_shm() && data_.in_through_shm(); }
  [[nodiscard]] bool touches_shared_memory() const noexcept { return data_.out_through_shm() || data_.in_through_shm(); }

  // The liveness monitor whose verdict ends this ring's operations (the job's ring's, shared by the rings inside).
  void watch(liveness_monitor* monitor) noexcept { data_.watch(monitor); }
  [[nodiscard]] liveness_monitor* monitor() const noexcept { return data_.monitor(); }

  // Float32 sums and means narrowed to 16 bits on this ring's wire (the links between hosts).
  void compress(wire_compression c) {
    compression_ = c;
    if (c != wire_compression::none) data_.make_wire_stage();
  }
  [[nodiscard]] wire_compression compression() const noexcept { return compression_; }

  // A failed ring stays failed: its operations rethrow the first error.
  [[nodiscard]] bool broken() const noexcept { return broken_ != nullptr; }
  void rethrow_if_broken() const {
    if (broken_) std::rethrow_exception(broken_);
  }
  void break_with(std::exception_ptr e) noexcept { broken_ = std::move(e); }

  // Shuts every data connection down, so that the neighbours (and queued operations) fail fast.
  void shutdown_links() { data_.shutdown_links(); }

  void log(const std::string& text) const { ring_log(*options_, ranks_.job_rank(rank_), text); }

  // The operations (ring_collective's, on this ring alone), behind the front end's argument checks.

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    plan p = flat_all_reduce_plan(data, op);
    run<T>(p, options);
  }

  // all_reduce_streamed: all_reduce_now's plan with the final parts reported as they come.
  template <class T, class OnFinal>
  void all_reduce_streamed_now(std::span<T> data, reduce_op op, OnFinal& on_final, op_options options) {
    if (n_ == 1) {
      all_reduce_now(data, op, options);
      if (!data.empty()) on_final(std::size_t{0}, data.size());
      return;
    }
    plan p = flat_all_reduce_plan(data, op);
    p.on_final_context = static_cast<void*>(std::addressof(on_final));
    p.on_final = [](void* context, std::size_t first, std::size_t count) {
      (*static_cast<OnFinal*>(context))(first, count);
    };
    run<T>(p, options);
  }

  // all_reduce_update (ring_collective.hpp says what it does).
  template <class T, class Update>
  void all_reduce_update_now(std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                             op_options options) {
    if (n_ == 1) {  // the reduction of one rank is its input
      if (!gradients.empty()) update(std::size_t{0}, gradients.size());
      return;
    }
    plan p = make_plan(
        all_reduce_schedule(op_kind::all_reduce_update, rank_, n_, gradients.size(), sizeof(T), chunk_bytes_), op,
        static_cast<std::uint8_t>(op), gradients.data());
    narrow_on_the_wire<T>(p, op);  // the reduce-scatter's gradients; the parameters travel exact (resolve_chunk)
    p.gather_base = reinterpret_cast<std::uint8_t*>(params.data());
    p.on_reduced_context = static_cast<void*>(std::addressof(update));
    p.on_reduced = [](void* context, std::size_t first, std::size_t count) {
      (*static_cast<Update*>(context))(first, count);
    };
    run<T>(p, options);
  }

  template <class T>
  void broadcast_now(std::span<T> data, int root, op_options options) {
    check_broadcast(root, dtype_of<T>(), data.size(), options);
    plan p = make_plan(broadcast_schedule(rank_, n_, root, data.size(), sizeof(T), chunk_bytes_), reduce_op::sum, 0,
                       data.data());
    run<T>(p, options);
  }

  template <class T>
  void all_gather_now(std::span<const T> mine, std::span<T> all, op_options options) {
    T* own = all.data() + static_cast<std::size_t>(rank_) * mine.size();
    if (!mine.empty() && own != mine.data()) std::memmove(own, mine.data(), mine.size_bytes());
    plan p = make_plan(all_gather_schedule(rank_, n_, mine.size(), sizeof(T), chunk_bytes_), reduce_op::sum,
                       0, all.data());
    run<T>(p, options);
  }

  // A one-element all-reduce around the ring.
  void barrier_now(op_options options) {
    std::int32_t token = 0;
    plan p = make_plan(all_reduce_schedule(op_kind::barrier, rank_, n_, 1, sizeof(token), chunk_bytes_),
                       reduce_op::sum, static_cast<std::uint8_t>(reduce_op::sum), &token);
    run<std::int32_t>(p, options);
  }

  // The ring's half of an all-reduce (the hierarchical all-reduce's steps within a host).
  template <class T>
  void run_half(ring_half half, std::span<T> data, reduce_op op, op_options options) {
    plan p = make_plan(all_reduce_half_schedule(half, rank_, n_, data.size(), sizeof(T), chunk_bytes_), op,
                       static_cast<std::uint8_t>(op), data.data());
    run<T>(p, options);
  }

 private:
  using failure = ring_failure;
  using plan = ring_plan;

  template <class T>
  plan make_plan(const ring_schedule& sched, reduce_op op, std::uint8_t reduction, T* base) {
    plan p;
    p.sched = sched;
    p.type = dtype_of<T>();
    p.op = op;
    p.reduction = reduction;
    p.seq = next_seq_++;
    p.esize = sizeof(T);
    p.wire_esize = sizeof(T);
    p.base = reinterpret_cast<std::uint8_t*>(base);
    return p;
  }

  // Float32 sums and means travel as 16 bits when this ring compresses (the links between hosts).
  template <class T>
  void narrow_on_the_wire(plan& p, reduce_op op) const {
    if constexpr (std::is_same_v<T, float>) {
      if (compression_ != wire_compression::none && (op == reduce_op::sum || op == reduce_op::mean)) {
        p.wire = compression_;
        p.wire_esize = sizeof(std::uint16_t);
      }
    }
  }

  // An all-reduce of `data` on this ring alone.
  template <class T>
  plan flat_all_reduce_plan(std::span<T> data, reduce_op op) {
    plan p = make_plan(all_reduce_schedule(op_kind::all_reduce, rank_, n_, data.size(), sizeof(T), chunk_bytes_), op,
                       static_cast<std::uint8_t>(op), data.data());
    narrow_on_the_wire<T>(p, op);
    return p;
  }

  // Before a broadcast moves data, the ranks compare what they were called with: a rank that takes itself for the
  // root only sends, so ranks passing different roots would otherwise each end with their own data and no error, and
  // the root, which receives nothing, would not see another rank's different size or type. One all-reduce of the
  // maximum of each value and of its negation gives every rank the range of each; all must be single values.
  void check_broadcast(int root, wire_dtype type, std::size_t count, op_options options) {
    if (n_ == 1) return;
    const auto c = static_cast<std::int64_t>(count), t = static_cast<std::int64_t>(type);
    std::array<std::int64_t, 6> v{root, -root, c, -c, t, -t};
    const std::uint64_t seq = next_seq_;
    plan p = make_plan(
        all_reduce_schedule(op_kind::broadcast_check, rank_, n_, v.size(), sizeof(std::int64_t), chunk_bytes_),
        reduce_op::max, static_cast<std::uint8_t>(reduce_op::max), v.data());
    run<std::int64_t>(p, options);
    std::string differ;
    const auto range = [&](const char* what, std::int64_t low, std::int64_t high, auto name) {
      if (low == high) return;
      differ += std::string(differ.empty() ? "" : ", ") + what + " from " + name(low) + " to " + name(high);
    };
    const auto number = [](std::int64_t x) { return std::to_string(x); };
    const auto type_name = [](std::int64_t x) { return std::string(dtype_name(static_cast<wire_dtype>(x))); };
    range("roots", -v[1], v[0], number);
    range("element counts", -v[3], v[2], number);
    range("element types", -v[5], v[4], type_name);
    // As any protocol failure: the verdict goes to the neighbours before this rank leaves, so a rank still in the
    // check reads it rather than finding this one gone; the ring stays failed.
    if (!differ.empty())
      fail(p, failure{error_kind::protocol, rank_,
                      "broadcast #" + std::to_string(seq + 1) + ": the ranks were called with different arguments (" +
                          differ + "); every rank must pass the same root, type and size"});
  }

  template <class T>
  void run(plan& p, op_options options) {
    if (broken_) std::rethrow_exception(broken_);
    if (n_ == 1 || p.sched.items <= p.sched.begin) return;  // one rank: the result is the input (mean over one rank is a no-op)
    if (auto* monitor = data_.monitor(); monitor && monitor->fired())
      fail(p, *monitor->verdict());  // a peer was lost between operations
    const auto timeout = options.timeout.count() > 0 ? options.timeout : options_->op_timeout;
    const auto deadline = deadline_after(timeout);
    std::optional<failure> f = data_.pump<T>(p, deadline, timeout);
    if (f) fail(p, *f);
  }

  // Tells both neighbours, breaks the ring for good, and throws the error this rank reports.
  [[noreturn]] void fail(const plan& p, const failure& found) {
    if (auto* monitor = data_.monitor()) {
      // One verdict for the whole job: the liveness verdict, when there is one, is the cause. A neighbour that closed
      // or aborted may be its echo, so this waits (briefly) for the verdict that travels ahead of it; without one,
      // this rank's own finding becomes the verdict, passed on before anything of this rank closes. (The monitor logs
      // it.)
      auto verdict = monitor->verdict();
      if (!verdict) verdict = monitor->await_verdict(abort_read_grace);
      if (!verdict) {
        failure own = ranks_.in_job_terms(found);
        own.text += " (reported by rank " + std::to_string(ranks_.job_rank(rank_)) + ")";
        verdict = monitor->publish(std::move(own));
      }
      // The verdict names the flat ring's ranks: the ranks of a ring inside hear this rank's abort as "it gave up".
      failure told = *verdict;
      if (ranks_.inner()) told.culprit = -1;
      data_.abort_neighbours(p, told);
      broken_ = ring_error(ranks_, rank_, *verdict);
      std::rethrow_exception(broken_);
    }
    // A world without liveness (none is started in a world of one): the neighbours hear this ring's own terms, the
    // error and the log name the job's.
    data_.abort_neighbours(p, found);
    const failure mapped = ranks_.in_job_terms(found);
    broken_ = ring_error(ranks_, rank_, mapped);
    log(mapped.text);
    std::rethrow_exception(broken_);
  }

  std::shared_ptr<const ring_options> options_;  // shared with the liveness monitor's log
  rank_map ranks_;                               // who this ring's ranks are in the job, for every message naming one
  int n_ = 0;
  int rank_ = 0;
  std::size_t chunk_bytes_ = 0;
  ring_data_path data_;  // the links to the neighbours and the pump over them
  std::uint64_t next_seq_ = 0;
  std::exception_ptr broken_;
  wire_compression compression_ = wire_compression::none;  // set on the ring that carries the inter-host leg
};

}  // namespace mwstrat::detail
