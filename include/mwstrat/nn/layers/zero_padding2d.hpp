// ZeroPadding2D (`nn::zero_padding2d`): zero rows and columns around each (height, width, channels) sample.

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
class zero_padding2d_layer final : public layer_impl<T> {
 public:
  zero_padding2d_layer(const nn::zero_padding2d& spec, const nn_shape& in) : layer_impl<T>(in, out(spec, in)), spec_(spec) {}
  std::string keras_type() const override { return "ZeroPadding2D"; }
  std::string base_name() const override { return "zero_padding2d"; }
  std::string config() const override {
    return "zero_padding2d(" + json_list({spec_.height[0], spec_.height[1], spec_.width[0], spec_.width[1]}) + ")";
  }
  std::string keras_config() const override {
    return "\"padding\": [" + json_list({spec_.height[0], spec_.height[1]}) + ", " +
           json_list({spec_.width[0], spec_.width[1]}) + "]";
  }
  void forward(const forward_args<T>& a) override {
    const std::size_t h = this->in_[0], w = this->in_[1], c = this->in_[2];
    const std::size_t ow = this->out_[1];
    parallel_tasks(a.batch, [&](std::size_t b) {
      T* y = a.y + b * this->output_size();
      std::fill(y, y + this->output_size(), T{});
      const T* x = a.x + b * this->input_size();
      for (std::size_t i = 0; i < h; ++i)
        std::copy(x + i * w * c, x + (i + 1) * w * c, y + ((i + spec_.height[0]) * ow + spec_.width[0]) * c);
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx == nullptr) return;
    const std::size_t h = this->in_[0], w = this->in_[1], c = this->in_[2];
    const std::size_t ow = this->out_[1];
    parallel_tasks(a.batch, [&](std::size_t b) {
      const T* dy = a.dy + b * this->output_size();
      T* dx = a.dx + b * this->input_size();
      for (std::size_t i = 0; i < h; ++i) {
        const T* src = dy + ((i + spec_.height[0]) * ow + spec_.width[0]) * c;
        std::copy(src, src + w * c, dx + i * w * c);
      }
    });
  }

 private:
  static nn_shape out(const nn::zero_padding2d& s, const nn_shape& in) {
    if (in.size() != 3)
      nn_config_error("zero_padding2d: input shape " + shape_string(in) + " is not (height, width, channels)");
    return {in[0] + s.height[0] + s.height[1], in[1] + s.width[0] + s.width[1], in[2]};
  }
  nn::zero_padding2d spec_;
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
