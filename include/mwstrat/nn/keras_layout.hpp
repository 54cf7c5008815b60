#pragma once
/// \file
/// How a layer of `nn::sequential` looks to Keras: its weights' names and layouts, and its config, for saved
/// models that Python reads (contract 1, docs/checkpointing.md). A layer's tensors are `<layer>/<weight>` in Keras's
/// layouts — conv kernel [kh, kw, in, out] (the arena's own layout), dense kernel [in, out] (the arena keeps it
/// [out, in] for speed, so it is transposed on the way out and back), biases [out].

#include <mwstrat/nn/layer_specs.hpp>

#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace mwstrat::detail {
// Keras's JSON for a list of sizes, an activation and a padding (those a sequential model's layers have).
inline boost::json::array json_ints(const auto& xs) {
  boost::json::array a;
  for (auto x : xs) a.push_back(static_cast<std::int64_t>(x));
  return a;
}
inline const char* keras_activation_name(nn::activation a) { return a == nn::activation::relu ? "relu" : "linear"; }
inline const char* keras_padding_name(nn::padding p) { return p == nn::padding::same ? "same" : "valid"; }
}  // namespace mwstrat::detail

namespace mwstrat::nn::keras {

/// One weight of a layer in Keras's layout and where it lies in the layer's slice of the arena.
struct tensor_layout {
  std::string weight;                ///< "kernel", "bias"
  std::vector<std::int64_t> shape;   ///< Keras's shape
  std::size_t offset = 0;            ///< first value in the layer's slice
  std::size_t count = 0;             ///< number of values
  std::size_t arena_rows = 0;        ///< non-zero: the arena holds it as [arena_rows][arena_cols], Keras as the transpose
  std::size_t arena_cols = 0;
};


/// The weights of a layer described by `spec`, whose input (per sample) has shape `in`.
inline std::vector<tensor_layout> tensors_of(const layer_spec& spec, const shape_t& in) {
  return std::visit(
      [&](const auto& s) -> std::vector<tensor_layout> {
        using S = std::decay_t<decltype(s)>;
        const auto i64 = [](std::size_t v) { return static_cast<std::int64_t>(v); };
        if constexpr (std::is_same_v<S, conv2d>) {
          const std::size_t c = in.back(), k = s.kernel_size[0] * s.kernel_size[1] * c * s.filters;
          std::vector<tensor_layout> t{
              {"kernel", {i64(s.kernel_size[0]), i64(s.kernel_size[1]), i64(c), i64(s.filters)}, 0, k, 0, 0}};
          if (s.use_bias) t.push_back({"bias", {i64(s.filters)}, k, s.filters, 0, 0});  // the layer has none without
          return t;
        } else if constexpr (std::is_same_v<S, dense>) {
          const std::size_t inputs = in.back(), k = inputs * s.units;
          return {{"kernel", {i64(inputs), i64(s.units)}, 0, k, s.units, inputs},
                  {"bias", {i64(s.units)}, k, s.units, 0, 0}};
        } else {
          return {};
        }
      },
      spec);
}

/// Keras's config fields of the layer described by `spec` (those this library has).
inline boost::json::object config_of(const layer_spec& spec) {
  namespace d = ::mwstrat::detail;
  return std::visit(
      [](const auto& s) -> boost::json::object {
        using S = std::decay_t<decltype(s)>;
        boost::json::object o;
        if constexpr (std::is_same_v<S, input>) {
          boost::json::array shape{nullptr};
          for (auto e : s.shape) shape.push_back(static_cast<std::int64_t>(e));
          o["batch_shape"] = shape;
        } else if constexpr (std::is_same_v<S, reshape>) {
          o["target_shape"] = d::json_ints(s.target_shape);
        } else if constexpr (std::is_same_v<S, conv2d>) {
          o["filters"] = static_cast<std::int64_t>(s.filters);
          o["kernel_size"] = d::json_ints(s.kernel_size);
          o["strides"] = d::json_ints(s.strides);
          o["padding"] = d::keras_padding_name(s.padding);
          o["activation"] = d::keras_activation_name(s.activation);
          o["use_bias"] = s.use_bias;
        } else if constexpr (std::is_same_v<S, max_pool2d>) {
          o["pool_size"] = d::json_ints(s.pool_size);
          o["strides"] = s.strides[0] == 0 ? d::json_ints(s.pool_size) : d::json_ints(s.strides);
          o["padding"] = d::keras_padding_name(s.padding);
        } else if constexpr (std::is_same_v<S, dense>) {
          o["units"] = static_cast<std::int64_t>(s.units);
          o["activation"] = d::keras_activation_name(s.activation);
          o["use_bias"] = true;
        } else if constexpr (std::is_same_v<S, dropout>) {
          o["rate"] = s.rate;
          o["seed"] = static_cast<std::int64_t>(s.seed);
        } else if constexpr (std::is_same_v<S, softmax>) {
          o["axis"] = -1;
        }
        return o;  // flatten, relu: no fields
      },
      spec);
}

/// One entry of the architecture list (contract 1): name, class_name, output_shape (batch as null), params, config,
/// inbound layer names.
inline boost::json::object layer_entry(const std::string& name, const std::string& class_name, const shape_t& out,
                                       std::size_t params, const layer_spec& spec, const std::string& inbound) {
  boost::json::object e;
  e["name"] = name;
  e["class_name"] = class_name;
  boost::json::array shape{nullptr};
  for (auto x : out) shape.push_back(static_cast<std::int64_t>(x));
  e["output_shape"] = shape;
  e["params"] = static_cast<std::int64_t>(params);
  e["config"] = config_of(spec);
  boost::json::array from;
  if (!inbound.empty()) from.push_back(boost::json::string(inbound));
  e["inbound"] = from;
  return e;
}

}  // namespace mwstrat::nn::keras
