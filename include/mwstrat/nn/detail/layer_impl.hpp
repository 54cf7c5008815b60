#pragma once
// The interface of the layers behind the models (one header per layer in nn/layers/; the fusions' interfaces beside
// it in layer_fusions.hpp). Each layer owns its scratch
// (sized for the largest batch by reserve()), reads its parameters from and writes its gradients to the model's
// arena, and splits its work into tasks by shape only, so its results do not depend on the number of threads.

#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

using nn_shape = std::vector<std::size_t>;

inline std::size_t shape_size(const nn_shape& s) {
  return std::accumulate(s.begin(), s.end(), std::size_t{1}, std::multiplies<>{});
}

inline std::string shape_string(const nn_shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

[[noreturn]] inline void nn_config_error(const std::string& what) { throw config_error({"nn"}, what); }

// Sums values across the replicas in sync, in place (null: this replica is alone). What SyncBatchNormalization
// reaches the strategy's collective through; the model receives it from `fit`.
using replica_sum = std::function<void(std::span<double>)>;

template <class T>
struct forward_args {
  std::size_t batch;
  const T* x;
  T* y;
  const T* params;
  bool training;
  std::uint64_t step;
  T* state;                    // the layer's non-trained state (batch norm's moving statistics), or null
  const replica_sum* replicas; // null or empty: one replica
  const T* const* xs;          // every input (a multi-input layer), xs[0] == x
};

// How a layer says, during its backward, that part of its parameter gradient is final (so a strategy can start
// reducing it while the layer still computes the rest, its input gradient included): `offset` and `count` are
// relative to the layer's own gradients, and the parts must arrive as a growing contiguous suffix of them (the
// arena's order, which is also the order buckets leave in). Not an std::function: nothing is allocated per call.
struct gradient_ready {
  void* context = nullptr;
  void (*report)(void* context, std::size_t offset, std::size_t count) = nullptr;
  void operator()(std::size_t offset, std::size_t count) const {
    if (report != nullptr) report(context, offset, count);
  }
};

template <class T>
struct backward_args {
  std::size_t batch;
  const T* x;
  const T* y;
  const T* dy;
  T* dx;  // null when no gradient is needed below this layer
  const T* params;
  T* grads;
  std::uint64_t step;
  const replica_sum* replicas;
  T* const* dxs;  // per input (multi-input layers), each null when not needed; dxs[0] == dx
  bool add_regularization;  // false: the model adds the regularisation gradients itself, after the replicas' mean
  // Where the layer may report parts of its gradient as final before it returns (null: nobody listens); what it
  // has not reported when it returns, the model reports then. Regularisation must be added before a report.
  const gradient_ready* ready = nullptr;
  // dx += the input gradient rather than dx = it (only where can_add_to_dx(); dxs[0] == dx, a single-input layer).
  bool add_to_dx = false;
  // Run on each sample of dx once it is final (only where can_run_input_gradient_hook(); null: none).
  const nn::kernels::conv2d_image_hook* dx_hook = nullptr;
};

// An L2 term of a layer's loss: λ·Σw² over `count` parameters from `offset` in the layer's parameters.
struct l2_term {
  std::size_t offset;
  std::size_t count;
  double lambda;
};

// One weight of a layer, in arena order: its Keras name ("kernel") and Keras shape.
struct weight_info {
  std::string name;
  std::vector<std::size_t> shape;
};

// A per-channel map y = (x − mean)·scale + shift over the last axis (batch norm in training, with the batch's
// statistics), applied by apply_channel_map (nn/detail/elementwise.hpp) wherever it is applied, so that the bits are the same everywhere.
template <class T>
struct channel_map {
  const T* mean = nullptr;  // null: no map (the identity)
  const T* scale = nullptr;
  const T* shift = nullptr;
};

template <class T>
class layer_impl {
 public:
  layer_impl(nn_shape in, nn_shape out) : in_(std::move(in)), out_(std::move(out)) {}
  virtual ~layer_impl() = default;
  layer_impl(const layer_impl&) = delete;
  layer_impl& operator=(const layer_impl&) = delete;

  [[nodiscard]] virtual std::string keras_type() const = 0;  // "Conv2D"
  [[nodiscard]] virtual std::string base_name() const = 0;   // "conv2d"
  [[nodiscard]] virtual std::string config() const = 0;      // architecture, for fingerprints
  [[nodiscard]] virtual std::size_t param_count() const { return 0; }
  [[nodiscard]] virtual std::size_t state_count() const { return 0; }  // non-trained values (moving statistics)
  [[nodiscard]] virtual std::size_t input_count() const { return 1; }
  [[nodiscard]] virtual std::vector<weight_info> weights() const { return {}; }       // parameters, arena order
  [[nodiscard]] virtual std::vector<weight_info> state_weights() const { return {}; }  // state, in order
  // Keras's `config` fields of the layer, as JSON members ("\"filters\": 16, ...").
  [[nodiscard]] virtual std::string keras_config() const { return {}; }
  // The regularisation term this layer adds to the loss (Keras's `losses`), e.g. λ·Σw²; the matching gradient
  // is added by backward() when its `add_regularization` says so.
  [[nodiscard]] virtual double regularization(const T* /*params*/) const { return 0; }
  // The same terms as data, for a model that adds their gradients itself.
  [[nodiscard]] virtual std::vector<l2_term> l2_terms() const { return {}; }
  virtual void initialize_state(std::span<T> /*state*/) {}
  [[nodiscard]] virtual bool aliases_input() const { return false; }
  virtual void initialize(std::span<T> /*params*/, std::uint64_t /*seed*/, std::uint64_t /*stream*/) {}
  virtual void reserve(std::size_t /*batch*/) {}
  virtual void forward(const forward_args<T>& a) = 0;
  virtual void backward(const backward_args<T>& a) = 0;

  // Fusions (a layer running inside another's pass) are not here: a layer that takes part in one derives from its
  // small interface (nn/detail/layer_fusions.hpp), which the fusion planner asks for.

  [[nodiscard]] const nn_shape& input_shape() const noexcept { return in_; }
  [[nodiscard]] const nn_shape& output_shape() const noexcept { return out_; }
  [[nodiscard]] std::size_t input_size() const { return shape_size(in_); }
  [[nodiscard]] std::size_t output_size() const { return shape_size(out_); }

 protected:
  nn_shape in_;
  nn_shape out_;
};

}  // namespace mwstrat::detail

namespace mwstrat::detail {

// λ·Σ w² in double, in index order (the same bits on every thread count).
template <class T>
double l2_penalty(double lambda, const T* w, std::size_t n) {
  if (lambda == 0) return 0;
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * static_cast<double>(w[i]);
  return lambda * s;
}

// g += 2λ·w: the gradient of `l2_penalty`.
template <class T>
void add_l2_gradient(double lambda, const T* w, T* g, std::size_t n) {
  if (lambda == 0) return;
  const T two_lambda = static_cast<T>(2 * lambda);
  for (std::size_t i = 0; i < n; ++i) g[i] += two_lambda * w[i];
}

// A shape as a JSON list ("[32, 32, 3]"), and a number as JSON.
inline std::string json_list(const std::vector<std::size_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
inline std::string json_number(double v) { return general_text(v, 17); }
inline std::string activation_name(nn::activation a) {
  return a == nn::activation::relu ? "relu" : a == nn::activation::softmax ? "softmax" : "linear";
}
inline std::string regularizer_json(double l2) {
  return l2 == 0 ? "null" : "{\"class_name\": \"L2\", \"config\": {\"l2\": " + json_number(l2) + "}}";
}

}  // namespace mwstrat::detail
