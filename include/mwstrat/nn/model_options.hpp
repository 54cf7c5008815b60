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
};

}  // namespace mwstrat::nn
