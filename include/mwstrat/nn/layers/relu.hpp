// ReLU (`nn::relu`).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

template <class T>
class relu_layer final : public layer_impl<T>, public plain_relu {
 public:
  explicit relu_layer(const nn_shape& in) : layer_impl<T>(in, in) {}
  std::string keras_type() const override { return "ReLU"; }
  std::string base_name() const override { return "re_lu"; }
  std::string config() const override { return "relu"; }
  void forward(const forward_args<T>& a) override {
    parallel_chunks(a.batch * this->input_size(), 1 << 16, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) a.y[i] = a.x[i] > T{} ? a.x[i] : T{};
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx != nullptr) relu_backward(a.batch * this->input_size(), a.y, a.dy, a.dx);
  }
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
