#pragma once
/// \file
/// `distributed_batches`: this worker's part of every global batch of an in-memory image set, filled into
/// buffers the caller owns, at any `data_cursor` (so it can be checkpointed and resumed exactly).
///
/// The rules (docs/sharding.md works them through):
///   - Each epoch has one global order of the C examples: a permutation that depends only on (seed, epoch), or on
///     seed alone when `reshuffle_each_epoch` is false, or the file order when `shuffle` is false.
///   - Data sharding (`data_shard`, and `auto_shard` on a single file): global step s is positions
///     [s·G, s·G + n_s) of that order, n_s = min(G, C − s·G), whatever N is. Worker w takes the contiguous part
///     [s·G + ⌊n_s·w/N⌋, s·G + ⌊n_s·(w+1)/N⌋): exactly B = G/N examples on a full step.
///   - `off_shard`: every worker walks the whole global order in per-worker batches of B (step s is positions
///     [s·B, s·B + B)); steps_per_epoch counts those, so an epoch takes N times as many steps.
///   - File sharding: worker w reads only its files, shuffled by (seed, epoch) among themselves, in batches of B.
///   - Every worker computes the same `steps_per_epoch()`. With `drop_remainder` (the default) only full global
///     batches are produced: ⌊C/G⌋ steps (file sharding: the smallest worker's ⌊c_w/B⌋), and the examples of the
///     partial tail are skipped for that epoch (they fall elsewhere in the next epoch's order). Without it the
///     last step is partial, ⌈C/G⌉ steps (file: the largest worker's ⌈c_w/B⌉); a worker may then get fewer than
///     B examples, or none, and `fill` returns how many: weight each worker's mean by it (`global_count(step)`
///     is the step's total over all workers), so the update equals the mean over the step's examples.
/// Nothing allocates after construction: each epoch's order is computed into the same buffer.
///
/// `distribution_options::transform` is the one hook for per-example preprocessing (augmentation, standardization:
/// data/image_augmentation.hpp): when set, `fill` calls it instead of the [0, 1] normalisation, with the example's
/// index in the set and the epoch. Those two (and the transform's own seed) are all it may depend on, so an
/// example looks the same whichever worker reads it, with any number of workers, and after a resume.

#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/data/detail/shard_walk.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/sharding.hpp>
#include <mwstrat/detail/hash.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// Per-example preprocessing for `distributed_batches::fill` and `record_batches::fill`: writes `image` (the
/// pixels of example `index` of the set, `shape`, HWC bytes) as it should look in `epoch` into `out` (exactly
/// rows × cols × channels floats). A pure function of its arguments — the pixels, not where they are stored, so
/// an example looks the same read from memory or from a record file; called from whatever thread fills the batch
/// (record sets decode on several), so it must be safe to call concurrently; must not allocate if the steady
/// state is to stay allocation-free.
using example_transform = std::function<void(std::span<const std::uint8_t> image, image_shape shape,
                                             std::size_t index, std::uint64_t epoch, std::span<float> out)>;

/// How a data set is split into global batches and among workers.
struct distribution_options {
  std::size_t global_batch = 0;           ///< G: examples per global step over all workers; a multiple of N
  int num_workers = 1;                    ///< N
  int worker_index = 0;                   ///< w, this worker's index in [0, N)
  std::uint64_t seed = 0;                 ///< the shuffle seed; the same on every worker
  bool shuffle = true;                    ///< false: the file order (evaluation)
  bool drop_remainder = true;             ///< true: only full global batches; false: a partial last step
  any_shard_policy policy = auto_shard{}; ///< how examples are split among workers
  bool reshuffle_each_epoch = true;       ///< false: the same order every epoch
  example_transform transform = {};       ///< empty: pixels / 255; else this (augmentation, standardization)
};

/// The options of the in-order pass an evaluation needs: no shuffle, the partial last batch kept, so every example
/// is read exactly once per epoch over all workers.
[[nodiscard]] inline distribution_options evaluation_options(std::size_t global_batch, int num_workers,
                                                             int worker_index, any_shard_policy policy,
                                                             example_transform transform) {
  distribution_options o;
  o.global_batch = global_batch;
  o.num_workers = num_workers;
  o.worker_index = worker_index;
  o.shuffle = false;
  o.drop_remainder = false;
  o.policy = std::move(policy);
  o.transform = std::move(transform);
  return o;
}

/// One batch in buffers owned by a `distributed_batches`; valid until its next call.
struct batch_view {
  std::span<const float> images;         ///< count × example_size floats in [0, 1], row-major
  std::span<const std::int64_t> labels;  ///< count labels
  std::size_t count = 0;                 ///< examples in this worker's part of the step (may be < B, or 0)
  data_cursor cursor;                    ///< the position this batch was taken at
};

/// This worker's batches of an in-memory image set, distributed by global batch (see the file comment).
class distributed_batches {
 public:
  /// Resolves the sharding policy and checks the options; throws config_error for impossible options (G not a
  /// multiple of N, w out of range) and data_error when the set cannot be sharded so or gives no step at all.
  distributed_batches(labeled_images set, distribution_options options)
      : set_(std::move(set)),
        options_(std::move(options)),
        walk_(walk_shape_of(set_, options_)) {
    cursor_ = {0, 0, options_.seed};
    images_.resize(walk_.per_worker_batch() * set_.example_size());
    labels_.resize(walk_.per_worker_batch());
  }

  /// The in-order pass an evaluation needs: no shuffle, the partial last batch kept, so every example is read
  /// exactly once per epoch over all workers; weight per-worker metrics by the counts `fill` returns.
  [[nodiscard]] static distributed_batches for_evaluation(labeled_images set, std::size_t global_batch,
                                                          int num_workers, int worker_index,
                                                          any_shard_policy policy = data_shard{},
                                                          example_transform transform = {}) {
    return {std::move(set), evaluation_options(global_batch, num_workers, worker_index, std::move(policy),
                                               std::move(transform))};
  }

  /// Global steps per epoch; the same number on every worker.
  [[nodiscard]] std::size_t steps_per_epoch() const noexcept { return walk_.steps_per_pass(); }
  /// B = G / N (⌈G/N⌉ after a `reshard`): the most examples this worker gets in one step (the size of the buffers
  /// `fill` needs).
  [[nodiscard]] std::size_t per_worker_batch() const noexcept { return walk_.per_worker_batch(); }
  /// G.
  [[nodiscard]] std::size_t global_batch() const noexcept { return options_.global_batch; }
  /// Floats per example (rows × cols × channels).
  [[nodiscard]] std::size_t example_size() const noexcept { return set_.example_size(); }
  /// What the sharding policy resolved to.
  [[nodiscard]] shard_mode mode() const noexcept { return walk_.mode(); }
  /// The options it was built with.
  [[nodiscard]] const distribution_options& options() const noexcept { return options_; }
  /// The data set.
  [[nodiscard]] const labeled_images& images() const noexcept { return set_; }

  /// A digest of what decides the global batches: the examples (every label, and the pixels of every 64th example),
  /// the shape, the global batch and the shuffle. An elastic job compares it with a joiner's before it hands over its
  /// state (train/in_memory_recovery.hpp), so that a worker started on other data is refused. Not the workers: the
  /// same on every worker, and after a `reshard`.
  [[nodiscard]] std::uint64_t data_fingerprint() const {
    const auto bytes = [](const auto& v) {
      return std::string_view(reinterpret_cast<const char*>(&v), sizeof v);
    };
    std::uint64_t h = mwstrat::detail::fnv1a64(bytes(options_.seed));
    for (const std::uint64_t v : {std::uint64_t{options_.global_batch}, std::uint64_t{options_.shuffle},
                                  std::uint64_t{options_.reshuffle_each_epoch}, std::uint64_t{options_.drop_remainder},
                                  std::uint64_t{set_.example_size()}, std::uint64_t{set_.count()}}) {
      h = mwstrat::detail::fnv1a64(bytes(v), h);
    }
    const auto add = [&h](const auto span) {
      h = mwstrat::detail::fnv1a64(std::string_view(reinterpret_cast<const char*>(span.data()), span.size_bytes()), h);
    };
    add(set_.labels());
    for (std::size_t i = 0; i < set_.count(); i += 64) add(set_.image(i));
    return h;
  }

  /// Elastic training (train/in_memory_recovery.hpp): the same global batches, from now on split over `num_workers`
  /// workers, this one `worker_index` of them. Only under data sharding, where the global order does not depend on
  /// the workers (config_error otherwise): every step keeps its G examples in the same order, and worker w takes
  /// [⌊n·w/N⌋, ⌊n·(w+1)/N⌋) of them, so the shares may differ by one (128 over 3: 42, 43, 43); `fill` returns this
  /// worker's count and `per_worker_batch()` becomes ⌈G/N⌉. The cursor stays where it is. Allocates (the buffers).
  void reshard(int num_workers, int worker_index) {
    if (walk_.mode() != shard_mode::data) {
      throw config_error({"data", options_.worker_index},
                         "reshard: only data sharding keeps every global batch when the number of workers changes; "
                         "this set is sharded by '" + std::string(to_string(walk_.mode())) +
                             "' (use data_shard{} for an elastic job)");
    }
    if (num_workers < 1 || worker_index < 0 || worker_index >= num_workers) {
      throw config_error({"data", options_.worker_index}, "reshard: worker " + std::to_string(worker_index) +
                                                              " of " + std::to_string(num_workers) +
                                                              " is not a worker index in [0, workers)");
    }
    if (options_.global_batch < static_cast<std::size_t>(num_workers)) {
      throw config_error({"data", options_.worker_index},
                         "reshard: a global batch of " + std::to_string(options_.global_batch) + " over " +
                             std::to_string(num_workers) + " workers leaves a worker without an example");
    }
    options_.num_workers = num_workers;
    options_.worker_index = worker_index;
    options_.policy = data_shard{};  // what it resolved to: kept whatever the new count would resolve AUTO to
    detail::walk_shape shape = detail::plan_walk(options_.policy, set_.file_counts(), options_.global_batch,
                                                 num_workers, worker_index);
    shape.shuffle = options_.shuffle;
    shape.drop_remainder = options_.drop_remainder;
    shape.reshuffle_each_epoch = options_.reshuffle_each_epoch;
    walk_ = detail::shard_walk(std::move(shape));
    images_.resize(walk_.per_worker_batch() * set_.example_size());
    labels_.resize(walk_.per_worker_batch());
  }

  /// The position of the next batch `next` will produce.
  [[nodiscard]] data_cursor cursor() const noexcept { return cursor_; }

  /// Moves to `at` (e.g. from a checkpoint), adopting its seed. A step at or beyond steps_per_epoch() continues
  /// into the following passes (step steps_per_epoch() is the start of the next pass), as a repeated pipeline does.
  void restore(const data_cursor& at) { cursor_ = walk_.normalised(at); }

  /// `at` with a step at or beyond the end of a pass carried into the following passes.
  [[nodiscard]] data_cursor normalised(const data_cursor& at) const noexcept { return walk_.normalised(at); }

  /// How many examples all workers together read at `at`'s step (the denominator of a count-weighted mean).
  [[nodiscard]] std::size_t global_count(const data_cursor& at) const { return walk_.global_count(at); }

  /// Writes the global indices of this worker's examples at `at` into `out` (at least B long); returns how many.
  std::size_t indices(const data_cursor& at, std::span<std::size_t> out) {
    check_room(out.size(), walk_.per_worker_batch(), "index");
    const auto examples = walk_.slice(at);
    std::copy(examples.begin(), examples.end(), out.begin());
    return examples.size();
  }

  /// Fills this worker's part of the step at `at`: images as floats in [0, 1] (count × example_size, row-major;
  /// or what the options' transform writes) and int64 labels; returns count (B on a full step, fewer or 0 on a
  /// partial last one; the rest of the buffers is left as it was). The buffers need room for B examples. Does not
  /// move the cursor; allocates nothing (nor may the transform).
  std::size_t fill(const data_cursor& at, std::span<float> images, std::span<std::int64_t> labels) {
    const std::size_t per = set_.example_size();
    check_room(images.size(), walk_.per_worker_batch() * per, "image");
    check_room(labels.size(), walk_.per_worker_batch(), "label");
    const auto examples = walk_.slice(at);
    const std::uint64_t epoch = walk_.normalised(at).epoch;
    for (std::size_t i = 0; i < examples.size(); ++i) {
      const std::size_t example = examples[i];
      if (options_.transform) {
        options_.transform(set_.image(example), set_.shape(), example, epoch, images.subspan(i * per, per));
      } else {
        set_.normalized(example, images.subspan(i * per, per));
      }
      labels[i] = set_.label(example);
    }
    return examples.size();
  }

  /// Fills the batch at cursor() and advances the cursor by one step; returns the count as `fill` does.
  std::size_t next(std::span<float> images, std::span<std::int64_t> labels) {
    const std::size_t count = fill(cursor_, images, labels);
    advance();
    return count;
  }

  /// The batch at cursor() in this object's own buffers (valid until the next call); advances the cursor.
  batch_view next() {
    const data_cursor at = cursor_;
    const std::size_t count = next(images_, labels_);
    return {std::span<const float>(images_).first(count * set_.example_size()),
            std::span<const std::int64_t>(labels_).first(count), count, at};
  }

 private:
  static detail::walk_shape walk_shape_of(const labeled_images& set, const distribution_options& o) {
    (void)detail::checked_per_worker_batch(o.global_batch, o.num_workers, o.worker_index);
    detail::walk_shape shape = detail::plan_walk(o.policy, set.file_counts(), o.global_batch, o.num_workers,
                                                 o.worker_index);
    shape.shuffle = o.shuffle;
    shape.drop_remainder = o.drop_remainder;
    shape.reshuffle_each_epoch = o.reshuffle_each_epoch;
    return shape;
  }

  void advance() noexcept {
    if (++cursor_.step >= walk_.steps_per_pass()) {
      cursor_.step = 0;
      ++cursor_.epoch;
    }
  }

  void check_room(std::size_t have, std::size_t need, const char* what) const {
    if (have < need) {
      throw config_error({"data", options_.worker_index},
                         std::string(what) + " buffer of " + std::to_string(have) + " elements is smaller than the " +
                             std::to_string(need) + " one batch of " + std::to_string(walk_.per_worker_batch()) +
                             " needs");
    }
  }

  labeled_images set_;
  distribution_options options_;
  detail::shard_walk walk_;
  data_cursor cursor_;
  std::vector<float> images_;
  std::vector<std::int64_t> labels_;
};

}  // namespace mwstrat::data
