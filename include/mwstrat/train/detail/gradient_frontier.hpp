#pragma once
// Gradients of a tensor sequence become final in whatever order the user's backward finishes them (a layer's bias
// before its weight, parallel branches in any order); gradient synchronisation wants them as a suffix of the arena
// that grows last-first (bucketed_reduction). The frontier turns the first into the second: tensor i is final
// (`mark`), and the run of tensors that has just joined the final suffix is what can be reported. This is DDP's
// "buckets are reduced in order" rule, per tensor. Nothing allocates after construction.

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace mwstrat::detail {

class gradient_frontier {
 public:
  explicit gradient_frontier(std::size_t tensors) : final_(tensors, 0), next_(tensors) {}

  /// A new step: no tensor final.
  void begin() {
    std::fill(final_.begin(), final_.end(), char{0});
    next_ = final_.size();
  }

  /// Whether tensor `i` is final already this step.
  [[nodiscard]] bool is_final(std::size_t i) const { return final_[i] != 0; }

  /// Tensor `i` (not final yet) is final now. Returns the tensors [first, last) that have just joined the final
  /// suffix (empty when a later tensor is still missing).
  std::pair<std::size_t, std::size_t> mark(std::size_t i) {
    final_[i] = 1;
    const std::size_t last = next_;
    while (next_ > 0 && final_[next_ - 1] != 0) --next_;
    return {next_, last};
  }

  /// The number of tensors not yet in the final suffix.
  [[nodiscard]] std::size_t unreported() const { return next_; }

 private:
  std::vector<char> final_;  // per tensor: final this step
  std::size_t next_;         // tensors [next_, n) are final and reported
};

}  // namespace mwstrat::detail
