#pragma once
// The interface of the layers behind the models (one header per layer in nn/layers/). Each layer owns its scratch
// (sized for the largest batch by reserve()), reads its parameters from and writes its gradients to the model's
// arena, and splits its work into tasks by shape only, so its results do not depend on the number of threads.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/layers.hpp>

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

template <class T>
struct forward_args {
  std::size_t batch;
  const T* x;
  T* y;
  const T* params;
  bool training;
  std::uint64_t step;
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
  [[nodiscard]] virtual bool aliases_input() const { return false; }
  virtual void initialize(std::span<T> /*params*/, std::uint64_t /*seed*/, std::uint64_t /*stream*/) {}
  virtual void reserve(std::size_t /*batch*/) {}
  virtual void forward(const forward_args<T>& a) = 0;
  virtual void backward(const backward_args<T>& a) = 0;

  [[nodiscard]] const nn_shape& input_shape() const noexcept { return in_; }
  [[nodiscard]] const nn_shape& output_shape() const noexcept { return out_; }
  [[nodiscard]] std::size_t input_size() const { return shape_size(in_); }
  [[nodiscard]] std::size_t output_size() const { return shape_size(out_); }

 protected:
  nn_shape in_;
  nn_shape out_;
};

}  // namespace mwstrat::detail
