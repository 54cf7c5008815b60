#pragma once
/// \file
/// `distributed_input`: an in-memory image set as `fit` sees it — this worker's share of every global batch, as
/// a pure function of (epoch, step), so a resumed job reads exactly the examples it would have read.
///
/// It wraps `data::distributed_batches` (shuffle by seed and epoch, sharding policy, global batch = per-worker
/// batch × workers) and fills buffers it owns: no allocation per step.

#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// This worker's batches of an image set, for `fit` and `evaluate`.
class distributed_input {
 public:
  /// Training input: shuffled with `seed` (reshuffled every epoch), only full global batches of `global_batch`
  /// examples, split among `strategy`'s replicas by `policy`.
  template <class Strategy>
  distributed_input(data::labeled_images set, std::size_t global_batch, const Strategy& strategy, std::uint64_t seed,
                    data::any_shard_policy policy = data::auto_shard{})
      : batches_(std::move(set), training_options(global_batch, strategy.num_replicas_in_sync(),
                                                  strategy.replica_id(), seed, std::move(policy))) {
    allocate();
  }

  /// Any distribution (evaluation order, a partial last batch, no sharding, ...).
  explicit distributed_input(data::distributed_batches batches) : batches_(std::move(batches)) { allocate(); }

  /// Evaluation input: the set in file order, every example once over all workers, the last batch partial.
  template <class Strategy>
  [[nodiscard]] static distributed_input for_evaluation(data::labeled_images set, std::size_t global_batch,
                                                        const Strategy& strategy) {
    return distributed_input(data::distributed_batches::for_evaluation(
        std::move(set), global_batch, strategy.num_replicas_in_sync(), strategy.replica_id()));
  }

  /// Global steps per epoch (the same on every worker).
  [[nodiscard]] std::size_t steps_per_epoch() const { return batches_.steps_per_epoch(); }

  /// This worker's part of global step `step` of epoch `epoch`; valid until the next call.
  data::image_batch batch_at(std::size_t epoch, std::size_t step) {
    const data::data_cursor at{epoch, step, batches_.options().seed};
    const std::size_t n = batches_.fill(at, images_, labels_);
    return {std::span<const float>(images_).first(n * batches_.example_size()),
            std::span<const std::int64_t>(labels_).first(n), n};
  }

  /// The underlying distribution.
  [[nodiscard]] data::distributed_batches& batches() { return batches_; }

 private:
  static data::distribution_options training_options(std::size_t global_batch, int workers, int worker,
                                                     std::uint64_t seed, data::any_shard_policy policy) {
    data::distribution_options o;
    o.global_batch = global_batch;
    o.num_workers = workers;
    o.worker_index = worker;
    o.seed = seed;
    o.policy = std::move(policy);
    return o;
  }

  void allocate() {
    images_.resize(batches_.per_worker_batch() * batches_.example_size());
    labels_.resize(batches_.per_worker_batch());
  }

  data::distributed_batches batches_;
  std::vector<float> images_;
  std::vector<std::int64_t> labels_;
};

static_assert(batch_source<distributed_input>);

/// A data set split for training and validation.
struct split_sets {
  data::labeled_images training;
  data::labeled_images validation;
};

/// Keras's `validation_split`: the last `fraction` of `set`, in file order (before any shuffling, as Keras takes
/// it), is held out for validation; the first ⌊count × (1 − fraction)⌋ examples train. Per-file counts are kept
/// for both parts (file sharding still sees the files). Throws config_error when `fraction` is not in (0, 1) or
/// leaves either part empty.
[[nodiscard]] inline split_sets validation_split(const data::labeled_images& set, double fraction) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    throw config_error({"train"}, "validation_split: " + std::to_string(fraction) + " is not in (0, 1)");
  }
  const std::size_t count = set.count();
  const auto split_at = static_cast<std::size_t>(static_cast<double>(count) * (1.0 - fraction));
  if (split_at == 0 || split_at == count) {
    throw config_error({"train"}, "validation_split: " + std::to_string(fraction) + " of " + std::to_string(count) +
                                      " examples leaves " + (split_at == 0 ? "no training" : "no validation") +
                                      " example");
  }
  const auto part = [&](std::size_t first, std::size_t last) {
    const std::size_t per = set.example_size();
    const auto pixels = set.pixels().subspan(first * per, (last - first) * per);
    const auto labels = set.labels().subspan(first, last - first);
    std::vector<std::size_t> files;  // the files' shares of [first, last)
    std::size_t begin = 0;
    for (const std::size_t n : set.file_counts()) {
      const std::size_t lo = std::max(begin, first), hi = std::min(begin + n, last);
      if (lo < hi) files.push_back(hi - lo);
      begin += n;
    }
    return data::labeled_images(std::vector<std::uint8_t>(pixels.begin(), pixels.end()),
                                std::vector<std::int64_t>(labels.begin(), labels.end()), set.rows(), set.cols(),
                                std::move(files));
  };
  return {part(0, split_at), part(split_at, count)};
}

}  // namespace mwstrat
