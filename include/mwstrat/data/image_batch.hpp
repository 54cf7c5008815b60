#pragma once
/// \file
/// `image_batch`: the batch of the library's image pipelines (MNIST, CIFAR-10): what `distributed_input` yields and
/// what `nn::sequential` trains on. It lives with the data, not in the trainer's concepts: `fit` asks a model for
/// `train_batch(batch, on_ready)` with whatever batch type its `batch_source` yields, and this is one of them.

#include <cstddef>
#include <cstdint>
#include <span>

namespace mwstrat::data {

/// A batch of images (`size` × example floats, row-major) and their class labels.
struct image_batch {
  std::span<const float> inputs;          ///< `size` examples, each `inputs.size() / size` floats
  std::span<const std::int64_t> labels;   ///< `size` class indices
  std::size_t size = 0;                   ///< the number of examples
};

/// Examples [first, first + count) of `b`, a view: how `fit` splits a batch into micro-batches
/// (`fit_options::max_micro_batch`, train/micro_batches.hpp).
inline image_batch mwstrat_micro_batch(const image_batch& b, std::size_t first, std::size_t count) {
  const std::size_t per = b.size == 0 ? 0 : b.inputs.size() / b.size;
  return {b.inputs.subspan(first * per, count * per), b.labels.subspan(first, count), count};
}

}  // namespace mwstrat::data
