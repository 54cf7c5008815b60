// Conv2D (`nn::conv2d`): im2col + GEMM, with the ReLU fused.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/window_2d.hpp>
#include <mwstrat/nn/initializers.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

template <class T>
class conv2d_layer final : public layer_impl<T>,
                           public input_affine_reader<T>,
                           public output_hook_runner<T>,
                           public input_gradient_hook_runner,
                           public input_gradient_adder {
 public:
  conv2d_layer(const nn::conv2d& spec, const nn_shape& in)
      : layer_impl<T>(in, geometry(spec, in).first), spec_(spec), g_(geometry(spec, in).second) {
    patch_ = g_.kh * g_.kw * g_.c;
    if (spec.algorithm == nn::conv_algorithm::direct) kernels_ws_.path = nn::kernels::conv2d_path::direct;
  }
  std::string keras_type() const override { return "Conv2D"; }
  std::string base_name() const override { return "conv2d"; }
  std::string config() const override {
    std::string s = "conv2d(" + std::to_string(spec_.filters) + "," + std::to_string(g_.kh) + "x" +
                    std::to_string(g_.kw) + ",s" + std::to_string(g_.sh) + "x" + std::to_string(g_.sw) +
                    (spec_.padding == nn::padding::same ? ",same" : ",valid") +
                    (spec_.activation == nn::activation::relu ? ",relu" : "");
    // Only what differs from the original layer, so that fingerprints of existing models stay the same.
    if (!spec_.use_bias) s += ",nobias";
    if (spec_.kernel_initializer == nn::initializer::he_normal) s += ",he_normal";
    if (spec_.kernel_regularizer != 0) s += ",l2k=" + json_number(spec_.kernel_regularizer);
    if (spec_.bias_regularizer != 0) s += ",l2b=" + json_number(spec_.bias_regularizer);
    return s + ")";
  }
  std::size_t param_count() const override { return patch_ * spec_.filters + (spec_.use_bias ? spec_.filters : 0); }
  std::vector<weight_info> weights() const override {
    std::vector<weight_info> w{{"kernel", {g_.kh, g_.kw, g_.c, spec_.filters}}};
    if (spec_.use_bias) w.push_back({"bias", {spec_.filters}});
    return w;
  }
  std::string keras_config() const override {
    return "\"filters\": " + std::to_string(spec_.filters) + ", \"kernel_size\": " + json_list({g_.kh, g_.kw}) +
           ", \"strides\": " + json_list({g_.sh, g_.sw}) + ", \"padding\": \"" +
           (spec_.padding == nn::padding::same ? "same" : "valid") + "\", \"activation\": \"" +
           activation_name(spec_.activation) + "\", \"use_bias\": " + (spec_.use_bias ? "true" : "false") +
           ", \"kernel_initializer\": \"" +
           (spec_.kernel_initializer == nn::initializer::he_normal ? "he_normal" : "glorot_uniform") +
           "\", \"kernel_regularizer\": " + regularizer_json(spec_.kernel_regularizer) +
           ", \"bias_regularizer\": " + regularizer_json(spec_.bias_regularizer);
  }
  std::vector<l2_term> l2_terms() const override {
    const std::size_t k = patch_ * spec_.filters;
    std::vector<l2_term> terms;
    if (spec_.kernel_regularizer != 0) terms.push_back({0, k, spec_.kernel_regularizer});
    if (spec_.use_bias && spec_.bias_regularizer != 0) terms.push_back({k, spec_.filters, spec_.bias_regularizer});
    return terms;
  }
  double regularization(const T* params) const override {
    const std::size_t k = patch_ * spec_.filters;
    return l2_penalty(spec_.kernel_regularizer, params, k) +
           (spec_.use_bias ? l2_penalty(spec_.bias_regularizer, params + k, spec_.filters) : 0.0);
  }
  void initialize(std::span<T> p, std::uint64_t seed, std::uint64_t stream) override {
    const std::size_t k = patch_ * spec_.filters;
    if (spec_.kernel_initializer == nn::initializer::he_normal) {
      nn::he_normal(p.first(k), patch_, seed, stream);
    } else {
      nn::glorot_uniform(p.first(k), g_.kh * g_.kw * g_.c, g_.kh * g_.kw * spec_.filters, seed, stream);
    }
    nn::zeros(p.subspan(k));
  }
  void reserve(std::size_t batch) override {
    if (uses_kernels()) return;  // the kernels' workspace grows on first use, then stays
    const std::size_t positions = batch * g_.oh * g_.ow;
    cols_.assign(positions * patch_, T{});
    chunks_ = std::max<std::size_t>(1, ceil_div(positions, chunk_rows));
    partial_.assign(chunks_ * (patch_ + 1) * spec_.filters, T{});
    if (spec_.activation == nn::activation::relu) dz_.assign(positions * spec_.filters, T{});
  }
  void forward(const forward_args<T>& a) override {
    if constexpr (std::is_same_v<T, float>) {
      if (uses_kernels()) {
        nn::kernels::conv2d_forward(geometry_of(a.batch), a.x, a.params,
                                    spec_.use_bias ? a.params + patch_ * spec_.filters : nullptr, a.y, kernels_ws_);
        return;
      }
    }
    const std::size_t positions = a.batch * g_.oh * g_.ow;
    im2col(a.batch, a.x);
    gemm_nn<T>(positions, spec_.filters, patch_, cols_.data(), static_cast<std::ptrdiff_t>(patch_), 1, a.params,
               spec_.filters, a.y, spec_.filters, spec_.use_bias ? a.params + patch_ * spec_.filters : nullptr,
               spec_.activation == nn::activation::relu);
  }
  // Inference folding (layer_fusions.hpp): the kernels apply a batch norm's map and ReLU as they read the input.
  bool takes_input_affine() const override { return uses_kernels(); }
  void forward_with_input_affine(const forward_args<T>& a, const T* scale, const T* shift, bool relu) override {
    if constexpr (std::is_same_v<T, float>) {
      if (uses_kernels()) {
        nn::kernels::conv2d_forward(geometry_of(a.batch), a.x, nn::kernels::conv2d_input_transform{scale, shift, relu},
                                    a.params, spec_.use_bias ? a.params + patch_ * spec_.filters : nullptr, a.y,
                                    kernels_ws_);
        return;
      }
    }
    (void)a, (void)scale, (void)shift, (void)relu;  // not takes_input_affine()
    nn_config_error("conv2d: cannot apply an affine map to its input off the float kernels");
  }
  // Statistics in the producer's pass (layer_fusions.hpp): the kernels run the reader's hook on each output image, and
  // the batch norm's hook on each image of the data gradient (backward_args::dx_hook).
  bool can_run_output_hook() const override { return uses_kernels(); }
  void forward_with_output_hook(const forward_args<T>& a, const nn::kernels::conv2d_image_hook& hook) override {
    if constexpr (std::is_same_v<T, float>) {
      if (uses_kernels()) {
        nn::kernels::conv2d_forward(geometry_of(a.batch), a.x, a.params,
                                    spec_.use_bias ? a.params + patch_ * spec_.filters : nullptr, a.y, kernels_ws_,
                                    &hook);
        return;
      }
    }
    (void)a, (void)hook;  // not can_run_output_hook()
    nn_config_error("conv2d: cannot run a hook on its output off the float kernels");
  }
  bool can_run_input_gradient_hook() const override { return uses_kernels(); }
  // The kernels add a data gradient as they store it on the Winograd path, and through a buffer of their own on
  // the others (layer_fusions.hpp).
  bool can_add_to_dx() const override { return uses_kernels(); }
  void backward(const backward_args<T>& a) override {
    if constexpr (std::is_same_v<T, float>) {
      if (uses_kernels()) {
        const std::size_t k = patch_ * spec_.filters;
        const nn::kernels::conv2d_geometry g = geometry_of(a.batch);
        nn::kernels::conv2d_backward_filter(g, a.x, a.dy, a.grads, spec_.use_bias ? a.grads + k : nullptr, kernels_ws_);
        if (a.add_regularization) {
          add_l2_gradient(spec_.kernel_regularizer, a.params, a.grads, k);
          if (spec_.use_bias) add_l2_gradient(spec_.bias_regularizer, a.params + k, a.grads + k, spec_.filters);
        }
        // Final now: its reduction can start while the input gradient is computed.
        if (a.ready != nullptr) (*a.ready)(0, this->param_count());
        if (a.dx != nullptr)
          nn::kernels::conv2d_backward_data(g, a.dy, a.params, a.dx, kernels_ws_, a.add_to_dx, a.dx_hook);
        return;
      }
    }
    const std::size_t positions = a.batch * g_.oh * g_.ow;
    const std::size_t f = spec_.filters;
    const bool relu = spec_.activation == nn::activation::relu;
    const T* dz = relu ? dz_.data() : a.dy;
    // dK[p][f] = sum_m cols[m][p] dz[m][f], db[f] = sum_m dz[m][f]: fixed chunks of rows, summed in chunk order.
    // Each chunk first masks its own rows of the gradient by the ReLU, so they are still in cache for the GEMM.
    const std::size_t chunks = ceil_div(positions, chunk_rows);
    // Without an input gradient to compute (a first layer), the masked gradient is needed only here: it is made a
    // few rows at a time in a buffer on the stack and used while in L1, never written out (at batch 128 the whole
    // of it is 11 MB of stores). The GEMM continues its sums across those blocks in order, so the bits are the same.
    const std::size_t block_rows = stack_block_floats / std::max<std::size_t>(f, 1);
    const bool blocked = relu && a.dx == nullptr && block_rows >= 8;
    // A small patch (a first layer on few channels) and a few vectors of filters: sums in registers.
    const bool small = small_filter_gradient<T>(patch_, f);
    parallel_tasks(chunks, [&](std::size_t ch) {
      const std::size_t m0 = ch * chunk_rows;
      const std::size_t m1 = std::min(positions, m0 + chunk_rows);
      T* part = partial_.data() + ch * (patch_ + 1) * f;
      if (small) {
        conv_filter_gradient<T>(patch_, f, m1 - m0, cols_.data() + m0 * patch_, relu ? a.y + m0 * f : nullptr,
                                a.dy + m0 * f, relu && a.dx != nullptr ? dz_.data() + m0 * f : nullptr, part);
        return;
      }
      T* pb = part + patch_ * f;
      for (std::size_t j = 0; j < f; ++j) pb[j] = T{};
      auto sum_bias = [pb, f](const T* rows, std::size_t count) {
        for (std::size_t m = 0; m < count; ++m)
          for (std::size_t j = 0; j < f; ++j) pb[j] += rows[m * f + j];
      };
      if (blocked) {
        alignas(64) T block[stack_block_floats];
        for (std::size_t b0 = m0; b0 < m1; b0 += block_rows) {
          const std::size_t b1 = std::min(m1, b0 + block_rows);
          relu_backward_range(0, (b1 - b0) * f, a.y + b0 * f, a.dy + b0 * f, block);
          gemm_nn_block<T>(0, patch_, 0, f, b1 - b0, cols_.data() + b0 * patch_, 1,
                           static_cast<std::ptrdiff_t>(patch_), block, f, part, f, nullptr, b0 > m0);
          sum_bias(block, b1 - b0);
        }
        return;
      }
      if (relu) relu_backward_range(m0 * f, m1 * f, a.y, a.dy, dz_.data());
      gemm_nn_block<T>(0, patch_, 0, f, m1 - m0, cols_.data() + m0 * patch_, 1, static_cast<std::ptrdiff_t>(patch_),
                       dz + m0 * f, f, part, f, nullptr);
      sum_bias(dz + m0 * f, m1 - m0);
    });
    const std::size_t n = (patch_ + 1) * f;
    parallel_chunks(this->param_count(), 4096, [&](std::size_t b, std::size_t e) {  // without a bias: no bias sums
      for (std::size_t i = b; i < e; ++i) {
        T s = partial_[i];
        for (std::size_t ch = 1; ch < chunks; ++ch) s += partial_[ch * n + i];
        a.grads[i] = s;
      }
    });
    if (a.add_regularization) {
      add_l2_gradient(spec_.kernel_regularizer, a.params, a.grads, patch_ * f);
      if (spec_.use_bias) add_l2_gradient(spec_.bias_regularizer, a.params + patch_ * f, a.grads + patch_ * f, f);
    }
    if (a.ready != nullptr) (*a.ready)(0, this->param_count());  // final before the input gradient
    if (a.dx == nullptr) return;
    // dcols[m][p] = sum_f dz[m][f] K[p][f], then scattered back to the input, one task per sample.
    gemm_nt<T>(positions, patch_, f, dz, f, a.params, f, cols_.data(), patch_, nullptr, false, {});
    const std::size_t in_size = g_.h * g_.w * g_.c;
    parallel_tasks(a.batch, [&](std::size_t b) {
      T* dx = a.dx + b * in_size;
      std::fill(dx, dx + in_size, T{});
      const T* dcol = cols_.data() + b * g_.oh * g_.ow * patch_;
      for (std::size_t oy = 0; oy < g_.oh; ++oy)
        for (std::size_t ox = 0; ox < g_.ow; ++ox, dcol += patch_)
          for (std::size_t ky = 0; ky < g_.kh; ++ky) {
            const std::ptrdiff_t iy = g_.in_row(oy, ky);
            if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(g_.h)) continue;
            for (std::size_t kx = 0; kx < g_.kw; ++kx) {
              const std::ptrdiff_t ix = g_.in_col(ox, kx);
              if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(g_.w)) continue;
              T* d = dx + (static_cast<std::size_t>(iy) * g_.w + static_cast<std::size_t>(ix)) * g_.c;
              const T* s = dcol + (ky * g_.kw + kx) * g_.c;
              for (std::size_t c = 0; c < g_.c; ++c) d[c] += s[c];
            }
          }
    });
  }

 private:
  static constexpr std::size_t chunk_rows = 2048;
  static constexpr std::size_t stack_block_floats = 4096;  // 16 KiB of masked gradient per block

  static std::pair<nn_shape, window_2d> geometry(const nn::conv2d& spec, const nn_shape& in) {
    if (spec.filters == 0) nn_config_error("conv2d: filters must be positive");
    if (spec.activation == nn::activation::softmax) nn_config_error("conv2d: a softmax activation is not supported");
    const window_2d g = window_2d::make("conv2d", in, spec.kernel_size, spec.strides, spec.padding);
    return {nn_shape{g.oh, g.ow, spec.filters}, g};
  }

  // cols[position][ky][kx][c], filled one (output row, ky, kx, c) at a time along the output row: a simple
  // strided loop with a predictable bounds test, instead of a tiny copy per window row (which the compiler
  // turns into a memcpy call per position).
  void im2col(std::size_t batch, const T* x) {
    const std::size_t in_size = g_.h * g_.w * g_.c;
    const std::size_t run = g_.kw * g_.c;
    const std::ptrdiff_t h = static_cast<std::ptrdiff_t>(g_.h);
    const std::ptrdiff_t w = static_cast<std::ptrdiff_t>(g_.w);
    const std::size_t patch = patch_;
    parallel_tasks(batch, [&](std::size_t b) {
      const T* xs = x + b * in_size;
      T* col_b = cols_.data() + b * g_.oh * g_.ow * patch;
      for (std::size_t oy = 0; oy < g_.oh; ++oy)
        for (std::size_t ky = 0; ky < g_.kh; ++ky) {
          T* dst = col_b + oy * g_.ow * patch + ky * run;
          const std::ptrdiff_t iy = g_.in_row(oy, ky);
          if (iy < 0 || iy >= h) {
            for (std::size_t ox = 0; ox < g_.ow; ++ox)
              for (std::size_t t = 0; t < run; ++t) dst[ox * patch + t] = T{};
            continue;
          }
          const T* src = xs + static_cast<std::size_t>(iy) * g_.w * g_.c;
          for (std::size_t kx = 0; kx < g_.kw; ++kx)
            for (std::size_t ch = 0; ch < g_.c; ++ch) {
              T* d = dst + kx * g_.c + ch;
              for (std::size_t ox = 0; ox < g_.ow; ++ox) {
                const std::ptrdiff_t ix = g_.in_col(ox, kx);
                d[ox * patch] = ix >= 0 && ix < w ? src[static_cast<std::size_t>(ix) * g_.c + ch] : T{};
              }
            }
        }
    });
  }

  nn::conv2d spec_;
  window_2d g_;
  std::size_t patch_ = 0;
  std::size_t chunks_ = 1;
  aligned_vector<T> cols_;
  aligned_vector<T> partial_;
  aligned_vector<T> dz_;
  nn::kernels::conv2d_workspace kernels_ws_;

  // Float convolutions without a fused ReLU run on the convolution kernels (nn/kernels); the im2col + GEMM path
  // stays for double (gradient checks) and for the fused ReLU of the MNIST tutorial's CNN.
  [[nodiscard]] bool uses_kernels() const noexcept {
    return std::is_same_v<T, float> && spec_.activation == nn::activation::linear;
  }
  [[nodiscard]] nn::kernels::conv2d_geometry geometry_of(std::size_t batch) const noexcept {
    return {batch, g_.h, g_.w, g_.c, spec_.filters, g_.kh, g_.kw, g_.sh, g_.sw, g_.pad_top, g_.pad_left, g_.oh, g_.ow};
  }
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
