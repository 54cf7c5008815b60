#pragma once
/// \file
/// DistributedDataParallel for libtorch's C++ frontend: `mwstrat::libtorch::module_model` makes a
/// `torch::nn::Module` a model that `mwstrat::fit` trains with any mwstrat strategy (MultiWorkerMirroredStrategy over
/// the ring, local replicas as threads), with BackupAndRestore, ModelCheckpoint, `save_model` and in-memory
/// recovery as for any other model. libtorch itself has no DDP in C++.
///
/// What it does, as DDP's reducer does with `gradient_as_bucket_view=True`:
///   - the module's parameters become **views of mwstrat's arenas**: one flat float tensor holds every parameter
///     (registration order), a second every gradient (`param.grad()` is a view into it), so the all-reduce and the
///     optimizer work on the module's own memory with no copy;
///   - gradient readiness comes from libtorch's autograd: a post hook on each parameter's gradient accumulator
///     says when its gradient is final; the gradients reach the synchroniser as a suffix of the arena that grows
///     last-first (train/detail/gradient_frontier.hpp), so buckets leave while backward is still running;
///   - on one host (every replica a process whose ring links use shared memory) with an elementwise optimizer
///     without slots, the arenas themselves move into the host's shared region (`adopt_storage`, the
///     `storage_adopting_model` capability): one copy of the parameters for all the host's replicas, each
///     replica's gradients read there by the others, so no gradient is copied or sent at all
///     (`update_placement::shared_host_copy`, docs/training.md);
///   - a parameter that took no part in the step (an unused branch) has a zero gradient and is reported when
///     backward returns (DDP's `find_unused_parameters`, without its extra pass);
///   - the first adapter built pins glibc's malloc thresholds, so that each step's freed tensors stay with the
///     process instead of being faulted in again next step (libtorch/tensor_memory.hpp; MWSTRAT_LIBTORCH_MALLOC).
/// Refused, with a message naming the tensor: a parameter that is not a contiguous CPU float32 tensor (the arena,
/// the optimizers and the wire are float32), a module with buffers (batch-norm statistics are not mirrored or saved
/// by this adapter yet), a module with no parameters.
///
/// The step function is the user's forward and loss: `step(module, batch)` returns `classified{loss, logits,
/// labels}` (a classifier: accuracy is reported) or `regressed{loss, predictions, targets}` (any other task:
/// `mean_squared_error` and `mean_absolute_error` see the predictions and targets). `loss` is the batch's mean
/// loss, a scalar; the adapter runs `backward()` itself.
///
/// \code
///   auto net = std::make_shared<Net>();
///   mwstrat::libtorch::module_model model(net, [](Net& n, const mwstrat::data::image_batch& b) {
///     auto x = torch::from_blob(const_cast<float*>(b.inputs.data()), {long(b.size), 1, 28, 28});
///     auto y = torch::from_blob(const_cast<std::int64_t*>(b.labels.data()), {long(b.size)}, torch::kInt64);
///     auto logits = n.forward(x);
///     return mwstrat::libtorch::classified{torch::cross_entropy_loss(logits, y), logits, y};
///   });
///   mwstrat::fit(strategy, model, optimizer, train, options, progress, backup);
/// \endcode

#include <mwstrat/error.hpp>
#include <mwstrat/libtorch/tensor_memory.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/gradient_frontier.hpp>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::libtorch {

/// What a classifier's step returns: its mean loss (a scalar), its logits (rows × classes) and the labels.
struct classified {
  ::torch::Tensor loss;
  ::torch::Tensor logits;
  ::torch::Tensor labels;
};

/// What any other task's step returns: its mean loss (a scalar), its predictions and the targets (same shape).
struct regressed {
  ::torch::Tensor loss;
  ::torch::Tensor predictions;
  ::torch::Tensor targets;
};

/// A classifier's batch result (`classification_result`).
struct classifier_result {
  double loss_sum = 0;
  double correct = 0;
  double count = 0;
};

/// Any other task's batch result (`result_with_targets`): the predictions and targets as floats, valid until the
/// model's next batch.
struct regression_result {
  double loss_sum = 0;
  double count = 0;
  std::span<const float> predictions;
  std::span<const float> targets;
};

/// A parameter as checkpoints see it: its name in the module, its shape, its values in the arena.
struct arena_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;
};

/// A `torch::nn::Module` trained by `mwstrat::fit` (see the file comment). `Step` is the user's forward and loss:
/// `step(Module&, const Batch&)` returning `classified` or `regressed`.
template <class Module, class Step>
class module_model {
 public:
  /// Makes the module's parameters views of the adapter's arenas (their values are kept). Throws config_error
  /// naming the parameter or buffer that cannot be trained this way.
  module_model(std::shared_ptr<Module> module, Step step) : module_(std::move(module)), step_(std::move(step)) {
    if (!module_) refuse("no module");
    const auto params = module_->named_parameters(/*recurse=*/true);
    for (const auto& b : module_->named_buffers(/*recurse=*/true)) {
      refuse("the module has the buffer '" + b.key() +
             "': modules with buffers (batch-norm statistics) are not mirrored or saved by this adapter yet");
    }
    if (params.size() == 0) refuse("the module has no parameters");
    std::int64_t total = 0;
    for (const auto& p : params) {
      const ::torch::Tensor& t = p.value();
      if (!t.device().is_cpu()) refuse("parameter '" + p.key() + "' is not on the CPU");
      if (t.scalar_type() != ::torch::kFloat32) {
        refuse("parameter '" + p.key() + "' is " + std::string(c10::toString(t.scalar_type())) +
               "; the arena, the optimizers and the wire are float32 (convert the module with module->to(torch::kFloat32))");
      }
      if (!t.is_contiguous()) refuse("parameter '" + p.key() + "' is not contiguous");
      if (!t.requires_grad()) continue;  // frozen: not trained, not reduced
      total += t.numel();
    }
    if (total == 0) refuse("no parameter of the module requires a gradient");
    (void)detail::keep_tensor_memory_once();  // before the arenas: they are the first large blocks it keeps
    own_params_ = ::torch::empty({total}, ::torch::kFloat32);
    own_grads_ = ::torch::zeros({total}, ::torch::kFloat32);
    flat_params_ = own_params_;
    flat_grads_ = own_grads_;
    std::int64_t at = 0;
    std::string fingerprint = "libtorch(";
    const ::torch::NoGradGuard no_grad;
    for (const auto& p : params) {
      ::torch::Tensor t = p.value();
      if (!t.requires_grad()) continue;
      const std::int64_t n = t.numel();
      ::torch::Tensor value = flat_params_.narrow(0, at, n).view(t.sizes());
      value.copy_(t);
      t.set_data(value);  // the parameter now lives in the arena
      t.mutable_grad() = flat_grads_.narrow(0, at, n).view(t.sizes());
      tensors_.push_back(t);
      offsets_.push_back(static_cast<std::size_t>(at));
      named_.push_back({p.key(), std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end()), {}});
      if (fingerprint.size() > 9) fingerprint += ',';
      fingerprint += p.key();
      fingerprint += shape_text(t.sizes());
      at += n;
    }
    offsets_.push_back(static_cast<std::size_t>(at));
    fingerprint_ = fingerprint + ")";
    view_named();
    frontier_.emplace(tensors_.size());
    // One post hook per gradient accumulator, kept for the adapter's lifetime (libtorch holds accumulators
    // weakly: holding them keeps the hooks across steps, as DDP's reducer does).
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      std::shared_ptr<::torch::autograd::Node> acc = ::torch::autograd::impl::grad_accumulator(tensors_[i]);
      acc->add_post_hook(std::make_unique<ready_hook>(this, i));
      accumulators_.push_back(std::move(acc));
    }
  }

  module_model(const module_model&) = delete;
  module_model& operator=(const module_model&) = delete;

  /// The parameters leave the arena (each gets its own copy) so that the module outlives the adapter intact.
  ~module_model() {
    const ::torch::NoGradGuard no_grad;
    for (auto& t : tensors_) {
      t.set_data(t.detach().clone());
      t.mutable_grad() = ::torch::Tensor();
    }
  }

  // ------------------------------------------------------------------------------------------ trainable_model

  std::span<float> parameters() { return {flat_params_.data_ptr<float>(), static_cast<std::size_t>(flat_params_.numel())}; }
  std::span<float> gradients() { return {flat_grads_.data_ptr<float>(), static_cast<std::size_t>(flat_grads_.numel())}; }
  [[nodiscard]] const std::string& fingerprint() const { return fingerprint_; }

  /// The parameters and gradients in storage the trainer provides, which holds the parameter values already and
  /// stays valid until `use_own_storage()` (`storage_adopting_model`; the synchroniser's shared host copy). Each
  /// parameter and its `grad()` then view that storage; autograd's accumulators and hooks stay as they are.
  /// Throws config_error when the sizes are not the module's.
  void adopt_storage(std::span<float> params, std::span<float> grads) {
    const auto n = static_cast<std::size_t>(own_params_.numel());
    if (params.size() != n || grads.size() != n) {
      refuse("adopt_storage: " + std::to_string(params.size()) + " parameters and " + std::to_string(grads.size()) +
             " gradients for a module of " + std::to_string(n));
    }
    const auto shape = {static_cast<std::int64_t>(n)};
    view_flat(::torch::from_blob(params.data(), shape, ::torch::kFloat32),
              ::torch::from_blob(grads.data(), shape, ::torch::kFloat32));
  }

  /// Copies the values back into the adapter's own arenas and makes the parameters view them again (it runs while
  /// unwinding too: it does not throw).
  void use_own_storage() noexcept {
    if (flat_params_.data_ptr<float>() == own_params_.data_ptr<float>()) return;
    const auto p = parameters();
    const auto g = gradients();
    std::copy(p.begin(), p.end(), own_params_.data_ptr<float>());
    std::copy(g.begin(), g.end(), own_grads_.data_ptr<float>());
    view_flat(own_params_, own_grads_);
  }

  /// Forward (the user's step), backward with the gradients reported as they become final, last first.
  template <class Batch, class OnReady>
  auto train_batch(const Batch& b, OnReady&& on_ready) {
    module_->train();
    flat_grads_.zero_();  // autograd accumulates into the arena's views
    frontier_->begin();
    reporter<std::remove_reference_t<OnReady>> report{this, &on_ready};
    report_ = {&report, &reporter<std::remove_reference_t<OnReady>>::call};
    struct clear_on_exit {
      module_model* self;
      ~clear_on_exit() { self->report_ = {}; }
    } clear{this};
    auto out = step_(*module_, b);
    out.loss.backward();
    // Parameters the step did not use: their gradient is zero, final now.
    for (std::size_t i = tensors_.size(); i-- > 0;) {
      if (!frontier_->is_final(i)) tensor_final(i);
    }
    return result_of(out);
  }

  /// Forward and loss only, without recording a graph.
  template <class Batch>
  auto evaluate_batch(const Batch& b) {
    module_->eval();
    const ::torch::NoGradGuard no_grad;
    auto out = step_(*module_, b);
    return result_of(out);
  }

  // ----------------------------------------------------------------------------------------------- capabilities

  /// The parameters under their names in the module, viewing the arena (checkpoints, saved models).
  [[nodiscard]] const std::vector<arena_tensor>& named_parameters() const { return named_; }
  /// libtorch's intra-op threads (the synchroniser's overlap decision).
  [[nodiscard]] int threads() const { return ::torch::get_num_threads(); }
  /// The module being trained.
  Module& module() { return *module_; }

 private:
  // The post hook on a parameter's gradient accumulator: its gradient is final.
  struct ready_hook : ::torch::autograd::FunctionPostHook {
    ready_hook(module_model* m, std::size_t i) : self(m), index(i) {}
    ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                                const ::torch::autograd::variable_list&) override {
      self->tensor_final(index);
      return outputs;
    }
    module_model* self;
    std::size_t index;
  };

  // The synchroniser's on_ready for the step under way, type-erased without allocating.
  template <class OnReady>
  struct reporter {
    module_model* self;
    OnReady* on_ready;
    static void call(void* r, std::size_t offset, std::size_t count) {
      (*static_cast<reporter*>(r)->on_ready)(offset, count);
    }
  };
  struct report_target {
    void* target = nullptr;
    void (*call)(void*, std::size_t, std::size_t) = nullptr;
  };

  // Every trained parameter and its gradient as views of these two flat tensors (the own arenas or adopted
  // storage), and the checkpoint spans with them.
  void view_flat(::torch::Tensor params, ::torch::Tensor grads) {
    const ::torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto at = static_cast<std::int64_t>(offsets_[i]);
      const auto n = static_cast<std::int64_t>(offsets_[i + 1] - offsets_[i]);
      ::torch::Tensor& t = tensors_[i];
      t.set_data(params.narrow(0, at, n).view(t.sizes()));
      t.mutable_grad() = grads.narrow(0, at, n).view(t.sizes());
    }
    flat_params_ = std::move(params);
    flat_grads_ = std::move(grads);
    view_named();
  }

  void view_named() {
    for (std::size_t i = 0; i < named_.size(); ++i) {
      named_[i].values = std::span<const float>(parameters()).subspan(offsets_[i], offsets_[i + 1] - offsets_[i]);
    }
  }

  void tensor_final(std::size_t i) {
    if (report_.call == nullptr || frontier_->is_final(i)) return;  // outside train_batch, or reported already
    const auto [first, last] = frontier_->mark(i);
    if (first < last) report_.call(report_.target, offsets_[first], offsets_[last] - offsets_[first]);
  }

  classifier_result result_of(const classified& out) {
    const ::torch::NoGradGuard no_grad;
    classifier_result r;
    r.count = static_cast<double>(out.logits.size(0));
    r.loss_sum = out.loss.item<double>() * r.count;
    r.correct = static_cast<double>(out.logits.argmax(1).eq(out.labels).sum().item<std::int64_t>());
    return r;
  }

  regression_result result_of(const regressed& out) {
    const ::torch::NoGradGuard no_grad;
    predictions_ = out.predictions.detach().to(::torch::kFloat32).contiguous();
    targets_ = out.targets.detach().to(::torch::kFloat32).contiguous();
    if (predictions_.numel() != targets_.numel()) {
      refuse("the step's predictions have " + std::to_string(predictions_.numel()) + " values, its targets " +
             std::to_string(targets_.numel()));
    }
    regression_result r;
    r.count = predictions_.dim() == 0 ? 1.0 : static_cast<double>(predictions_.size(0));
    r.loss_sum = out.loss.item<double>() * r.count;
    r.predictions = {predictions_.data_ptr<float>(), static_cast<std::size_t>(predictions_.numel())};
    r.targets = {targets_.data_ptr<float>(), static_cast<std::size_t>(targets_.numel())};
    return r;
  }

  static std::string shape_text(c10::IntArrayRef sizes) {
    std::string s = "[";
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (i != 0) s += ',';
      s += std::to_string(sizes[i]);
    }
    s += ']';
    return s;
  }

  [[noreturn]] static void refuse(const std::string& what) {
    std::string message = "libtorch::module_model: ";
    message += what;
    throw config_error({"train"}, message);
  }

  std::shared_ptr<Module> module_;
  Step step_;
  ::torch::Tensor own_params_, own_grads_;            // the adapter's own arenas
  ::torch::Tensor flat_params_, flat_grads_;          // the arenas in use (own or adopted); parameters view them
  std::vector<::torch::Tensor> tensors_;              // the trained parameters, registration order
  std::vector<std::size_t> offsets_;                  // tensor i is [offsets_[i], offsets_[i + 1])
  std::vector<arena_tensor> named_;
  std::vector<std::shared_ptr<::torch::autograd::Node>> accumulators_;
  std::string fingerprint_;
  std::optional<detail::gradient_frontier> frontier_;
  report_target report_;
  ::torch::Tensor predictions_, targets_;  // the last regression step's, for the metrics
};

}  // namespace mwstrat::libtorch
