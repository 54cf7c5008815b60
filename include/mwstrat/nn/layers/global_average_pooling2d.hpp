// GlobalAveragePooling2D (`nn::global_average_pooling2d`): (height, width, channels) -> (channels), the mean of each
// channel, summed in a fixed order.

#include <mwstrat/error.hpp>
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
class global_average_pooling2d_layer final : public layer_impl<T> {
 public:
  explicit global_average_pooling2d_layer(const nn_shape& in) : layer_impl<T>(in, out(in)) {}
  std::string keras_type() const override { return "GlobalAveragePooling2D"; }
  std::string base_name() const override { return "global_average_pooling2d"; }
  std::string config() const override { return "global_average_pooling2d"; }
  std::string keras_config() const override { return "\"data_format\": \"channels_last\", \"keepdims\": false"; }
  void forward(const forward_args<T>& a) override {
    const std::size_t hw = this->in_[0] * this->in_[1], c = this->in_[2];
    const T scale = T{1} / static_cast<T>(hw);
    parallel_tasks(a.batch, [&](std::size_t b) {
      const T* x = a.x + b * hw * c;
      T* y = a.y + b * c;
      std::fill(y, y + c, T{});
      for (std::size_t p = 0; p < hw; ++p)
        for (std::size_t j = 0; j < c; ++j) y[j] += x[p * c + j];
      for (std::size_t j = 0; j < c; ++j) y[j] *= scale;
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx == nullptr) return;
    const std::size_t hw = this->in_[0] * this->in_[1], c = this->in_[2];
    const T scale = T{1} / static_cast<T>(hw);
    parallel_tasks(a.batch, [&](std::size_t b) {
      const T* dy = a.dy + b * c;
      T* dx = a.dx + b * hw * c;
      for (std::size_t p = 0; p < hw; ++p)
        for (std::size_t j = 0; j < c; ++j) dx[p * c + j] = dy[j] * scale;
    });
  }

 private:
  static nn_shape out(const nn_shape& in) {
    if (in.size() != 3 || shape_size(in) == 0)
      nn_config_error("global_average_pooling2d: input shape " + shape_string(in) + " is not (height, width, channels)");
    return {in[2]};
  }
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
