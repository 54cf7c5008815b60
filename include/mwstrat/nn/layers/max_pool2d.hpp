// MaxPooling2D (`nn::max_pool2d`).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/window_2d.hpp>
#include <mwstrat/nn/layer_specs.hpp>

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
class max_pool2d_layer final : public layer_impl<T> {
 public:
  max_pool2d_layer(const nn::max_pool2d& spec, const nn_shape& in)
      : layer_impl<T>(in, nn_shape{}), spec_(normalise(spec)),
        g_(window_2d::make("max_pool2d", in, spec_.pool_size, spec_.strides, spec_.padding)) {
    this->out_ = {g_.oh, g_.ow, g_.c};
  }
  std::string keras_type() const override { return "MaxPooling2D"; }
  std::string base_name() const override { return "max_pooling2d"; }
  std::string config() const override {
    return "max_pool2d(" + std::to_string(g_.kh) + "x" + std::to_string(g_.kw) + ",s" + std::to_string(g_.sh) + "x" +
           std::to_string(g_.sw) + (spec_.padding == nn::padding::same ? ",same)" : ",valid)");
  }
  void reserve(std::size_t batch) override { argmax_.assign(batch * this->output_size(), 0); }
  void forward(const forward_args<T>& a) override {
    const std::size_t in_size = this->input_size();
    const std::size_t out_size = this->output_size();
    parallel_tasks(a.batch, [&](std::size_t b) {
      const T* x = a.x + b * in_size;
      T* y = a.y + b * out_size;
      std::uint32_t* arg = argmax_.data() + b * out_size;
      for (std::size_t oy = 0; oy < g_.oh; ++oy)
        for (std::size_t ox = 0; ox < g_.ow; ++ox)
          for (std::size_t c = 0; c < g_.c; ++c) {
            T best = -std::numeric_limits<T>::infinity();
            std::size_t best_at = 0;
            bool any = false;
            for (std::size_t ky = 0; ky < g_.kh; ++ky) {
              const std::ptrdiff_t iy = g_.in_row(oy, ky);
              if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(g_.h)) continue;
              for (std::size_t kx = 0; kx < g_.kw; ++kx) {
                const std::ptrdiff_t ix = g_.in_col(ox, kx);
                if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(g_.w)) continue;
                const std::size_t at = (static_cast<std::size_t>(iy) * g_.w + static_cast<std::size_t>(ix)) * g_.c + c;
                if (!any || x[at] > best) {
                  best = x[at];
                  best_at = at;
                  any = true;
                }
              }
            }
            const std::size_t o = (oy * g_.ow + ox) * g_.c + c;
            y[o] = best;
            arg[o] = static_cast<std::uint32_t>(best_at);
          }
    });
  }
  void backward(const backward_args<T>& a) override {
    if (a.dx == nullptr) return;
    const std::size_t in_size = this->input_size();
    const std::size_t out_size = this->output_size();
    parallel_tasks(a.batch, [&](std::size_t b) {
      T* dx = a.dx + b * in_size;
      std::fill(dx, dx + in_size, T{});
      const T* dy = a.dy + b * out_size;
      const std::uint32_t* arg = argmax_.data() + b * out_size;
      for (std::size_t o = 0; o < out_size; ++o) dx[arg[o]] += dy[o];
    });
  }

 private:
  static nn::max_pool2d normalise(nn::max_pool2d s) {
    if (s.strides[0] == 0 && s.strides[1] == 0) s.strides = s.pool_size;
    return s;
  }
  nn::max_pool2d spec_;
  window_2d g_;
  std::vector<std::uint32_t> argmax_;
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
