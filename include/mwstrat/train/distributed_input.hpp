#pragma once
/// \file
/// `distributed_input`: a data set as `fit` sees it — this worker's share of every global batch, as a pure
/// function of (epoch, step), so a resumed job reads exactly the examples it would have read.
///
/// It wraps `data::distributed_batches` (an in-memory set) or `data::record_batches` (TFRecord files, streamed):
/// shuffle by seed and epoch, sharding policy, global batch = per-worker batch × workers. Its buffers are its own:
/// no allocation per step.
///
/// **Prefetch.** When `batch_at(e, s)` returns, a thread of the input's own is already filling step s + 1 (the
/// next step of a repeated pipeline) into a second pair of buffers, so decoding and augmentation run beside the
/// training step rather than before it; the next `batch_at(e, s + 1)` only swaps buffers. A call for another
/// step than the one prefetched (a resume, the first step of an evaluation) fills it there and then. Because a
/// step's batch is a pure function of (seed, epoch, step), prefetching changes no bit of any batch. A failure
/// while prefetching (a corrupt record) is thrown by the `batch_at` that asks for that step, and by no other.

#include <mwstrat/data/cursor.hpp>
#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/record_batches.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace mwstrat {

/// This worker's batches of an image set, for `fit` and `evaluate`.
class distributed_input {
 public:
  /// Training input: shuffled with `seed` (reshuffled every epoch), only full global batches of `global_batch`
  /// examples, split among `strategy`'s replicas by `policy`. A job starts on a multiple of its workers
  /// (config_error otherwise); a worker that joined a running elastic job takes its share of the job's global batch
  /// as the members do after a resize, even where the shares are uneven (12 over 5: 2, 2, 3, 2, 3).
  template <class Strategy>
  distributed_input(data::labeled_images set, std::size_t global_batch, const Strategy& strategy, std::uint64_t seed,
                    data::any_shard_policy policy = data::auto_shard{})
      : distributed_input(data::distributed_batches(
            std::move(set), training_options(global_batch, uneven_joiner(global_batch, strategy)
                                                               ? 1
                                                               : strategy.num_replicas_in_sync(),
                                             uneven_joiner(global_batch, strategy) ? 0 : strategy.replica_id(), seed,
                                             std::move(policy)))) {
    if (uneven_joiner(global_batch, strategy)) reshard(strategy.num_replicas_in_sync(), strategy.replica_id());
  }

  /// Any distribution of an in-memory set (evaluation order, a partial last batch, no sharding, ...).
  explicit distributed_input(data::distributed_batches batches)
      : state_(std::make_unique<state>(std::move(batches))) {}

  /// A set streamed from TFRecord files, distributed as `batches` says.
  explicit distributed_input(data::record_batches batches) : state_(std::make_unique<state>(std::move(batches))) {}

  /// Records in `files` (paths; `data::list_files` expands globs) as `strategy`'s replicas read them: `options`
  /// with its worker count and index taken from the strategy, and under file sharding the workers' record counts
  /// exchanged over the strategy's collective (no worker opens another's files). A collective call: every
  /// worker makes it.
  template <class Strategy>
  [[nodiscard]] static distributed_input from_records(std::vector<std::filesystem::path> files,
                                                      data::record_image_format format,
                                                      data::distribution_options options, Strategy& strategy,
                                                      data::record_batch_options reading = {}) {
    options.num_workers = strategy.num_replicas_in_sync();
    options.worker_index = strategy.replica_id();
    if (!reading.exchange_counts) {
      reading.exchange_counts = [&strategy](std::span<const std::size_t> mine) {
        const std::size_t n_files = mine.size();
        const auto workers = static_cast<std::size_t>(strategy.num_replicas_in_sync());
        std::vector<std::int64_t> own(mine.begin(), mine.end());
        std::vector<std::int64_t> all(n_files * workers);
        strategy.collective().all_gather(std::span<const std::int64_t>(own), std::span<std::int64_t>(all));
        std::vector<std::size_t> counts(n_files, 0);
        for (std::size_t w = 0; w < workers; ++w) {
          for (std::size_t f = 0; f < n_files; ++f) {
            counts[f] = std::max(counts[f], static_cast<std::size_t>(all[w * n_files + f]));
          }
        }
        return counts;
      };
    }
    const std::string policy(options.policy.name());
    data::record_batches batches(std::move(files), std::move(format), std::move(options), std::move(reading));
    if (strategy.is_chief()) {
      // Once, by the chief: what the policy resolved to (AUTO decides by the number of files, as TensorFlow does).
      std::clog << "[mwstrat.data] " << policy << " sharding of " << batches.files().size() << " file(s) over "
                << batches.options().num_workers << " worker(s): " << data::to_string(batches.mode())
                << (batches.mode() == data::shard_mode::file ? " (each worker opens only its own files)" : "")
                << ", " << batches.steps_per_epoch() << " steps per pass\n";
    }
    return distributed_input(std::move(batches));
  }

  /// Evaluation input: the set in file order, every example once over all workers, the last batch partial.
  template <class Strategy>
  [[nodiscard]] static distributed_input for_evaluation(data::labeled_images set, std::size_t global_batch,
                                                        const Strategy& strategy) {
    return distributed_input(data::distributed_batches::for_evaluation(
        std::move(set), global_batch, strategy.num_replicas_in_sync(), strategy.replica_id()));
  }

  /// Global steps per epoch (the same on every worker).
  [[nodiscard]] std::size_t steps_per_epoch() const {
    return std::visit([](const auto& b) { return b.steps_per_epoch(); }, state_->source);
  }

  /// This worker's part of global step `step` of epoch `epoch`; valid until the next call.
  data::image_batch batch_at(std::size_t epoch, std::size_t step) { return state_->batch_at(epoch, step); }

  /// The set's indices of the examples of `batch_at(epoch, step)`, in the same order, written into `out` (at least
  /// one batch long); returns how many.
  std::size_t indices_at(std::size_t epoch, std::size_t step, std::span<std::size_t> out) {
    return state_->indices_at(epoch, step, out);
  }

  /// How many examples all workers together read at step `step` of epoch `epoch` (G on a full step): what `fit`
  /// weights a worker's gradients by when the shares of a step are uneven (after an elastic resize).
  [[nodiscard]] std::size_t global_count_at(std::size_t epoch, std::size_t step) const {
    const data::data_cursor at = state_->normalised(epoch, step);
    return std::visit([&](const auto& b) { return b.global_count(at); }, state_->source);
  }

  /// Elastic training (`in_memory_recovery_options::min_workers`): the same global batches from now on split over
  /// `num_workers` workers, this one `worker_index` of them (`data::distributed_batches::reshard`). `fit` calls it
  /// after the job has shrunk. Only an in-memory set under data sharding can (config_error otherwise: a record
  /// set streams by files).
  void reshard(int num_workers, int worker_index) { state_->reshard(num_workers, worker_index); }

  /// Whether `reshard` can: an in-memory set under data sharding. `fit` asks at its start, so that an elastic job
  /// with data it could not reshard is refused before it trains rather than when it shrinks.
  [[nodiscard]] bool can_reshard() const {
    const auto* b = std::get_if<data::distributed_batches>(&state_->source);
    return b != nullptr && b->mode() == data::shard_mode::data;
  }

  /// What an elastic job compares with a joiner's (`data::distributed_batches::data_fingerprint`); 0 for records
  /// streamed from files (their shape is still compared).
  [[nodiscard]] std::uint64_t data_fingerprint() const {
    const auto* b = std::get_if<data::distributed_batches>(&state_->source);
    return b != nullptr ? b->data_fingerprint() : 0;
  }

  /// False: every step is filled when it is asked for (no prefetch thread). For measuring what prefetch saves.
  void set_prefetch(bool on) { state_->prefetch = on; }

  /// The in-memory distribution underneath; throws config_error for a set streamed from records.
  [[nodiscard]] data::distributed_batches& batches() {
    state_->wait_idle();
    if (auto* b = std::get_if<data::distributed_batches>(&state_->source)) return *b;
    throw config_error({"train"}, "distributed_input: this input streams records; there is no in-memory set "
                                  "(sample and class weights need one)");
  }

  /// The record distribution underneath; throws config_error for an in-memory set.
  [[nodiscard]] data::record_batches& records() {
    state_->wait_idle();
    if (auto* b = std::get_if<data::record_batches>(&state_->source)) return *b;
    throw config_error({"train"}, "distributed_input: this input is an in-memory set, not records");
  }

 private:
  // A worker that joined a running job whose global batch its new group cannot split evenly: built as the whole
  // job's one worker, then resharded (fit reshards a joiner again, once it holds the job's state).
  template <class Strategy>
  static bool uneven_joiner(std::size_t global_batch, const Strategy& strategy) {
    if constexpr (requires { { strategy.joined_collective() } -> std::convertible_to<bool>; }) {
      const auto n = static_cast<std::size_t>(strategy.num_replicas_in_sync());
      return strategy.joined_collective() && n > 0 && global_batch % n != 0;
    } else {
      (void)global_batch;
      (void)strategy;
      return false;
    }
  }

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

  // One step's batch: its examples' floats, labels and set indices.
  struct filled {
    std::vector<float> images;
    std::vector<std::int64_t> labels;
    std::vector<std::size_t> indices;
    std::size_t count = 0;
    std::optional<data::data_cursor> at;  // the step it holds (normalised), if any
    std::exception_ptr failure;           // set instead when filling it threw
  };

  // On the heap, so that the prefetch thread's `this` stays valid when the input is moved.
  struct state {
    template <class Batches>
    explicit state(Batches b) : source(std::move(b)) {
      std::visit(
          [&](auto& batches) {
            for (filled* f : {&front, &back}) {
              f->images.resize(batches.per_worker_batch() * batches.example_size());
              f->labels.resize(batches.per_worker_batch());
              f->indices.resize(batches.per_worker_batch());
            }
            seed = batches.options().seed;
          },
          source);
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      {
        const std::lock_guard lock(mutex);
        stopping = true;
      }
      wake.notify_all();
      if (thread.joinable()) thread.join();
    }

    [[nodiscard]] data::data_cursor normalised(std::size_t epoch, std::size_t step) const {
      const data::data_cursor raw{epoch, step, seed};
      return std::visit([&](const auto& b) { return b.normalised(raw); }, source);
    }

    // Fills `f` with the step at `at` (only ever one thread at a time: the caller when idle, else the prefetcher).
    void fill(filled& f, const data::data_cursor& at) {
      f.at = at;
      f.failure = nullptr;
      try {
        std::visit(
            [&](auto& b) {
              f.count = b.fill(at, f.images, f.labels);
              (void)b.indices(at, f.indices);
            },
            source);
      } catch (...) {
        f.failure = std::current_exception();
        f.count = 0;
      }
    }

    void reshard(int num_workers, int worker_index) {
      wait_idle();
      auto* b = std::get_if<data::distributed_batches>(&source);
      if (b == nullptr) {
        throw config_error({"train", worker_index},
                           "distributed_input::reshard: this input streams records, which cannot be resharded yet "
                           "(an elastic job needs an in-memory set under data sharding)");
      }
      b->reshard(num_workers, worker_index);
      for (filled* f : {&front, &back}) {
        f->images.resize(b->per_worker_batch() * b->example_size());
        f->labels.resize(b->per_worker_batch());
        f->indices.resize(b->per_worker_batch());
        f->at.reset();  // filled for the old split
        f->failure = nullptr;
      }
    }

    void wait_idle() {
      std::unique_lock lock(mutex);
      idle.wait(lock, [&] { return !busy; });
    }

    data::image_batch batch_at(std::size_t epoch, std::size_t step) {
      const data::data_cursor at = normalised(epoch, step);
      wait_idle();
      if (back.at == at) {
        std::swap(front, back);
      } else if (front.at != at) {
        fill(front, at);
      }
      back.at.reset();
      if (front.failure) {
        const std::exception_ptr failure = front.failure;
        front.at.reset();
        front.failure = nullptr;
        std::rethrow_exception(failure);
      }
      if (prefetch) schedule({at.epoch, at.step + 1, at.seed});
      const std::size_t per = front.count == 0 ? 0 : front.images.size() / front.labels.size();
      return {std::span<const float>(front.images).first(front.count * per),
              std::span<const std::int64_t>(front.labels).first(front.count), front.count};
    }

    std::size_t indices_at(std::size_t epoch, std::size_t step, std::span<std::size_t> out) {
      const data::data_cursor at = normalised(epoch, step);
      if (front.at == at && !front.failure) {  // the batch just returned: its indices were kept with it
        const std::size_t n = std::min(front.count, out.size());
        std::copy_n(front.indices.begin(), n, out.begin());
        return n;
      }
      wait_idle();
      return std::visit([&](auto& b) { return b.indices(at, out); }, source);
    }

    void schedule(const data::data_cursor& raw) {
      const data::data_cursor next = std::visit([&](const auto& b) { return b.normalised(raw); }, source);
      {
        const std::lock_guard lock(mutex);
        wanted = next;
        busy = true;
      }
      if (!thread.joinable()) thread = std::thread([this] { serve(); });
      wake.notify_one();
    }

    void serve() {
      for (;;) {
        data::data_cursor at;
        {
          std::unique_lock lock(mutex);
          wake.wait(lock, [&] { return stopping || wanted.has_value(); });
          if (stopping) return;
          at = *wanted;
          wanted.reset();
        }
        fill(back, at);
        {
          const std::lock_guard lock(mutex);
          busy = false;
        }
        idle.notify_all();
      }
    }

    std::variant<data::distributed_batches, data::record_batches> source;
    std::uint64_t seed = 0;
    bool prefetch = true;
    filled front;  // the batch last returned
    filled back;   // the prefetched one
    std::mutex mutex;
    std::condition_variable wake;  // a step is wanted, or stop
    std::condition_variable idle;  // the prefetch finished
    std::optional<data::data_cursor> wanted;
    bool busy = false;
    bool stopping = false;
    std::thread thread;
  };

  std::unique_ptr<state> state_;
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
