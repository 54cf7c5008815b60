#pragma once
// The MNIST tutorial's CNN as a libtorch module and its training step for mwstrat::libtorch::module_model: one
// definition for the example and for benchmarks/libtorch, which times this very model against PyTorch's DDP.
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/libtorch/module_model.hpp>

#include <torch/torch.h>

#include <cstdint>

namespace libtorch_mnist {

// The tutorial's model: Conv2D(32, 3, relu) → Flatten → Dense(128, relu) → Dense(10).
struct cnn : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 26 * 26, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1->forward(x));
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
};

// The batch's images as a tensor over mwstrat's buffer (no copy), N × 1 × 28 × 28.
inline torch::Tensor images(const mwstrat::data::image_batch& b) {
  return torch::from_blob(const_cast<float*>(b.inputs.data()), {static_cast<std::int64_t>(b.size), 1, 28, 28});
}

// Forward and cross-entropy of one batch (module_model runs the backward).
inline mwstrat::libtorch::classified classify(cnn& n, const mwstrat::data::image_batch& b) {
  const torch::Tensor labels =
      torch::from_blob(const_cast<std::int64_t*>(b.labels.data()), {static_cast<std::int64_t>(b.size)}, torch::kInt64);
  const torch::Tensor logits = n.forward(images(b));
  return {torch::nn::functional::cross_entropy(logits, labels), logits, labels};
}

}  // namespace libtorch_mnist
