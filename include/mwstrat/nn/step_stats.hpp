#pragma once
/// \file
/// `nn::step_stats`: what one training or evaluation step of a model returns (every model of nn/, and what `fit`
/// sums into an epoch's loss and accuracy).

#include <cstddef>

namespace mwstrat::nn {

/// Loss and accuracy counts of one batch: the mean loss is loss_sum / count, the accuracy correct / count.
struct step_stats {
  double loss_sum = 0;     ///< sum over the batch of the per-sample loss
  std::size_t correct = 0; ///< samples whose arg-max logit is the label
  std::size_t count = 0;   ///< samples in the batch
};

}  // namespace mwstrat::nn
