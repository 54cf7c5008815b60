// Add (`nn::add`): the element-wise sum of two or more tensors of one shape, the merge of a residual block
// (with the ReLU that follows it fused in, where the graph executor finds one).

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
class add_layer final : public layer_impl<T>,
                        public relu_fusable,
                        public input_map_reader<T>,
                        public one_gradient_for_every_input {
 public:
  add_layer(const std::vector<nn_shape>& ins)
      : layer_impl<T>(check(ins), ins.front()), inputs_(ins.size()), outs_(ins.size(), nullptr) {}
  std::string keras_type() const override { return "Add"; }
  std::string base_name() const override { return "add"; }
  std::string config() const override { return "add(" + std::to_string(inputs_) + ")"; }
  std::size_t input_count() const override { return inputs_; }
  void fuse_relu() override { relu_ = true; }
  void forward(const forward_args<T>& a) override {
    const T* const* xs = a.xs;
    T* y = a.y;
    const std::size_t m = inputs_;
    const bool relu = relu_;
    parallel_chunks(a.batch * this->output_size(), 1 << 16,
                    [xs, y, m, relu](std::size_t b, std::size_t e) { add_range(b, e, xs, m, y, relu); });
  }
  // Training deferral (layer_fusions.hpp): inputs with a map are read through it. The sum runs over the inputs in order a
  // chunk of rows at a time (the chunk stays in cache), in T, as the plain pass adds the mapped values it is given.
  void forward_with_input_maps(const forward_args<T>& a, const channel_map<T>* maps) override {
    const T* const* xs = a.xs;
    T* y = a.y;
    const std::size_t m = inputs_;
    const bool relu = relu_;
    const std::size_t c = this->output_shape().back();
    const std::size_t rows = a.batch * this->output_size() / c;
    parallel_chunks(rows, 256, [=](std::size_t b, std::size_t e) {
      T* __restrict out = y + b * c;
      const std::size_t n = (e - b) * c;
      for (std::size_t k = 0; k < m; ++k) {
        const T* __restrict x = xs[k] + b * c;
        const channel_map<T> map = maps[k];
        if (map.mean == nullptr) {
          if (k == 0) std::copy(x, x + n, out);
          else
            for (std::size_t i = 0; i < n; ++i) out[i] += x[i];
          continue;
        }
        const T* mean = map.mean;
        const T* scale = map.scale;
        const T* shift = map.shift;
        for (std::size_t r = 0; r < e - b; ++r) {
          const T* xr = x + r * c;
          T* yr = out + r * c;
          if (k == 0)
            for (std::size_t j = 0; j < c; ++j) yr[j] = apply_channel_map(xr[j], mean[j], scale[j], shift[j]);
          else
            for (std::size_t j = 0; j < c; ++j) yr[j] += apply_channel_map(xr[j], mean[j], scale[j], shift[j]);
        }
      }
      if (relu)
        for (std::size_t i = 0; i < n; ++i) out[i] = out[i] > T{} ? out[i] : T{};
    });
  }

  // Each input's gradient is the output's (through the fused ReLU's mask, if any), written to every input in one
  // pass over the output's gradient (not written once and then copied). The graph executor usually asks for one.
  void backward(const backward_args<T>& a) override {
    const std::size_t n = a.batch * this->output_size();
    std::size_t outs = 0;
    for (std::size_t k = 0; k < inputs_; ++k)
      if (a.dxs[k] != nullptr) outs_[outs++] = a.dxs[k];
    if (outs == 0) return;
    T* const* to = outs_.data();
    const T* y = relu_ ? a.y : nullptr;
    const T* dy = a.dy;
    parallel_chunks(n, 1 << 16, [to, outs, y, dy](std::size_t b, std::size_t e) {
      if (y != nullptr) relu_backward_range(b, e, y, dy, to[0]);
      else std::copy(dy + b, dy + e, to[0] + b);
      for (std::size_t k = 1; k < outs; ++k) std::copy(to[0] + b, to[0] + e, to[k] + b);  // the chunk is in cache
    });
  }

 private:
  static nn_shape check(const std::vector<nn_shape>& ins) {
    if (ins.size() < 2) nn_config_error("add: needs at least 2 inputs, got " + std::to_string(ins.size()));
    for (const auto& s : ins)
      if (s != ins.front())
        nn_config_error("add: inputs of different shapes " + shape_string(ins.front()) + " and " + shape_string(s));
    return ins.front();
  }
  // y[i] = ((xs[0][i] + xs[1][i]) + ...), then max(·, 0) with a fused ReLU, for i in [b, e): whole vectors (the
  // inputs are read through memcpy, so the compiler need not fear that y aliases them), in the inputs' order.
  static void add_range(std::size_t b, std::size_t e, const T* const* xs, std::size_t m, T* y, bool relu) noexcept {
    using V = vec_t<T>;
    constexpr std::size_t L = lanes_v<T>;
    const V zero = {};
    std::size_t i = b;
    for (; i + L <= e; i += L) {
      V s;
      V v;
      vload(s, xs[0] + i);
      for (std::size_t k = 1; k < m; ++k) {
        vload(v, xs[k] + i);
        s += v;
      }
      if (relu) s = s > zero ? s : zero;
      vstore(y + i, s);
    }
    for (; i < e; ++i) {
      T s = xs[0][i];
      for (std::size_t k = 1; k < m; ++k) s += xs[k][i];
      y[i] = relu ? (s > T{} ? s : T{}) : s;
    }
  }

  std::size_t inputs_;
  std::vector<T*> outs_;  // backward: the inputs' gradients that are wanted (sized once)
  bool relu_ = false;  // a following ReLU is fused (layer_impl::fuse_relu)
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
