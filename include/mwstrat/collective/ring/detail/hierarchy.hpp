#pragma once
// The hierarchical all-reduce of a ring_collective whose ranks span several hosts with the same number of ranks
// each: a reduce-scatter in the ring of this host's ranks, an all-reduce of this rank's part in the ring between
// hosts, an all-gather in the host ring. A friend of ring_collective, over its two inner rings (`local_`, `cross_`);
// a template on the ring type so that this header needs nothing of ring_collective.hpp, which includes it. The rings
// themselves are joined by ring_collective::arrange_hosts once the flat ring is up.

#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/types.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <span>

namespace mwstrat::detail {

struct ring_hierarchy {
  // Reduce-scatter within the host, all-reduce of this rank's part around the ring between hosts, all-gather within
  // the host. Element e is combined in a fixed order — its host ring's order, then the hosts' ring order — so every
  // rank gets the same bits, every run. A failure in any ring breaks all three (and shuts their connections, so the
  // ranks waiting in the others fail fast too).
  template <class Ring, class T>
  static void all_reduce(Ring& ring, std::span<T> data, reduce_op op, op_options options) {
    if (ring.broken_) std::rethrow_exception(ring.broken_);
    const reduce_op partial = op == reduce_op::mean ? reduce_op::sum : op;
    const auto left = remaining(ring, options);
    try {
      ring.local_->template run_half<T>(ring_half::reduce_scatter, data, partial, left());
      std::size_t first = 0, last = 0;
      owned_segment(ring.local_->rank_, ring.local_->n_, data.size(), first, last);
      const auto part = data.subspan(first, last - first);
      ring.cross_->template all_reduce_now<T>(part, partial, left());
      finish_reduce(part.data(), part.size(), op, ring.n_);
      ring.local_->template run_half<T>(ring_half::all_gather, data, partial, left());
    } catch (...) {
      break_all(ring);
      throw;
    }
  }

  // The same with all_reduce_update's sharding: the host ring's reduce-scatter leaves this rank a part, the ring
  // between hosts reduces it and updates a share of it (all_reduce_update), the host ring gathers the parameters.
  template <class Ring, class T, class Update>
  static void all_reduce_update(Ring& ring, std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                                op_options options) {
    if (ring.broken_) std::rethrow_exception(ring.broken_);
    const reduce_op partial = op == reduce_op::mean ? reduce_op::sum : op;
    const auto left = remaining(ring, options);
    try {
      ring.local_->template run_half<T>(ring_half::reduce_scatter, gradients, partial, left());
      std::size_t first = 0, last = 0;
      owned_segment(ring.local_->rank_, ring.local_->n_, gradients.size(), first, last);
      const int world = ring.n_;
      auto finish_then_update = [&](std::size_t at, std::size_t count) {
        finish_reduce(gradients.data() + first + at, count, op, world);
        update(first + at, count);
      };
      ring.cross_->template flat_all_reduce_update<T>(gradients.subspan(first, last - first), partial,
                                                      params.subspan(first, last - first), finish_then_update, left());
      ring.local_->template run_half<T>(ring_half::all_gather, params, partial, left());
    } catch (...) {
      break_all(ring);
      throw;
    }
  }

 private:
  // The operation's deadline, shared by its steps on the three rings: a callable giving each step what is left.
  template <class Ring>
  static auto remaining(const Ring& ring, op_options options) {
    const auto timeout = options.timeout.count() > 0 ? options.timeout : ring.options_.op_timeout;
    const auto deadline = deadline_after(timeout);
    return [deadline] {
      op_options o;
      o.timeout = std::max(std::chrono::milliseconds(1),
                           std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now()));
      return o;
    };
  }

  template <class Ring>
  static void break_all(Ring& ring) {
    ring.broken_ = std::current_exception();
    for (Ring* r : {ring.local_.get(), ring.cross_.get(), &ring}) r->shutdown_links();
  }
};

}  // namespace mwstrat::detail
