#pragma once
/// \file
/// `epoch_batches<B>`: a `dataset<B>` pipeline as what `fit` reads (a `batch_source`), as tf.data feeds Keras's fit.
///
/// `fit` asks for `batch_at(epoch, step)`, a pure function of its arguments, so that a restarted job sees exactly
/// the batches it would have seen. A `dataset` is a stream whose shuffles count the passes they start, so the
/// adapter does not keep one dataset across epochs: it asks `make_epoch(epoch)` for the pipeline of that epoch
/// (seed its shuffle with the epoch), already sharded for this worker and batched:
///
///     data::epoch_batches<batch> train(
///         [&](std::uint64_t epoch) {
///           return data::from_vector(examples).shuffle(seed + epoch).shard(num_workers, worker_index)
///                      .batch(per_worker_batch, /*drop_remainder=*/true).map(to_batch);
///         },
///         examples.size() / (per_worker_batch * num_workers));   // steps per epoch: the same on every worker
///     fit(strategy, model, optimizer, train, options);
///
/// Sharding elements before batching (`shard(N, w)` then `batch(b)`) gives worker w the elements w, w+N, ... of the
/// epoch's order, so global step s covers elements [s·N·b, (s+1)·N·b) of that order on N workers together: the
/// same examples one worker with batch N·b would see. Reading in order costs one element per step; a jump (the
/// first step after a restore, or evaluation restarting at step 0) starts the epoch's pass again and skips ahead.
/// An epoch whose pass ends before `steps_per_epoch` batches is a `data_error`.

#include <mwstrat/data/dataset.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace mwstrat::data {

/// A `batch_source` over per-epoch `dataset<B>` pipelines (see the file comment).
template <class B>
class epoch_batches {
 public:
  /// `make_epoch(epoch)`: this worker's batched pipeline of `epoch`, a pure function of it. `steps_per_epoch`:
  /// the global steps in an epoch, the same on every worker (at most the batches each worker's pass yields).
  epoch_batches(std::function<dataset<B>(std::uint64_t)> make_epoch, std::size_t steps_per_epoch)
      : make_epoch_(std::move(make_epoch)), steps_(steps_per_epoch) {}

  /// The global steps in an epoch.
  [[nodiscard]] std::size_t steps_per_epoch() const noexcept { return steps_; }

  /// This worker's batch of global step `step` of `epoch`; valid until the next call.
  const B& batch_at(std::size_t epoch, std::size_t step) {
    if (!pass_ || epoch != epoch_ || step < position_) {
      pass_.emplace(make_epoch_(static_cast<std::uint64_t>(epoch)).make_iterator());
      epoch_ = epoch;
      position_ = 0;
      current_ = pass_->next();
    }
    while (position_ < step && current_) {
      current_ = pass_->next();
      ++position_;
    }
    if (!current_) {
      pass_.reset();
      throw data_error({"data"}, "",
                       "epoch_batches: the pipeline of epoch " + std::to_string(epoch) + " ended before step " +
                           std::to_string(step) + " (steps_per_epoch is " + std::to_string(steps_) + ")");
    }
    return *current_;
  }

 private:
  std::function<dataset<B>(std::uint64_t)> make_epoch_;
  std::size_t steps_;
  std::optional<typename dataset<B>::iterator> pass_;
  std::optional<B> current_;
  std::size_t epoch_ = 0;
  std::size_t position_ = 0;  // the step `current_` belongs to
};

}  // namespace mwstrat::data
