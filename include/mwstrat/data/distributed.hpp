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
#include <mwstrat/data/detail/shuffle.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/sharding.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// Per-example preprocessing for `distributed_batches::fill`: writes example `index` of `set` as it should look in
/// `epoch` into `out` (exactly set.example_size() floats). A pure function of its arguments; called from whatever
/// thread fills the batch; must not allocate if the steady state is to stay allocation-free.
using example_transform =
    std::function<void(const labeled_images& set, std::size_t index, std::uint64_t epoch, std::span<float> out)>;

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
      : set_(std::move(set)), options_(std::move(options)) {
    const int n = options_.num_workers;
    const int w = options_.worker_index;
    if (n < 1 || w < 0 || w >= n) {
      throw config_error({"data", w}, "worker index " + std::to_string(w) + " is not in [0, " + std::to_string(n) +
                                          ") (num_workers " + std::to_string(n) + ")");
    }
    const auto workers = static_cast<std::size_t>(n);
    if (options_.global_batch == 0 || options_.global_batch % workers != 0) {
      throw config_error({"data", w}, "global batch " + std::to_string(options_.global_batch) +
                                          " is not a positive multiple of the " + std::to_string(n) + " workers");
    }
    batch_ = options_.global_batch / workers;

    worker_counts_.assign(workers, 0);
    for (int v = 0; v < n; ++v) {
      const shard_request request{set_.count(), set_.file_counts(), n, v, options_.global_batch};
      shard_plan plan = options_.policy.resolve(request);
      if (v == 0) {
        mode_ = plan.mode;
      } else if (plan.mode != mode_) {
        throw config_error({"data", w}, "sharding policy '" + std::string(options_.policy.name()) +
                                            "' resolved to different modes on different workers");
      }
      if (plan.mode == shard_mode::file) {
        worker_counts_[static_cast<std::size_t>(v)] = file_examples(plan, w, nullptr);
      }
      if (v == w && plan.mode == shard_mode::file) {
        local_.reserve(worker_counts_[static_cast<std::size_t>(v)]);
        (void)file_examples(plan, w, &local_);
      }
    }

    const std::size_t c = set_.count();
    const std::size_t g = options_.global_batch;
    switch (mode_) {
      case shard_mode::data:
        steps_ = options_.drop_remainder ? c / g : (c + g - 1) / g;
        order_.resize(c);
        break;
      case shard_mode::replicate:
        steps_ = options_.drop_remainder ? c / batch_ : (c + batch_ - 1) / batch_;
        order_.resize(c);
        break;
      case shard_mode::file: {
        const auto [lo, hi] = std::minmax_element(worker_counts_.begin(), worker_counts_.end());
        steps_ = options_.drop_remainder ? *lo / batch_ : (*hi + batch_ - 1) / batch_;
        order_.resize(local_.size());
        break;
      }
    }
    if (steps_ == 0) {
      throw data_error({"data", w}, "",
                       "a data set of " + std::to_string(c) + " examples gives no step of global batch " +
                           std::to_string(g) + " over " + std::to_string(n) + " workers (" +
                           std::string(options_.policy.name()) + " sharding, drop_remainder " +
                           (options_.drop_remainder ? "true" : "false") + ")");
    }
    cursor_ = {0, 0, options_.seed};
    images_.resize(batch_ * set_.example_size());
    labels_.resize(batch_);
  }

  /// The in-order pass an evaluation needs: no shuffle, the partial last batch kept, so every example is read
  /// exactly once per epoch over all workers; weight per-worker metrics by the counts `fill` returns.
  [[nodiscard]] static distributed_batches for_evaluation(labeled_images set, std::size_t global_batch,
                                                          int num_workers, int worker_index,
                                                          any_shard_policy policy = data_shard{},
                                                          example_transform transform = {}) {
    distribution_options o;
    o.global_batch = global_batch;
    o.num_workers = num_workers;
    o.worker_index = worker_index;
    o.shuffle = false;
    o.drop_remainder = false;
    o.policy = std::move(policy);
    o.transform = std::move(transform);
    return {std::move(set), std::move(o)};
  }

  /// Global steps per epoch; the same number on every worker.
  [[nodiscard]] std::size_t steps_per_epoch() const noexcept { return steps_; }
  /// B = G / N: the most examples this worker gets in one step (the size of the buffers `fill` needs).
  [[nodiscard]] std::size_t per_worker_batch() const noexcept { return batch_; }
  /// G.
  [[nodiscard]] std::size_t global_batch() const noexcept { return options_.global_batch; }
  /// Floats per example (rows × cols × channels).
  [[nodiscard]] std::size_t example_size() const noexcept { return set_.example_size(); }
  /// What the sharding policy resolved to.
  [[nodiscard]] shard_mode mode() const noexcept { return mode_; }
  /// The options it was built with.
  [[nodiscard]] const distribution_options& options() const noexcept { return options_; }
  /// The data set.
  [[nodiscard]] const labeled_images& images() const noexcept { return set_; }

  /// The position of the next batch `next` will produce.
  [[nodiscard]] data_cursor cursor() const noexcept { return cursor_; }

  /// Moves to `at` (e.g. from a checkpoint), adopting its seed. A step at or beyond steps_per_epoch() continues
  /// into the following passes (step steps_per_epoch() is the start of the next pass), as a repeated pipeline does.
  void restore(const data_cursor& at) { cursor_ = normalised(at); }

  /// How many examples all workers together read at `at`'s step (the denominator of a count-weighted mean).
  [[nodiscard]] std::size_t global_count(const data_cursor& at) const {
    const data_cursor c = normalised(at);
    switch (mode_) {
      case shard_mode::data: return std::min(options_.global_batch, set_.count() - c.step * options_.global_batch);
      case shard_mode::replicate:
        return static_cast<std::size_t>(options_.num_workers) * part(set_.count(), c.step);
      case shard_mode::file: {
        std::size_t total = 0;
        for (const std::size_t cw : worker_counts_) {
          total += part(cw, c.step);
        }
        return total;
      }
    }
    return 0;
  }

  /// Writes the global indices of this worker's examples at `at` into `out` (at least B long); returns how many.
  std::size_t indices(const data_cursor& at, std::span<std::size_t> out) {
    const auto [first, count] = slice(at);
    check_room(out.size(), batch_, "index");
    std::copy_n(order_.begin() + static_cast<std::ptrdiff_t>(first), count, out.begin());
    return count;
  }

  /// Fills this worker's part of the step at `at`: images as floats in [0, 1] (count × example_size, row-major;
  /// or what the options' transform writes) and int64 labels; returns count (B on a full step, fewer or 0 on a
  /// partial last one; the rest of the buffers is left as it was). The buffers need room for B examples. Does not
  /// move the cursor; allocates nothing (nor may the transform).
  std::size_t fill(const data_cursor& at, std::span<float> images, std::span<std::int64_t> labels) {
    check_room(images.size(), batch_ * set_.example_size(), "image");
    check_room(labels.size(), batch_, "label");
    const auto [first, count] = slice(at);
    const std::size_t per = set_.example_size();
    const std::uint64_t epoch = normalised(at).epoch;
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t example = order_[first + i];
      if (options_.transform) {
        options_.transform(set_, example, epoch, images.subspan(i * per, per));
      } else {
        set_.normalized(example, images.subspan(i * per, per));
      }
      labels[i] = set_.label(example);
    }
    return count;
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
  // A step at or beyond the end of a pass continues into the following passes, as a repeated pipeline does
  // (`fit` with steps_per_epoch larger than a pass reads on into the next, reshuffled, pass).
  [[nodiscard]] data_cursor normalised(data_cursor at) const noexcept {
    if (at.step >= steps_) {
      at.epoch += at.step / steps_;
      at.step %= steps_;
    }
    return at;
  }

  void advance() noexcept {
    if (++cursor_.step >= steps_) {
      cursor_.step = 0;
      ++cursor_.epoch;
    }
  }

  void check_room(std::size_t have, std::size_t need, const char* what) const {
    if (have < need) {
      throw config_error({"data", options_.worker_index},
                         std::string(what) + " buffer of " + std::to_string(have) + " elements is smaller than the " +
                             std::to_string(need) + " one batch of " + std::to_string(batch_) + " needs");
    }
  }

  // Examples of the (local or global) order in step `step` when walked in batches of B.
  [[nodiscard]] std::size_t part(std::size_t total, std::uint64_t step) const noexcept {
    const std::size_t begin = static_cast<std::size_t>(step) * batch_;
    return begin >= total ? 0 : std::min(batch_, total - begin);
  }

  // [first, first + count) of order_ for `at`, computing that epoch's order if it is not the cached one.
  [[nodiscard]] std::pair<std::size_t, std::size_t> slice(const data_cursor& raw) {
    const data_cursor at = normalised(raw);
    prepare_order(at);
    if (mode_ == shard_mode::data) {
      const std::size_t g = options_.global_batch;
      const auto n = static_cast<std::size_t>(options_.num_workers);
      const auto w = static_cast<std::size_t>(options_.worker_index);
      const std::size_t begin = static_cast<std::size_t>(at.step) * g;
      const std::size_t in_step = std::min(g, set_.count() - begin);
      const std::size_t lo = begin + in_step * w / n;
      const std::size_t hi = begin + in_step * (w + 1) / n;
      return {lo, hi - lo};
    }
    const std::size_t count = part(order_.size(), at.step);
    return {count == 0 ? 0 : static_cast<std::size_t>(at.step) * batch_, count};
  }

  void prepare_order(const data_cursor& at) {
    const std::uint64_t key = options_.reshuffle_each_epoch ? at.epoch : 0;
    if (order_ready_ && key == order_epoch_ && at.seed == order_seed_) {
      return;
    }
    if (options_.shuffle) {
      detail::fill_permutation(order_, detail::stream_seed(at.seed, key));
    } else {
      std::iota(order_.begin(), order_.end(), std::size_t{0});
    }
    if (mode_ == shard_mode::file) {
      for (std::size_t& i : order_) {
        i = local_[i];
      }
    }
    order_ready_ = true;
    order_epoch_ = key;
    order_seed_ = at.seed;
  }

  // The number of examples in `plan`'s files; appends their global indices to `out` when given.
  [[nodiscard]] std::size_t file_examples(const shard_plan& plan, int rank, std::vector<std::size_t>* out) const {
    const auto counts = set_.file_counts();
    std::vector<std::size_t> offsets(counts.size() + 1, 0);
    std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
    std::size_t total = 0;
    for (const std::size_t f : plan.files) {
      if (f >= counts.size()) {
        throw config_error({"data", rank}, "sharding policy '" + std::string(options_.policy.name()) +
                                               "' chose file " + std::to_string(f) + " of " +
                                               std::to_string(counts.size()));
      }
      total += counts[f];
      if (out != nullptr) {
        for (std::size_t i = offsets[f]; i < offsets[f + 1]; ++i) {
          out->push_back(i);
        }
      }
    }
    return total;
  }

  labeled_images set_;
  distribution_options options_;
  shard_mode mode_ = shard_mode::data;
  std::size_t batch_ = 0;
  std::size_t steps_ = 0;
  std::vector<std::size_t> worker_counts_;  // file mode: examples of each worker's files
  std::vector<std::size_t> local_;          // file mode: global indices of this worker's examples
  std::vector<std::size_t> order_;          // this epoch's order (global indices)
  bool order_ready_ = false;
  std::uint64_t order_epoch_ = 0;
  std::uint64_t order_seed_ = 0;
  data_cursor cursor_;
  std::vector<float> images_;
  std::vector<std::int64_t> labels_;
};

}  // namespace mwstrat::data
