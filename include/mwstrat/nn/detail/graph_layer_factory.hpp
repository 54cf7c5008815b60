#pragma once
// The layer a graph model's layer description makes, for any element type: the one place a `graph_layer_spec`
// becomes a `layer_impl`. The front end (nn/graph.hpp) makes one to check shapes and learn names as a layer is
// applied; the executor (graph_executor.hpp) makes the model's own.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/kernel_isas.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/layer_specs.hpp>
#include <mwstrat/nn/layers/activation.hpp>
#include <mwstrat/nn/layers/add.hpp>
#include <mwstrat/nn/layers/alias.hpp>
#include <mwstrat/nn/layers/batch_normalization.hpp>
#include <mwstrat/nn/layers/conv2d.hpp>
#include <mwstrat/nn/layers/dense.hpp>
#include <mwstrat/nn/layers/dropout.hpp>
#include <mwstrat/nn/layers/global_average_pooling2d.hpp>
#include <mwstrat/nn/layers/max_pool2d.hpp>
#include <mwstrat/nn/layers/pad_channels_shortcut.hpp>
#include <mwstrat/nn/layers/relu.hpp>
#include <mwstrat/nn/layers/softmax.hpp>
#include <mwstrat/nn/layers/zero_padding2d.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace mwstrat::nn::graph_detail {

// The layer a spec makes, for any element type, of the ISA this process runs (nn/kernels/isa.hpp); `ins` are the
// input shapes, `stream` keys its random numbers.
template <class T>
std::unique_ptr<mwstrat::detail::layer_impl<T>> make_graph_layer(const graph_layer_spec& spec,
                                                                 const std::vector<shape_t>& ins, std::size_t stream) {
  namespace d = mwstrat::detail;
  using ptr = std::unique_ptr<d::layer_impl<T>>;
  return d::with_running_pass([&]<class L>(L) -> ptr { return std::visit(
      [&](const auto& s) -> ptr {
        using S = std::remove_cvref_t<decltype(s)>;
        if constexpr (std::is_same_v<S, add>) {
          return std::make_unique<typename L::template add<T>>(ins);
        } else {
          if (ins.size() != 1) d::nn_config_error("takes one input, got " + std::to_string(ins.size()));
          const shape_t& in = ins.front();
          if constexpr (std::is_same_v<S, input>) {
            d::nn_config_error("an input is not applied to a tensor");
          } else if constexpr (std::is_same_v<S, reshape>) {
            if (d::shape_size(s.target_shape) != d::shape_size(in) || s.target_shape.empty())
              d::nn_config_error("cannot reshape " + d::shape_string(in) + " to " + d::shape_string(s.target_shape));
            return std::make_unique<typename L::template alias<T>>("Reshape", "reshape", in, s.target_shape);
          } else if constexpr (std::is_same_v<S, flatten>) {
            return std::make_unique<typename L::template alias<T>>("Flatten", "flatten", in, shape_t{d::shape_size(in)});
          } else if constexpr (std::is_same_v<S, conv2d>) {
            if (s.activation == activation::softmax) d::nn_config_error("conv2d: softmax activation is not supported");
            return std::make_unique<typename L::template conv2d<T>>(s, in);
          } else if constexpr (std::is_same_v<S, max_pool2d>) {
            return std::make_unique<typename L::template max_pool2d<T>>(s, in);
          } else if constexpr (std::is_same_v<S, relu>) {
            return std::make_unique<typename L::template relu<T>>(in);
          } else if constexpr (std::is_same_v<S, dense>) {
            return std::make_unique<typename L::template dense<T>>(s, in, true);
          } else if constexpr (std::is_same_v<S, dropout>) {
            return std::make_unique<typename L::template dropout<T>>(s, in, stream);
          } else if constexpr (std::is_same_v<S, softmax>) {
            return std::make_unique<typename L::template softmax<T>>(in);
          } else if constexpr (std::is_same_v<S, batch_normalization>) {
            return std::make_unique<typename L::template batch_normalization<T>>(s.momentum, s.epsilon, false, in);
          } else if constexpr (std::is_same_v<S, sync_batch_normalization>) {
            return std::make_unique<typename L::template batch_normalization<T>>(s.momentum, s.epsilon, true, in);
          } else if constexpr (std::is_same_v<S, activation_layer>) {
            if (s.activation == activation::softmax)
              d::nn_config_error("activation: use nn::softmax or a Dense output's softmax activation");
            return std::make_unique<typename L::template activation<T>>(s, in);
          } else if constexpr (std::is_same_v<S, zero_padding2d>) {
            return std::make_unique<typename L::template zero_padding2d<T>>(s, in);
          } else if constexpr (std::is_same_v<S, global_average_pooling2d>) {
            return std::make_unique<typename L::template global_average_pooling2d<T>>(in);
          } else {
            static_assert(std::is_same_v<S, pad_channels_shortcut>);
            return std::make_unique<typename L::template pad_channels_shortcut<T>>(s, in);
          }
        }
      },
      spec); });
}

// Keras's base name of the layer a spec would make (its base_name()), for an error raised before the layer exists.
inline std::string keras_base_name(const graph_layer_spec& spec) {
  return std::visit(
      [](const auto& s) -> std::string {
        using S = std::remove_cvref_t<decltype(s)>;
        return std::is_same_v<S, conv2d>                     ? "conv2d"
               : std::is_same_v<S, dense>                    ? "dense"
               : std::is_same_v<S, batch_normalization>      ? "batch_normalization"
               : std::is_same_v<S, sync_batch_normalization> ? "sync_batch_normalization"
               : std::is_same_v<S, add>                      ? "add"
               : std::is_same_v<S, zero_padding2d>           ? "zero_padding2d"
               : std::is_same_v<S, global_average_pooling2d> ? "global_average_pooling2d"
               : std::is_same_v<S, max_pool2d>               ? "max_pooling2d"
               : std::is_same_v<S, pad_channels_shortcut>    ? "lambda"
               : std::is_same_v<S, activation_layer>         ? "activation"
               : std::is_same_v<S, reshape>                  ? "reshape"
               : std::is_same_v<S, flatten>                  ? "flatten"
               : std::is_same_v<S, dropout>                  ? "dropout"
               : std::is_same_v<S, relu>                     ? "re_lu"
               : std::is_same_v<S, softmax>                  ? "softmax"
                                                             : "input_layer";
      },
      spec);
}

}  // namespace mwstrat::nn::graph_detail
