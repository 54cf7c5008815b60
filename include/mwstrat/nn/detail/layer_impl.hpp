#pragma once
// The layers behind nn::sequential. Each layer owns its scratch (sized for the largest batch by reserve()),
// reads its parameters from and writes its gradients to the model's arena, and splits its work into tasks by
// shape only, so its results do not depend on the number of threads.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/conv_filter_gradient.hpp>
#include <mwstrat/nn/detail/gemm.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/random.hpp>
#include <mwstrat/nn/detail/simd.hpp>
#include <mwstrat/nn/initializers.hpp>
#include <mwstrat/nn/layers.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

using nn_shape = std::vector<std::size_t>;

inline std::size_t shape_size(const nn_shape& s) {
  return std::accumulate(s.begin(), s.end(), std::size_t{1}, std::multiplies<>{});
}

inline std::string shape_string(const nn_shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

[[noreturn]] inline void nn_config_error(const std::string& what) { throw config_error({"nn"}, what); }

template <class T>
struct forward_args {
  std::size_t batch;
  const T* x;
  T* y;
  const T* params;
  bool training;
  std::uint64_t step;
};

template <class T>
struct backward_args {
  std::size_t batch;
  const T* x;
  const T* y;
  const T* dy;
  T* dx;  // null when no gradient is needed below this layer
  const T* params;
  T* grads;
  std::uint64_t step;
};

template <class T>
class layer_impl {
 public:
  layer_impl(nn_shape in, nn_shape out) : in_(std::move(in)), out_(std::move(out)) {}
  virtual ~layer_impl() = default;
  layer_impl(const layer_impl&) = delete;
  layer_impl& operator=(const layer_impl&) = delete;

  [[nodiscard]] virtual std::string keras_type() const = 0;  // "Conv2D"
  [[nodiscard]] virtual std::string base_name() const = 0;   // "conv2d"
  [[nodiscard]] virtual std::string config() const = 0;      // architecture, for fingerprints
  [[nodiscard]] virtual std::size_t param_count() const { return 0; }
  [[nodiscard]] virtual bool aliases_input() const { return false; }
  virtual void initialize(std::span<T> /*params*/, std::uint64_t /*seed*/, std::uint64_t /*stream*/) {}
  virtual void reserve(std::size_t /*batch*/) {}
  virtual void forward(const forward_args<T>& a) = 0;
  virtual void backward(const backward_args<T>& a) = 0;

  [[nodiscard]] const nn_shape& input_shape() const noexcept { return in_; }
  [[nodiscard]] const nn_shape& output_shape() const noexcept { return out_; }
  [[nodiscard]] std::size_t input_size() const { return shape_size(in_); }
  [[nodiscard]] std::size_t output_size() const { return shape_size(out_); }

 protected:
  nn_shape in_;
  nn_shape out_;
};

// Input, reshape and flatten only relabel the data: output and gradient share the input's buffers.
template <class T>
class alias_layer final : public layer_impl<T> {
 public:
  alias_layer(std::string type, std::string base, nn_shape in, nn_shape out)
      : layer_impl<T>(std::move(in), std::move(out)), type_(std::move(type)), base_(std::move(base)) {}
  std::string keras_type() const override { return type_; }
  std::string base_name() const override { return base_; }
  std::string config() const override { return base_ + shape_string(this->out_); }
  bool aliases_input() const override { return true; }
  void forward(const forward_args<T>&) override {}
  void backward(const backward_args<T>&) override {}

 private:
  std::string type_;
  std::string base_;
};

// dz[i] = dy[i] where y[i] > 0, else 0, for i in [b, e): a vector select, no branch on the data.
template <class T>
void relu_backward_range(std::size_t b, std::size_t e, const T* y, const T* dy, T* dz) noexcept {
  using V = vec_t<T>;
  constexpr std::size_t L = lanes_v<T>;
  const V zero = {};
  std::size_t i = b;
  for (; i + L <= e; i += L) {
    V yv;
    V g;
    vload(yv, y + i);
    vload(g, dy + i);
    const V r = yv > zero ? g : zero;
    vstore(dz + i, r);
  }
  for (; i < e; ++i) dz[i] = y[i] > T{} ? dy[i] : T{};
}

// The same over [0, n) in fixed chunks.
template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dz) {
  parallel_chunks(n, 1 << 16, [y, dy, dz](std::size_t b, std::size_t e) { relu_backward_range(b, e, y, dy, dz); });
}

template <class T>
class dense_layer final : public layer_impl<T> {
 public:
  dense_layer(const nn::dense& spec, nn_shape in) : layer_impl<T>(in, out_shape(spec, in)), spec_(spec) {
    inputs_ = in.back();
    rows_per_sample_ = shape_size(in) / inputs_;
  }
  std::string keras_type() const override { return "Dense"; }
  std::string base_name() const override { return "dense"; }
  std::string config() const override {
    return "dense(" + std::to_string(spec_.units) + (spec_.activation == nn::activation::relu ? ",relu)" : ")");
  }
  std::size_t param_count() const override { return spec_.units * inputs_ + spec_.units; }
  void initialize(std::span<T> p, std::uint64_t seed, std::uint64_t stream) override {
    nn::glorot_uniform(p.first(spec_.units * inputs_), inputs_, spec_.units, seed, stream);
    nn::zeros(p.subspan(spec_.units * inputs_));
  }
  void reserve(std::size_t batch) override {
    const std::size_t rows = batch * rows_per_sample_;
    workspace_.assign(gemm_nt_workspace(rows, spec_.units, inputs_), T{});
    if (spec_.activation == nn::activation::relu) dz_.assign(rows * spec_.units, T{});
  }
  void forward(const forward_args<T>& a) override {
    const std::size_t rows = a.batch * rows_per_sample_;
    const T* kernel = a.params;
    const T* bias = a.params + spec_.units * inputs_;
    gemm_nt<T>(rows, spec_.units, inputs_, a.x, inputs_, kernel, inputs_, a.y, spec_.units, bias,
               spec_.activation == nn::activation::relu, std::span<T>(workspace_));
  }
  void backward(const backward_args<T>& a) override {
    const std::size_t rows = a.batch * rows_per_sample_;
    const std::size_t units = spec_.units;
    const T* dz = a.dy;
    if (spec_.activation == nn::activation::relu) {
      relu_backward(rows * units, a.y, a.dy, dz_.data());
      dz = dz_.data();
    }
    T* gkernel = a.grads;
    T* gbias = a.grads + units * inputs_;
    // dK[u][f] = sum_r dz[r][u] x[r][f]
    gemm_nn<T>(units, inputs_, rows, dz, 1, static_cast<std::ptrdiff_t>(units), a.x, inputs_, gkernel, inputs_);
    parallel_chunks(units, 64, [&](std::size_t b, std::size_t e) {
      for (std::size_t u = b; u < e; ++u) {
        T s{};
        for (std::size_t r = 0; r < rows; ++r) s += dz[r * units + u];
        gbias[u] = s;
      }
    });
    // dx[r][f] = sum_u dz[r][u] K[u][f]
    if (a.dx != nullptr)
      gemm_nn<T>(rows, inputs_, units, dz, static_cast<std::ptrdiff_t>(units), 1, a.params, inputs_, a.dx, inputs_);
  }

 private:
  static nn_shape out_shape(const nn::dense& spec, nn_shape in) {
    if (spec.units == 0) nn_config_error("dense: units must be positive");
    if (in.empty() || shape_size(in) == 0) nn_config_error("dense: input shape " + shape_string(in) + " is empty");
    in.back() = spec.units;
    return in;
  }
  nn::dense spec_;
  std::size_t inputs_ = 0;
  std::size_t rows_per_sample_ = 1;
  aligned_vector<T> workspace_;
  aligned_vector<T> dz_;
};

// Window geometry shared by conv2d and max_pool2d (Keras/TensorFlow rules for valid and same padding).
struct window_2d {
  std::size_t h, w, c;      // input
  std::size_t kh, kw;       // window
  std::size_t sh, sw;       // strides
  std::size_t oh, ow;       // output
  std::size_t pad_top, pad_left;

  static window_2d make(const std::string& who, const nn_shape& in, std::array<std::size_t, 2> k,
                        std::array<std::size_t, 2> s, nn::padding pad) {
    if (in.size() != 3) nn_config_error(who + ": input shape " + shape_string(in) + " is not (height, width, channels)");
    if (k[0] == 0 || k[1] == 0 || s[0] == 0 || s[1] == 0) nn_config_error(who + ": window and strides must be positive");
    window_2d g{in[0], in[1], in[2], k[0], k[1], s[0], s[1], 0, 0, 0, 0};
    if (pad == nn::padding::valid) {
      if (g.h < g.kh || g.w < g.kw)
        nn_config_error(who + ": window " + std::to_string(g.kh) + "x" + std::to_string(g.kw) + " larger than input " +
                        shape_string(in));
      g.oh = (g.h - g.kh) / g.sh + 1;
      g.ow = (g.w - g.kw) / g.sw + 1;
    } else {
      g.oh = ceil_div(g.h, g.sh);
      g.ow = ceil_div(g.w, g.sw);
      const std::size_t need_h = (g.oh - 1) * g.sh + g.kh;
      const std::size_t need_w = (g.ow - 1) * g.sw + g.kw;
      g.pad_top = need_h > g.h ? (need_h - g.h) / 2 : 0;
      g.pad_left = need_w > g.w ? (need_w - g.w) / 2 : 0;
    }
    if (g.oh == 0 || g.ow == 0 || g.c == 0) nn_config_error(who + ": empty output for input " + shape_string(in));
    return g;
  }
  // Input row/column for output (o) and window offset (k); negative or >= extent means padding.
  [[nodiscard]] std::ptrdiff_t in_row(std::size_t o, std::size_t k) const {
    return static_cast<std::ptrdiff_t>(o * sh + k) - static_cast<std::ptrdiff_t>(pad_top);
  }
  [[nodiscard]] std::ptrdiff_t in_col(std::size_t o, std::size_t k) const {
    return static_cast<std::ptrdiff_t>(o * sw + k) - static_cast<std::ptrdiff_t>(pad_left);
  }
};

template <class T>
class conv2d_layer final : public layer_impl<T> {
 public:
  conv2d_layer(const nn::conv2d& spec, const nn_shape& in)
      : layer_impl<T>(in, geometry(spec, in).first), spec_(spec), g_(geometry(spec, in).second) {
    patch_ = g_.kh * g_.kw * g_.c;
  }
  std::string keras_type() const override { return "Conv2D"; }
  std::string base_name() const override { return "conv2d"; }
  std::string config() const override {
    return "conv2d(" + std::to_string(spec_.filters) + "," + std::to_string(g_.kh) + "x" + std::to_string(g_.kw) +
           ",s" + std::to_string(g_.sh) + "x" + std::to_string(g_.sw) +
           (spec_.padding == nn::padding::same ? ",same" : ",valid") +
           (spec_.activation == nn::activation::relu ? ",relu)" : ")");
  }
  std::size_t param_count() const override { return patch_ * spec_.filters + spec_.filters; }
  void initialize(std::span<T> p, std::uint64_t seed, std::uint64_t stream) override {
    nn::glorot_uniform(p.first(patch_ * spec_.filters), g_.kh * g_.kw * g_.c, g_.kh * g_.kw * spec_.filters, seed,
                       stream);
    nn::zeros(p.subspan(patch_ * spec_.filters));
  }
  void reserve(std::size_t batch) override {
    const std::size_t positions = batch * g_.oh * g_.ow;
    cols_.assign(positions * patch_, T{});
    chunks_ = std::max<std::size_t>(1, ceil_div(positions, chunk_rows));
    partial_.assign(chunks_ * (patch_ + 1) * spec_.filters, T{});
    if (spec_.activation == nn::activation::relu) dz_.assign(positions * spec_.filters, T{});
  }
  void forward(const forward_args<T>& a) override {
    const std::size_t positions = a.batch * g_.oh * g_.ow;
    im2col(a.batch, a.x);
    gemm_nn<T>(positions, spec_.filters, patch_, cols_.data(), static_cast<std::ptrdiff_t>(patch_), 1, a.params,
               spec_.filters, a.y, spec_.filters, a.params + patch_ * spec_.filters,
               spec_.activation == nn::activation::relu);
  }
  void backward(const backward_args<T>& a) override {
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
    parallel_chunks(n, 4096, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        T s = partial_[i];
        for (std::size_t ch = 1; ch < chunks; ++ch) s += partial_[ch * n + i];
        a.grads[i] = s;
      }
    });
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
};

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

template <class T>
class relu_layer final : public layer_impl<T> {
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

template <class T>
class dropout_layer final : public layer_impl<T> {
 public:
  dropout_layer(const nn::dropout& spec, const nn_shape& in, std::uint64_t stream)
      : layer_impl<T>(in, in), spec_(spec), stream_(stream) {
    if (!(spec.rate >= 0.0 && spec.rate < 1.0)) nn_config_error("dropout: rate " + std::to_string(spec.rate) + " outside [0, 1)");
  }
  std::string keras_type() const override { return "Dropout"; }
  std::string base_name() const override { return "dropout"; }
  std::string config() const override { return "dropout(" + std::to_string(spec_.rate) + ")"; }
  void initialize(std::span<T>, std::uint64_t seed, std::uint64_t) override { seed_ = seed; }
  void forward(const forward_args<T>& a) override { apply(a.batch, a.x, a.y, a.training, a.step); }
  void backward(const backward_args<T>& a) override {
    if (a.dx != nullptr) apply(a.batch, a.dy, a.dx, true, a.step);
  }

 private:
  void apply(std::size_t batch, const T* in, T* out, bool training, std::uint64_t step) const {
    const std::size_t n = batch * this->input_size();
    const T scale = static_cast<T>(1.0 / (1.0 - spec_.rate));
    const std::uint64_t key = random_bits(seed_ ^ spec_.seed, stream_, step);
    parallel_chunks(n, 1 << 16, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        if (!training) {
          out[i] = in[i];
        } else {
          out[i] = random_unit(key, 0x64726f70ULL, i) < spec_.rate ? T{} : in[i] * scale;
        }
      }
    });
  }
  nn::dropout spec_;
  std::uint64_t stream_;
  std::uint64_t seed_ = 0;
};

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
