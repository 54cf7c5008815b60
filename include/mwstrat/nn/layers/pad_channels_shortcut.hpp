// He et al.'s option-A shortcut (`nn::pad_channels_shortcut`, a Keras Lambda): every stride-th row and column, the
// channels padded with zeros (after the existing ones) up to `filters`. No parameters.

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
class pad_channels_shortcut_layer final : public layer_impl<T> {
 public:
  pad_channels_shortcut_layer(const nn::pad_channels_shortcut& spec, const nn_shape& in)
      : layer_impl<T>(in, out(spec, in)), spec_(spec) {}
  std::string keras_type() const override { return "Lambda"; }
  std::string base_name() const override { return "lambda"; }
  std::string config() const override {
    return "pad_channels_shortcut(" + std::to_string(spec_.stride) + "," + std::to_string(spec_.filters) + ")";
  }
  std::string keras_config() const override {
    return "\"function\": \"pad_channels_shortcut\", \"stride\": " + std::to_string(spec_.stride) +
           ", \"filters\": " + std::to_string(spec_.filters);
  }
  void forward(const forward_args<T>& a) override {
    const std::size_t w = this->in_[1], c = this->in_[2];
    const std::size_t oh = this->out_[0], ow = this->out_[1], f = this->out_[2];
    parallel_tasks(a.batch, [&](std::size_t b) {
      const T* x = a.x + b * this->input_size();
      T* y = a.y + b * this->output_size();
      for (std::size_t i = 0; i < oh; ++i)
        for (std::size_t j = 0; j < ow; ++j) {
          const T* src = x + (i * spec_.stride * w + j * spec_.stride) * c;
          T* dst = y + (i * ow + j) * f;
          std::copy(src, src + c, dst);
          std::fill(dst + c, dst + f, T{});
        }
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx == nullptr) return;
    const std::size_t w = this->in_[1], c = this->in_[2];
    const std::size_t oh = this->out_[0], ow = this->out_[1], f = this->out_[2];
    parallel_tasks(a.batch, [&](std::size_t b) {
      const T* dy = a.dy + b * this->output_size();
      T* dx = a.dx + b * this->input_size();
      std::fill(dx, dx + this->input_size(), T{});
      for (std::size_t i = 0; i < oh; ++i)
        for (std::size_t j = 0; j < ow; ++j)
          std::copy(dy + (i * ow + j) * f, dy + (i * ow + j) * f + c, dx + (i * spec_.stride * w + j * spec_.stride) * c);
    });
  }

 private:
  static nn_shape out(const nn::pad_channels_shortcut& s, const nn_shape& in) {
    if (in.size() != 3)
      nn_config_error("pad_channels_shortcut: input shape " + shape_string(in) + " is not (height, width, channels)");
    if (s.stride == 0) nn_config_error("pad_channels_shortcut: stride must be positive");
    if (s.filters < in[2])
      nn_config_error("pad_channels_shortcut: filters " + std::to_string(s.filters) + " fewer than the input's " +
                      std::to_string(in[2]) + " channels");
    return {ceil_div(in[0], s.stride), ceil_div(in[1], s.stride), s.filters};
  }
  nn::pad_channels_shortcut spec_;
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
