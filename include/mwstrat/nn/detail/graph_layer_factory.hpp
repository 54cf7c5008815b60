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

namespace mwstrat::detail {

// The layer a spec makes, for any element type, of the ISA pass `Pass` (nn/detail/isa_pass.hpp); `ins` are the
// input shapes, `stream` keys its random numbers.
template <class T, class Pass>
std::unique_ptr<mwstrat::detail::layer_impl<T>> make_graph_layer_of(const nn::graph_layer_spec& spec,
                                                                    const std::vector<nn::shape_t>& ins,
                                                                    std::size_t stream) {
  namespace d = mwstrat::detail;
  using ptr = std::unique_ptr<d::layer_impl<T>>;
  return std::visit(
      [&](const auto& s) -> ptr {
        using S = std::remove_cvref_t<decltype(s)>;
        if constexpr (std::is_same_v<S, nn::add>) {
          return std::make_unique<typename Pass::template add<T>>(ins);
        } else {
          if (ins.size() != 1) d::nn_config_error("takes one input, got " + std::to_string(ins.size()));
          const nn::shape_t& in = ins.front();
          if constexpr (std::is_same_v<S, nn::input>) {
            d::nn_config_error("an input is not applied to a tensor");
          } else if constexpr (std::is_same_v<S, nn::reshape>) {
            if (d::shape_size(s.target_shape) != d::shape_size(in) || s.target_shape.empty())
              d::nn_config_error("cannot reshape " + d::shape_string(in) + " to " + d::shape_string(s.target_shape));
            return std::make_unique<typename Pass::template alias<T>>("Reshape", "reshape", in, s.target_shape);
          } else if constexpr (std::is_same_v<S, nn::flatten>) {
            return std::make_unique<typename Pass::template alias<T>>("Flatten", "flatten", in, nn::shape_t{d::shape_size(in)});
          } else if constexpr (std::is_same_v<S, nn::conv2d>) {
            if (s.activation == nn::activation::softmax)
              d::nn_config_error("conv2d: softmax activation is not supported");
            return std::make_unique<typename Pass::template conv2d<T>>(s, in);
          } else if constexpr (std::is_same_v<S, nn::max_pool2d>) {
            return std::make_unique<typename Pass::template max_pool2d<T>>(s, in);
          } else if constexpr (std::is_same_v<S, nn::relu>) {
            return std::make_unique<typename Pass::template relu<T>>(in);
          } else if constexpr (std::is_same_v<S, nn::dense>) {
            return std::make_unique<typename Pass::template dense<T>>(s, in, true);
          } else if constexpr (std::is_same_v<S, nn::dropout>) {
            return std::make_unique<typename Pass::template dropout<T>>(s, in, stream);
          } else if constexpr (std::is_same_v<S, nn::softmax>) {
            return std::make_unique<typename Pass::template softmax<T>>(in);
          } else if constexpr (std::is_same_v<S, nn::batch_normalization>) {
            return std::make_unique<typename Pass::template batch_normalization<T>>(s.momentum, s.epsilon, false, in);
          } else if constexpr (std::is_same_v<S, nn::sync_batch_normalization>) {
            return std::make_unique<typename Pass::template batch_normalization<T>>(s.momentum, s.epsilon, true, in);
          } else if constexpr (std::is_same_v<S, nn::activation_layer>) {
            if (s.activation == nn::activation::softmax)
              d::nn_config_error("activation: use nn::softmax or a Dense output's softmax activation");
            return std::make_unique<typename Pass::template activation<T>>(s, in);
          } else if constexpr (std::is_same_v<S, nn::zero_padding2d>) {
            return std::make_unique<typename Pass::template zero_padding2d<T>>(s, in);
          } else if constexpr (std::is_same_v<S, nn::global_average_pooling2d>) {
            return std::make_unique<typename Pass::template global_average_pooling2d<T>>(in);
          } else {
            static_assert(std::is_same_v<S, nn::pad_channels_shortcut>);
            return std::make_unique<typename Pass::template pad_channels_shortcut<T>>(s, in);
          }
        }
      },
      spec);
}

// The same, of the ISA pass this process runs (nn/kernels/isa.hpp).
template <class T>
std::unique_ptr<mwstrat::detail::layer_impl<T>> make_graph_layer(const nn::graph_layer_spec& spec,
                                                                 const std::vector<nn::shape_t>& ins,
                                                                 std::size_t stream) {
  return with_running_pass([&]<class Pass>(Pass) { return make_graph_layer_of<T, Pass>(spec, ins, stream); });
}

// Keras's base name of the layer a spec would make (its base_name()), for an error raised before the layer exists.
inline std::string keras_base_name(const nn::graph_layer_spec& spec) {
  return std::visit(
      [](const auto& s) -> std::string {
        using S = std::remove_cvref_t<decltype(s)>;
        return std::is_same_v<S, nn::conv2d>                     ? "conv2d"
               : std::is_same_v<S, nn::dense>                    ? "dense"
               : std::is_same_v<S, nn::batch_normalization>      ? "batch_normalization"
               : std::is_same_v<S, nn::sync_batch_normalization> ? "sync_batch_normalization"
               : std::is_same_v<S, nn::add>                      ? "add"
               : std::is_same_v<S, nn::zero_padding2d>           ? "zero_padding2d"
               : std::is_same_v<S, nn::global_average_pooling2d> ? "global_average_pooling2d"
               : std::is_same_v<S, nn::max_pool2d>               ? "max_pooling2d"
               : std::is_same_v<S, nn::pad_channels_shortcut>    ? "lambda"
               : std::is_same_v<S, nn::activation_layer>         ? "activation"
               : std::is_same_v<S, nn::reshape>                  ? "reshape"
               : std::is_same_v<S, nn::flatten>                  ? "flatten"
               : std::is_same_v<S, nn::dropout>                  ? "dropout"
               : std::is_same_v<S, nn::relu>                     ? "re_lu"
               : std::is_same_v<S, nn::softmax>                  ? "softmax"
                                                                 : "input_layer";
      },
      spec);
}

}  // namespace mwstrat::detail
