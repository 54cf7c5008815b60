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
///
/// The class is the public face of four parts: the front end that records the graph (nn/graph.hpp: symbolic
/// tensors, layers applied to them, the cut from input to output), the executor that owns the arenas and runs the
/// passes (nn/detail/graph_executor.hpp), the front end over it that both models share (nn/detail/executor_front.hpp:
/// the arena accessors, the checks of what callers pass, the thread arena, the steps), and Keras's summary table
/// (nn/detail/graph_summary.hpp). Here: the model state, `predict`, and the weights and architecture in Keras's terms.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/executor_front.hpp>
#include <mwstrat/nn/detail/graph_executor.hpp>
#include <mwstrat/nn/detail/graph_layer_info.hpp>
#include <mwstrat/nn/detail/graph_summary.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/graph.hpp>
#include <mwstrat/nn/layer_specs.hpp>
#include <mwstrat/nn/sequential.hpp>  // nn::sequential: this header has always given both models
#include <mwstrat/nn/model_options.hpp>
#include <mwstrat/nn/step_stats.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::nn {

/// A Keras functional model over elements of type `T` (float, or double for gradient checks): one input, one
/// output. It satisfies what `nn::basic_sequential` does for `fit` (arena, steps, storage adoption, threads).
template <class T = float>
class basic_graph_model : public mwstrat::detail::executor_front<basic_graph_model<T>, T> {
  static_assert(std::is_floating_point_v<T>, "basic_graph_model<T>: T must be a floating-point type");

 public:
  using value_type = T;

  /// One layer's place in the arenas (name, type, output shape, inbound layers, parameter and state slices).
  using layer_info = mwstrat::detail::graph_layer_info;

  /// One named weight: `<layer>/<weight>` with Keras's shape, viewing the arena (`named_parameters()`).
  struct named_weight {
    std::string name;
    std::vector<std::size_t> shape;
    std::span<const T> values;
  };

  /// The model from `inputs` to `outputs`: the layers `outputs` depends on, in the order they were applied.
  basic_graph_model(const symbolic_tensor& inputs, const symbolic_tensor& outputs, model_options options = {})
      : front(options), exec_(plan(inputs, outputs, options)) {
    this->initialize(options.seed);
    if (options.max_batch != 0) this->reserve(options.max_batch);
  }

  basic_graph_model(basic_graph_model&&) noexcept = default;
  basic_graph_model& operator=(basic_graph_model&&) noexcept = default;

  // ------------------------------------------------------------------------------------------ arenas
  // The parameters, gradients, storage adoption, threads and steps: detail::executor_front (shared with the
  // sequential model).

  /// Non-trained model state (batch norm's moving mean and variance, layer by layer): saved and restored with the
  /// weights, never touched by an optimizer.
  [[nodiscard]] std::span<T> model_state() noexcept { return exec_.state(); }
  [[nodiscard]] std::span<const T> model_state() const noexcept { return exec_.state(); }

  /// The layers after the input, in order.
  [[nodiscard]] const std::vector<layer_info>& layers() const noexcept { return exec_.info(); }

  /// Every weight as `<layer>/<weight>` in Keras's layout: the parameters in arena order, then the model state
  /// (`batch_normalization/moving_mean`, …) in its order.
  [[nodiscard]] std::vector<named_weight> named_parameters() const {
    const auto& layers = exec_.layers();
    const auto& info = exec_.info();
    std::vector<named_weight> out;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0; i < layers.size(); ++i) {
        std::size_t at = pass == 0 ? info[i].offset : info[i].state_offset;
        const T* base = pass == 0 ? exec_.parameters() : exec_.state().data();
        for (const auto& w : pass == 0 ? layers[i]->weights() : layers[i]->state_weights()) {
          const std::size_t n = mwstrat::detail::shape_size(w.shape);
          out.push_back({info[i].name + "/" + w.name, w.shape, std::span<const T>(base + at, n)});
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

  /// A string naming each layer's kind, inputs and shape: equal for models of the same architecture and type.
  [[nodiscard]] std::string fingerprint() const {
    const auto& layers = exec_.layers();
    const auto& inputs = exec_.inputs();
    std::string s = sizeof(T) == 4 ? "graph<f32>[input" : "graph<f64>[input";
    s.append(mwstrat::detail::shape_string(exec_.input_shape()));
    for (std::size_t i = 0; i < layers.size(); ++i) {
      s.append(";").append(layers[i]->config()).append("<-");
      for (std::size_t k = 0; k < inputs[i].size(); ++k)
        s.append(k ? "," : "").append(std::to_string(inputs[i][k]));
      s.append("->").append(mwstrat::detail::shape_string(layers[i]->output_shape()));
    }
    s.append("]params=").append(std::to_string(exec_.parameter_count())).append("+").append(
        std::to_string(exec_.state().size()));
    return s;
  }

  /// The architecture as contract 1 writes it: a JSON list of `{"name", "class_name", "output_shape", "params",
  /// "config", "inbound"}`, the input first.
  [[nodiscard]] std::string architecture_json() const {
    namespace d = mwstrat::detail;
    const auto& layers = exec_.layers();
    const auto& info = exec_.info();
    const shape_t& in = exec_.input_shape();
    std::string s = "[{\"name\": \"input_1\", \"class_name\": \"InputLayer\", \"output_shape\": " +
                    d::json_list(in) + ", \"params\": 0, \"config\": {\"batch_input_shape\": " +
                    d::json_list(in) + "}, \"inbound\": []}";
    for (std::size_t i = 0; i < layers.size(); ++i) {
      s += ", {\"name\": \"" + info[i].name + "\", \"class_name\": \"" + info[i].type +
           "\", \"output_shape\": " + d::json_list(info[i].output_shape) +
           ", \"params\": " + std::to_string(info[i].count + info[i].state_count) + ", \"config\": {\"name\": \"" +
           info[i].name + "\"";
      const std::string c = layers[i]->keras_config();
      if (!c.empty()) s += ", " + c;
      s += "}, \"inbound\": [";
      for (std::size_t k = 0; k < info[i].inbound.size(); ++k) s += (k ? ", \"" : "\"") + info[i].inbound[k] + "\"";
      s += "]}";
    }
    return s + "]";
  }

  /// Prints Keras's summary of a functional model: Layer (type), Output Shape, Param #, Connected to; totals.
  void summary(std::ostream& out) const {
    mwstrat::detail::print_graph_summary(out, exec_.input_shape(), exec_.info(), exec_.parameter_count(),
                                         exec_.state().size());
  }

  /// The sum across replicas that SyncBatchNormalization uses (`fit` sets it to the strategy's for the length of
  /// the training; an empty function means this replica is alone).
  void set_cross_replica_sum(mwstrat::detail::replica_sum sum) { exec_.set_cross_replica_sum(std::move(sum)); }

  /// Makes backward leave the regularisation gradients out (`true`), for the gradient synchroniser to add after
  /// the replicas' mean (`add_regularization_gradients`): added before, they would enter the mean once per replica
  /// and round differently from one replica over the whole batch. Counted: each `true` is undone by one `false`,
  /// so nested synchronisers (or a caller's own deferral around `fit`) never leave it doubled or lost.
  void defer_regularization_gradients(bool deferred) noexcept { exec_.defer_regularization_gradients(deferred); }
  /// Adds the regularisation gradients (2λ·w) of the parameters [first, first + count) into `gradients()`.
  void add_regularization_gradients(std::size_t first, std::size_t count) {
    exec_.add_regularization_gradients(first, count);
  }

  /// The model's outputs for a batch (probabilities when the output layer has a softmax activation), in inference
  /// mode unless `training`; valid until the next call.
  std::span<const T> predict(std::span<const T> inputs, std::size_t batch, bool training = false) {
    if (inputs.size() != batch * this->input_size())
      mwstrat::detail::nn_config_error("predict: " + std::to_string(inputs.size()) + " input values for a batch of " +
                                       std::to_string(batch) + " samples of " + std::to_string(this->input_size()));
    if (batch == 0) return {};  // nothing to run (and a model never reserved has no buffers to run it in)
    this->reserve(batch);
    this->execute([&] { exec_.forward_pass(inputs.data(), batch, training, false); });
    if (!exec_.output_softmax()) return exec_.outputs();
    return exec_.probabilities(batch);
  }

  /// The regularisation terms of the loss at the current parameters (Keras's `sum(model.losses)`).
  [[nodiscard]] double regularization_loss() const { return exec_.regularization_loss(); }

 private:
  using front = mwstrat::detail::executor_front<basic_graph_model<T>, T>;
  friend front;  // reads engine(), kind and default_on_ready

  static constexpr const char* kind = "graph_model";  // the model in messages
  // train_batch without on_ready reports every gradient slice (to nobody), as it always has.
  struct default_on_ready {
    void operator()(std::size_t, std::size_t) const noexcept {}
  };
  mwstrat::detail::graph_executor<T>& engine() noexcept { return exec_; }
  const mwstrat::detail::graph_executor<T>& engine() const noexcept { return exec_; }

  // The layers between `inputs` and `outputs`, checked; the model's threads are set first (as their errors were).
  mwstrat::detail::graph_plan plan(const symbolic_tensor& inputs, const symbolic_tensor& outputs,
                                   const model_options& options) {
    if (inputs.graph() != outputs.graph() || inputs.graph()->nodes[inputs.node()].type != "InputLayer")
      mwstrat::detail::nn_config_error("graph_model: the inputs must be the input_tensor the outputs were built from");
    nn::check_label_smoothing(options.label_smoothing, "graph_model");
    this->set_threads(options.threads);
    return mwstrat::detail::plan_model(*outputs.graph(), inputs.node(), outputs.node());
  }

  mwstrat::detail::graph_executor<T> exec_;  // the layers, arenas, buffers and passes (after the base's thread arena)
};

/// The graph model of float elements.
using graph_model = basic_graph_model<float>;

}  // namespace mwstrat::nn
