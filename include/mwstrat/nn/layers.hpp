#pragma once
/// \file
/// Layer descriptions for `nn::sequential`: small value types that read like their Keras namesakes.
///
///     nn::sequential model{
///         nn::input{{28, 28}},
///         nn::reshape{{28, 28, 1}},
///         nn::conv2d{32, {3, 3}, nn::activation::relu},
///         nn::flatten{},
///         nn::dense{128, nn::activation::relu},
///         nn::dense{10}};
///
/// Data layout is channels-last (NHWC) as in Keras. A description holds no weights: the model builds the
/// layer, gives it its slice of the parameter arena and initialises it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>
#include <vector>

namespace mwstrat::nn {

/// Extents of one sample (the batch dimension is never part of a shape).
using shape_t = std::vector<std::size_t>;

/// An activation fused into a layer, as Keras's `activation=` argument.
enum class activation { linear, relu };

/// Convolution and pooling padding, as in Keras: `valid` (no padding) or `same` (output = ceil(input/stride)).
enum class padding { valid, same };

/// The model's input: the shape of one sample (`InputLayer(input_shape=...)`).
struct input {
  shape_t shape;  ///< e.g. {28, 28}
};

/// Reshapes each sample without moving data (`Reshape(target_shape=...)`).
struct reshape {
  shape_t target_shape;  ///< same number of elements as the incoming shape
};

/// 2-D convolution over (height, width, channels) samples (`Conv2D`). Kernel [kh][kw][in][filters], bias [filters].
struct conv2d {
  std::size_t filters = 0;                           ///< output channels
  std::array<std::size_t, 2> kernel_size = {3, 3};   ///< (height, width)
  nn::activation activation = nn::activation::linear;  ///< fused activation
  std::array<std::size_t, 2> strides = {1, 1};       ///< (height, width)
  nn::padding padding = nn::padding::valid;          ///< valid or same
};

/// Max pooling over (height, width) windows of each channel (`MaxPooling2D`).
struct max_pool2d {
  std::array<std::size_t, 2> pool_size = {2, 2};  ///< (height, width)
  std::array<std::size_t, 2> strides = {0, 0};    ///< (height, width); {0, 0} means pool_size, as in Keras
  nn::padding padding = nn::padding::valid;       ///< valid or same
};

/// Rectified linear unit, max(0, x) (`ReLU`).
struct relu {};

/// Flattens each sample to one dimension without moving data (`Flatten`).
struct flatten {};

/// Fully connected layer on the last axis (`Dense`). Its kernel is stored [units][inputs] (output-major), which
/// lets all three products of training run without a transpose; its bias is [units].
struct dense {
  std::size_t units = 0;                               ///< output features
  nn::activation activation = nn::activation::linear;  ///< fused activation
};

/// Inverted dropout (`Dropout`): in training, zeroes each element with probability `rate` and scales the rest by
/// 1 / (1 - rate); the identity in evaluation. The mask is a pure function of (seed, model step, element).
struct dropout {
  double rate = 0.5;        ///< in [0, 1)
  std::uint64_t seed = 0;   ///< mixed with the model's seed
};

/// Softmax over the last axis (`Softmax`). The reference model keeps logits and uses the loss from logits.
struct softmax {};

/// Any layer description.
using layer_spec = std::variant<input, reshape, conv2d, max_pool2d, relu, flatten, dense, dropout, softmax>;

}  // namespace mwstrat::nn
