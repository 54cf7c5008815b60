#pragma once
// The small interfaces through which the fusion planner (graph_fusion_plan.hpp) asks layers to run inside one
// another's passes. A layer takes part in a fusion by deriving from that fusion's interface (and, where the ability
// depends on its shape or on another fusion, by answering its `can_...()`), so a new fusion adds an interface here
// and touches only the layers that take part, never layer_impl or the layers that do not. The planner finds them
// with dynamic_cast, once, when the executor is made, and keeps the pointers the passes call through.
//
// Each fusion keeps the bits of the layers run one after the other (graph_fusion_plan.hpp says how).

#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>

#include <cstddef>

namespace mwstrat::detail {

// ReLU fusion. A layer that is y = max(x, 0) and nothing else (ReLU; an Activation whose activation is relu) ...
class plain_relu {
 public:
  virtual ~plain_relu() = default;
  [[nodiscard]] virtual bool is_plain_relu() const { return true; }
};
// ... and a layer that can apply that ReLU to its own output in the same pass (batch norm, Add): once fuse_relu() is
// called, forward writes max(output, 0), and backward gets that as `y` and the gradient w.r.t. it as `dy`.
class relu_fusable {
 public:
  virtual ~relu_fusable() = default;
  virtual void fuse_relu() = 0;
};

// Inference folding. A layer that is, in inference, the per-channel affine map y = x·scale + shift (batch norm with
// its moving statistics) gives its factors ...
template <class T>
class inference_affine_map {
 public:
  virtual ~inference_affine_map() = default;
  virtual void inference_affine(const T* params, const T* state, T* scale, T* shift) const = 0;
};
// ... and a layer that can apply such a map, and a ReLU after it, to its input as it reads it (a convolution on the
// kernels) then runs on the map's input instead.
template <class T>
class input_affine_reader {
 public:
  virtual ~input_affine_reader() = default;
  [[nodiscard]] virtual bool takes_input_affine() const = 0;
  virtual void forward_with_input_affine(const forward_args<T>& a, const T* scale, const T* shift, bool relu) = 0;
};

// Training deferral. A batch norm with no fused ReLU computes its statistics and factors only (nothing written to
// a.y) ...
template <class T>
class deferrable_map {
 public:
  virtual ~deferrable_map() = default;
  [[nodiscard]] virtual bool can_defer_map() const = 0;
  virtual channel_map<T> forward_statistics(const forward_args<T>& a) = 0;
};
// ... and the Add that reads it applies the map as it reads that input (a map per input, mean null for a plain one).
template <class T>
class input_map_reader {
 public:
  virtual ~input_map_reader() = default;
  virtual void forward_with_input_maps(const forward_args<T>& a, const channel_map<T>* maps) = 0;
};

// Statistics in the producer's pass. A layer that sums its input over chunks of samples before anything else (batch
// norm) hands the layer that writes that input a hook to run on each sample as it is written ...
template <class T>
class input_sums_by_hook {
 public:
  virtual ~input_sums_by_hook() = default;
  [[nodiscard]] virtual const nn::kernels::conv2d_image_hook* input_sums_hook(std::size_t batch, const T* x) = 0;
};
// ... and a layer that can run such a hook in its forward pass (a convolution on the kernels) does.
template <class T>
class output_hook_runner {
 public:
  virtual ~output_hook_runner() = default;
  [[nodiscard]] virtual bool can_run_output_hook() const = 0;
  virtual void forward_with_output_hook(const forward_args<T>& a, const nn::kernels::conv2d_image_hook& hook) = 0;
};

// The same in the backward pass. A batch norm sums the gradient it is given (with its input) before anything else
// ...
template <class T>
class output_gradient_sums_by_hook {
 public:
  virtual ~output_gradient_sums_by_hook() = default;
  [[nodiscard]] virtual const nn::kernels::conv2d_image_hook* output_gradient_sums_hook(std::size_t batch, const T* x,
                                                                                       const T* dy) = 0;
};
// ... so the layer that reads its output and writes that gradient (a convolution's data gradient) runs the hook on
// each sample of it (backward_args::dx_hook).
class input_gradient_hook_runner {
 public:
  virtual ~input_gradient_hook_runner() = default;
  [[nodiscard]] virtual bool can_run_input_gradient_hook() const = 0;
};

// Gradient aliasing. A layer whose every input's gradient is one tensor (Add: the output's, through its fused ReLU's
// mask) writes it to each non-null dxs[k] it is given; the executor may give it only one and let an input that
// nothing else reads take its gradient from there in place.
class one_gradient_for_every_input {
 public:
  virtual ~one_gradient_for_every_input() = default;
};

// Gradient accumulation. A layer that can add its input gradient to what dx holds (backward_args::add_to_dx; each
// element's sum rounded once) gets a node's gradient buffer where another reader has written its part first.
class input_gradient_adder {
 public:
  virtual ~input_gradient_adder() = default;
  [[nodiscard]] virtual bool can_add_to_dx() const = 0;
};

// The interface `I` of `layer` where it derives from it (null otherwise).
template <class I, class T>
[[nodiscard]] I* fusion_role(layer_impl<T>& layer) noexcept {
  return dynamic_cast<I*>(&layer);
}

}  // namespace mwstrat::detail
