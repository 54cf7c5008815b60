#pragma once
/// \file
/// `nn::graph_model`: Keras's functional API — layers applied to tensors, with branches and merges — over the same
/// arena as `nn::sequential`, so `fit`, the strategies and the checkpoints take it unchanged.
///
///     auto x = nn::input_tensor({32, 32, 3});
///     auto y = nn::conv2d{16, {3, 3}}.operator()(x);          // or: nn::conv2d{16, {3, 3}}(x)
///     auto z = nn::add{}({x2, y});                              // a residual merge
///     nn::graph_model m(x, nn::dense{10, nn::activation::softmax}(nn::global_average_pooling2d{}(z)));
///
/// - Layers are named as Keras names them (`conv2d`, `conv2d_1`, …, per class in the order they are applied).
///   Applying a layer checks its input shape at once; errors name the layer (`layer conv2d_3 (Conv2D): …`).
/// - Parameters (each layer's, in that order: kernel, bias / gamma, beta) live in one arena; non-trained state
///   (batch norm's moving statistics) in a second one, `model_state()`, saved beside the weights.
/// - A Dense output with a softmax activation is trained through the loss from its logits (the same math, stable);
///   `predict` returns the probabilities.
/// - `set_cross_replica_sum(f)` gives the model the strategy's sum across replicas (`fit` does it), which
///   SyncBatchNormalization uses for its batch statistics.

#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/layers.hpp>
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
#include <mwstrat/nn/losses.hpp>
#include <mwstrat/nn/model.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <ranges>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iomanip>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mwstrat::nn {

/// Any layer a graph model can hold.
using graph_layer_spec =
    std::variant<input, reshape, conv2d, max_pool2d, relu, flatten, dense, dropout, softmax, batch_normalization,
                 sync_batch_normalization, add, activation_layer, zero_padding2d, global_average_pooling2d,
                 pad_channels_shortcut>;

namespace graph_detail {

// The layer a spec makes, for any element type; `ins` are the input shapes, `stream` keys its random numbers.
template <class T>
std::unique_ptr<mwstrat::detail::layer_impl<T>> make_graph_layer(const graph_layer_spec& spec,
                                                                 const std::vector<shape_t>& ins, std::size_t stream) {
  namespace d = mwstrat::detail;
  using ptr = std::unique_ptr<d::layer_impl<T>>;
  return std::visit(
      [&](const auto& s) -> ptr {
        using S = std::remove_cvref_t<decltype(s)>;
        if constexpr (std::is_same_v<S, add>) {
          return std::make_unique<d::add_layer<T>>(ins);
        } else {
          if (ins.size() != 1) d::nn_config_error("takes one input, got " + std::to_string(ins.size()));
          const shape_t& in = ins.front();
          if constexpr (std::is_same_v<S, input>) {
            d::nn_config_error("an input is not applied to a tensor");
          } else if constexpr (std::is_same_v<S, reshape>) {
            if (d::shape_size(s.target_shape) != d::shape_size(in) || s.target_shape.empty())
              d::nn_config_error("cannot reshape " + d::shape_string(in) + " to " + d::shape_string(s.target_shape));
            return std::make_unique<d::alias_layer<T>>("Reshape", "reshape", in, s.target_shape);
          } else if constexpr (std::is_same_v<S, flatten>) {
            return std::make_unique<d::alias_layer<T>>("Flatten", "flatten", in, shape_t{d::shape_size(in)});
          } else if constexpr (std::is_same_v<S, conv2d>) {
            if (s.activation == activation::softmax) d::nn_config_error("conv2d: softmax activation is not supported");
            return std::make_unique<d::conv2d_layer<T>>(s, in);
          } else if constexpr (std::is_same_v<S, max_pool2d>) {
            return std::make_unique<d::max_pool2d_layer<T>>(s, in);
          } else if constexpr (std::is_same_v<S, relu>) {
            return std::make_unique<d::relu_layer<T>>(in);
          } else if constexpr (std::is_same_v<S, dense>) {
            return std::make_unique<d::dense_layer<T>>(s, in, true);
          } else if constexpr (std::is_same_v<S, dropout>) {
            return std::make_unique<d::dropout_layer<T>>(s, in, stream);
          } else if constexpr (std::is_same_v<S, softmax>) {
            return std::make_unique<d::softmax_layer<T>>(in);
          } else if constexpr (std::is_same_v<S, batch_normalization>) {
            return std::make_unique<d::batch_normalization_layer<T>>(s.momentum, s.epsilon, false, in);
          } else if constexpr (std::is_same_v<S, sync_batch_normalization>) {
            return std::make_unique<d::batch_normalization_layer<T>>(s.momentum, s.epsilon, true, in);
          } else if constexpr (std::is_same_v<S, activation_layer>) {
            if (s.activation == activation::softmax)
              d::nn_config_error("activation: use nn::softmax or a Dense output's softmax activation");
            return std::make_unique<d::activation_layer<T>>(s, in);
          } else if constexpr (std::is_same_v<S, zero_padding2d>) {
            return std::make_unique<d::zero_padding2d_layer<T>>(s, in);
          } else if constexpr (std::is_same_v<S, global_average_pooling2d>) {
            return std::make_unique<d::global_average_pooling2d_layer<T>>(in);
          } else {
            static_assert(std::is_same_v<S, pad_channels_shortcut>);
            return std::make_unique<d::pad_channels_shortcut_layer<T>>(s, in);
          }
        }
      },
      spec);
}

// The graph as the functional API builds it: nodes in the order layers were applied (a topological order).
struct graph_node {
  graph_layer_spec spec;
  std::vector<std::size_t> inputs;  // node indices
  shape_t shape;                    // output, per sample
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

}  // namespace graph_detail

/// A tensor of the functional API: the output of a layer (or an input) in a graph being built. It holds no values.
class symbolic_tensor {
 public:
  /// Shape of one sample.
  [[nodiscard]] const shape_t& shape() const { return graph_->nodes[node_].shape; }
  /// The Keras name of the layer that made it.
  [[nodiscard]] const std::string& layer_name() const { return graph_->nodes[node_].name; }

  // Implementation: the graph and the node.
  symbolic_tensor(std::shared_ptr<graph_detail::graph_def> g, std::size_t node) : graph_(std::move(g)), node_(node) {}
  [[nodiscard]] const std::shared_ptr<graph_detail::graph_def>& graph() const noexcept { return graph_; }
  [[nodiscard]] std::size_t node() const noexcept { return node_; }

 private:
  std::shared_ptr<graph_detail::graph_def> graph_;
  std::size_t node_;
};

/// A graph model's input of the given per-sample shape (Keras's `Input(shape=...)`), named `input_1`.
inline symbolic_tensor input_tensor(shape_t shape) {
  if (shape.empty() || mwstrat::detail::shape_size(shape) == 0)
    mwstrat::detail::nn_config_error("input_tensor: shape " + mwstrat::detail::shape_string(shape) + " is empty");
  auto g = std::make_shared<graph_detail::graph_def>();
  g->per_class["input"] = 1;  // Keras names the first input input_1
  g->nodes.push_back({input{shape}, {}, shape, "input_1", "InputLayer"});
  return {g, 0};
}

namespace graph_detail {
inline symbolic_tensor apply_spec(const graph_layer_spec& spec, const std::vector<symbolic_tensor>& xs) {
  if (xs.empty()) mwstrat::detail::nn_config_error("a layer applied to no tensors");
  const auto& g = xs.front().graph();
  std::vector<shape_t> shapes;
  std::vector<std::size_t> ids;
  for (const auto& x : xs) {
    if (x.graph() != g) mwstrat::detail::nn_config_error("a layer applied to tensors of different graphs");
    shapes.push_back(x.shape());
    ids.push_back(x.node());
  }
  // Make the layer once to check the shapes and learn its output shape and names; the model makes its own.
  std::unique_ptr<mwstrat::detail::layer_impl<float>> probe;
  std::string base = "layer";
  try {
    probe = make_graph_layer<float>(spec, shapes, 0);
  } catch (const config_error& e) {
    // Name the layer it would have been.
    std::visit([&](const auto& s) {
      using S = std::remove_cvref_t<decltype(s)>;
      base = std::is_same_v<S, conv2d>                     ? "conv2d"
             : std::is_same_v<S, dense>                    ? "dense"
             : std::is_same_v<S, batch_normalization>      ? "batch_normalization"
             : std::is_same_v<S, sync_batch_normalization> ? "sync_batch_normalization"
             : std::is_same_v<S, add>                      ? "add"
             : std::is_same_v<S, zero_padding2d>           ? "zero_padding2d"
             : std::is_same_v<S, global_average_pooling2d> ? "global_average_pooling2d"
             : std::is_same_v<S, max_pool2d>               ? "max_pooling2d"
             : std::is_same_v<S, pad_channels_shortcut>    ? "lambda"
             : std::is_same_v<S, activation_layer>         ? "activation"
                                                           : "layer";
    }, spec);
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
}  // namespace graph_detail

/// Applies a layer description to a tensor (what `spec(x)` calls).
template <class Spec>
  requires std::is_constructible_v<graph_layer_spec, Spec>
symbolic_tensor apply_layer(const Spec& spec, const symbolic_tensor& x) {
  return graph_detail::apply_spec(graph_layer_spec(spec), {x});
}
/// Applies `Add` to a list of tensors (what `nn::add{}({a, b})` calls).
inline symbolic_tensor apply_layer(const add& spec, std::initializer_list<symbolic_tensor> xs) {
  return graph_detail::apply_spec(graph_layer_spec(spec), std::vector<symbolic_tensor>(xs));
}

/// A Keras functional model over elements of type `T` (float, or double for gradient checks): one input, one
/// output. It satisfies what `nn::basic_sequential` does for `fit` (arena, steps, storage adoption, threads).
template <class T = float>
class basic_graph_model {
  static_assert(std::is_floating_point_v<T>, "basic_graph_model<T>: T must be a floating-point type");

 public:
  using value_type = T;

  /// One layer's place in the arenas.
  struct layer_info {
    std::string name;                 ///< Keras's unique name
    std::string type;                 ///< Keras class name
    shape_t output_shape;             ///< per sample
    std::vector<std::string> inbound; ///< names of the layers it is applied to
    std::size_t offset;               ///< first parameter in the arena
    std::size_t count;                ///< trained parameters
    std::size_t state_offset;         ///< first value in `model_state()`
    std::size_t state_count;          ///< non-trained values (moving statistics)
  };

  /// One named weight: `<layer>/<weight>` with Keras's shape, viewing the arena (`named_parameters()`).
  struct named_weight {
    std::string name;
    std::vector<std::size_t> shape;
    std::span<const T> values;
  };

  /// The model from `inputs` to `outputs`: the layers `outputs` depends on, in the order they were applied.
  basic_graph_model(const symbolic_tensor& inputs, const symbolic_tensor& outputs, model_options options = {})
      : options_(options) {
    if (inputs.graph() != outputs.graph() || inputs.graph()->nodes[inputs.node()].type != "InputLayer")
      mwstrat::detail::nn_config_error("graph_model: the inputs must be the input_tensor the outputs were built from");
    set_threads(options.threads);
    build(*outputs.graph(), inputs.node(), outputs.node());
    initialize(options.seed);
    if (options.max_batch != 0) reserve(options.max_batch);
  }

  basic_graph_model(basic_graph_model&&) noexcept = default;
  basic_graph_model& operator=(basic_graph_model&&) noexcept = default;

  // ------------------------------------------------------------------------------------------ arenas
  /// All trained parameters, layer by layer.
  [[nodiscard]] std::span<T> parameters() noexcept { return {pbase_, count_}; }
  [[nodiscard]] std::span<const T> parameters() const noexcept { return {pbase_, count_}; }
  /// The gradients, same layout as `parameters()`.
  [[nodiscard]] std::span<T> gradients() noexcept { return {gbase_, count_}; }
  [[nodiscard]] std::span<const T> gradients() const noexcept { return {gbase_, count_}; }
  /// Number of trained parameters.
  [[nodiscard]] std::size_t parameter_count() const noexcept { return count_; }
  /// Non-trained model state (batch norm's moving mean and variance, layer by layer): saved and restored with the
  /// weights, never touched by an optimizer.
  [[nodiscard]] std::span<T> model_state() noexcept { return state_; }
  [[nodiscard]] std::span<const T> model_state() const noexcept { return state_; }

  /// Makes `parameters()` and `gradients()` the caller's storage (see `basic_sequential::adopt_storage`). The
  /// model state stays the replica's own.
  void adopt_storage(std::span<T> params, std::span<T> grads) {
    if (params.size() != count_ || grads.size() != count_)
      mwstrat::detail::nn_config_error("adopt_storage: " + std::to_string(params.size()) + " parameters and " +
                                       std::to_string(grads.size()) + " gradients for a model of " +
                                       std::to_string(count_));
    constexpr auto align = static_cast<std::uintptr_t>(mwstrat::detail::aligned_allocator<T>::alignment);
    if (reinterpret_cast<std::uintptr_t>(params.data()) % align != 0 ||
        reinterpret_cast<std::uintptr_t>(grads.data()) % align != 0)
      mwstrat::detail::nn_config_error("adopt_storage: storage must be " + std::to_string(align) + "-byte aligned");
    pbase_ = params.data();
    gbase_ = grads.data();
  }
  /// Copies the parameters and gradients back into the model's own arena and uses it again.
  void use_own_storage() {
    if (uses_own_storage()) return;
    std::copy(pbase_, pbase_ + count_, arena_.data());
    std::copy(gbase_, gbase_ + count_, arena_.data() + count_);
    pbase_ = arena_.data();
    gbase_ = arena_.data() + count_;
  }
  [[nodiscard]] bool uses_own_storage() const noexcept { return pbase_ == arena_.data(); }

  /// The layers after the input, in order.
  [[nodiscard]] const std::vector<layer_info>& layers() const noexcept { return info_; }

  /// Every weight as `<layer>/<weight>` in Keras's layout: the parameters in arena order, then the model state
  /// (`batch_normalization/moving_mean`, …) in its order.
  [[nodiscard]] std::vector<named_weight> named_parameters() const {
    std::vector<named_weight> out;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0; i < layers_.size(); ++i) {
        std::size_t at = pass == 0 ? info_[i].offset : info_[i].state_offset;
        const T* base = pass == 0 ? pbase_ : state_.data();
        for (const auto& w : pass == 0 ? layers_[i]->weights() : layers_[i]->state_weights()) {
          const std::size_t n = mwstrat::detail::shape_size(w.shape);
          out.push_back({info_[i].name + "/" + w.name, w.shape, std::span<const T>(base + at, n)});
          at += n;
        }
      }
    return out;
  }

  /// One weight in Keras's name, shape and layout (what `save_model` writes: contract 1).
  struct keras_weight {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<const T> values;
  };
  /// Every weight, the model state included, in Keras's names and layouts (the arena already has them).
  [[nodiscard]] std::vector<keras_weight> keras_weights() const {
    std::vector<keras_weight> out;
    for (const auto& w : named_parameters())
      out.push_back({w.name, std::vector<std::int64_t>(w.shape.begin(), w.shape.end()), w.values});
    return out;
  }
  /// Sets one weight from Keras's name, shape and layout; throws `config_error` for an unknown name or another shape.
  void set_keras_weight(std::string_view name, std::span<const std::int64_t> shape, std::span<const T> values) {
    for (const auto& w : named_parameters()) {
      if (w.name != name) continue;
      if (!std::ranges::equal(shape, w.shape, [](std::int64_t a, std::size_t b) { return a >= 0 && static_cast<std::size_t>(a) == b; }) ||
          values.size() != w.values.size()) {
        std::string theirs, ours;
        for (auto e : shape) theirs += (theirs.empty() ? "" : ", ") + std::to_string(e);
        mwstrat::detail::nn_config_error("weight '" + std::string(name) + "' has shape (" + theirs +
                                         "); the model's is " + mwstrat::detail::shape_string(w.shape));
      }
      std::copy(values.begin(), values.end(), const_cast<T*>(w.values.data()));  // the model's own storage
      return;
    }
    mwstrat::detail::nn_config_error("the model has no weight '" + std::string(name) + "'");
  }
  /// The architecture as contract 1's JSON list (what `save_model` writes under `mwstrat.architecture`).
  [[nodiscard]] std::string architecture() const { return architecture_json(); }

  /// Re-initialises every parameter and the model state from `seed`; gradients to zero, step to 0.
  void initialize(std::uint64_t seed) {
    seed_ = seed;
    step_ = 0;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->initialize(parameters().subspan(info_[i].offset, info_[i].count), seed, i + 1);
      layers_[i]->initialize_state(model_state().subspan(info_[i].state_offset, info_[i].state_count));
    }
    for (auto& g : gradients()) g = T{};
  }

  /// A string naming each layer's kind, inputs and shape: equal for models of the same architecture and type.
  [[nodiscard]] std::string fingerprint() const {
    std::string s = sizeof(T) == 4 ? "graph<f32>[input" : "graph<f64>[input";
    s.append(mwstrat::detail::shape_string(input_shape_));
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      s.append(";").append(layers_[i]->config()).append("<-");
      for (std::size_t k = 0; k < inputs_[i].size(); ++k)
        s.append(k ? "," : "").append(std::to_string(inputs_[i][k]));
      s.append("->").append(mwstrat::detail::shape_string(layers_[i]->output_shape()));
    }
    s.append("]params=").append(std::to_string(count_)).append("+").append(std::to_string(state_.size()));
    return s;
  }

  /// The architecture as contract 1 writes it: a JSON list of `{"name", "class_name", "output_shape", "params",
  /// "config", "inbound"}`, the input first.
  [[nodiscard]] std::string architecture_json() const {
    namespace d = mwstrat::detail;
    std::string s = "[{\"name\": \"input_1\", \"class_name\": \"InputLayer\", \"output_shape\": " +
                    d::json_list(input_shape_) + ", \"params\": 0, \"config\": {\"batch_input_shape\": " +
                    d::json_list(input_shape_) + "}, \"inbound\": []}";
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      s += ", {\"name\": \"" + info_[i].name + "\", \"class_name\": \"" + info_[i].type +
           "\", \"output_shape\": " + d::json_list(info_[i].output_shape) +
           ", \"params\": " + std::to_string(info_[i].count + info_[i].state_count) + ", \"config\": {\"name\": \"" +
           info_[i].name + "\"";
      const std::string c = layers_[i]->keras_config();
      if (!c.empty()) s += ", " + c;
      s += "}, \"inbound\": [";
      for (std::size_t k = 0; k < info_[i].inbound.size(); ++k) s += (k ? ", \"" : "\"") + info_[i].inbound[k] + "\"";
      s += "]}";
    }
    return s + "]";
  }

  /// Prints Keras's summary of a functional model: Layer (type), Output Shape, Param #, Connected to; totals.
  void summary(std::ostream& out) const {
    constexpr std::size_t width = 98;
    const std::size_t stops[] = {32, 53, 65, width};
    auto row = [&](std::ostringstream& o, const std::vector<std::string>& fields) {
      std::string line;
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (i > 0 && !line.empty()) line.back() = ' ';  // Keras: the previous column's last character gives way
        line += fields[i];
        if (i + 1 < fields.size() && line.size() > stops[i]) line.resize(stops[i]);
        if (line.size() < stops[i]) line.append(stops[i] - line.size(), ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      o << line << "\n";
    };
    auto shape = [](const shape_t& s) {
      std::string r = "(None";
      for (auto e : s) r += ", " + std::to_string(e);
      return r + ")";
    };
    std::ostringstream o;
    o << "Model: \"model\"\n" << std::string(width, '_') << "\n";
    row(o, {" Layer (type)", "Output Shape", "Param #", "Connected to"});
    o << std::string(width, '=') << "\n";
    row(o, {" input_1 (InputLayer)", "[" + shape(input_shape_) + "]", "0", "[]"});
    for (std::size_t i = 0; i < info_.size(); ++i) {
      o << "\n";
      std::string connected = "[";
      for (std::size_t k = 0; k < info_[i].inbound.size(); ++k)
        connected += (k ? ", '" : "'") + info_[i].inbound[k] + "[0][0]'";
      connected += "]";
      row(o, {" " + info_[i].name + " (" + info_[i].type + ")", shape(info_[i].output_shape),
              grouped(info_[i].count + info_[i].state_count), connected});
    }
    o << std::string(width, '=') << "\n";
    o << "Total params: " << grouped(count_ + state_.size()) << "\nTrainable params: " << grouped(count_)
      << "\nNon-trainable params: " << grouped(state_.size()) << "\n"
      << std::string(width, '_') << "\n";
    out << o.str();
  }

  /// Shape of one input sample.
  [[nodiscard]] const shape_t& input_shape() const noexcept { return input_shape_; }
  /// Shape of one output sample.
  [[nodiscard]] const shape_t& output_shape() const noexcept { return layers_.back()->output_shape(); }
  [[nodiscard]] std::size_t input_size() const { return mwstrat::detail::shape_size(input_shape_); }
  [[nodiscard]] std::size_t output_size() const { return layers_.back()->output_size(); }

  // ------------------------------------------------------------------------------------------ threads
  [[nodiscard]] int threads() const noexcept { return threads_; }
  /// Sets the number of threads the kernels use (results do not change).
  void set_threads(int threads) {
    if (threads < 1)
      mwstrat::detail::nn_config_error("graph_model: threads must be at least 1, got " + std::to_string(threads));
    threads_ = threads;
    arena_threads_ = std::make_unique<tbb::task_arena>(threads);
  }
  template <class F>
  decltype(auto) execute(F&& f) {
    return arena_threads_->execute(std::forward<F>(f));
  }

  /// The sum across replicas that SyncBatchNormalization uses (`fit` sets it to the strategy's for the length of
  /// the training; an empty function means this replica is alone).
  void set_cross_replica_sum(mwstrat::detail::replica_sum sum) { replicas_ = std::move(sum); }

  /// Makes backward leave the regularisation gradients out (`true`), for the gradient synchroniser to add after
  /// the replicas' mean (`add_regularization_gradients`): added before, they would enter the mean once per replica
  /// and round differently from one replica over the whole batch. Counted: each `true` is undone by one `false`,
  /// so nested synchronisers (or a caller's own deferral around `fit`) never leave it doubled or lost.
  void defer_regularization_gradients(bool deferred) noexcept {
    if (deferred) ++regularization_deferrals_;
    else if (regularization_deferrals_ > 0) --regularization_deferrals_;
  }
  /// Adds the regularisation gradients (2λ·w) of the parameters [first, first + count) into `gradients()`.
  void add_regularization_gradients(std::size_t first, std::size_t count) {
    const std::size_t last = first + count;
    for (const auto& t : l2_terms_) {
      const std::size_t b = std::max(first, t.offset);
      const std::size_t e = std::min(last, t.offset + t.count);
      if (b < e) mwstrat::detail::add_l2_gradient(t.lambda, pbase_ + b, gbase_ + b, e - b);
    }
  }

  // ------------------------------------------------------------------------------------------ steps
  /// Allocates every buffer a batch of up to `batch` samples needs, so that later steps allocate nothing.
  void reserve(std::size_t batch) {
    if (batch <= capacity_) return;
    capacity_ = batch;
    std::size_t widest = 0;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->reserve(batch);
      acts_[i].assign(batch * layers_[i]->output_size(), T{});
      if (grad_needed_[i + 1] || i + 1 == layers_.size()) grads_[i].assign(batch * layers_[i]->output_size(), T{});
      for (std::size_t in : inputs_[i]) widest = std::max(widest, node_size(in));
    }
    for (auto& s : scratch_) s.assign(batch * widest, T{});
    probs_.assign(batch * output_size(), T{});
    losses_.assign(batch, T{});
    hits_.assign(batch, 0);
  }

  /// The training step counter that keys dropout masks (saved and restored with a checkpoint).
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  void set_step(std::uint64_t step) noexcept { step_ = step; }

  /// Forward, loss (with the regularisation terms) and backward on one batch; overwrites `gradients()` and calls
  /// `on_ready(offset, count)` for each layer's gradient slice once final, last layer first.
  template <class OnReady>
  step_stats train_batch(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch,
                         OnReady&& on_ready) {
    return train_batch(inputs, labels, std::span<const float>{}, batch, std::forward<OnReady>(on_ready));
  }
  /// `train_batch` with a weight per example (empty: all 1), as `basic_sequential`'s: Keras's
  /// `sum_over_batch_size`, sum(w_i * loss_i) / batch (the regularisation terms unweighted).
  template <class OnReady>
  step_stats train_batch(std::span<const T> inputs, std::span<const std::int64_t> labels,
                         std::span<const float> weights, std::size_t batch, OnReady&& on_ready) {
    check(inputs, labels, batch, "train_batch");
    check_weights(weights, batch, "train_batch");
    step_stats stats;
    arena_threads_->execute([&] {
      forward_pass(inputs.data(), batch, true, true);
      stats = loss_pass(labels, weights, batch, true);
      backward_pass(batch, on_ready);
    });
    ++step_;
    return stats;
  }
  step_stats train_batch(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch) {
    return train_batch(inputs, labels, batch, [](std::size_t, std::size_t) {});
  }
  template <class OnReady>
    requires std::same_as<T, float>
  step_stats train_batch(const data::image_batch& batch, OnReady&& on_ready) {
    return train_batch(batch.inputs, batch.labels, batch.size, std::forward<OnReady>(on_ready));
  }
  template <class OnReady>
    requires std::same_as<T, float>
  step_stats train_batch(const data::image_batch& batch, std::span<const float> weights, OnReady&& on_ready) {
    return train_batch(batch.inputs, batch.labels, weights, batch.size, std::forward<OnReady>(on_ready));
  }
  step_stats evaluate_batch(const data::image_batch& batch)
    requires std::same_as<T, float>
  {
    return evaluate_batch(batch.inputs, batch.labels, batch.size);
  }
  step_stats evaluate_batch(const data::image_batch& batch, std::span<const float> weights)
    requires std::same_as<T, float>
  {
    return evaluate_batch(batch.inputs, batch.labels, weights, batch.size);
  }

  /// Forward and loss on one batch in inference mode (batch norm on its moving statistics, dropout off).
  step_stats evaluate_batch(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch) {
    return evaluate_batch(inputs, labels, std::span<const float>{}, batch);
  }
  step_stats evaluate_batch(std::span<const T> inputs, std::span<const std::int64_t> labels,
                            std::span<const float> weights, std::size_t batch) {
    check(inputs, labels, batch, "evaluate_batch");
    check_weights(weights, batch, "evaluate_batch");
    step_stats stats;
    arena_threads_->execute([&] {
      forward_pass(inputs.data(), batch, false, false);
      stats = loss_pass(labels, weights, batch, false);
    });
    return stats;
  }

  /// The training loss of one batch (training-mode batch norm and dropout at the current step), without gradients,
  /// without advancing the step and without moving the batch-norm statistics (for finite-difference checks).
  step_stats training_loss(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch) {
    check(inputs, labels, batch, "training_loss");
    step_stats stats;
    arena_threads_->execute([&] {
      forward_pass(inputs.data(), batch, true, false);
      stats = loss_pass(labels, {}, batch, false);
    });
    return stats;
  }

  /// The model's outputs for a batch (probabilities when the output layer has a softmax activation), in inference
  /// mode unless `training`; valid until the next call.
  std::span<const T> predict(std::span<const T> inputs, std::size_t batch, bool training = false) {
    if (inputs.size() != batch * input_size())
      mwstrat::detail::nn_config_error("predict: " + std::to_string(inputs.size()) + " input values for a batch of " +
                                       std::to_string(batch) + " samples of " + std::to_string(input_size()));
    reserve(batch);
    arena_threads_->execute([&] { forward_pass(inputs.data(), batch, training, false); });
    if (!output_softmax_) return {acts_.back().data(), batch * output_size()};
    const std::size_t k = output_size();
    for (std::size_t s = 0; s < batch; ++s)
      apply_softmax<T>(std::span<const T>(acts_.back().data() + s * k, k), std::span<T>(probs_.data() + s * k, k), k);
    return {probs_.data(), batch * k};
  }

  /// The outputs (logits, before an output softmax) of the last forward pass: rows × `output_size()`, valid until
  /// the next step (`model_with_outputs`: top-k accuracy).
  [[nodiscard]] std::span<const T> outputs() const { return {acts_.back().data(), last_batch_ * output_size()}; }

  /// The regularisation terms of the loss at the current parameters (Keras's `sum(model.losses)`).
  [[nodiscard]] double regularization_loss() const {
    double r = 0;
    for (std::size_t i = 0; i < layers_.size(); ++i) r += layers_[i]->regularization(pbase_ + info_[i].offset);
    return r;
  }

 private:
  static std::string grouped(std::size_t n) {  // 860874 -> "860,874", as Keras prints counts
    const std::string digits = std::to_string(n);
    std::string s;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
      s.push_back(digits[i]);
    }
    return s;
  }

  // node 0 is the input; node i + 1 is layer i.
  std::size_t node_size(std::size_t node) const {
    return node == 0 ? input_size() : layers_[node - 1]->output_size();
  }

  void build(const graph_detail::graph_def& g, std::size_t in_node, std::size_t out_node) {
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
    input_shape_ = g.nodes[in_node].shape;
    std::vector<std::size_t> remap(g.nodes.size(), 0);  // graph node -> model node (0: input)
    std::size_t offset = 0, state_offset = 0;
    for (std::size_t i = 0; i <= out_node; ++i) {
      if (!used[i] || i == in_node) continue;
      const auto& n = g.nodes[i];
      std::vector<shape_t> shapes;
      std::vector<std::size_t> ins;
      std::vector<std::string> inbound;
      for (std::size_t in : n.inputs) {
        ins.push_back(remap[in]);
        shapes.push_back(g.nodes[in].shape);
        inbound.push_back(g.nodes[in].name);
      }
      auto layer = graph_detail::make_graph_layer<T>(n.spec, shapes, layers_.size() + 1);
      remap[i] = layers_.size() + 1;
      info_.push_back({n.name, layer->keras_type(), layer->output_shape(), inbound, offset, layer->param_count(),
                       state_offset, layer->state_count()});
      for (auto t : layer->l2_terms()) {  // in model offsets
        t.offset += offset;
        l2_terms_.push_back(t);
      }
      offset += layer->param_count();
      state_offset += layer->state_count();
      inputs_.push_back(ins);
      layers_.push_back(std::move(layer));
    }
    if (const auto* last = std::get_if<dense>(&g.nodes[out_node].spec); last && last->activation == activation::softmax)
      output_softmax_ = true;
    count_ = offset;
    arena_.assign(2 * count_, T{});
    pbase_ = arena_.data();
    gbase_ = arena_.data() + count_;
    state_.assign(state_offset, T{});
    // The gradient w.r.t. a node's output is needed when the node or a node before it has parameters.
    grad_needed_.assign(layers_.size() + 1, false);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      bool below = layers_[i]->param_count() > 0;
      for (std::size_t in : inputs_[i]) below = below || grad_needed_[in];
      grad_needed_[i + 1] = below;
    }
    std::size_t arity = 1;
    for (const auto& ins : inputs_) arity = std::max(arity, ins.size());
    scratch_.resize(arity);
    acts_.resize(layers_.size());
    grads_.resize(layers_.size());
    written_.assign(layers_.size() + 1, 0);
    xs_.resize(arity);
    dxs_.resize(arity);
    // Only softmax-activated Dense as the output: elsewhere it would need the softmax applied.
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i)
      if (layers_[i]->config().find(",softmax") != std::string::npos && info_[i].type == "Dense")
        d::nn_config_error("graph_model: layer " + info_[i].name + " (Dense) has a softmax activation but is not the output");
  }

  void check(std::span<const T> inputs, std::span<const std::int64_t> labels, std::size_t batch, const char* what) {
    namespace d = mwstrat::detail;
    if (batch == 0) d::nn_config_error(std::string(what) + ": empty batch");
    if (inputs.size() != batch * input_size())
      d::nn_config_error(std::string(what) + ": " + std::to_string(inputs.size()) + " input values for a batch of " +
                         std::to_string(batch) + " samples of " + std::to_string(input_size()));
    if (labels.size() != batch)
      d::nn_config_error(std::string(what) + ": " + std::to_string(labels.size()) + " labels for a batch of " +
                         std::to_string(batch));
    const auto classes = static_cast<std::int64_t>(output_size());
    for (std::size_t i = 0; i < batch; ++i)
      if (labels[i] < 0 || labels[i] >= classes)
        throw data_error({"nn"}, "", std::string(what) + ": label " + std::to_string(labels[i]) + " of sample " +
                                         std::to_string(i) + " outside [0, " + std::to_string(classes) + ")");
    reserve(batch);
  }

  void check_weights(std::span<const float> weights, std::size_t batch, const char* what) const {
    if (weights.empty()) return;
    if (weights.size() != batch)
      mwstrat::detail::nn_config_error(std::string(what) + ": sample_weight has " + std::to_string(weights.size()) +
                                       " weights for a batch of " + std::to_string(batch));
    for (std::size_t i = 0; i < batch; ++i)
      if (!(weights[i] >= 0.0f) || !std::isfinite(weights[i]))
        mwstrat::detail::nn_config_error(std::string(what) + ": sample_weight " + std::to_string(weights[i]) +
                                         " of sample " + std::to_string(i) + " is not a finite weight >= 0");
  }

  const T* node_values(std::size_t node) const { return node == 0 ? input_ : acts_[node - 1].data(); }

  // `update_state`: training mode moves the batch-norm statistics (not while only measuring a loss).
  void forward_pass(const T* x, std::size_t batch, bool training, bool update_state) {
    input_ = x;
    last_batch_ = batch;
    const mwstrat::detail::replica_sum* sum = replicas_ ? &replicas_ : nullptr;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      for (std::size_t k = 0; k < inputs_[i].size(); ++k) xs_[k] = node_values(inputs_[i][k]);
      T* state = info_[i].state_count != 0 && update_state ? state_.data() + info_[i].state_offset : nullptr;
      if (info_[i].state_count != 0 && !training) state = state_.data() + info_[i].state_offset;
      if (layers_[i]->aliases_input()) {  // Reshape, Flatten: the graph copies (a tensor may feed several layers)
        std::copy(xs_[0], xs_[0] + batch * layers_[i]->output_size(), acts_[i].data());
        continue;
      }
      layers_[i]->forward({batch, xs_[0], acts_[i].data(), pbase_ + info_[i].offset, training, step_, state, sum,
                           xs_.data()});
    }
  }

  step_stats loss_pass(std::span<const std::int64_t> labels, std::span<const float> weights, std::size_t batch,
                       bool with_grad) {
    const std::size_t k = output_size();
    const T* logits = acts_.back().data();
    T* dlogits = grads_.back().data();
    const T scale = T{1} / static_cast<T>(batch);
    mwstrat::detail::parallel_chunks(batch, 64, [&](std::size_t b, std::size_t e) {
      for (std::size_t s = b; s < e; ++s) {
        std::span<const T> row(logits + s * k, k);
        const T w = weights.empty() ? T{1} : static_cast<T>(weights[s]);
        losses_[s] = w * sparse_categorical_crossentropy<T>(
                             row, labels[s], with_grad ? std::span<T>(dlogits + s * k, k) : std::span<T>{}, scale * w);
        hits_[s] = static_cast<std::int64_t>(arg_max(row)) == labels[s] ? 1 : 0;
      }
    });
    step_stats st;
    st.count = batch;
    for (std::size_t s = 0; s < batch; ++s) {
      st.loss_sum += static_cast<double>(losses_[s]);
      st.correct += hits_[s];
    }
    // Keras's loss includes the regularisation terms: the mean gains them once.
    st.loss_sum += static_cast<double>(batch) * regularization_loss();
    return st;
  }

  template <class OnReady>
  void backward_pass(std::size_t batch, OnReady& on_ready) {
    const mwstrat::detail::replica_sum* sum = replicas_ ? &replicas_ : nullptr;
    std::fill(written_.begin(), written_.end(), 0);
    written_.back() = 1;  // the output's gradient is the loss's
    for (std::size_t i = layers_.size(); i-- > 0;) {
      auto& l = *layers_[i];
      const std::size_t n = l.param_count();
      const auto& ins = inputs_[i];
      bool any_input = false;
      for (std::size_t k = 0; k < ins.size(); ++k) {
        const std::size_t in = ins[k];
        if (!grad_needed_[in]) {
          dxs_[k] = nullptr;
          continue;
        }
        any_input = true;
        dxs_[k] = written_[in] ? scratch_[k].data() : grads_[in - 1].data();  // a second consumer adds its part
      }
      if (n > 0 || any_input) {
        for (std::size_t k = 0; k < ins.size(); ++k) xs_[k] = node_values(ins[k]);
        if (l.aliases_input()) {
          if (dxs_[0] != nullptr) std::copy(grads_[i].data(), grads_[i].data() + batch * l.output_size(), dxs_[0]);
        } else {
          l.backward({batch, xs_[0], acts_[i].data(), grads_[i].data(), dxs_[0], pbase_ + info_[i].offset,
                      gbase_ + info_[i].offset, step_, sum, dxs_.data(), regularization_deferrals_ == 0});
        }
        for (std::size_t k = 0; k < ins.size(); ++k) {
          if (dxs_[k] == nullptr) continue;
          const std::size_t in = ins[k];
          if (written_[in]) {
            T* to = grads_[in - 1].data();
            const T* from = dxs_[k];
            mwstrat::detail::parallel_chunks(batch * node_size(in), 1 << 16, [&](std::size_t b, std::size_t e) {
              for (std::size_t j = b; j < e; ++j) to[j] += from[j];
            });
          }
          written_[in] = 1;
        }
      }
      if (n > 0) on_ready(info_[i].offset, n);
    }
  }

  model_options options_;
  int threads_ = 1;
  std::unique_ptr<tbb::task_arena> arena_threads_;
  shape_t input_shape_;
  std::vector<std::unique_ptr<mwstrat::detail::layer_impl<T>>> layers_;
  std::vector<std::vector<std::size_t>> inputs_;  // per layer: model nodes (0 = input, i + 1 = layer i)
  std::vector<layer_info> info_;
  std::vector<bool> grad_needed_;                  // per model node
  bool output_softmax_ = false;
  std::size_t count_ = 0;
  mwstrat::detail::aligned_vector<T> arena_;  // [parameters | gradients]
  T* pbase_ = nullptr;
  T* gbase_ = nullptr;
  std::vector<T> state_;                                // moving statistics
  std::vector<mwstrat::detail::aligned_vector<T>> acts_;    // per layer: its output
  std::vector<mwstrat::detail::aligned_vector<T>> grads_;   // per layer: gradient w.r.t. its output
  std::vector<mwstrat::detail::aligned_vector<T>> scratch_; // per input slot: a second consumer's gradient
  std::vector<std::uint8_t> written_;                       // per node: its gradient has a first part this step
  std::vector<const T*> xs_;
  std::vector<T*> dxs_;
  std::vector<T> probs_;
  std::vector<T> losses_;
  std::vector<std::uint8_t> hits_;
  mwstrat::detail::replica_sum replicas_;
  std::vector<mwstrat::detail::l2_term> l2_terms_;  // every layer's, in model parameter offsets
  int regularization_deferrals_ = 0;  // > 0: a synchroniser adds the regularisation gradients after the mean
  const T* input_ = nullptr;
  std::size_t last_batch_ = 0;  // examples in the last forward pass (what outputs() covers)
  std::size_t capacity_ = 0;
  std::uint64_t seed_ = 0;
  std::uint64_t step_ = 0;
};

/// The graph model of float elements.
using graph_model = basic_graph_model<float>;

}  // namespace mwstrat::nn
