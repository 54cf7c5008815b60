// Dense (`nn::dense`): a fully connected layer on the last axis, on the GEMM kernels.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
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
#include <vector>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

template <class T>
class dense_layer final : public layer_impl<T> {
 public:
  // `keras_layout`: the kernel is stored [inputs][units] as Keras's (the graph model); otherwise [units][inputs],
  // which lets the sequential model's products run without a transpose. A softmax activation leaves the logits
  // in y: the graph model applies it after the loss has used them.
  dense_layer(const nn::dense& spec, nn_shape in, bool keras_layout = false)
      : layer_impl<T>(in, out_shape(spec, in)), spec_(spec), keras_layout_(keras_layout) {
    inputs_ = in.back();
    rows_per_sample_ = shape_size(in) / inputs_;
  }
  std::string keras_type() const override { return "Dense"; }
  std::string base_name() const override { return "dense"; }
  std::string config() const override {
    std::string s = "dense(" + std::to_string(spec_.units) + (spec_.activation == nn::activation::relu ? ",relu" : "");
    if (spec_.activation == nn::activation::softmax) s += ",softmax";
    if (keras_layout_) s += ",io";
    if (spec_.kernel_initializer == nn::initializer::he_normal) s += ",he_normal";
    if (spec_.kernel_regularizer != 0) s += ",l2k=" + json_number(spec_.kernel_regularizer);
    if (spec_.bias_regularizer != 0) s += ",l2b=" + json_number(spec_.bias_regularizer);
    return s + ")";
  }
  std::size_t param_count() const override { return spec_.units * inputs_ + spec_.units; }
  std::vector<weight_info> weights() const override {
    if (keras_layout_) return {{"kernel", {inputs_, spec_.units}}, {"bias", {spec_.units}}};
    return {{"kernel", {spec_.units, inputs_}}, {"bias", {spec_.units}}};
  }
  std::string keras_config() const override {
    return "\"units\": " + std::to_string(spec_.units) + ", \"activation\": \"" + activation_name(spec_.activation) +
           "\", \"use_bias\": true, \"kernel_initializer\": \"" +
           (spec_.kernel_initializer == nn::initializer::he_normal ? "he_normal" : "glorot_uniform") +
           "\", \"kernel_regularizer\": " + regularizer_json(spec_.kernel_regularizer) +
           ", \"bias_regularizer\": " + regularizer_json(spec_.bias_regularizer);
  }
  std::vector<l2_term> l2_terms() const override {
    const std::size_t k = spec_.units * inputs_;
    std::vector<l2_term> terms;
    if (spec_.kernel_regularizer != 0) terms.push_back({0, k, spec_.kernel_regularizer});
    if (spec_.bias_regularizer != 0) terms.push_back({k, spec_.units, spec_.bias_regularizer});
    return terms;
  }
  double regularization(const T* params) const override {
    const std::size_t k = spec_.units * inputs_;
    return l2_penalty(spec_.kernel_regularizer, params, k) + l2_penalty(spec_.bias_regularizer, params + k, spec_.units);
  }
  void initialize(std::span<T> p, std::uint64_t seed, std::uint64_t stream) override {
    if (spec_.kernel_initializer == nn::initializer::he_normal) {
      nn::he_normal(p.first(spec_.units * inputs_), inputs_, seed, stream);
    } else {
      nn::glorot_uniform(p.first(spec_.units * inputs_), inputs_, spec_.units, seed, stream);
    }
    nn::zeros(p.subspan(spec_.units * inputs_));
  }
  void reserve(std::size_t batch) override {
    const std::size_t rows = batch * rows_per_sample_;
    workspace_.assign(keras_layout_ ? gemm_nt_workspace(rows, inputs_, spec_.units)
                                    : gemm_nt_workspace(rows, spec_.units, inputs_), T{});
    if (spec_.activation == nn::activation::relu) dz_.assign(rows * spec_.units, T{});
    if (split_invariant()) partial_.assign(ceil_div(batch, chunk_samples()) * this->param_count(), T{});
  }
  void forward(const forward_args<T>& a) override {
    const std::size_t rows = a.batch * rows_per_sample_;
    const T* kernel = a.params;
    const T* bias = a.params + spec_.units * inputs_;
    if (keras_layout_) {
      gemm_nn<T>(rows, spec_.units, inputs_, a.x, static_cast<std::ptrdiff_t>(inputs_), 1, kernel, spec_.units, a.y,
                 spec_.units, bias, spec_.activation == nn::activation::relu);
      return;
    }
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
    if (split_invariant()) {
      // Per chunk of samples into its own partial sums, then the aligned tree: batch-split invariant.
      const std::size_t chunk_rows = chunk_samples() * rows_per_sample_;
      const std::size_t chunks = ceil_div(rows, chunk_rows);
      const std::size_t n = this->param_count();
      if (partial_.size() < chunks * n) partial_.assign(chunks * n, T{});  // a larger batch than reserved
      parallel_tasks(chunks, [&](std::size_t ch) {
        const std::size_t r0 = ch * chunk_rows;
        const std::size_t count = std::min(rows, r0 + chunk_rows) - r0;
        T* part = partial_.data() + ch * n;
        kernel_gradient(count, a.x + r0 * inputs_, dz + r0 * units, part);
        bias_gradient(count, dz + r0 * units, part + units * inputs_);
      });
      combine_blocks(partial_.data(), chunks, n, n);
      std::copy_n(partial_.data(), n, a.grads);
    } else if (a.ready != nullptr && !keras_layout_) {
      // Someone reduces the gradient while backward runs: the bias (the slice's end) first, then the kernel's last
      // units, then the rest of it, each reported as soon as it is final, so the first bucket leaves while the rest
      // is computed. Each element is the same sum as in one product over all units (the GEMM forms every element
      // over k in order whatever rows it is given), so the bits do not change. Only two products: each packs the
      // whole input again, which costs more than a third chunk would win.
      bias_gradient_by_unit(rows, dz, gbias);
      if (a.add_regularization) add_l2_gradient(spec_.bias_regularizer, a.params + units * inputs_, gbias, units);
      (*a.ready)(units * inputs_, units);
      for (std::size_t u1 = units; u1 > 0;) {
        const std::size_t u0 = u1 == units && u1 > report_chunk_units() ? u1 - report_chunk_units() : 0;
        gemm_nn<T>(u1 - u0, inputs_, rows, dz + u0, 1, static_cast<std::ptrdiff_t>(units), a.x, inputs_,
                   gkernel + u0 * inputs_, inputs_);
        if (a.add_regularization)
          add_l2_gradient(spec_.kernel_regularizer, a.params + u0 * inputs_, gkernel + u0 * inputs_,
                          (u1 - u0) * inputs_);
        (*a.ready)(u0 * inputs_, (u1 - u0) * inputs_);
        u1 = u0;
      }
    } else {
      kernel_gradient(rows, a.x, dz, gkernel);
      bias_gradient_by_unit(rows, dz, gbias);
    }
    if (a.add_regularization && (a.ready == nullptr || keras_layout_ || split_invariant())) {
      add_l2_gradient(spec_.kernel_regularizer, a.params, gkernel, units * inputs_);
      add_l2_gradient(spec_.bias_regularizer, a.params + units * inputs_, gbias, units);
    }
    // Final now: its reduction can start while the input gradient is computed (the chunked path reported already).
    if (a.ready != nullptr && (keras_layout_ || split_invariant())) (*a.ready)(0, this->param_count());
    if (a.dx != nullptr && keras_layout_) {  // dx[r][f] = sum_u dz[r][u] K[f][u]
      gemm_nt<T>(rows, inputs_, units, dz, units, a.params, units, a.dx, inputs_, nullptr, false, std::span<T>(workspace_));
      return;
    }
    // dx[r][f] = sum_u dz[r][u] K[u][f]
    if (a.dx != nullptr)
      gemm_nn<T>(rows, inputs_, units, dz, static_cast<std::ptrdiff_t>(units), 1, a.params, inputs_, a.dx, inputs_);
  }

 private:
  // Small layers (a classifier head) sum their gradient by chunks of samples and the aligned tree, so two replicas
  // of B give the bits of one of 2B; a large kernel would need a partial copy per chunk, and keeps one GEMM.
  static constexpr std::size_t split_invariant_params = std::size_t{1} << 14;
  bool split_invariant() const noexcept { return this->param_count() <= split_invariant_params; }
  std::size_t chunk_samples() const noexcept {
    return power_of_two_floor(std::clamp<std::size_t>(split_invariant_params / this->param_count(), 1, 8));
  }
  // A large kernel's last units reported first: at least this many elements, a bucket's worth at the strategy's
  // default (4 MiB), so that bucket leaves early. Rounded up to whole units: a part just short of a bucket would
  // wait for the rest of the kernel and leave with it (the tutorial CNN's 48 units of 21 632 inputs did).
  static constexpr std::size_t report_chunk_floats = std::size_t{1} << 20;
  std::size_t report_chunk_units() const noexcept {
    return std::max<std::size_t>(1, ceil_div(report_chunk_floats, std::max<std::size_t>(inputs_, 1)));
  }
  // The bias's gradient of a large layer: per unit, the rows in order.
  void bias_gradient_by_unit(std::size_t rows, const T* dz, T* out) const {
    const std::size_t units = spec_.units;
    parallel_chunks(units, 64, [&](std::size_t b, std::size_t e) {
      for (std::size_t u = b; u < e; ++u) {
        T s{};
        for (std::size_t r = 0; r < rows; ++r) s += dz[r * units + u];
        out[u] = s;
      }
    });
  }
  // The kernel's gradient over `rows` rows, overwriting `out`.
  void kernel_gradient(std::size_t rows, const T* x, const T* dz, T* out) const {
    const std::size_t units = spec_.units;
    if (keras_layout_) {  // dK[f][u] = sum_r x[r][f] dz[r][u]
      gemm_nn<T>(inputs_, units, rows, x, 1, static_cast<std::ptrdiff_t>(inputs_), dz, units, out, units);
    } else {  // dK[u][f] = sum_r dz[r][u] x[r][f]
      gemm_nn<T>(units, inputs_, rows, dz, 1, static_cast<std::ptrdiff_t>(units), x, inputs_, out, inputs_);
    }
  }
  void bias_gradient(std::size_t rows, const T* dz, T* out) const {
    const std::size_t units = spec_.units;
    std::fill_n(out, units, T{});
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t u = 0; u < units; ++u) out[u] += dz[r * units + u];
  }

  static nn_shape out_shape(const nn::dense& spec, nn_shape in) {
    if (spec.units == 0) nn_config_error("dense: units must be positive");
    if (spec.activation == nn::activation::softmax && in.size() != 1)
      nn_config_error("dense: a softmax activation needs a flat input, got " + shape_string(in));
    if (in.empty() || shape_size(in) == 0) nn_config_error("dense: input shape " + shape_string(in) + " is empty");
    in.back() = spec.units;
    return in;
  }
  nn::dense spec_;
  bool keras_layout_ = false;
  std::size_t inputs_ = 0;
  std::size_t rows_per_sample_ = 1;
  aligned_vector<T> workspace_;
  aligned_vector<T> dz_;
  aligned_vector<T> partial_;  // per chunk of samples: the kernel's then the bias's gradient (small layers)
};

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
