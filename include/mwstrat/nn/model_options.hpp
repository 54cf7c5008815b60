#pragma once
/// \file
/// `nn::model_options`: how a model of nn/ (`nn::sequential`, `nn::graph_model`) is built and run.

#include <cstddef>
#include <cstdint>

namespace mwstrat::nn {

/// How a model is built and run.
struct model_options {
  int threads = 1;          ///< threads of the model's oneTBB arena (results do not depend on it)
  std::uint64_t seed = 0;   ///< seed of the initialisers and dropout masks
  std::size_t max_batch = 0;///< if non-zero, buffers for this batch size are allocated at construction
  /// The loss's label smoothing ε in [0, 1]: the sparse cross-entropy's target is (1 − ε)·onehot + ε/K, as with
  /// Keras's `CategoricalCrossentropy(label_smoothing=ε)`. Training and evaluation report the same smoothed loss
  /// (as Keras's compiled loss does); accuracy is unaffected.
  double label_smoothing = 0.0;
};

}  // namespace mwstrat::nn
