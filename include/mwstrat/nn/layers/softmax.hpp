// Softmax (`nn::softmax`) over the last axis.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
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
class softmax_layer final : public layer_impl<T> {
 public:
  explicit softmax_layer(const nn_shape& in) : layer_impl<T>(in, in) {}
  std::string keras_type() const override { return "Softmax"; }
  std::string base_name() const override { return "softmax"; }
  std::string config() const override { return "softmax"; }
  void forward(const forward_args<T>& a) override {
    const std::size_t k = this->in_.back();
    const std::size_t rows = a.batch * this->input_size() / k;
    parallel_chunks(rows, 256, [&](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) {
        const T* x = a.x + r * k;
        T* y = a.y + r * k;
        T m = x[0];
        for (std::size_t j = 1; j < k; ++j) m = x[j] > m ? x[j] : m;
        T s{};
        for (std::size_t j = 0; j < k; ++j) s += (y[j] = std::exp(x[j] - m));
        for (std::size_t j = 0; j < k; ++j) y[j] /= s;
      }
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx == nullptr) return;
    const std::size_t k = this->in_.back();
    const std::size_t rows = a.batch * this->input_size() / k;
    parallel_chunks(rows, 256, [&](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) {
        const T* y = a.y + r * k;
        const T* dy = a.dy + r * k;
        T dot{};
        for (std::size_t j = 0; j < k; ++j) dot += y[j] * dy[j];
        for (std::size_t j = 0; j < k; ++j) a.dx[r * k + j] = y[j] * (dy[j] - dot);
      }
    });
  }
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
