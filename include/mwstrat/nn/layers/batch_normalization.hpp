// BatchNormalization and SyncBatchNormalization (`nn::batch_normalization`, `nn::sync_batch_normalization`) over
// the channel (last) axis. Per-channel sums run in double over fixed chunks of samples combined by an aligned tree,
// so the bits depend neither on the thread count nor on the batch's split among replicas; the synchronised variant
// adds the replicas' sums (one all-reduce of 2C + 1 values forward, 2C backward) so that N replicas × B normalise
// and differentiate as one replica × N·B (bit for bit with two replicas of a power-of-two batch).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/initializers.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

template <class T>
class batch_normalization_layer final : public layer_impl<T>,
                                        public relu_fusable,
                                        public deferrable_map<T>,
                                        public inference_affine_map<T>,
                                        public input_sums_by_hook<T>,
                                        public output_gradient_sums_by_hook<T> {
 public:
  batch_normalization_layer(double momentum, double epsilon, bool sync, const nn_shape& in)
      : layer_impl<T>(in, in), momentum_(momentum), epsilon_(epsilon), sync_(sync) {
    const std::string who = sync ? "sync_batch_normalization" : "batch_normalization";
    if (in.empty() || shape_size(in) == 0) nn_config_error(who + ": input shape " + shape_string(in) + " is empty");
    if (!(momentum >= 0 && momentum <= 1)) nn_config_error(who + ": momentum " + json_number(momentum) + " outside [0, 1]");
    if (!(epsilon > 0)) nn_config_error(who + ": epsilon " + json_number(epsilon) + " is not positive");
    channels_ = in.back();
    per_sample_rows_ = shape_size(in) / channels_;
  }
  std::string keras_type() const override { return sync_ ? "SyncBatchNormalization" : "BatchNormalization"; }
  std::string base_name() const override { return sync_ ? "sync_batch_normalization" : "batch_normalization"; }
  std::string config() const override {
    return base_name() + "(" + json_number(momentum_) + "," + json_number(epsilon_) + ")";
  }
  std::size_t param_count() const override { return 2 * channels_; }
  std::size_t state_count() const override { return 2 * channels_; }
  std::vector<weight_info> weights() const override { return {{"gamma", {channels_}}, {"beta", {channels_}}}; }
  std::vector<weight_info> state_weights() const override {
    return {{"moving_mean", {channels_}}, {"moving_variance", {channels_}}};
  }
  std::string keras_config() const override {
    return "\"axis\": -1, \"momentum\": " + json_number(momentum_) + ", \"epsilon\": " + json_number(epsilon_) +
           ", \"center\": true, \"scale\": true";
  }
  void initialize(std::span<T> p, std::uint64_t, std::uint64_t) override {
    nn::ones(p.first(channels_));
    nn::zeros(p.subspan(channels_));
  }
  void initialize_state(std::span<T> s) override {
    nn::zeros(s.first(channels_));
    nn::ones(s.subspan(channels_));
  }
  void fuse_relu() override { relu_ = true; }
  void reserve(std::size_t batch) override {
    chunks_ = std::max<std::size_t>(1, ceil_div(batch, chunk_samples()));
    partial_.assign(chunks_ * 2 * channels_, 0.0);
    grad_partial_.assign(chunks_ * 2 * channels_, T{});
    sums_.assign(2 * channels_ + 1, 0.0);
    mean_.assign(channels_, 0.0);
    inv_std_.assign(channels_, 0.0);
    coef_.assign(5 * channels_, T{});
    map_.assign(3 * channels_, T{});
  }

  void forward(const forward_args<T>& a) override {
    const std::size_t c = channels_;
    const std::size_t rows = a.batch * per_sample_rows_;
    if (!a.training) {  // inference: the moving statistics, as one affine map (what a folding convolution applies)
      T* scale = coef_.data();
      T* shift = scale + c;
      inference_affine(a.params, a.state, scale, shift);
      if (relu_) apply_affine<true>(a.x, a.y, scale, shift, rows);
      else apply_affine<false>(a.x, a.y, scale, shift, rows);
      return;
    }
    const channel_map<T> m = forward_statistics(a);
    if (relu_) normalize<true>(a.x, a.y, m, rows);
    else normalize<false>(a.x, a.y, m, rows);
  }

  // Training: the batch's statistics (and the moving ones moved), and the map y = (x − mean)·(γ·inv_std) + β with
  // its per-channel factors rounded to T once; nothing is written to a.y.
  bool can_defer_map() const override { return !relu_; }
  channel_map<T> forward_statistics(const forward_args<T>& a) override {
    const std::size_t c = channels_;
    const std::size_t rows = a.batch * per_sample_rows_;
    // Σx and Σx² per channel (over this replica's rows, then over all replicas): the chunks' sums made by the
    // producer's hook on this very input, or else here.
    const T* x = a.x;
    if (hooked_ != nullptr && hooked_ == x && hooked_batch_ == a.batch)
      finish_sums(chunks_for(rows));
    else
      channel_sums(rows, [this, x](std::size_t r0, std::size_t r1, double* part) { add_input_sums(x, r0, r1, part); });
    hooked_ = nullptr;
    sums_[2 * c] = static_cast<double>(rows);
    if (sync_ && a.replicas != nullptr && *a.replicas) (*a.replicas)(std::span<double>(sums_));
    const double count = sums_[2 * c];
    T* mm = a.state;
    T* mv = mm != nullptr ? mm + c : nullptr;  // no moving statistics to keep (a model without state)
    for (std::size_t j = 0; j < c; ++j) {
      const double mean = sums_[j] / count;
      const double var = std::max(0.0, sums_[c + j] / count - mean * mean);
      mean_[j] = mean;
      inv_std_[j] = 1.0 / std::sqrt(var + epsilon_);
      if (mm != nullptr) {
        mm[j] = static_cast<T>(momentum_ * static_cast<double>(mm[j]) + (1 - momentum_) * mean);
        mv[j] = static_cast<T>(momentum_ * static_cast<double>(mv[j]) + (1 - momentum_) * var);
      }
    }
    T* mean = map_.data();
    T* scale = mean + c;
    T* shift = scale + c;
    for (std::size_t j = 0; j < c; ++j) {
      mean[j] = static_cast<T>(mean_[j]);
      scale[j] = static_cast<T>(static_cast<double>(a.params[j]) * inv_std_[j]);
      shift[j] = a.params[c + j];
    }
    return {mean, scale, shift};
  }

  // Inference as Keras computes it: x·scale + shift with scale = γ/√(moving variance + ε) and
  // shift = β − moving mean·scale (here in double, rounded to T once).
  void inference_affine(const T* params, const T* state, T* scale, T* shift) const override {
    const std::size_t c = channels_;
    for (std::size_t j = 0; j < c; ++j) {
      const double s = static_cast<double>(params[j]) / std::sqrt(static_cast<double>(state[c + j]) + epsilon_);
      scale[j] = static_cast<T>(s);
      shift[j] = static_cast<T>(static_cast<double>(params[c + j]) - static_cast<double>(state[j]) * s);
    }
  }

  // Statistics in the producer's pass (layer_fusions.hpp): the hook adds each sample's rows into its chunk's sums, as
  // the own pass adds them (a chunk's samples in order, by one task: the hook's group), so the same bits.
  const nn::kernels::conv2d_image_hook* input_sums_hook(std::size_t batch, const T* x) override {
    hooked_ = x;
    return start_hook(batch, [](void* self, std::size_t n) {
      static_cast<batch_normalization_layer*>(self)->add_sample_sums(n);
    });
  }

  // The same for the backward pass's sums, on each sample of the gradient as the layer that reads this one's
  // output writes it (layer_fusions.hpp): a chunk is finished after its last sample.
  const nn::kernels::conv2d_image_hook* output_gradient_sums_hook(std::size_t batch, const T* x,
                                                                 const T* dy) override {
    hooked_x_ = x;
    hooked_dy_ = dy;
    if (relu_)
      return start_hook(batch, [](void* self, std::size_t n) {
        static_cast<batch_normalization_layer*>(self)->template add_sample_gradient_sums<true>(n);
      });
    return start_hook(batch, [](void* self, std::size_t n) {
      static_cast<batch_normalization_layer*>(self)->template add_sample_gradient_sums<false>(n);
    });
  }

  // Training mode (the statistics of the last forward pass in training).
  void backward(const backward_args<T>& a) override {
    if (relu_) backward_through<true>(a);
    else backward_through<false>(a);
  }

 private:
  // y = map(x) (then max(·, 0) with a fused ReLU), the element-wise work in T, so that it vectorises at T's width.
  template <bool Relu>
  void normalize(const T* x, T* y, const channel_map<T>& m, std::size_t rows) const {
    const std::size_t c = channels_;
    const T* mean = m.mean;
    const T* scale = m.scale;
    const T* shift = m.shift;
    parallel_chunks(rows, 256, [=](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) {
        const T* xr = x + r * c;
        T* yr = y + r * c;
        for (std::size_t j = 0; j < c; ++j) {
          const T v = apply_channel_map(xr[j], mean[j], scale[j], shift[j]);
          yr[j] = Relu ? (v > T{} ? v : T{}) : v;
        }
      }
    });
  }

  // y = x·scale + shift (then max(·, 0)): the expression nn::kernels::conv2d_input_transform applies, so a
  // convolution that folds this map in reads the values this pass would have written.
  template <bool Relu>
  void apply_affine(const T* x, T* y, const T* scale, const T* shift, std::size_t rows) const {
    const std::size_t c = channels_;
    parallel_chunks(rows, 256, [=](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) {
        const T* xr = x + r * c;
        T* yr = y + r * c;
        for (std::size_t j = 0; j < c; ++j) {
          const T v = fmadd(xr[j], scale[j], shift[j]);
          yr[j] = Relu ? (v > T{} ? v : T{}) : v;
        }
      }
    });
  }

  // The gradient w.r.t. the batch norm's output at element i of channel j: dy, or with a fused ReLU dy where the
  // forward pass's y = max(map(x), 0) was > 0, else 0. The mask is map(x) > 0 computed again from x, by the same
  // expression and factors as the forward pass (so the same bits), rather than read from y: the backward passes
  // read x anyway, and y is one tensor less to stream through memory twice.
  template <bool Relu>
  static T output_gradient(const T* x, const T* dy, const channel_map<T>& m, std::size_t i, std::size_t j) noexcept {
    const T g = dy[i];
    if constexpr (Relu) {
      const T v = apply_channel_map(x[i], m.mean[j], m.scale[j], m.shift[j]);
      return v > T{} ? g : T{};
    } else {
      (void)x, (void)m, (void)j;
      return g;
    }
  }

  // One vector of channels over `rows` rows `stride` apart, the sums in double and in registers from the first row
  // to the last (not through memory row by row, where each row waited on the last one's store): the same additions
  // in the same order, so the same bits. A vector of floats is taken as two halves, each widened to a vector of
  // doubles the registers hold (a whole vector of doubles would be two registers, which compilers move through the
  // stack); explicit vectors, because compilers leave the masked, widened sums scalar.
  static constexpr std::size_t L = lanes_v<T>;
  static constexpr std::size_t H = L / 2;
  typedef T half_t __attribute__((vector_size(H * sizeof(T))));
  typedef double half_wide_t __attribute__((vector_size(H * sizeof(double))));

  static half_wide_t widen_half(const T* p) noexcept {
    half_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, half_wide_t);
  }
  // Half h (0: the first lanes) of a whole vector, widened, without going through memory.
  template <std::size_t... I>
  static half_wide_t widen_half(const vec_t<T>& v, std::size_t h, std::index_sequence<I...>) noexcept {
    return h == 0 ? __builtin_convertvector(__builtin_shufflevector(v, v, I...), half_wide_t)
                  : __builtin_convertvector(__builtin_shufflevector(v, v, (I + H)...), half_wide_t);
  }
  // The loop every sum shares, over K vectors of channels at once (2K halves, 4K sums in registers: enough
  // independent additions to hide their latency, and each row read once): `add(at, k, h, a1, a2)` for each half h
  // (0, then 1) of vector k of each row (`at` its offset from the first), a1 and a2 that half's two sums, loaded
  // from s1 and s2 before and stored back after. Each channel's sums still take the rows in order: the same bits
  // whatever K.
  template <std::size_t K, class Add>
  static void sum_rows(std::size_t rows, std::size_t stride, double* s1, double* s2, Add&& add) noexcept {
    half_wide_t a1[2 * K];
    half_wide_t a2[2 * K];
    for (std::size_t i = 0; i < 2 * K; ++i) {
      std::memcpy(&a1[i], s1 + i * H, sizeof a1[i]);
      std::memcpy(&a2[i], s2 + i * H, sizeof a2[i]);
    }
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t h = 0; h < 2; ++h) add(r * stride + k * L + h * H, k, h, a1[2 * k + h], a2[2 * k + h]);
    for (std::size_t i = 0; i < 2 * K; ++i) {
      std::memcpy(s1 + i * H, &a1[i], sizeof a1[i]);
      std::memcpy(s2 + i * H, &a2[i], sizeof a2[i]);
    }
  }

  // `sum(j, K)` over the channels' whole vectors, K = 2 vectors at a time then 1; returns the first channel left.
  template <class Sum>
  static std::size_t for_channel_vectors(std::size_t c, Sum&& sum) {
    std::size_t j = 0;
    for (; j + 2 * L <= c; j += 2 * L) sum(j, std::integral_constant<std::size_t, 2>{});
    for (; j + L <= c; j += L) sum(j, std::integral_constant<std::size_t, 1>{});
    return j;
  }

  // The hook for `batch` samples that runs `run` on each: every chunk's sums zeroed, its group a chunk's samples.
  const nn::kernels::conv2d_image_hook* start_hook(std::size_t batch, void (*run)(void*, std::size_t)) {
    const std::size_t chunks = chunks_for(batch * per_sample_rows_);
    ensure_partials(chunks);
    std::fill_n(partial_.data(), chunks * 2 * channels_, 0.0);
    hooked_batch_ = batch;
    hook_ = {this, run, chunk_samples()};
    return &hook_;
  }

  // part[0, C) += Σx and part[C, 2C) += Σx² per channel over rows [r0, r1) of x, row by row.
  void add_input_sums(const T* x, std::size_t r0, std::size_t r1, double* part) const noexcept {
    const std::size_t c = channels_;
    double* __restrict s1 = part;
    double* __restrict s2 = part + c;
    const std::size_t j = for_channel_vectors(c, [&](std::size_t at, auto k) {
      add_squares<decltype(k)::value>(x + r0 * c + at, r1 - r0, c, s1 + at, s2 + at);
    });
    for (std::size_t r = r0; r < r1 && j < c; ++r) {
      const T* __restrict xr = x + r * c;
      for (std::size_t i = j; i < c; ++i) {
        const double v = static_cast<double>(xr[i]);
        s1[i] += v;
        s2[i] += v * v;
      }
    }
  }

  // The hook's work on sample n of the hooked input: its rows into its chunk's sums (zeroed by input_sums_hook).
  void add_sample_sums(std::size_t n) noexcept {
    const std::size_t rows = per_sample_rows_;
    add_input_sums(hooked_, n * rows, (n + 1) * rows, partial_.data() + (n / chunk_samples()) * 2 * channels_);
  }

  // part[0, C) += Σdy and part[C, 2C) += Σdy·x per channel over rows [r0, r1), row by row, dy masked as
  // output_gradient masks it.
  template <bool Relu>
  void add_gradient_sums(const T* x, const T* dy, std::size_t r0, std::size_t r1, double* part) const noexcept {
    const std::size_t c = channels_;
    const channel_map<T> m{map_.data(), map_.data() + c, map_.data() + 2 * c};  // the forward pass's
    double* __restrict s1 = part;
    double* __restrict s2 = part + c;
    const std::size_t j = for_channel_vectors(c, [&](std::size_t at, auto k) {
      add_gradient_products<Relu, decltype(k)::value>(x + r0 * c + at, dy + r0 * c + at,
                                                      {m.mean + at, m.scale + at, m.shift + at}, r1 - r0, c,
                                                      s1 + at, s2 + at);
    });
    for (std::size_t r = r0; r < r1 && j < c; ++r) {
      const T* __restrict xr = x + r * c;
      const T* __restrict dyr = dy + r * c;
      for (std::size_t i = j; i < c; ++i) {
        const double g = static_cast<double>(output_gradient<Relu>(xr, dyr, m, i, i));
        s1[i] += g;
        s2[i] += g * static_cast<double>(xr[i]);
      }
    }
  }

  // A chunk's Σdy·x into Σdy·x̂ = inv_std·(Σdy·x − mean·Σdy), once all its rows are in.
  void finish_gradient_chunk(double* part) const noexcept {
    const std::size_t c = channels_;
    for (std::size_t i = 0; i < c; ++i) part[c + i] = inv_std_[i] * (part[c + i] - mean_[i] * part[i]);
  }

  // The backward hook's work on sample n: its rows into its chunk's sums, and the chunk finished after its last.
  template <bool Relu>
  void add_sample_gradient_sums(std::size_t n) noexcept {
    const std::size_t rows = per_sample_rows_, per_chunk = chunk_samples();
    double* part = partial_.data() + (n / per_chunk) * 2 * channels_;
    add_gradient_sums<Relu>(hooked_x_, hooked_dy_, n * rows, (n + 1) * rows, part);
    if (n % per_chunk == per_chunk - 1 || n + 1 == hooked_batch_) finish_gradient_chunk(part);
  }

  // s1 += x, s2 += x·x, for K vectors of channels.
  template <std::size_t K>
  static void add_squares(const T* x, std::size_t rows, std::size_t stride, double* s1, double* s2) noexcept {
    sum_rows<K>(rows, stride, s1, s2,
                [x](std::size_t at, std::size_t, std::size_t, half_wide_t& a1, half_wide_t& a2) {
                  const half_wide_t xd = widen_half(x + at);
                  a1 += xd;
                  a2 += xd * xd;
                });
  }

  // s1 += dy, s2 += dy·x, for K vectors of channels (`m` at the first), dy masked as output_gradient masks it.
  // With a fused ReLU a row's masked dy is formed in T first, as the element-wise passes form it, then widened.
  template <bool Relu, std::size_t K>
  static void add_gradient_products(const T* x, const T* dy, const channel_map<T>& m, std::size_t rows,
                                    std::size_t stride, double* s1, double* s2) noexcept {
    if constexpr (Relu) {
      // The mask in registers, a whole vector at once: output_gradient's expression lane by lane (vfmadd is
      // fmadd's bits). Formed lane by lane into memory and read back as halves, it cost a stalled store-to-load
      // forward per row, and this sum took about 8% of a ResNet-56 step on Zen 3.
      vec_t<T> g;
      sum_rows<K>(rows, stride, s1, s2,
                  [x, dy, m, &g](std::size_t at, std::size_t k, std::size_t h, half_wide_t& a1, half_wide_t& a2) {
                    if (h == 0) {  // vector k's whole row, for both halves
                      vec_t<T> xv, dyv, mean, scale, shift;
                      vload(xv, x + at);
                      vload(dyv, dy + at);
                      vload(mean, m.mean + k * L);
                      vload(scale, m.scale + k * L);
                      vload(shift, m.shift + k * L);
                      const vec_t<T> zero = {};
                      g = vfmadd(xv - mean, scale, shift) > zero ? dyv : zero;
                    }
                    const half_wide_t gd = widen_half(g, h, std::make_index_sequence<H>{});
                    a1 += gd;
                    a2 += gd * widen_half(x + at);
                  });
    } else {
      (void)m;
      sum_rows<K>(rows, stride, s1, s2,
                  [x, dy](std::size_t at, std::size_t, std::size_t, half_wide_t& a1, half_wide_t& a2) {
                    const half_wide_t gd = widen_half(dy + at);
                    a1 += gd;
                    a2 += gd * widen_half(x + at);
                  });
    }
  }

  template <bool Relu>
  void backward_through(const backward_args<T>& a) {
    const std::size_t c = channels_;
    const std::size_t rows = a.batch * per_sample_rows_;
    const T* x = a.x;
    const T* dyp = a.dy;
    const channel_map<T> m{map_.data(), map_.data() + c, map_.data() + 2 * c};  // the forward pass's
    // Σdy and Σdy·x̂ per channel: beta's and gamma's gradients on this replica's rows. A chunk sums dy and dy·x in
    // double and turns the second into Σdy·x̂ = inv_std·(Σdy·x − mean·Σdy) (x̂ is not formed per element). The
    // gradients are summed in T from the chunks' sums, as the replicas' mean will add them, so that their tree goes
    // on there.
    // The chunks' sums may have been made by the hook of the layer that wrote dy (output_gradient_sums_hook).
    if (hooked_dy_ != nullptr && hooked_dy_ == dyp && hooked_x_ == x && hooked_batch_ == a.batch) {
      finish_sums(chunks_for(rows), true);
    } else {
      channel_sums(
          rows,
          [this, x, dyp](std::size_t r0, std::size_t r1, double* part) {
            add_gradient_sums<Relu>(x, dyp, r0, r1, part);
            finish_gradient_chunk(part);
          },
          true);
    }
    hooked_dy_ = nullptr;
    for (std::size_t j = 0; j < c; ++j) {
      a.grads[j] = grad_partial_[c + j];  // dgamma
      a.grads[c + j] = grad_partial_[j];  // dbeta
    }
    if (a.dx == nullptr) return;
    double count = static_cast<double>(rows);
    if (sync_ && a.replicas != nullptr && *a.replicas) {
      sums_[2 * c] = count;
      (*a.replicas)(std::span<double>(sums_));
      count = sums_[2 * c];
    }
    // dx = γ/σ · (dy − mean(dy) − x̂·mean(dy·x̂)), the means over the whole (global) batch; per-channel factors
    // rounded to T once, the element-wise work in T.
    const T* gamma = a.params;
    T* mu = coef_.data();
    T* inv = mu + c;
    T* k = inv + c;
    T* mean_dy = k + c;
    T* mean_dyx = mean_dy + c;
    for (std::size_t j = 0; j < c; ++j) {
      mu[j] = static_cast<T>(mean_[j]);
      inv[j] = static_cast<T>(inv_std_[j]);
      k[j] = static_cast<T>(static_cast<double>(gamma[j]) * inv_std_[j]);
      mean_dy[j] = static_cast<T>(sums_[j] / count);
      mean_dyx[j] = static_cast<T>(sums_[c + j] / count);
    }
    T* dx = a.dx;
    parallel_chunks(rows, 256, [=](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r)
        for (std::size_t j = 0; j < c; ++j) {
          const std::size_t i = r * c + j;
          const T xhat = (x[i] - mu[j]) * inv[j];
          dx[i] = k[j] * ((output_gradient<Relu>(x, dyp, m, i, j) - mean_dy[j]) - xhat * mean_dyx[j]);
        }
    });
  }

  // Rows per chunk at the most: about 1024 (one 32×32 image), as whole samples, and at most 8 samples.
  static constexpr std::size_t chunk_rows = 1024;
  static constexpr std::size_t max_chunk_samples = 8;

  // Samples per chunk: a power of two fixed by the shape, so the chunks' tree is batch-split invariant wherever
  // each replica's batch is a power-of-two multiple of it (small, so that small batches split exactly too).
  std::size_t chunk_samples() const noexcept {
    return power_of_two_floor(std::clamp<std::size_t>(chunk_rows / per_sample_rows_, 1, max_chunk_samples));
  }

  // sums_[0, 2C): per-channel sums over the rows, taken by fixed chunks of samples in parallel and combined by the
  // aligned tree of nn/detail/batch_sum.hpp (so a replica's sums are a node of the whole batch's tree);
  // `add_rows(r0, r1, part)` adds rows [r0, r1) of one chunk into its 2C zeroed sums (and may finish them). With
  // `in_t`: also the same sums in T, each chunk's rounded to T and combined by the tree in T (left in
  // grad_partial_[0, 2C)).
  template <class F>
  void channel_sums(std::size_t rows, F&& add_rows, bool in_t = false) {
    const std::size_t c = channels_;
    const std::size_t rows_per_chunk = chunk_samples() * per_sample_rows_;
    const std::size_t chunks = chunks_for(rows);
    ensure_partials(chunks);
    parallel_tasks(chunks, [&](std::size_t ch) {
      double* part = partial_.data() + ch * 2 * c;
      std::fill(part, part + 2 * c, 0.0);
      add_rows(ch * rows_per_chunk, std::min(rows, (ch + 1) * rows_per_chunk), part);
    });
    finish_sums(chunks, in_t);
  }

  std::size_t chunks_for(std::size_t rows) const noexcept {
    return std::max<std::size_t>(1, ceil_div(rows, chunk_samples() * per_sample_rows_));
  }

  void ensure_partials(std::size_t chunks) {
    const std::size_t n = chunks * 2 * channels_;
    if (partial_.size() < n) {  // a larger batch than reserved
      partial_.assign(n, 0.0);
      grad_partial_.assign(n, T{});
    }
  }

  // The chunks' sums (partial_) into sums_, by the aligned tree; with `in_t` also in T (above).
  void finish_sums(std::size_t chunks, bool in_t = false) {
    const std::size_t c = channels_;
    if (in_t) {
      for (std::size_t i = 0; i < chunks * 2 * c; ++i) grad_partial_[i] = static_cast<T>(partial_[i]);
      combine_blocks(grad_partial_.data(), chunks, 2 * c, 2 * c);
    }
    combine_blocks(partial_.data(), chunks, 2 * c, 2 * c);
    std::copy_n(partial_.data(), 2 * c, sums_.data());
  }

  double momentum_;
  double epsilon_;
  bool sync_;
  bool relu_ = false;  // a following ReLU is fused (layer_impl::fuse_relu): y = max(BN(x), 0)
  std::size_t channels_ = 0;
  std::size_t per_sample_rows_ = 1;
  std::size_t chunks_ = 1;
  std::vector<double> partial_;
  std::vector<T> grad_partial_;  // the backward sums' chunks in T (gamma's and beta's gradients)
  std::vector<double> sums_;     // [Σ first (C) | Σ second (C) | count]
  std::vector<double> mean_;     // of the last forward pass
  std::vector<double> inv_std_;  // 1 / sqrt(var + ε)
  std::vector<T> coef_;          // per-channel factors of the element-wise passes, in T
  std::vector<T> map_;           // the last training forward pass's map: [mean | scale | shift (β)], in T
  // The input whose chunk sums the producer's hook is making (input_sums_hook), until forward_statistics takes them.
  const T* hooked_ = nullptr;
  std::size_t hooked_batch_ = 0;  // of either hook
  // The input and gradient whose chunk sums the backward hook is making, until the backward pass takes them.
  const T* hooked_x_ = nullptr;
  const T* hooked_dy_ = nullptr;
  nn::kernels::conv2d_image_hook hook_;  // the one in use (the forward's, then the backward's)
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
