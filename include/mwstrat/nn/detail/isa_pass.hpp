// One ISA pass (nn/detail/kernel_isas.hpp) as one type, so that code written once uses whichever pass runs: a
// factory makes `typename Pass::template conv2d<T>` (that pass's conv2d_layer<T>), and a test compares a kernel
// entry point with the same pass's internals (`Pass::scatter_backward_data`) and rounding (`Pass::fmadd`).

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

struct isa_pass {
  // The layers.
  template <class T> using activation = activation_layer<T>;
  template <class T> using add = add_layer<T>;
  template <class T> using alias = alias_layer<T>;
  template <class T> using batch_normalization = batch_normalization_layer<T>;
  template <class T> using conv2d = conv2d_layer<T>;
  template <class T> using dense = dense_layer<T>;
  template <class T> using dropout = dropout_layer<T>;
  template <class T> using global_average_pooling2d = global_average_pooling2d_layer<T>;
  template <class T> using max_pool2d = max_pool2d_layer<T>;
  template <class T> using pad_channels_shortcut = pad_channels_shortcut_layer<T>;
  template <class T> using relu = relu_layer<T>;
  template <class T> using softmax = softmax_layer<T>;
  template <class T> using zero_padding2d = zero_padding2d_layer<T>;

  // What tests compare the entry points with.
  static constexpr int float_lanes = lanes_v<float>;
  static float fmadd(float a, float b, float c) noexcept { return detail::fmadd(a, b, c); }
  static bool scatter_applies(const nn::kernels::conv2d_geometry& g) { return nn::kernels::scatter::applies(g); }
  static void scatter_backward_data(const nn::kernels::conv2d_geometry& g, const float* grad_output,
                                    const float* kernel_hwio, float* grad_input, nn::kernels::conv2d_workspace& ws) {
    nn::kernels::scatter::backward_data(g, grad_output, kernel_hwio, grad_input, ws);
  }
};

}  // namespace MWSTRAT_ISA_NS(detail)

#endif  // MWSTRAT_ISA_NS
