// Activation (`nn::activation_layer`): ReLU or the identity as a layer of its own (softmax only on a graph
// model's output, where the loss uses the logits before it).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

template <class T>
class activation_layer final : public layer_impl<T>, public plain_relu {
 public:
  activation_layer(const nn::activation_layer& spec, const nn_shape& in) : layer_impl<T>(in, in), spec_(spec) {}
  std::string keras_type() const override { return "Activation"; }
  std::string base_name() const override { return "activation"; }
  std::string config() const override { return "activation(" + activation_name(spec_.activation) + ")"; }
  std::string keras_config() const override { return "\"activation\": \"" + activation_name(spec_.activation) + "\""; }
  bool is_plain_relu() const override { return spec_.activation == nn::activation::relu; }
  void forward(const forward_args<T>& a) override {
    const bool relu = spec_.activation == nn::activation::relu;
    parallel_chunks(a.batch * this->input_size(), 1 << 16, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) a.y[i] = relu ? (a.x[i] > T{} ? a.x[i] : T{}) : a.x[i];
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx == nullptr) return;
    const std::size_t n = a.batch * this->input_size();
    if (spec_.activation == nn::activation::relu) {
      relu_backward(n, a.y, a.dy, a.dx);
    } else {
      std::copy(a.dy, a.dy + n, a.dx);
    }
  }

 private:
  nn::activation_layer spec_;
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
