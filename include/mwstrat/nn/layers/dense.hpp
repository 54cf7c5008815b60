#pragma once
// Dense (`nn::dense`): a fully connected layer on the last axis, on the GEMM kernels.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/gemm.hpp>
#include <mwstrat/nn/detail/relu_backward.hpp>
#include <mwstrat/nn/initializers.hpp>
#include <mwstrat/nn/layers.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

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

}  // namespace mwstrat::detail
