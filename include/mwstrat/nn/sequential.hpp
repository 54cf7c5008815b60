#pragma once
/// \file
/// `nn::sequential`: a Keras-style sequential model whose parameters and gradients live in one contiguous arena.
/// As in Keras, it is a builder of a linear graph: its layers run on the one model executor
/// (nn/detail/graph_executor.hpp) that also runs the graph model, so both train alike (early gradient reports,
/// buffer sharing, no copies for Reshape and Flatten), and share its front end (nn/detail/executor_front.hpp: the
/// arena accessors, the argument checks, the thread arena and the steps).
///
/// - `parameters()` / `gradients()` are spans over the whole arena in layer order (each layer: kernel, then
///   bias), so a strategy broadcasts, all-reduces or checkpoints a model in one piece.
/// - `train_batch` runs forward, loss and backward; it OVERWRITES the gradients with d(mean loss)/d(params) and
///   calls `on_ready(offset, count)` for each layer's gradient slice as soon as it is final, last layer first.
/// - Work runs in the model's own oneTBB arena of `threads` threads; every result is bitwise the same for any
///   number of threads. Once a batch size has been seen (or reserved), a step allocates nothing.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/executor_front.hpp>
#include <mwstrat/nn/detail/graph_executor.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/kernel_isas.hpp>
#include <mwstrat/nn/layers/alias.hpp>
#include <mwstrat/nn/layers/conv2d.hpp>
#include <mwstrat/nn/layers/dense.hpp>
#include <mwstrat/nn/layers/dropout.hpp>
#include <mwstrat/nn/layers/max_pool2d.hpp>
#include <mwstrat/nn/layers/relu.hpp>
#include <mwstrat/nn/layers/softmax.hpp>
#include <mwstrat/nn/keras_layout.hpp>
#include <mwstrat/nn/layer_specs.hpp>
#include <mwstrat/nn/losses.hpp>
#include <mwstrat/nn/model_options.hpp>
#include <mwstrat/nn/step_stats.hpp>
#include <mwstrat/strategy/after_backward.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace mwstrat::nn {

/// A sequential model over elements of type `T` (float, or double for gradient checks).
template <class T = float>
class basic_sequential : public detail::executor_front<basic_sequential<T>, T> {
  static_assert(std::is_floating_point_v<T>, "basic_sequential<T>: T must be a floating-point type");

 public:
  using value_type = T;

  /// Builds the layers described by `specs` (the first must be `nn::input`) and initialises them with
  /// `options.seed`.
  basic_sequential(std::initializer_list<layer_spec> specs, model_options options = {})
      : basic_sequential(std::vector<layer_spec>(specs), options) {}

  /// Builds the layers described by `specs` (the first must be `nn::input`).
  explicit basic_sequential(std::vector<layer_spec> specs, model_options options = {}) : front(options) {
    if (specs.empty() || !std::holds_alternative<input>(specs.front()))
      detail::nn_config_error("sequential: the first layer must be nn::input");
    check_label_smoothing(options.label_smoothing, "sequential");
    this->set_threads(options.threads);
    specs_ = specs;  // for the Keras layout of saved models
    exec_ = std::make_unique<executor>(build(specs));
    for (const auto& l : exec_->info()) info_.push_back({l.name, l.type, l.output_shape, l.offset, l.count});
    this->initialize(options.seed);
    if (options.max_batch != 0) this->reserve(options.max_batch);
  }

  basic_sequential(basic_sequential&&) noexcept = default;
  basic_sequential& operator=(basic_sequential&&) noexcept = default;

  // The arena accessors, threads and steps: detail::executor_front (shared with the graph model).

  /// One layer's place in the arena.
  struct layer_info {
    std::string name;      ///< Keras-style unique name ("conv2d", "dense_1")
    std::string type;      ///< Keras class name ("Conv2D")
    shape_t output_shape;  ///< per sample
    std::size_t offset;    ///< first parameter in the arena
    std::size_t count;     ///< number of parameters
  };
  /// The layers (after the input), in order.
  [[nodiscard]] const std::vector<layer_info>& layers() const noexcept { return info_; }

  /// A string naming each layer's kind and shape: equal for models of the same architecture and element type.
  [[nodiscard]] std::string fingerprint() const {
    std::string s = sizeof(T) == 4 ? "sequential<f32>[input" : "sequential<f64>[input";
    s.append(detail::shape_string(input_shape_));
    for (const auto& l : exec_->layers()) {
      s.append(";").append(l->config()).append("->").append(detail::shape_string(l->output_shape()));
    }
    s.append("]params=").append(std::to_string(this->parameter_count()));
    return s;
  }

  /// Prints a Keras-style summary: layers, output shapes, parameter counts.
  void summary(std::ostream& out) const {
    std::ostringstream o;
    const std::string rule(65, '_');
    const std::string thick(65, '=');
    o << "Model: \"sequential\"\n" << rule << "\n";
    o << std::left << std::setw(29) << " Layer (type)" << std::setw(26) << "Output Shape" << "Param #\n" << thick << "\n";
    for (std::size_t i = 0; i < info_.size(); ++i) {
      std::string shape = "(None";
      for (auto e : info_[i].output_shape) shape += ", " + std::to_string(e);
      shape += ")";
      o << " " << std::setw(28) << (info_[i].name + " (" + info_[i].type + ")") << std::setw(26) << shape
        << info_[i].count << "\n";
      if (i + 1 < info_.size()) o << "\n";
    }
    o << thick << "\nTotal params: " << this->parameter_count() << "\nTrainable params: " << this->parameter_count()
      << "\nNon-trainable params: 0\n" << rule << "\n";
    out << o.str();
  }

  // ------------------------------------------------------------------------------------------ Keras layout
  // What save_model / load_model / ModelCheckpoint write and read (keras_layout_model, train/saved_model.hpp):
  // every weight as `<layer>/<weight>` in Keras's layout, and the architecture as JSON. Backups keep the arena.

  /// One weight in Keras's name and layout; `values` is valid until the next call of `keras_weights`.
  struct keras_weight {
    std::string name;                  ///< "conv2d/kernel", "dense_1/bias", ...
    std::vector<std::int64_t> shape;   ///< Keras's shape
    std::span<const T> values;         ///< in Keras's layout
  };
  /// Every weight, layer by layer, in Keras's names and layouts (dense kernels transposed into a buffer).
  [[nodiscard]] std::vector<keras_weight> keras_weights() const {
    std::vector<keras_weight> out;
    std::size_t transposed = 0;
    for_each_keras_tensor([&](std::size_t layer, const keras::tensor_layout& t) {
      const T* at = exec_->parameters() + info_[layer].offset + t.offset;
      std::span<const T> values(at, t.count);
      if (t.arena_rows != 0) {
        if (keras_buffers_.size() <= transposed) keras_buffers_.emplace_back();
        auto& buf = keras_buffers_[transposed++];
        buf.resize(t.count);
        for (std::size_t r = 0; r < t.arena_rows; ++r)
          for (std::size_t c = 0; c < t.arena_cols; ++c) buf[c * t.arena_rows + r] = at[r * t.arena_cols + c];
        values = buf;
      }
      out.push_back({info_[layer].name + "/" + t.weight, t.shape, values});
    });
    return out;
  }
  /// Sets the weight called `name` from values in Keras's layout; a `config_error` names the weight when the name
  /// is unknown or the shape differs.
  void set_keras_weight(std::string_view name, std::span<const std::int64_t> shape, std::span<const T> values) {
    bool found = false;
    for_each_keras_tensor([&](std::size_t layer, const keras::tensor_layout& t) {
      if (found || info_[layer].name + "/" + t.weight != name) return;
      found = true;
      if (!std::ranges::equal(shape, t.shape) || values.size() != t.count)
        detail::nn_config_error("weight '" + std::string(name) + "' has shape " + shape_text(shape) + "; the model's is " +
                                shape_text(t.shape));
      T* at = exec_->parameters() + info_[layer].offset + t.offset;
      if (t.arena_rows == 0) {
        std::copy(values.begin(), values.end(), at);
      } else {
        for (std::size_t r = 0; r < t.arena_rows; ++r)
          for (std::size_t c = 0; c < t.arena_cols; ++c) at[r * t.arena_cols + c] = values[c * t.arena_rows + r];
      }
    });
    if (!found) detail::nn_config_error("the model has no weight '" + std::string(name) + "'");
  }
  /// The architecture as Keras describes it (contract 1): a JSON list of {name, class_name, output_shape, params,
  /// config, inbound}, the input layer first.
  [[nodiscard]] std::string architecture() const {
    boost::json::array layers;
    layers.push_back(keras::layer_entry("input_layer", "InputLayer", input_shape_, 0, specs_.front(), ""));
    for (std::size_t i = 0; i < info_.size(); ++i)
      layers.push_back(keras::layer_entry(info_[i].name, info_[i].type, info_[i].output_shape, info_[i].count,
                                          specs_[i + 1], i == 0 ? "input_layer" : info_[i - 1].name));
    return boost::json::serialize(layers);
  }

  /// The model's outputs (logits) for a batch, in inference mode unless `training` (dropout on, at the current
  /// step); valid until the next call.
  std::span<const T> predict(std::span<const T> inputs, std::size_t batch, bool training = false) {
    if (inputs.size() != batch * this->input_size())
      detail::nn_config_error("predict: " + std::to_string(inputs.size()) + " input values for a batch of " +
                              std::to_string(batch) + " samples of " + std::to_string(this->input_size()));
    this->reserve(batch);
    this->execute([&] { exec_->forward_pass(inputs.data(), batch, training, false); });
    return exec_->outputs();
  }

 private:
  using executor = detail::graph_executor<T>;
  using front = detail::executor_front<basic_sequential<T>, T>;
  friend front;  // reads engine(), kind and default_on_ready

  static constexpr const char* kind = "sequential";  // the model in messages
  using default_on_ready = after_backward;            // no reports wanted: the dense kernel's gradient in one product
  executor& engine() noexcept { return *exec_; }
  const executor& engine() const noexcept { return *exec_; }

  // The linear graph of `specs` for the executor: layer i reads node i (the input, then each layer's output),
  // named as Keras names a sequential model's layers; its parameters are drawn from stream i, as they always were.
  executor build(const std::vector<layer_spec>& specs) {
    input_shape_ = std::get<input>(specs.front()).shape;
    if (input_shape_.empty() || detail::shape_size(input_shape_) == 0)
      detail::nn_config_error("input: shape " + detail::shape_string(input_shape_) + " is empty");
    shape_t shape = input_shape_;
    std::vector<detail::executor_layer<T>> layers;
    std::vector<std::string> bases;
    for (std::size_t i = 1; i < specs.size(); ++i) {
      // Layers of the ISA this process runs (nn/kernels/isa.hpp).
      auto layer = detail::with_running_pass(
          [&]<class Pass>(Pass) { return std::visit([&](const auto& s) { return make<Pass>(s, shape, i); }, specs[i]); });
      shape = layer->output_shape();
      const std::string base = layer->base_name();
      const auto n = static_cast<std::size_t>(std::count(bases.begin(), bases.end(), base));
      bases.push_back(base);
      std::string inbound = layers.empty() ? "input_layer" : layers.back().name;
      layers.push_back({std::move(layer), {i - 1}, n == 0 ? base : base + "_" + std::to_string(n), {std::move(inbound)}});
    }
    if (layers.empty()) detail::nn_config_error("sequential: no layers after nn::input");
    return executor(input_shape_, std::move(layers), false, {.fuse = true, .share = true, .first_stream = 0});
  }

  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const input& s, const shape_t&, std::size_t) {
    (void)s;
    detail::nn_config_error("sequential: nn::input may only be the first layer");
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const reshape& s, const shape_t& in, std::size_t) {
    if (detail::shape_size(s.target_shape) != detail::shape_size(in) || s.target_shape.empty())
      detail::nn_config_error("reshape: cannot reshape " + detail::shape_string(in) + " to " +
                              detail::shape_string(s.target_shape));
    return std::make_unique<typename Pass::template alias<T>>("Reshape", "reshape", in, s.target_shape);
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const flatten&, const shape_t& in, std::size_t) {
    return std::make_unique<typename Pass::template alias<T>>("Flatten", "flatten", in, shape_t{detail::shape_size(in)});
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const conv2d& s, const shape_t& in, std::size_t) {
    return std::make_unique<typename Pass::template conv2d<T>>(s, in);
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const max_pool2d& s, const shape_t& in, std::size_t) {
    return std::make_unique<typename Pass::template max_pool2d<T>>(s, in);
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const relu&, const shape_t& in, std::size_t) {
    return std::make_unique<typename Pass::template relu<T>>(in);
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const dense& s, const shape_t& in, std::size_t) {
    if (s.activation == activation::softmax)
      detail::nn_config_error(
          "dense: a softmax activation is a graph model's output only. The loss takes logits (Keras's "
          "from_logits=True) and predict returns them: end a sequential model with a linear Dense, and apply a "
          "softmax to predict's logits where probabilities are wanted (an nn::softmax layer at the end would be "
          "trained through a second softmax)");
    return std::make_unique<typename Pass::template dense<T>>(s, in);
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const dropout& s, const shape_t& in, std::size_t i) {
    return std::make_unique<typename Pass::template dropout<T>>(s, in, i);
  }
  template <class Pass>
  std::unique_ptr<detail::layer_impl<T>> make(const softmax&, const shape_t& in, std::size_t) {
    return std::make_unique<typename Pass::template softmax<T>>(in);
  }

  // f(layer index, tensor layout) for every weight of every layer, in arena order.
  template <class F>
  void for_each_keras_tensor(F&& f) const {
    const auto& layers = exec_->layers();
    for (std::size_t i = 0; i < layers.size(); ++i)
      for (const auto& t : keras::tensors_of(specs_[i + 1], layers[i]->input_shape())) f(i, t);
  }
  static std::string shape_text(std::span<const std::int64_t> shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  std::vector<layer_spec> specs_;                        // as built (input first): the Keras layout's source
  mutable std::vector<std::vector<T>> keras_buffers_;    // transposed dense kernels of keras_weights()
  shape_t input_shape_;
  std::vector<layer_info> info_;
  std::unique_ptr<executor> exec_;  // the layers, arenas, buffers and passes (a pointer: the model moves cheaply)
};

/// The model of float elements.
using sequential = basic_sequential<float>;

/// The tutorial's CNN: input 28x28 -> reshape 28x28x1 -> Conv2D(32, 3x3, relu) -> Flatten -> Dense(128, relu)
/// -> Dense(10) logits; 2 770 634 parameters.
template <class T = float>
basic_sequential<T> reference_cnn(model_options options = {}) {
  return basic_sequential<T>({input{{28, 28}}, reshape{{28, 28, 1}}, conv2d{32, {3, 3}, activation::relu}, flatten{},
                              dense{128, activation::relu}, dense{10}},
                             options);
}

}  // namespace mwstrat::nn
