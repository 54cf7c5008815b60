#pragma once
// The one model executor: lays the parameters, gradients and non-trained state of a graph of layers out in arenas,
// and runs the forward, loss and backward passes over the activation and gradient buffers. Two builders give it its
// layers: the graph model's plan (nn::basic_graph_model, through graph_plan) and the sequential model's list (a
// linear graph, nn::basic_sequential). It checks nothing a caller passes (the models do) and runs in whatever task
// arena it is called from.
//
// A layer may report its parameter gradient as final during its own backward (backward_args::ready: a convolution
// before its data gradient, a large dense kernel in chunks of units), so that a strategy's first bucket leaves while
// the layer still computes its input gradient; the executor passes each report on at once and reports the rest of
// the layer's slice after it. A step whose reduction waits for the end of backward (`after_backward`) asks for none.
//
// Reshape and Flatten copy nothing: their output is their input's buffer, and where they are the only reader of
// their input, the input's gradient is their output's (one buffer, as below).
//
// Which layers run inside other layers' passes (ReLU fusion, batch-norm folding and deferral, statistics in the
// producer's pass) is decided once, from the graph, by nn/detail/graph_fusion_plan.hpp; the passes here follow it.
//
// Gradient buffers are shared: the gradient w.r.t. a node's output lives only from the backward step of its last
// reader (which writes it first) to the node's own backward step (which reads it), so buffers whose lifetimes do not
// overlap use one slot (ResNet-56 at batch 128 keeps a few slots per stage instead of one buffer per layer).
// A second reader of a node that can add its part of the node's gradient as it writes it (a convolution, which on
// the Winograd path adds as it stores: input_gradient_adder in layer_fusions.hpp) gets the node's buffer instead of a scratch
// buffer added afterwards.
// Gradient aliasing goes one step further: a layer that gives every input one gradient (Add) writes it once, to
// the input whose gradient is read last, and another input read by nothing else reads it from that buffer in place
// (a ResNet block's second batch norm reads the gradient its shortcut got), where no other reader of the first adds
// its part before then. One write of an activation-sized tensor fewer per residual block.

#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/graph_fusion_plan.hpp>
#include <mwstrat/nn/detail/graph_layer_factory.hpp>
#include <mwstrat/nn/detail/graph_layer_info.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/loss_pass.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/graph.hpp>
#include <mwstrat/nn/layer_specs.hpp>
#include <mwstrat/nn/losses.hpp>
#include <mwstrat/nn/step_stats.hpp>
#include <mwstrat/strategy/after_backward.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// One layer as a builder hands it to the executor: the layer, its inputs as model nodes (0 is the input, i + 1 is
// layer i; a layer reads only nodes before it), Keras's name and the names of the layers it is applied to.
template <class T>
struct executor_layer {
  std::unique_ptr<mwstrat::detail::layer_impl<T>> layer;
  std::vector<std::size_t> inputs;
  std::string name;
  std::vector<std::string> inbound;
};

// How an executor runs. `fuse`: run layers inside others' passes (graph_fusion_plan.hpp); `share`: share gradient
// buffers (above); both off only to compare with the plain passes. `first_stream`: layer i's parameters are drawn
// from random stream first_stream + i (the graph model's layers count from 1, the sequential model's from 0).
struct executor_options {
  bool fuse = true;
  bool share = true;
  std::uint64_t first_stream = 1;
};

template <class T>
class graph_executor {
 public:
  using layer_ptr = std::unique_ptr<mwstrat::detail::layer_impl<T>>;

  // The graph model's layers, made from its plan (graph_layer_factory.hpp).
  explicit graph_executor(const graph_plan& plan, bool fuse = true, bool share = true)
      : graph_executor(plan.input_shape, layers_of(plan), plan.output_softmax, {fuse, share, 1}) {}

  // The layers a builder made, in an order where each reads only nodes before it; `output_softmax`: the last is a
  // Dense with a softmax activation (trained from its logits).
  graph_executor(nn::shape_t input_shape, std::vector<executor_layer<T>> layers, bool output_softmax,
                 executor_options options)
      : input_shape_(std::move(input_shape)),
        output_softmax_(output_softmax),
        share_gradients_(options.share),
        first_stream_(options.first_stream) {
    std::size_t offset = 0, state_offset = 0;
    for (auto& p : layers) {
      auto layer = std::move(p.layer);
      info_.push_back({std::move(p.name), layer->keras_type(), layer->output_shape(), std::move(p.inbound), offset,
                       layer->param_count(), state_offset, layer->state_count()});
      for (auto t : layer->l2_terms()) {  // in model offsets
        t.offset += offset;
        l2_terms_.push_back(t);
      }
      offset += layer->param_count();
      state_offset += layer->state_count();
      inputs_.push_back(std::move(p.inputs));
      layers_.push_back(std::move(layer));
    }
    // Where each node's values are: its own buffer, or the input's of a Reshape or Flatten (followed down).
    values_of_.resize(layers_.size() + 1);
    for (std::size_t node = 0; node <= layers_.size(); ++node)
      values_of_[node] = node > 0 && layers_[node - 1]->aliases_input() ? values_of_[inputs_[node - 1][0]] : node;
    count_ = offset;
    arena_.assign(2 * count_, T{});
    pbase_ = arena_.data();
    gbase_ = arena_.data() + count_;
    state_.assign(state_offset, T{});
    // The gradient w.r.t. a node's output is needed when the node or a node before it has parameters.
    grad_needed_.assign(layers_.size() + 1, false);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      bool below = layers_[i]->param_count() > 0;
      for (std::size_t in : inputs_[i]) below = below || grad_needed_[in];
      grad_needed_[i + 1] = below;
    }
    std::size_t arity = 1;
    for (const auto& ins : inputs_) arity = std::max(arity, ins.size());
    scratch_.resize(arity);
    acts_.resize(layers_.size());
    grads_.assign(layers_.size(), nullptr);
    written_.assign(layers_.size() + 1, 0);
    xs_.resize(arity);
    dxs_.resize(arity);
    alias_of_.assign(layers_.size(), no_layer);
    deferred_map_.resize(layers_.size());
    maps_.resize(arity);
    fusion_ = graph_fusion_plan<T>(layers_, inputs_, options.fuse);
    affine_.assign(2 * fusion_.widest_folded, T{});
  }

  // ---------------------------------------------------------------------------------------- layout
  [[nodiscard]] const std::vector<layer_ptr>& layers() const noexcept { return layers_; }
  [[nodiscard]] const std::vector<graph_layer_info>& info() const noexcept { return info_; }
  // Per layer: its inputs as model nodes (0 = the input, i + 1 = layer i).
  [[nodiscard]] const std::vector<std::vector<std::size_t>>& inputs() const noexcept { return inputs_; }
  [[nodiscard]] const nn::shape_t& input_shape() const noexcept { return input_shape_; }
  [[nodiscard]] std::size_t input_size() const { return mwstrat::detail::shape_size(input_shape_); }
  [[nodiscard]] std::size_t output_size() const { return layers_.back()->output_size(); }
  [[nodiscard]] bool output_softmax() const noexcept { return output_softmax_; }
  // How many gradient buffers the passes use (after reserve()).
  [[nodiscard]] std::size_t gradient_buffers() const noexcept { return grad_slots_.size(); }
  // What the fusion plan (nn/detail/graph_fusion_plan.hpp) runs inside other layers' passes.
  [[nodiscard]] const graph_fusion_plan<T>& fusion() const noexcept { return fusion_; }

  // How many layers read their output's gradient from another layer's buffer (gradient aliasing, above).
  [[nodiscard]] std::size_t aliased_gradients() const {
    return static_cast<std::size_t>(
        std::count_if(alias_of_.begin(), alias_of_.end(), [](std::size_t p) { return p != no_layer; }));
  }

  // ---------------------------------------------------------------------------------------- arenas
  [[nodiscard]] std::size_t parameter_count() const noexcept { return count_; }
  [[nodiscard]] T* parameters() const noexcept { return pbase_; }
  [[nodiscard]] T* gradients() const noexcept { return gbase_; }
  [[nodiscard]] std::span<T> state() noexcept { return state_; }
  [[nodiscard]] std::span<const T> state() const noexcept { return state_; }
  // Parameters and gradients in the caller's storage (`parameter_count()` elements each, 64-byte aligned like the
  // own arena), or back in the own arena. Both model front ends forward here, so the checks live once.
  void adopt_storage(std::span<T> params, std::span<T> grads) {
    if (params.size() != count_ || grads.size() != count_)
      mwstrat::detail::nn_config_error("adopt_storage: " + std::to_string(params.size()) + " parameters and " +
                                       std::to_string(grads.size()) + " gradients for a model of " +
                                       std::to_string(count_));
    constexpr auto align = static_cast<std::uintptr_t>(mwstrat::detail::aligned_allocator<T>::alignment);
    if (reinterpret_cast<std::uintptr_t>(params.data()) % align != 0 ||
        reinterpret_cast<std::uintptr_t>(grads.data()) % align != 0)
      mwstrat::detail::nn_config_error("adopt_storage: storage must be " + std::to_string(align) + "-byte aligned");
    pbase_ = params.data();
    gbase_ = grads.data();
  }
  void use_own_storage() {
    if (uses_own_storage()) return;
    std::copy(pbase_, pbase_ + count_, arena_.data());
    std::copy(gbase_, gbase_ + count_, arena_.data() + count_);
    pbase_ = arena_.data();
    gbase_ = arena_.data() + count_;
  }
  [[nodiscard]] bool uses_own_storage() const noexcept { return pbase_ == arena_.data(); }

  // Every parameter and the state from `seed` (layer i + 1's stream); gradients to zero, step to 0.
  void initialize(std::uint64_t seed) {
    seed_ = seed;
    step_ = 0;
    const std::span<T> params(pbase_, count_);
    const std::span<T> state(state_);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->initialize(params.subspan(info_[i].offset, info_[i].count), seed, first_stream_ + i);
      layers_[i]->initialize_state(state.subspan(info_[i].state_offset, info_[i].state_count));
    }
    for (auto& g : std::span<T>(gbase_, count_)) g = T{};
  }

  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  void set_step(std::uint64_t step) noexcept { step_ = step; }
  void advance_step() noexcept { ++step_; }  // after a training step: the next one draws other dropout masks

  // ---------------------------------------------------------------------------------------- regularisation
  void set_cross_replica_sum(mwstrat::detail::replica_sum sum) { replicas_ = std::move(sum); }
  void defer_regularization_gradients(bool deferred) noexcept {
    if (deferred) ++regularization_deferrals_;
    else if (regularization_deferrals_ > 0) --regularization_deferrals_;
  }
  // Adds the regularisation gradients (2λ·w) of the parameters [first, first + count) into the gradients.
  void add_regularization_gradients(std::size_t first, std::size_t count) {
    const std::size_t last = first + count;
    for (const auto& t : l2_terms_) {
      const std::size_t b = std::max(first, t.offset);
      const std::size_t e = std::min(last, t.offset + t.count);
      if (b < e) mwstrat::detail::add_l2_gradient(t.lambda, pbase_ + b, gbase_ + b, e - b);
    }
  }
  [[nodiscard]] double regularization_loss() const {
    double r = 0;
    for (std::size_t i = 0; i < layers_.size(); ++i) r += layers_[i]->regularization(pbase_ + info_[i].offset);
    return r;
  }

  // ---------------------------------------------------------------------------------------- passes
  // Every buffer a batch of up to `batch` samples needs, so that later steps allocate nothing.
  void reserve(std::size_t batch) {
    if (batch <= capacity_) return;
    capacity_ = batch;
    std::size_t widest = 0;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->reserve(batch);
      // Fused: the ReLU's buffer; Reshape, Flatten: their input's.
      if (fusion_.relu_of[i] == no_layer && !layers_[i]->aliases_input())
        acts_[i].assign(batch * layers_[i]->output_size(), T{});
      for (std::size_t in : inputs_[i]) widest = std::max(widest, node_size(in));
    }
    for (auto& s : scratch_) s.assign(batch * widest, T{});
    share_gradient_buffers(batch);
    probs_.assign(batch * output_size(), T{});
    losses_.assign(batch, T{});
    hits_.assign(batch, 0);
  }

  // `update_state`: training mode moves the batch-norm statistics (not while only measuring a loss).
  void forward_pass(const T* x, std::size_t batch, bool training, bool update_state) {
    input_ = x;
    last_batch_ = batch;
    const mwstrat::detail::replica_sum* sum = replicas_ ? &replicas_ : nullptr;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (fusion_.fused_away[i]) continue;  // its producer applied it
      if (!training && fusion_.skipped_in_inference[i]) continue;  // its reader applies it
      for (std::size_t k = 0; k < inputs_[i].size(); ++k) xs_[k] = node_values(inputs_[i][k]);
      T* state = info_[i].state_count != 0 && update_state ? state_.data() + info_[i].state_offset : nullptr;
      if (info_[i].state_count != 0 && !training) state = state_.data() + info_[i].state_offset;
      if (!training && fusion_.folded[i] != no_layer) {  // runs on the folded batch norm's input, applying its map
        const std::size_t p = fusion_.folded[i];
        T* scale = affine_.data();
        T* shift = scale + layers_[p]->output_shape().back();
        fusion_.roles[p].affine_map->inference_affine(pbase_ + info_[p].offset, state_.data() + info_[p].state_offset,
                                                      scale, shift);
        xs_[0] = node_values(inputs_[p][0]);
        fusion_.roles[i].affine_reader->forward_with_input_affine(
            {batch, xs_[0], acts_[i].data(), pbase_ + info_[i].offset, training, step_, state, sum, xs_.data()}, scale,
            shift, fusion_.relu_of[p] != no_layer);
        continue;
      }
      if (training && fusion_.deferred[i]) {  // statistics only: its reader applies the map
        deferred_map_[i] = fusion_.roles[i].deferrable->forward_statistics(
            {batch, xs_[0], nullptr, pbase_ + info_[i].offset, training, step_, state, sum, xs_.data()});
        continue;
      }
      T* y = fusion_.relu_of[i] == no_layer ? acts_[i].data() : acts_[fusion_.relu_of[i]].data();
      if (training && !fusion_.mapped_inputs[i].empty()) {  // reads deferred batch norms' inputs through their maps
        for (std::size_t k = 0; k < inputs_[i].size(); ++k) {
          const std::size_t p = fusion_.mapped_inputs[i][k];
          maps_[k] = p == no_layer ? mwstrat::detail::channel_map<T>{} : deferred_map_[p];
          if (p != no_layer) xs_[k] = node_values(inputs_[p][0]);
        }
        fusion_.roles[i].map_reader->forward_with_input_maps(
            {batch, xs_[0], y, pbase_ + info_[i].offset, training, step_, state, sum, xs_.data()}, maps_.data());
        continue;
      }
      if (training && fusion_.sums_for[i] != no_layer) {  // runs its reader's sums on each image it writes
        const std::size_t r = fusion_.sums_for[i];
        const auto* hook = fusion_.roles[r].input_sums->input_sums_hook(batch, node_values(i + 1));
        fusion_.roles[i].output_hook->forward_with_output_hook(
            {batch, xs_[0], y, pbase_ + info_[i].offset, training, step_, state, sum, xs_.data()}, *hook);
        continue;
      }
      if (layers_[i]->aliases_input()) continue;  // Reshape, Flatten: their values are their input's
      layers_[i]->forward({batch, xs_[0], y, pbase_ + info_[i].offset, training, step_, state, sum, xs_.data()});
    }
  }

  // The weighted cross-entropy (nn/detail/loss_pass.hpp, shared with the sequential model) and, as in Keras, the
  // regularisation terms, which the mean gains once.
  nn::step_stats loss_pass(std::span<const std::int64_t> labels, std::span<const float> weights, std::size_t batch,
                           bool with_grad, double label_smoothing) {
    nn::step_stats st = mwstrat::detail::weighted_loss_pass<T>(
        output_values(), with_grad ? grads_.back() : nullptr, output_size(), labels, weights, batch,
        losses_.data(), hits_.data(), static_cast<T>(label_smoothing));
    st.loss_sum += static_cast<double>(batch) * regularization_loss();
    return st;
  }

  // Overwrites the gradients and calls `on_ready(offset, count)` for each layer's slice once final, last first,
  // parts of it during the layer's backward where the layer reports them (above).
  template <class OnReady>
  void backward_pass(std::size_t batch, OnReady& on_ready) {
    const mwstrat::detail::replica_sum* sum = replicas_ ? &replicas_ : nullptr;
    std::fill(written_.begin(), written_.end(), 0);
    written_.back() = 1;  // the output's gradient is the loss's
    for (std::size_t i = layers_.size(); i-- > 0;) {
      if (fusion_.fused_away[i]) continue;  // its producer differentiates through it
      auto& l = *layers_[i];
      const std::size_t n = l.param_count();
      const auto& ins = inputs_[i];
      bool any_input = false;
      for (std::size_t k = 0; k < ins.size(); ++k) {
        const std::size_t in = ins[k];
        if (!grad_needed_[in]) {
          dxs_[k] = nullptr;
          continue;
        }
        if (in > 0 && alias_of_[in - 1] != no_layer) {  // its gradient is the one this layer writes to another input
          dxs_[k] = nullptr;
          written_[in] = 1;
          continue;
        }
        any_input = true;
        dxs_[k] = written_[in] ? scratch_[k].data() : grads_[in - 1];  // a second consumer adds its part
      }
      // A second consumer that can add its part as it writes it gets the node's buffer itself.
      const bool adds = share_gradients_ && ins.size() == 1 && dxs_[0] != nullptr && written_[ins[0]] &&
                        fusion_.roles[i].adds_to_dx();
      if (adds) dxs_[0] = grads_[ins[0] - 1];
      // The sums of the batch norm whose output gradient this layer writes, made as it writes it
      // (graph_fusion_plan.hpp): only when dx is that gradient's own buffer and this layer writes all of it.
      const mwstrat::nn::kernels::conv2d_image_hook* dx_hook = nullptr;
      if (fusion_.gradient_sums_of[i] != no_layer && dxs_[0] != nullptr && !adds) {
        const std::size_t b = fusion_.gradient_sums_of[i];
        const std::size_t o = fusion_.relu_of[b] == no_layer ? b : fusion_.relu_of[b];
        if (dxs_[0] == grads_[o])
          dx_hook = fusion_.roles[b].gradient_sums->output_gradient_sums_hook(batch, node_values(inputs_[b][0]), grads_[o]);
      }
      layer_report<OnReady> report{&on_ready, info_[i].offset, info_[i].offset + n};
      const mwstrat::detail::gradient_ready ready{&report, &layer_report<OnReady>::call};
      if (n > 0 || any_input) {
        for (std::size_t k = 0; k < ins.size(); ++k) xs_[k] = node_values(ins[k]);
        if (l.aliases_input()) {
          if (dxs_[0] != nullptr) std::copy(grads_[i], grads_[i] + batch * l.output_size(), dxs_[0]);
        } else {
          const std::size_t o = fusion_.relu_of[i] == no_layer ? i : fusion_.relu_of[i];  // whose output and gradient
          l.backward({batch, xs_[0], node_values(o + 1), grads_[o], dxs_[0], pbase_ + info_[i].offset,
                      gbase_ + info_[i].offset, step_, sum, dxs_.data(), regularization_deferrals_ == 0,
                      n > 0 && reports_wanted<OnReady> ? &ready : nullptr, adds, dx_hook});
        }
        for (std::size_t k = 0; k < ins.size(); ++k) {
          if (dxs_[k] == nullptr) continue;
          const std::size_t in = ins[k];
          if (written_[in] && !adds) {
            T* to = grads_[in - 1];
            const T* from = dxs_[k];
            mwstrat::detail::parallel_chunks(batch * node_size(in), 1 << 16, [&](std::size_t b, std::size_t e) {
              for (std::size_t j = b; j < e; ++j) to[j] += from[j];
            });
          }
          written_[in] = 1;
        }
      }
      if (report.reported > info_[i].offset) on_ready(info_[i].offset, report.reported - info_[i].offset);
    }
  }

  // The outputs (logits, before an output softmax) of the last forward pass: rows × output_size().
  [[nodiscard]] std::span<const T> outputs() const { return {output_values(), last_batch_ * output_size()}; }
  // The output softmax applied to the last forward pass's `batch` rows, in a buffer of the executor's.
  std::span<const T> probabilities(std::size_t batch) {
    const std::size_t k = output_size();
    for (std::size_t s = 0; s < batch; ++s)
      nn::apply_softmax<T>(std::span<const T>(output_values() + s * k, k), std::span<T>(probs_.data() + s * k, k), k);
    return {probs_.data(), batch * k};
  }

 private:
  static std::vector<executor_layer<T>> layers_of(const graph_plan& plan) {
    std::vector<executor_layer<T>> layers;
    for (const auto& p : plan.layers)
      layers.push_back({make_graph_layer<T>(p.spec, p.input_shapes, layers.size() + 1), p.inputs, p.name, p.inbound});
    return layers;
  }

  // A layer's reports during its backward, passed on to `on_ready` at once; they must grow as a contiguous suffix of
  // the layer's slice (the arena's order, which buckets leave in), and what is not reported is reported after.
  template <class OnReady>
  struct layer_report {
    OnReady* on_ready;
    std::size_t begin;     // the layer's first gradient in the arena
    std::size_t reported;  // [reported, begin + n) is already passed on
    static void call(void* self, std::size_t offset, std::size_t count) {
      auto& r = *static_cast<layer_report*>(self);
      if (count == 0) return;
      if (r.begin + offset + count != r.reported) {
        throw config_error({"nn"}, "a layer reported its gradient [" + std::to_string(offset) + ", " +
                                       std::to_string(offset + count) + ") out of order (expected one ending at " +
                                       std::to_string(r.reported - r.begin) + ")");
      }
      r.reported = r.begin + offset;
      (*r.on_ready)(r.reported, count);
    }
  };

  // Points grads_[i] at a slot for every layer whose output gradient is made: the layer's own backward step reads it
  // (time i) and its last reader's writes it first (time = that reader's index; the loss's, past every layer, for
  // the output); the backward pass runs time down, and two gradients share a slot when their lifetimes
  // [own, last reader] are disjoint. A fused producer reads its ReLU's gradient, so that one lives down to it.
  void share_gradient_buffers(std::size_t batch) {
    const std::size_t n = layers_.size();
    std::vector<std::size_t> last_reader(n, 0);
    for (std::size_t c = 0; c < n; ++c)
      for (std::size_t in : inputs_[c])
        if (in > 0) last_reader[in - 1] = std::max(last_reader[in - 1], c);
    std::vector<std::size_t> read_at(n);  // when the gradient w.r.t. layer i's output is read
    for (std::size_t i = 0; i < n; ++i) read_at[i] = i;
    for (std::size_t p = 0; p < n; ++p)
      if (fusion_.relu_of[p] != no_layer) read_at[fusion_.relu_of[p]] = p;
    alias_of_.assign(n, no_layer);
    plan_pass_through_gradients(read_at);
    if (share_gradients_) plan_gradient_aliases(last_reader, read_at);
    struct life {
      std::size_t layer, lo, hi;
    };
    std::vector<life> lives;
    for (std::size_t i = 0; i < n; ++i) {
      grads_[i] = nullptr;
      if (fusion_.relu_of[i] != no_layer || (!grad_needed_[i + 1] && i + 1 != n) || alias_of_[i] != no_layer) continue;
      lives.push_back({i, read_at[i], i + 1 == n ? n : std::max(last_reader[i], i)});
    }
    std::sort(lives.begin(), lives.end(), [](const life& a, const life& b) { return a.hi > b.hi; });
    std::vector<std::size_t> slot_free_below;  // per slot: its holder is read at this time (free below it)
    std::vector<std::size_t> slot_size;
    std::vector<std::size_t> slot_of(n, no_layer);
    for (const life& l : lives) {
      std::size_t s = no_layer;
      for (std::size_t k = 0; share_gradients_ && k < slot_size.size() && s == no_layer; ++k)
        if (slot_free_below[k] > l.hi) s = k;
      if (s == no_layer) {
        s = slot_size.size();
        slot_size.push_back(0);
        slot_free_below.push_back(0);
      }
      slot_free_below[s] = l.lo;
      slot_size[s] = std::max(slot_size[s], batch * layers_[l.layer]->output_size());
      slot_of[l.layer] = s;
    }
    grad_slots_.resize(slot_size.size());
    for (std::size_t k = 0; k < slot_size.size(); ++k) grad_slots_[k].assign(slot_size[k], T{});
    for (const life& l : lives) grads_[l.layer] = grad_slots_[slot_of[l.layer]].data();
    for (std::size_t i = 0; i < n; ++i)
      if (alias_of_[i] != no_layer) grads_[i] = grads_[root_of(i)];
  }

  // The layer whose gradient buffer layer i's output gradient is (following aliases).
  std::size_t root_of(std::size_t i) const {
    while (alias_of_[i] != no_layer) i = alias_of_[i];
    return i;
  }

  // A Reshape or Flatten that is the only reader of a layer's output passes its output's gradient through unchanged:
  // that gradient is the layer's, in the same buffer, which then lives down to the layer's own read (done before
  // the Add's aliases below, which see these lifetimes). Last layer first, so that chains of them join up.
  void plan_pass_through_gradients(std::vector<std::size_t>& read_at) {
    const std::vector<std::size_t> sole = sole_readers(inputs_);
    for (std::size_t i = layers_.size(); i-- > 0;) {
      if (!layers_[i]->aliases_input()) continue;
      const std::size_t in = inputs_[i][0];
      if (in == 0 || !grad_needed_[in] || sole[in] != i) continue;
      alias_of_[in - 1] = i;
      std::size_t& lo = read_at[root_of(in - 1)];
      lo = std::min(lo, read_at[in - 1]);
    }
  }

  // Gradient aliasing (above). For each layer that gives every input one gradient: the primary is the input whose
  // gradient this layer writes first (it is that gradient's last reader) and is read last (lowest read time), taken
  // once; another input takes the primary's buffer if this layer is its only reader, it is read while the buffer is
  // still live (not below the primary's read), and no other reader of the primary adds its part in between.
  void plan_gradient_aliases(const std::vector<std::size_t>& last_reader, const std::vector<std::size_t>& read_at) {
    const std::vector<std::size_t> sole = sole_readers(inputs_);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (fusion_.fused_away[i] || !fusion_.roles[i].one_gradient) continue;
      const auto& ins = inputs_[i];
      std::size_t primary = no_layer;
      for (std::size_t in : ins)
        if (in > 0 && grad_needed_[in] && last_reader[in - 1] == i && std::count(ins.begin(), ins.end(), in) == 1 &&
            (primary == no_layer || read_at[in - 1] < read_at[primary]))
          primary = in - 1;
      if (primary == no_layer) continue;
      for (std::size_t in : ins) {
        if (in == 0 || in - 1 == primary || !grad_needed_[in] || sole[in] != i) continue;
        const std::size_t t = read_at[in - 1];
        if (t < read_at[primary]) continue;
        bool kept = true;
        for (std::size_t r = t + 1; r < i && kept; ++r)
          kept = std::find(inputs_[r].begin(), inputs_[r].end(), primary + 1) == inputs_[r].end();
        if (kept) alias_of_[in - 1] = primary;
      }
    }
  }

  // node 0 is the input; node i + 1 is layer i.
  std::size_t node_size(std::size_t node) const {
    return node == 0 ? input_size() : layers_[node - 1]->output_size();
  }
  const T* node_values(std::size_t node) const {
    node = values_of_[node];
    return node == 0 ? input_ : acts_[node - 1].data();
  }
  const T* output_values() const { return node_values(layers_.size()); }

  nn::shape_t input_shape_;
  std::vector<layer_ptr> layers_;
  std::vector<std::vector<std::size_t>> inputs_;  // per layer: model nodes (0 = input, i + 1 = layer i)
  std::vector<std::size_t> values_of_;             // per model node: the node whose buffer holds its values
  std::vector<graph_layer_info> info_;
  std::vector<bool> grad_needed_;                  // per model node
  bool output_softmax_ = false;
  bool share_gradients_ = true;
  std::uint64_t first_stream_ = 1;
  std::size_t count_ = 0;
  mwstrat::detail::aligned_vector<T> arena_;  // [parameters | gradients]
  T* pbase_ = nullptr;
  T* gbase_ = nullptr;
  std::vector<T> state_;                                // moving statistics
  std::vector<mwstrat::detail::aligned_vector<T>> acts_;    // per layer: its output
  std::vector<T*> grads_;                                   // per layer: gradient w.r.t. its output (a slot's)
  std::vector<mwstrat::detail::aligned_vector<T>> grad_slots_;  // the gradient buffers, shared (above)
  std::vector<mwstrat::detail::aligned_vector<T>> scratch_; // per input slot: a second consumer's gradient
  std::vector<std::uint8_t> written_;                       // per node: its gradient has a first part this step
  graph_fusion_plan<T> fusion_;                      // which layer runs inside which (fixed at construction)
  std::vector<T> affine_;                            // the folded batch norm's [scale | shift] of the moment
  std::vector<std::size_t> alias_of_;                // per layer: whose gradient buffer its output's gradient is
  std::vector<mwstrat::detail::channel_map<T>> deferred_map_;  // per layer: a deferred batch norm's map, this pass's
  std::vector<mwstrat::detail::channel_map<T>> maps_;    // per input slot: the map the reader applies
  std::vector<const T*> xs_;
  std::vector<T*> dxs_;
  std::vector<T> probs_;
  std::vector<T> losses_;
  std::vector<std::uint8_t> hits_;
  mwstrat::detail::replica_sum replicas_;
  std::vector<mwstrat::detail::l2_term> l2_terms_;  // every layer's, in model parameter offsets
  int regularization_deferrals_ = 0;  // > 0: a synchroniser adds the regularisation gradients after the mean
  const T* input_ = nullptr;
  std::size_t last_batch_ = 0;  // examples in the last forward pass (what outputs() covers)
  std::size_t capacity_ = 0;
  std::uint64_t seed_ = 0;
  std::uint64_t step_ = 0;
};

}  // namespace mwstrat::detail
