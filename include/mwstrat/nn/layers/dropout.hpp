// Dropout (`nn::dropout`): masks keyed by (seed, step, element).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/counter_random.hpp>
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
class dropout_layer final : public layer_impl<T> {
 public:
  dropout_layer(const nn::dropout& spec, const nn_shape& in, std::uint64_t stream)
      : layer_impl<T>(in, in), spec_(spec), stream_(stream) {
    if (!(spec.rate >= 0.0 && spec.rate < 1.0))
      nn_config_error("dropout: rate " + fixed_text(spec.rate, 6) + " outside [0, 1)");
  }
  std::string keras_type() const override { return "Dropout"; }
  std::string base_name() const override { return "dropout"; }
  std::string config() const override { return "dropout(" + fixed_text(spec_.rate, 6) + ")"; }
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

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
