#pragma once
/// \file
/// Mean-reduces a gradient arena in buckets while backward is still running.
///
/// A model's backward pass finishes its layers last-first, so the final gradients grow as a suffix of the arena
/// `[ready, end)`. Each time the part of that suffix not yet sent reaches `bucket_floats`, it is handed to the
/// collective's asynchronous all-reduce, and backward goes on computing earlier layers meanwhile. `finish()`
/// sends the rest and waits for every bucket in issue order. Bucket boundaries depend only on the layer sizes and
/// `bucket_floats`, so every replica issues the same operations and results are the same bits every run.
/// Nothing is allocated per step.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// Overlaps the mean all-reduce of one gradient arena with the backward pass that fills it.
template <class Collective>
  requires collective<Collective>
class bucketed_reduction {
 public:
  using handle_type =
      decltype(std::declval<Collective&>().all_reduce_async(std::declval<std::span<float>>(), reduce_op::mean));

  /// `gradients` is the whole arena; buckets hold at least `bucket_floats`: whole reported slices, which are whole
  /// layers or the parts a layer reports during its backward (a large dense kernel's last units first).
  bucketed_reduction(Collective& c, std::span<float> gradients, std::size_t bucket_floats)
      : collective_(&c), gradients_(gradients), bucket_floats_(bucket_floats == 0 ? 1 : bucket_floats) {
    in_flight_.reserve(16);  // grows once, in the first step, if the model has more buckets
    begin();
  }

  /// Starts a new step: nothing ready, nothing sent.
  void begin() {
    ready_ = gradients_.size();
    unsent_end_ = gradients_.size();
    in_flight_.clear();
  }

  /// The slice `[offset, offset + count)` of the arena is final. Slices must arrive last-first and contiguous.
  void on_ready(std::size_t offset, std::size_t count) {
    if (offset + count != ready_) {
      throw config_error({"strategy", collective_->rank()},
                         "gradient slice [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                             ") became ready out of order (expected one ending at " + std::to_string(ready_) +
                             "): a model must report its layers' gradients last layer first");
    }
    ready_ = offset;
    if (unsent_end_ - ready_ >= bucket_floats_) send(ready_, unsent_end_);
  }

  /// Sends whatever is left and waits for every bucket; the arena then holds the mean over all replicas.
  void finish() {
    if (ready_ != 0) {
      throw config_error({"strategy", collective_->rank()},
                         "backward reported gradients only down to offset " + std::to_string(ready_) +
                             " of " + std::to_string(gradients_.size()));
    }
    if (unsent_end_ > 0) send(0, unsent_end_);
    // Every bucket is waited for before an error is rethrown: none may still write into the arena afterwards.
    std::exception_ptr first_failure;
    for (auto& h : in_flight_) {
      try {
        h.wait();
      } catch (...) {
        if (!first_failure) first_failure = std::current_exception();
      }
    }
    buckets_sent_ = in_flight_.size();
    in_flight_.clear();
    if (first_failure) std::rethrow_exception(first_failure);
  }

  /// Waits for every bucket still in flight and drops their errors: for a step being abandoned (backward threw), so
  /// that no all-reduce writes into the arena once the caller has unwound. Never throws; each wait is bounded by
  /// its operation's deadline.
  void abandon() noexcept {
    for (auto& h : in_flight_) {
      try {
        h.wait();
      } catch (...) {  // the step is failing already; its own error is the one that propagates
      }
    }
    in_flight_.clear();
  }

  /// How many buckets the last step sent (for tests and tuning).
  [[nodiscard]] std::size_t buckets_sent() const noexcept { return buckets_sent_; }
  /// How many buckets of this step have left so far (for tests: whether one leaves while backward still runs).
  [[nodiscard]] std::size_t buckets_in_flight() const noexcept { return in_flight_.size(); }

 private:
  void send(std::size_t from, std::size_t to) {
    in_flight_.push_back(collective_->all_reduce_async(gradients_.subspan(from, to - from), reduce_op::mean));
    unsent_end_ = from;
  }

  Collective* collective_;
  std::span<float> gradients_;
  std::size_t bucket_floats_;
  std::size_t ready_ = 0;       // gradients_[ready_, end) are final
  std::size_t unsent_end_ = 0;  // gradients_[ready_, unsent_end_) are final but not sent yet
  std::size_t buckets_sent_ = 0;
  std::vector<handle_type> in_flight_;
};

}  // namespace mwstrat
