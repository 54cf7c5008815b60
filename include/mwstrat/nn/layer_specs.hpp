#pragma once
/// \file
/// Layer descriptions (`nn::layer_spec`, `nn::graph_layer_spec`): small value types that read like their Keras
/// namesakes, which `nn::sequential` and the graph model make layers from (the layers themselves: nn/layers/).
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
#include <initializer_list>
#include <variant>
#include <vector>

namespace mwstrat::nn {

/// Extents of one sample (the batch dimension is never part of a shape).
using shape_t = std::vector<std::size_t>;

/// An activation fused into a layer, as Keras's `activation=` argument. `softmax` is allowed on a graph model's
/// output layer only: the loss is then computed from the logits before it (the same math, without the overflow).
enum class activation { linear, relu, softmax };

/// How a kernel is initialised, as Keras's `kernel_initializer=`: `glorot_uniform` (Keras's default) or
/// `he_normal` (truncated normal, stddev sqrt(2 / fan_in), cut at two standard deviations).
enum class initializer { glorot_uniform, he_normal };

/// Convolution and pooling padding, as in Keras: `valid` (no padding) or `same` (output = ceil(input/stride)).
enum class padding { valid, same };

/// How a float Conv2D computes: `automatic` takes the fastest kernels for its shape (Winograd F(4x4, 3x3) for a 3x3
/// stride-1 forward pass and data gradient: about 2x faster, with rounding errors about 5x the direct sum's, rms
/// ~1e-6 of the output's size); `direct` never takes Winograd (direct sums, as the kernel is written). Either way
/// the bits are the same for any thread count and batch split; they differ between the two.
enum class conv_algorithm { automatic, direct };

/// The model's input: the shape of one sample (`InputLayer(input_shape=...)`).
struct input {
  shape_t shape;  ///< e.g. {28, 28}
};

/// Reshapes each sample without moving data (`Reshape(target_shape=...)`).
struct reshape {
  shape_t target_shape;  ///< same number of elements as the incoming shape
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// 2-D convolution over (height, width, channels) samples (`Conv2D`). Kernel [kh][kw][in][filters], bias [filters].
struct conv2d {
  std::size_t filters = 0;                           ///< output channels
  std::array<std::size_t, 2> kernel_size = {3, 3};   ///< (height, width)
  nn::activation activation = nn::activation::linear;  ///< fused activation
  std::array<std::size_t, 2> strides = {1, 1};       ///< (height, width)
  nn::padding padding = nn::padding::valid;          ///< valid or same
  bool use_bias = true;                              ///< Keras's `use_bias`
  nn::initializer kernel_initializer = nn::initializer::glorot_uniform;  ///< bias starts at zero
  double kernel_regularizer = 0;  ///< L2 factor λ: the loss gains λ·Σ kernel² (Keras's `regularizers.l2(λ)`)
  double bias_regularizer = 0;    ///< L2 factor on the bias
  /// Which kernels compute it (not part of the model: a model saved with one loads and resumes with the other).
  nn::conv_algorithm algorithm = nn::conv_algorithm::automatic;
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Max pooling over (height, width) windows of each channel (`MaxPooling2D`).
struct max_pool2d {
  std::array<std::size_t, 2> pool_size = {2, 2};  ///< (height, width)
  std::array<std::size_t, 2> strides = {0, 0};    ///< (height, width); {0, 0} means pool_size, as in Keras
  nn::padding padding = nn::padding::valid;       ///< valid or same
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Rectified linear unit, max(0, x) (`ReLU`).
struct relu {
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Flattens each sample to one dimension without moving data (`Flatten`).
struct flatten {
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Fully connected layer on the last axis (`Dense`). Its kernel is stored [units][inputs] (output-major), which
/// lets all three products of training run without a transpose; its bias is [units].
struct dense {
  std::size_t units = 0;                               ///< output features
  nn::activation activation = nn::activation::linear;  ///< fused activation
  nn::initializer kernel_initializer = nn::initializer::glorot_uniform;  ///< bias starts at zero
  double kernel_regularizer = 0;  ///< L2 factor λ on the kernel (loss += λ·Σ kernel²)
  double bias_regularizer = 0;    ///< L2 factor on the bias
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Inverted dropout (`Dropout`): in training, zeroes each element with probability `rate` and scales the rest by
/// 1 / (1 - rate); the identity in evaluation. The mask is a pure function of (seed, model step, element).
struct dropout {
  double rate = 0.5;        ///< in [0, 1)
  std::uint64_t seed = 0;   ///< mixed with the model's seed
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Softmax over the last axis (`Softmax`). The reference model keeps logits and uses the loss from logits.
struct softmax {
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Any layer description of the sequential model.
using layer_spec = std::variant<input, reshape, conv2d, max_pool2d, relu, flatten, dense, dropout, softmax>;

/// Batch normalisation over the last (channel) axis (`BatchNormalization`). In training it normalises with the
/// batch's mean and (biased) variance and moves `moving_mean`/`moving_variance` towards them
/// (moving = momentum·moving + (1 − momentum)·batch); in inference it normalises with the moving statistics. The
/// moving statistics are model state (saved in checkpoints and models), not trained parameters.
struct batch_normalization {
  double momentum = 0.99;  ///< Keras's default
  double epsilon = 1e-3;   ///< Keras's default
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Batch normalisation whose batch statistics are summed across all replicas in sync (Keras's
/// `SyncBatchNormalization`): N workers × B normalise exactly as one worker × N·B. With one replica it is
/// `batch_normalization`.
struct sync_batch_normalization {
  double momentum = 0.99;
  double epsilon = 1e-3;
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Element-wise sum of tensors of one shape (`Add`): applied to a list, `nn::add{}({a, b})`.
struct add {
  /// Applies the layer to a list of a graph model's tensors (`nn::add{}({a, b})`).
  template <class Tensor>
  auto operator()(std::initializer_list<Tensor> xs) const -> decltype(apply_layer(*this, xs)) {
    return apply_layer(*this, xs);
  }
};

/// An activation as a layer of its own (`Activation`).
struct activation_layer {
  nn::activation activation = nn::activation::relu;
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Zero padding of the height and width (`ZeroPadding2D(padding=((top, bottom), (left, right)))`).
struct zero_padding2d {
  std::array<std::size_t, 2> height = {1, 1};  ///< (top, bottom)
  std::array<std::size_t, 2> width = {1, 1};   ///< (left, right)
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Mean over height and width of each channel (`GlobalAveragePooling2D`): (h, w, c) -> (c).
struct global_average_pooling2d {
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// He et al.'s option-A shortcut (a Keras `Lambda`): keeps every `stride`-th row and column and pads the channels
/// with zeros up to `filters`, so an identity shortcut can meet a strided, wider residual branch.
struct pad_channels_shortcut {
  std::size_t stride = 2;
  std::size_t filters = 0;
  /// Applies the layer to a graph model's tensor (Keras's functional API: `y = nn::conv2d{16}(x)`).
  template <class Tensor>
  auto operator()(const Tensor& x) const -> decltype(apply_layer(*this, x)) {
    return apply_layer(*this, x);
  }
};

/// Any layer a graph model can hold (`nn::graph_model`, built by applying these to tensors: nn/graph.hpp).
using graph_layer_spec =
    std::variant<input, reshape, conv2d, max_pool2d, relu, flatten, dense, dropout, softmax, batch_normalization,
                 sync_batch_normalization, add, activation_layer, zero_padding2d, global_average_pooling2d,
                 pad_channels_shortcut>;

}  // namespace mwstrat::nn
