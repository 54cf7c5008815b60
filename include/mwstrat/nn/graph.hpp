#pragma once
/// \file
/// The front end of Keras's functional API: symbolic tensors, and layer descriptions applied to them, which record
/// a graph (`nn::graph_model` then runs the part of it between an input and an output).
///
///     auto x = nn::input_tensor({32, 32, 3});
///     auto y = nn::conv2d{16, {3, 3}}(x);
///     auto z = nn::add{}({x, y});                 // a residual merge (shapes must agree)
///
/// - Applying a layer checks its input shapes at once; errors name the layer (`layer conv2d_3 (Conv2D): …`).
/// - Layers are named as Keras names them (`conv2d`, `conv2d_1`, …, per class in the order they are applied).
/// - A tensor holds no values, only its graph and the node that made it.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/graph_layer_factory.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <cstddef>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace mwstrat::detail {

// The graph as the functional API builds it: nodes in the order layers were applied (a topological order).
struct graph_node {
  nn::graph_layer_spec spec;
  std::vector<std::size_t> inputs;  // node indices
  nn::shape_t shape;                // output, per sample
  std::string name;                 // Keras's ("conv2d_3")
  std::string type;                 // Keras's class ("Conv2D")
};
struct graph_def {
  std::vector<graph_node> nodes;
  std::map<std::string, std::size_t> per_class;  // names handed out so far, per base name
  std::string unique_name(const std::string& base) {
    const std::size_t n = per_class[base]++;
    return n == 0 ? base : base + "_" + std::to_string(n);
  }
};

}  // namespace mwstrat::detail

namespace mwstrat::nn {

/// A tensor of the functional API: the output of a layer (or an input) in a graph being built. It holds no values.
class symbolic_tensor {
 public:
  /// Shape of one sample.
  [[nodiscard]] const shape_t& shape() const { return graph_->nodes[node_].shape; }
  /// The Keras name of the layer that made it.
  [[nodiscard]] const std::string& layer_name() const { return graph_->nodes[node_].name; }

  // Implementation: the graph and the node.
  symbolic_tensor(std::shared_ptr<mwstrat::detail::graph_def> g, std::size_t node)
      : graph_(std::move(g)), node_(node) {}
  [[nodiscard]] const std::shared_ptr<mwstrat::detail::graph_def>& graph() const noexcept { return graph_; }
  [[nodiscard]] std::size_t node() const noexcept { return node_; }

 private:
  std::shared_ptr<mwstrat::detail::graph_def> graph_;
  std::size_t node_;
};

/// A graph model's input of the given per-sample shape (Keras's `Input(shape=...)`), named `input_1`.
inline symbolic_tensor input_tensor(shape_t shape) {
  if (shape.empty() || mwstrat::detail::shape_size(shape) == 0)
    mwstrat::detail::nn_config_error("input_tensor: shape " + mwstrat::detail::shape_string(shape) + " is empty");
  auto g = std::make_shared<mwstrat::detail::graph_def>();
  g->per_class["input"] = 1;  // Keras names the first input input_1
  g->nodes.push_back({input{shape}, {}, shape, "input_1", "InputLayer"});
  return {g, 0};
}

}  // namespace mwstrat::nn

namespace mwstrat::detail {

inline nn::symbolic_tensor apply_spec(const nn::graph_layer_spec& spec, const std::vector<nn::symbolic_tensor>& xs) {
  if (xs.empty()) mwstrat::detail::nn_config_error("a layer applied to no tensors");
  const auto& g = xs.front().graph();
  std::vector<nn::shape_t> shapes;
  std::vector<std::size_t> ids;
  for (const auto& x : xs) {
    if (x.graph() != g) mwstrat::detail::nn_config_error("a layer applied to tensors of different graphs");
    shapes.push_back(x.shape());
    ids.push_back(x.node());
  }
  // Make the layer once to check the shapes and learn its output shape and names; the model makes its own.
  std::unique_ptr<mwstrat::detail::layer_impl<float>> probe;
  try {
    probe = make_graph_layer<float>(spec, shapes, 0);
  } catch (const config_error& e) {
    // Name the layer it would have been.
    const std::string base = keras_base_name(spec);
    const std::size_t n = g->per_class.count(base) != 0 ? g->per_class[base] : 0;
    const std::string name = n == 0 ? base : base + "_" + std::to_string(n);
    std::string in;
    for (std::size_t i = 0; i < shapes.size(); ++i)
      in += (i ? ", " : "") + mwstrat::detail::shape_string(shapes[i]);
    throw config_error({"nn"}, "layer " + name + " applied to " + in + ": " + std::string(e.detail()));
  }
  const std::string name = g->unique_name(probe->base_name());
  g->nodes.push_back({spec, ids, probe->output_shape(), name, probe->keras_type()});
  return {g, g->nodes.size() - 1};
}

// One layer of a model cut out of a graph, as the executor makes it.
struct planned_layer {
  nn::graph_layer_spec spec;
  std::vector<std::size_t> inputs;   // model nodes: 0 is the input, i + 1 is layer i
  std::vector<nn::shape_t> input_shapes;
  std::string name;                  // Keras's
  std::vector<std::string> inbound;  // names of the layers it is applied to
};
// The layers between a model's input and output, in the order they were applied (those the output depends on).
struct graph_plan {
  nn::shape_t input_shape;
  std::vector<planned_layer> layers;
  bool output_softmax = false;  // the output is a Dense with a softmax activation (trained from its logits)
};

// The model from node `in_node` to node `out_node` of `g`: checks that the output depends on that input alone and
// that only the output may be a softmax-activated Dense (elsewhere it would need the softmax applied).
inline graph_plan plan_model(const graph_def& g, std::size_t in_node, std::size_t out_node) {
  namespace d = mwstrat::detail;
  // The nodes the output depends on.
  std::vector<bool> used(g.nodes.size(), false);
  used[out_node] = true;
  for (std::size_t i = out_node + 1; i-- > 0;)
    if (used[i])
      for (std::size_t in : g.nodes[i].inputs) used[in] = true;
  for (std::size_t i = 0; i <= out_node; ++i)
    if (used[i] && g.nodes[i].type == "InputLayer" && i != in_node)
      d::nn_config_error("graph_model: the outputs depend on an input other than the model's (" + g.nodes[i].name + ")");
  if (!used[in_node]) d::nn_config_error("graph_model: the outputs do not depend on the inputs");
  if (out_node == in_node) d::nn_config_error("graph_model: no layers between the inputs and the outputs");
  graph_plan plan;
  plan.input_shape = g.nodes[in_node].shape;
  std::vector<std::size_t> remap(g.nodes.size(), 0);  // graph node -> model node (0: input)
  for (std::size_t i = 0; i <= out_node; ++i) {
    if (!used[i] || i == in_node) continue;
    const auto& n = g.nodes[i];
    planned_layer layer{n.spec, {}, {}, n.name, {}};
    for (std::size_t in : n.inputs) {
      layer.inputs.push_back(remap[in]);
      layer.input_shapes.push_back(g.nodes[in].shape);
      layer.inbound.push_back(g.nodes[in].name);
    }
    plan.layers.push_back(std::move(layer));
    remap[i] = plan.layers.size();
  }
  const auto softmax_dense = [](const nn::graph_layer_spec& spec) {
    const auto* d = std::get_if<nn::dense>(&spec);
    return d != nullptr && d->activation == nn::activation::softmax;
  };
  plan.output_softmax = softmax_dense(g.nodes[out_node].spec);
  for (std::size_t i = 0; i + 1 < plan.layers.size(); ++i)
    if (softmax_dense(plan.layers[i].spec))
      d::nn_config_error("graph_model: layer " + plan.layers[i].name + " (Dense) has a softmax activation but is not the output");
  return plan;
}

}  // namespace mwstrat::detail

namespace mwstrat::nn {

/// Applies a layer description to a tensor (what `spec(x)` calls).
template <class Spec>
  requires std::is_constructible_v<graph_layer_spec, Spec>
symbolic_tensor apply_layer(const Spec& spec, const symbolic_tensor& x) {
  return mwstrat::detail::apply_spec(graph_layer_spec(spec), {x});
}
/// Applies `Add` to a list of tensors (what `nn::add{}({a, b})` calls).
inline symbolic_tensor apply_layer(const add& spec, std::initializer_list<symbolic_tensor> xs) {
  return mwstrat::detail::apply_spec(graph_layer_spec(spec), std::vector<symbolic_tensor>(xs));
}

}  // namespace mwstrat::nn
