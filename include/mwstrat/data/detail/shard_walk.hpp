#pragma once
/// \file
/// `shard_walk`: the arithmetic of docs/sharding.md — steps per pass, each pass's global order and this worker's
/// slice of every step — apart from where the examples live. `distributed_batches` (examples in memory) and
/// `record_batches` (examples in record files) both walk their sets with it, so the two give the same indices
/// for the same numbers, whatever the storage.

#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/data/detail/shuffle.hpp>
#include <mwstrat/data/sharding.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::detail {

using data::any_shard_policy;
using data::data_cursor;
using data::shard_mode;
using data::shard_plan;
using data::shard_request;

/// What a walk is built from: the job's numbers and the resolved sharding.
struct walk_shape {
  std::size_t global_batch = 0;  ///< G (a positive multiple of N, checked by the caller; any G ≥ N after a reshard)
  int num_workers = 1;           ///< N
  int worker_index = 0;          ///< w
  bool shuffle = true;           ///< false: file order
  bool drop_remainder = true;    ///< only full global batches
  bool reshuffle_each_epoch = true;
  shard_mode mode = shard_mode::data;
  std::size_t num_examples = 0;              ///< C, all examples of the set (data and replicate modes)
  std::vector<std::size_t> local;            ///< file mode: global indices of this worker's examples, ascending
  std::vector<std::size_t> worker_counts;    ///< file mode: examples of each worker's files (N entries)
  std::string policy_name;                   ///< for messages
};

/// This worker's indices of every step of every pass (see the file comment).
class shard_walk {
 public:
  /// Throws data_error when the shape gives no step at all.
  explicit shard_walk(walk_shape shape) : s_(std::move(shape)) {
    // Data sharding cuts each step at ⌊n·w/N⌋: a G that N does not divide (after an elastic resize) gives shares
    // that differ by one, the largest ⌈G/N⌉. The other modes walk in batches of exactly G/N.
    const auto workers = static_cast<std::size_t>(s_.num_workers);
    batch_ = s_.mode == shard_mode::data ? (s_.global_batch + workers - 1) / workers : s_.global_batch / workers;
    const std::size_t c = s_.num_examples;
    const std::size_t g = s_.global_batch;
    switch (s_.mode) {
      case shard_mode::data:
        steps_ = s_.drop_remainder ? c / g : (c + g - 1) / g;
        order_.resize(c);
        break;
      case shard_mode::replicate:
        steps_ = s_.drop_remainder ? c / batch_ : (c + batch_ - 1) / batch_;
        order_.resize(c);
        break;
      case shard_mode::file: {
        const auto [lo, hi] = std::minmax_element(s_.worker_counts.begin(), s_.worker_counts.end());
        steps_ = s_.drop_remainder ? *lo / batch_ : (*hi + batch_ - 1) / batch_;
        order_.resize(s_.local.size());
        break;
      }
    }
    if (steps_ == 0) {
      throw data_error({"data", s_.worker_index}, "",
                       "a data set of " + std::to_string(c) + " examples gives no step of global batch " +
                           std::to_string(g) + " over " + std::to_string(s_.num_workers) + " workers (" +
                           s_.policy_name + " sharding, drop_remainder " + (s_.drop_remainder ? "true" : "false") +
                           ")");
    }
  }

  [[nodiscard]] std::size_t steps_per_pass() const noexcept { return steps_; }
  [[nodiscard]] std::size_t per_worker_batch() const noexcept { return batch_; }
  [[nodiscard]] shard_mode mode() const noexcept { return s_.mode; }

  /// `at` with a step at or beyond the end of a pass carried into the following passes, as a repeated pipeline
  /// reads on (`fit` with steps_per_epoch larger than a pass reads into the next, reshuffled, pass).
  [[nodiscard]] data_cursor normalised(data_cursor at) const noexcept {
    if (at.step >= steps_) {
      at.epoch += at.step / steps_;
      at.step %= steps_;
    }
    return at;
  }

  /// How many examples all workers together read at `at`'s step.
  [[nodiscard]] std::size_t global_count(const data_cursor& raw) const {
    const data_cursor at = normalised(raw);
    switch (s_.mode) {
      case shard_mode::data:
        return std::min(s_.global_batch, s_.num_examples - static_cast<std::size_t>(at.step) * s_.global_batch);
      case shard_mode::replicate:
        return static_cast<std::size_t>(s_.num_workers) * part(s_.num_examples, at.step);
      case shard_mode::file: {
        std::size_t total = 0;
        for (const std::size_t cw : s_.worker_counts) total += part(cw, at.step);
        return total;
      }
    }
    return 0;
  }

  /// The global indices of this worker's examples at `at`, in batch order (valid until the next call).
  [[nodiscard]] std::span<const std::size_t> slice(const data_cursor& raw) {
    const data_cursor at = normalised(raw);
    prepare_order(at);
    std::size_t first = 0;
    std::size_t count = 0;
    if (s_.mode == shard_mode::data) {
      const std::size_t g = s_.global_batch;
      const auto n = static_cast<std::size_t>(s_.num_workers);
      const auto w = static_cast<std::size_t>(s_.worker_index);
      const std::size_t begin = static_cast<std::size_t>(at.step) * g;
      const std::size_t in_step = std::min(g, s_.num_examples - begin);
      first = begin + in_step * w / n;
      count = begin + in_step * (w + 1) / n - first;
    } else {
      count = part(order_.size(), at.step);
      first = count == 0 ? 0 : static_cast<std::size_t>(at.step) * batch_;
    }
    return std::span<const std::size_t>(order_).subspan(first, count);
  }

 private:
  // Examples of an order of `total` in step `step` when walked in batches of B.
  [[nodiscard]] std::size_t part(std::size_t total, std::uint64_t step) const noexcept {
    const std::size_t begin = static_cast<std::size_t>(step) * batch_;
    return begin >= total ? 0 : std::min(batch_, total - begin);
  }

  // The pass's order, computed only when `at` is in another pass than the cached one.
  void prepare_order(const data_cursor& at) {
    const std::uint64_t key = s_.reshuffle_each_epoch ? at.epoch : 0;
    if (order_ready_ && key == order_epoch_ && at.seed == order_seed_) return;
    if (s_.shuffle) {
      fill_permutation(order_, stream_seed(at.seed, key));
    } else {
      std::iota(order_.begin(), order_.end(), std::size_t{0});
    }
    if (s_.mode == shard_mode::file) {
      for (std::size_t& i : order_) i = s_.local[i];
    }
    order_ready_ = true;
    order_epoch_ = key;
    order_seed_ = at.seed;
  }

  walk_shape s_;
  std::size_t batch_ = 0;
  std::size_t steps_ = 0;
  std::vector<std::size_t> order_;  // this pass's order (global indices)
  bool order_ready_ = false;
  std::uint64_t order_epoch_ = 0;
  std::uint64_t order_seed_ = 0;
};

/// Checks (N, w, G) as every distribution does; returns B = G / N.
[[nodiscard]] inline std::size_t checked_per_worker_batch(std::size_t global_batch, int num_workers,
                                                         int worker_index) {
  if (num_workers < 1 || worker_index < 0 || worker_index >= num_workers) {
    throw config_error({"data", worker_index}, "worker index " + std::to_string(worker_index) + " is not in [0, " +
                                                   std::to_string(num_workers) + ") (num_workers " +
                                                   std::to_string(num_workers) + ")");
  }
  const auto workers = static_cast<std::size_t>(num_workers);
  if (global_batch == 0 || global_batch % workers != 0) {
    throw config_error({"data", worker_index}, "global batch " + std::to_string(global_batch) +
                                                   " is not a positive multiple of the " +
                                                   std::to_string(num_workers) + " workers");
  }
  return global_batch / workers;
}

/// The global indices of the examples of `files` (a plan's), given every file's count; throws config_error when
/// a policy chose a file that does not exist.
[[nodiscard]] inline std::vector<std::size_t> examples_of_files(std::span<const std::size_t> files,
                                                                std::span<const std::size_t> counts,
                                                                const std::string& policy_name, int rank) {
  std::vector<std::size_t> offsets(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
  std::vector<std::size_t> out;
  for (const std::size_t f : files) {
    if (f >= counts.size()) {
      throw config_error({"data", rank}, "sharding policy '" + policy_name + "' chose file " + std::to_string(f) +
                                             " of " + std::to_string(counts.size()));
    }
    for (std::size_t i = offsets[f]; i < offsets[f + 1]; ++i) out.push_back(i);
  }
  return out;
}

/// The walk of worker `w` of N: `policy` asked for every worker's plan (all must agree on the mode), with every
/// file's example count known. Throws as `examples_of_files` and when the workers' modes differ.
[[nodiscard]] inline walk_shape plan_walk(const any_shard_policy& policy, std::span<const std::size_t> file_counts,
                                          std::size_t global_batch, int num_workers, int worker_index) {
  walk_shape shape;
  shape.global_batch = global_batch;
  shape.num_workers = num_workers;
  shape.worker_index = worker_index;
  shape.num_examples = std::accumulate(file_counts.begin(), file_counts.end(), std::size_t{0});
  shape.policy_name = std::string(policy.name());
  shape.worker_counts.assign(static_cast<std::size_t>(num_workers), 0);
  for (int v = 0; v < num_workers; ++v) {
    const shard_request request{shape.num_examples, file_counts, num_workers, v, global_batch};
    const shard_plan plan = policy.resolve(request);
    if (v == 0) {
      shape.mode = plan.mode;
    } else if (plan.mode != shape.mode) {
      throw config_error({"data", worker_index}, "sharding policy '" + shape.policy_name +
                                                     "' resolved to different modes on different workers");
    }
    if (plan.mode == shard_mode::file) {
      auto examples = examples_of_files(plan.files, file_counts, shape.policy_name, worker_index);
      shape.worker_counts[static_cast<std::size_t>(v)] = examples.size();
      if (v == worker_index) shape.local = std::move(examples);
    }
  }
  return shape;
}

}  // namespace mwstrat::detail
