// Reshape and Flatten: layers that only relabel the data.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>

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

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
