#pragma once
// Add (`nn::add`): the element-wise sum of two or more tensors of one shape, the merge of a residual block.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/layers.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace mwstrat::detail {

template <class T>
class add_layer final : public layer_impl<T> {
 public:
  add_layer(const std::vector<nn_shape>& ins) : layer_impl<T>(check(ins), ins.front()), inputs_(ins.size()) {}
  std::string keras_type() const override { return "Add"; }
  std::string base_name() const override { return "add"; }
  std::string config() const override { return "add(" + std::to_string(inputs_) + ")"; }
  std::size_t input_count() const override { return inputs_; }
  void forward(const forward_args<T>& a) override {
    parallel_chunks(a.batch * this->output_size(), 1 << 16, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        T s = a.xs[0][i];
        for (std::size_t k = 1; k < inputs_; ++k) s += a.xs[k][i];
        a.y[i] = s;
      }
    });
  }
  // Each input's gradient is the output's.
  void backward(const backward_args<T>& a) override {
    const std::size_t n = a.batch * this->output_size();
    for (std::size_t k = 0; k < inputs_; ++k)
      if (a.dxs[k] != nullptr) std::copy(a.dy, a.dy + n, a.dxs[k]);
  }

 private:
  static nn_shape check(const std::vector<nn_shape>& ins) {
    if (ins.size() < 2) nn_config_error("add: needs at least 2 inputs, got " + std::to_string(ins.size()));
    for (const auto& s : ins)
      if (s != ins.front())
        nn_config_error("add: inputs of different shapes " + shape_string(ins.front()) + " and " + shape_string(s));
    return ins.front();
  }
  std::size_t inputs_;
};

}  // namespace mwstrat::detail
