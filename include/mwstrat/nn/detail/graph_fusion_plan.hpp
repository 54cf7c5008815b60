#pragma once
// Which layers of a graph run inside other layers' passes, decided once from the graph and the layers' abilities
// (the small interfaces of layer_fusions.hpp, asked for by dynamic_cast here and nowhere else), before any pass: the
// graph executor (nn/detail/graph_executor.hpp) follows the plan and calls through the interfaces it found. Every fusion
// asks that the value it removes be read by one layer only, so each starts from the graph's sole readers.
//
// ReLU fusion: a plain ReLU (an Activation or ReLU layer) whose input is the output of a layer that can apply it
// itself (batch norm, Add) and is read by nothing else runs inside that layer's passes (relu_fusable):
// the producer writes max(output, 0) into the ReLU's buffer and differentiates through the mask, the ReLU layer is
// skipped, and the producer's own output and output-gradient buffers are never made. The bits are the two layers'.
//
// Batch-norm folding, in inference only: a batch norm (with its fused ReLU, if any) whose output is read by one
// convolution and nothing else is applied by that convolution as it reads its input (input_affine_reader:
// the kernels' conv2d_input_transform, in the pass that stages each image), and the batch norm's own pass is skipped.
// With the moving statistics a batch norm is a fixed per-channel map, so nothing is lost. In training it is not
// done: the batch's statistics need the whole output of the layer before it first, and the backward pass reads the
// normalised values, so they are written anyway. Folded and plain passes give the same bits.
//
// Batch-norm deferral, in training: a batch norm with no fused ReLU whose output is read by one Add and nothing
// else computes its statistics only (deferrable_map), and the Add applies the map as it reads that
// input (a ResNet's second batch norm of every block, before the residual sum). The batch norm's backward pass does
// not read its output, so the output is never written. Deferred and plain passes give the same bits.
//
// Statistics in the producer's pass, in training: a batch norm whose input is written by a convolution read by
// nothing else has that convolution run its sums on each image as the image is written (input_sums_by_hook and
// output_hook_runner: the kernels' conv2d_image_hook), rather than in a pass of its own that reads the
// whole output back from memory. The same sums in the same order: the same bits. The same in the backward pass: a
// batch norm whose output (or its fused ReLU's) only a convolution reads has that convolution's data gradient,
// which is the batch norm's output gradient, summed with its input on each image as the image is written
// (output_gradient_sums_by_hook, backward_args::dx_hook).

#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace mwstrat::detail {

// "No layer" in the per-layer tables below and the executor's.
inline constexpr std::size_t no_layer = static_cast<std::size_t>(-1);

// Per model node (0 = the input, i + 1 = layer i): the one layer that reads it, or no_layer where no layer or
// several do (a layer that takes it twice counts twice) and for the model's output (the loss reads that too).
inline std::vector<std::size_t> sole_readers(const std::vector<std::vector<std::size_t>>& inputs) {
  const std::size_t n = inputs.size();
  std::vector<std::size_t> count(n + 1, 0), reader(n + 1, no_layer);
  for (std::size_t c = 0; c < n; ++c)
    for (std::size_t in : inputs[c]) {
      ++count[in];
      reader[in] = c;
    }
  for (std::size_t node = 0; node <= n; ++node)
    if (count[node] != 1 || node == n) reader[node] = no_layer;
  return reader;
}

// The fusion interfaces one layer offers (layer_fusions.hpp), null where it does not; what the passes call through.
template <class T>
struct fusion_roles {
  mwstrat::detail::inference_affine_map<T>* affine_map = nullptr;
  mwstrat::detail::input_affine_reader<T>* affine_reader = nullptr;
  mwstrat::detail::deferrable_map<T>* deferrable = nullptr;
  mwstrat::detail::input_map_reader<T>* map_reader = nullptr;
  mwstrat::detail::input_sums_by_hook<T>* input_sums = nullptr;
  mwstrat::detail::output_hook_runner<T>* output_hook = nullptr;
  mwstrat::detail::output_gradient_sums_by_hook<T>* gradient_sums = nullptr;
  mwstrat::detail::input_gradient_adder* adder = nullptr;
  bool one_gradient = false;  // one_gradient_for_every_input

  explicit fusion_roles(mwstrat::detail::layer_impl<T>& l)
      : affine_map(mwstrat::detail::fusion_role<mwstrat::detail::inference_affine_map<T>>(l)),
        affine_reader(mwstrat::detail::fusion_role<mwstrat::detail::input_affine_reader<T>>(l)),
        deferrable(mwstrat::detail::fusion_role<mwstrat::detail::deferrable_map<T>>(l)),
        map_reader(mwstrat::detail::fusion_role<mwstrat::detail::input_map_reader<T>>(l)),
        input_sums(mwstrat::detail::fusion_role<mwstrat::detail::input_sums_by_hook<T>>(l)),
        output_hook(mwstrat::detail::fusion_role<mwstrat::detail::output_hook_runner<T>>(l)),
        gradient_sums(mwstrat::detail::fusion_role<mwstrat::detail::output_gradient_sums_by_hook<T>>(l)),
        adder(mwstrat::detail::fusion_role<mwstrat::detail::input_gradient_adder>(l)),
        one_gradient(mwstrat::detail::fusion_role<mwstrat::detail::one_gradient_for_every_input>(l) != nullptr) {}
  // Whether the layer can add its input gradient to what dx holds (backward_args::add_to_dx).
  [[nodiscard]] bool adds_to_dx() const { return adder != nullptr && adder->can_add_to_dx(); }
};

template <class T>
struct graph_fusion_plan {
  using layers_t = std::vector<std::unique_ptr<mwstrat::detail::layer_impl<T>>>;
  using inputs_t = std::vector<std::vector<std::size_t>>;

  std::vector<fusion_roles<T>> roles;             // per layer: the fusion interfaces it offers
  std::vector<std::size_t> relu_of;               // per layer: the ReLU layer fused into it, or no_layer
  std::vector<std::uint8_t> fused_away;           // per layer: a ReLU its producer applies
  std::vector<std::size_t> folded;                // per layer: the batch norm it applies in inference, or no_layer
  std::vector<std::uint8_t> skipped_in_inference; // per layer: a batch norm its reader applies in inference
  std::size_t widest_folded = 0;                  // channels of the widest folded batch norm
  std::vector<std::uint8_t> deferred;             // per layer: a batch norm whose reader applies its map (training)
  std::vector<std::vector<std::size_t>> mapped_inputs;  // per layer: per input, the deferred batch norm, or no_layer
  std::vector<std::size_t> sums_for;              // per layer: the reader whose input sums it makes, or no_layer
  std::vector<std::size_t> gradient_sums_of;      // per layer: whose output gradient's sums it makes, or no_layer

  graph_fusion_plan() = default;
  // `fuse` false: nothing runs inside anything (the plain passes, to compare with). Tells each producer of a fused
  // ReLU (relu_fusable).
  graph_fusion_plan(const layers_t& layers, const inputs_t& inputs, bool fuse)
      : relu_of(layers.size(), no_layer),
        fused_away(layers.size(), 0),
        folded(layers.size(), no_layer),
        skipped_in_inference(layers.size(), 0),
        deferred(layers.size(), 0),
        mapped_inputs(layers.size()),
        sums_for(layers.size(), no_layer),
        gradient_sums_of(layers.size(), no_layer) {
    for (const auto& l : layers) roles.emplace_back(*l);
    if (!fuse) return;
    const std::vector<std::size_t> sole = sole_readers(inputs);
    plan_relu_fusion(layers, inputs, sole);
    plan_inference_folding(layers, inputs, sole);
    plan_training_deferral(layers, inputs, sole);
    plan_sums_in_producers(layers, inputs, sole);
    plan_gradient_sums_in_readers(layers, inputs, sole);
  }

  // How many ReLU layers run inside their producers; batch norms run inside the convolution that reads them, in
  // inference; batch norms leave their map to the Add that reads them, in training; layers have their input's
  // statistics summed by its producer, and their output gradient's by its reader, in training.
  [[nodiscard]] std::size_t fused_relus() const { return marked(fused_away); }
  [[nodiscard]] std::size_t folded_batch_norms() const { return marked(skipped_in_inference); }
  [[nodiscard]] std::size_t deferred_batch_norms() const { return marked(deferred); }
  [[nodiscard]] std::size_t sums_in_producers() const { return paired(sums_for); }
  [[nodiscard]] std::size_t gradient_sums_in_readers() const { return paired(gradient_sums_of); }

 private:
  static std::size_t marked(const std::vector<std::uint8_t>& v) {
    return static_cast<std::size_t>(std::count(v.begin(), v.end(), std::uint8_t{1}));
  }
  static std::size_t paired(const std::vector<std::size_t>& v) {
    return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](std::size_t p) { return p != no_layer; }));
  }

  // Pairs each plain ReLU with the producer of its only input when that producer can fuse it and nothing else
  // reads the producer's output (the model's output is read by the loss: never fused away).
  void plan_relu_fusion(const layers_t& layers, const inputs_t& inputs,
                        const std::vector<std::size_t>& sole) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const auto* relu = mwstrat::detail::fusion_role<mwstrat::detail::plain_relu>(*layers[i]);
      if (relu == nullptr || !relu->is_plain_relu() || inputs[i].size() != 1) continue;
      const std::size_t node = inputs[i][0];
      if (node == 0 || sole[node] != i) continue;
      const std::size_t p = node - 1;
      auto* producer = mwstrat::detail::fusion_role<mwstrat::detail::relu_fusable>(*layers[p]);
      if (relu_of[p] != no_layer || producer == nullptr) continue;
      producer->fuse_relu();
      relu_of[p] = i;
      fused_away[i] = 1;
    }
  }

  // Pairs each batch norm that is an affine map in inference with the convolution that is the only reader of its
  // output (or of its fused ReLU's), where that convolution can apply the map to its input.
  void plan_inference_folding(const layers_t& layers, const inputs_t& inputs,
                              const std::vector<std::size_t>& sole) {
    std::size_t widest = 0;
    for (std::size_t p = 0; p < layers.size(); ++p) {
      if (roles[p].affine_map == nullptr || inputs[p].size() != 1) continue;
      const std::size_t out = relu_of[p] == no_layer ? p : relu_of[p];  // the layer whose output is read
      const std::size_t c = sole[out + 1];
      if (c == no_layer || inputs[c].size() != 1 || relu_of[c] != no_layer || roles[c].affine_reader == nullptr ||
          !roles[c].affine_reader->takes_input_affine())
        continue;
      folded[c] = p;
      skipped_in_inference[p] = 1;
      widest = std::max(widest, layers[p]->output_shape().back());
    }
    widest_folded = widest;
  }

  // Pairs each batch norm that can leave its map to its reader (no fused ReLU) with the Add that is the only reader
  // of its output.
  void plan_training_deferral(const layers_t& layers, const inputs_t& inputs,
                              const std::vector<std::size_t>& sole) {
    for (std::size_t p = 0; p < layers.size(); ++p) {
      if (roles[p].deferrable == nullptr || !roles[p].deferrable->can_defer_map() || inputs[p].size() != 1) continue;
      const std::size_t node = p + 1;
      const std::size_t c = sole[node];
      if (c == no_layer || roles[c].map_reader == nullptr) continue;
      auto& mapped = mapped_inputs[c];
      if (mapped.empty()) mapped.assign(inputs[c].size(), no_layer);
      for (std::size_t k = 0; k < inputs[c].size(); ++k)
        if (inputs[c][k] == node) mapped[k] = p;
      deferred[p] = 1;
    }
  }

  // Pairs each layer that can sum its input by a hook with the layer that writes that input, where that layer can
  // run the hook and nothing else reads its output (so its output is the reader's input, unfused).
  void plan_sums_in_producers(const layers_t& layers, const inputs_t& inputs,
                              const std::vector<std::size_t>& sole) {
    for (std::size_t r = 0; r < layers.size(); ++r) {
      if (roles[r].input_sums == nullptr || inputs[r].size() != 1) continue;
      const std::size_t node = inputs[r][0];
      if (node == 0 || sole[node] != r) continue;
      const std::size_t p = node - 1;
      if (relu_of[p] != no_layer || fused_away[p] || roles[p].output_hook == nullptr ||
          !roles[p].output_hook->can_run_output_hook())
        continue;
      sums_for[p] = r;
    }
  }

  // Pairs each layer that can sum its output's gradient by a hook with the only reader of that output (of its fused
  // ReLU's), where that reader writes the gradient in a pass that can run the hook.
  void plan_gradient_sums_in_readers(const layers_t& layers, const inputs_t& inputs,
                                     const std::vector<std::size_t>& sole) {
    for (std::size_t b = 0; b < layers.size(); ++b) {
      if (roles[b].gradient_sums == nullptr || inputs[b].size() != 1 || deferred[b]) continue;
      const std::size_t o = relu_of[b] == no_layer ? b : relu_of[b];
      const std::size_t r = sole[o + 1];
      if (r == no_layer || inputs[r].size() != 1) continue;
      const auto* runner = mwstrat::detail::fusion_role<mwstrat::detail::input_gradient_hook_runner>(*layers[r]);
      if (runner == nullptr || !runner->can_run_input_gradient_hook()) continue;
      gradient_sums_of[r] = b;
    }
  }
};

}  // namespace mwstrat::detail
