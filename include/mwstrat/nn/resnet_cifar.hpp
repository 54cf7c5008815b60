#pragma once
/// \file
/// `nn::resnet_cifar(depth, options)`: the CIFAR ResNets of depth 6n + 2 (20, 32, 44, 56, 110) as graph models.
///
/// - `resnet_variant::tf` (default): TensorFlow's official Keras `resnet_cifar_model`, the one the multi-worker
///   tutorial trains — ZeroPadding2D(1) + 3×3 valid Conv2D(16) stem, BN, ReLU; three stages of n blocks with 16,
///   32, 64 filters (strides 1, 2, 2); the first block of every stage has a 1×1 Conv2D + BN projection shortcut,
///   the others identity shortcuts; biased convolutions, he_normal kernels, L2 2e-4 on kernels and biases, batch
///   norm momentum 0.997 and epsilon 1e-5; GlobalAveragePooling2D and Dense(classes, softmax). ResNet-56: 862 490
///   parameters, 858 202 of them trained (Keras's `summary()`).
/// - `resnet_variant::he`: He et al.'s original (option A): identity shortcuts everywhere, a strided one
///   subsampling and zero-padding the channels; convolutions without biases; weight decay 1e-4 (an L2 factor of
///   5e-5: Keras's λ·Σw² has gradient 2λw).
/// - `sync_batch_norm`: SyncBatchNormalization everywhere instead of BatchNormalization.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/graph_model.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <cstddef>
#include <string>

namespace mwstrat::nn {

/// Which CIFAR ResNet (see the file comment).
enum class resnet_variant { tf, he };

/// How `resnet_cifar` builds the model.
struct resnet_options {
  resnet_variant variant = resnet_variant::tf;
  bool sync_batch_norm = false;  ///< SyncBatchNormalization instead of BatchNormalization
  double batch_norm_momentum = 0.997;  ///< TF's; a short run needs less (the moving statistics lag ~1/(1 − m) steps)
  double batch_norm_epsilon = 1e-5;
  std::size_t classes = 10;
  model_options model;           ///< threads, seed, max_batch
};

/// The CIFAR ResNet of `depth` = 6n + 2 layers on 32×32×3 images (see the file comment).
template <class T = float>
basic_graph_model<T> resnet_cifar(std::size_t depth, const resnet_options& options = {}) {
  if (depth < 8 || (depth - 2) % 6 != 0)
    mwstrat::detail::nn_config_error("resnet_cifar: depth " + std::to_string(depth) + " is not 6n + 2 with n >= 1");
  if (options.classes < 2) mwstrat::detail::nn_config_error("resnet_cifar: classes must be at least 2");
  const std::size_t blocks = (depth - 2) / 6;
  const bool tf = options.variant == resnet_variant::tf;
  const double l2 = tf ? 2e-4 : 5e-5;
  auto conv = [&](std::size_t filters, std::size_t k, std::size_t stride, padding pad) {
    return conv2d{filters, {k, k}, activation::linear, {stride, stride}, pad, tf, initializer::he_normal, l2, tf ? l2 : 0.0};
  };
  auto bn = [&](const symbolic_tensor& x) {
    const double m = options.batch_norm_momentum, e = options.batch_norm_epsilon;
    return options.sync_batch_norm ? sync_batch_normalization{m, e}(x) : batch_normalization{m, e}(x);
  };
  auto relu_of = [](const symbolic_tensor& x) { return activation_layer{activation::relu}(x); };

  const symbolic_tensor inputs = input_tensor({32, 32, 3});
  symbolic_tensor x = zero_padding2d{{1, 1}, {1, 1}}(inputs);
  x = relu_of(bn(conv(16, 3, 1, padding::valid)(x)));
  std::size_t channels = 16;
  for (std::size_t stage = 0; stage < 3; ++stage) {
    const std::size_t filters = std::size_t{16} << stage;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t stride = b == 0 && stage > 0 ? 2 : 1;
      symbolic_tensor y = relu_of(bn(conv(filters, 3, stride, padding::same)(x)));
      y = bn(conv(filters, 3, 1, padding::same)(y));
      symbolic_tensor shortcut = x;
      if (tf && b == 0) {
        shortcut = bn(conv(filters, 1, stride, padding::valid)(x));
      } else if (!tf && (stride != 1 || channels != filters)) {
        shortcut = pad_channels_shortcut{stride, filters}(x);
      }
      x = relu_of(add{}({y, shortcut}));
      channels = filters;
    }
  }
  x = global_average_pooling2d{}(x);
  const symbolic_tensor outputs =
      dense{options.classes, activation::softmax, initializer::he_normal, l2, tf ? l2 : 0.0}(x);
  return basic_graph_model<T>(inputs, outputs, options.model);
}

}  // namespace mwstrat::nn
