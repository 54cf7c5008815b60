#pragma once
// The hierarchical ring: two flat rings inside the job's — the host ring (this host's ranks, shared memory where
// proven) and the ring between hosts (the ranks with this rank's index on every host, TCP) — and the all-reduce over
// them: a reduce-scatter in the host ring, an all-reduce of this rank's part in the ring between hosts, an all-gather
// in the host ring. The builder (builder.hpp) joins the rings once the job's ring is up; the job's ring keeps the
// other operations, the small all-reduces and the liveness that watches the same ranks.

#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/flat_ring.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/types.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <span>
#include <utility>

namespace mwstrat::detail {

class ring_hierarchy {
 public:
  ring_hierarchy(flat_ring host, flat_ring between) : host_(std::move(host)), between_(std::move(between)) {}

  [[nodiscard]] const flat_ring& host() const noexcept { return host_; }
  [[nodiscard]] const flat_ring& between() const noexcept { return between_; }

  // Reduce-scatter within the host, all-reduce of this rank's part around the ring between hosts, all-gather within
  // the host. Element e is combined in a fixed order — its host ring's order, then the hosts' ring order — so every
  // rank gets the same bits, every run.
  template <class T>
  void all_reduce(flat_ring& job, std::span<T> data, reduce_op op, op_options options) {
    const auto between_hosts = [&](std::size_t first, std::size_t last, reduce_op partial, op_options o) {
      const auto part = data.subspan(first, last - first);
      between_.all_reduce_now<T>(part, partial, o);
      finish_reduce(part.data(), part.size(), op, job.size());
    };
    in_three_steps(job, data, data, op, options, between_hosts);
  }

  // The same with all_reduce_update's sharding: the host ring's reduce-scatter leaves this rank a part, the ring
  // between hosts reduces it and updates a share of it (all_reduce_update), the host ring gathers the parameters.
  template <class T, class Update>
  void all_reduce_update(flat_ring& job, std::span<T> gradients, reduce_op op, std::span<T> params, Update& update,
                         op_options options) {
    const auto between_hosts = [&](std::size_t first, std::size_t last, reduce_op partial, op_options o) {
      const int world = job.size();
      auto finish_then_update = [&](std::size_t at, std::size_t count) {
        finish_reduce(gradients.data() + first + at, count, op, world);
        update(first + at, count);
      };
      between_.all_reduce_update_now<T>(gradients.subspan(first, last - first), partial,
                                        params.subspan(first, last - first), finish_then_update, o);
    };
    in_three_steps(job, gradients, params, op, options, between_hosts);
  }

 private:
  // The operation's deadline, shared by its steps on the three rings: a callable giving each step what is left.
  static auto remaining(const flat_ring& job, op_options options) {
    const auto timeout = options.timeout.count() > 0 ? options.timeout : job.options().op_timeout;
    const auto deadline = deadline_after(timeout);
    return [deadline] {
      op_options o;
      o.timeout = std::max(std::chrono::milliseconds(1),
                           std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now()));
      return o;
    };
  }

  // The frame of both: the host ring's reduce-scatter of `data` leaves this rank the part [first, last), which
  // `between_hosts(first, last, partial, left)` reduces around the ring between hosts; the host ring then gathers
  // `gathered`. One deadline for the three steps. A failure in any ring breaks all three (`job` included) and shuts
  // their connections, so the ranks waiting in the others fail fast too.
  template <class T, class BetweenHosts>
  void in_three_steps(flat_ring& job, std::span<T> data, std::span<T> gathered, reduce_op op, op_options options,
                      const BetweenHosts& between_hosts) {
    job.rethrow_if_broken();
    const reduce_op partial = op == reduce_op::mean ? reduce_op::sum : op;
    const auto left = remaining(job, options);
    try {
      host_.run_half<T>(ring_half::reduce_scatter, data, partial, left());
      std::size_t first = 0, last = 0;
      owned_segment(host_.rank(), host_.size(), data.size(), first, last);
      between_hosts(first, last, partial, left());
      host_.run_half<T>(ring_half::all_gather, gathered, partial, left());
    } catch (...) {
      break_all(job);
      throw;
    }
  }

  void break_all(flat_ring& job) {
    job.break_with(std::current_exception());
    for (flat_ring* r : {&host_, &between_, &job}) r->shutdown_links();
  }

  flat_ring host_;
  flat_ring between_;
};

}  // namespace mwstrat::detail
