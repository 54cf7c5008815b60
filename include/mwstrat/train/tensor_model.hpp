#pragma once
/// \file
/// `tensor_model`: `fit` for a model whose parameters are many tensors of the user's own type (Eigen matrices,
/// xtensor arrays, a framework's parameter list) instead of one arena. mwstrat owns the layout: the adapter keeps
/// one parameter arena and one gradient arena, each tensor a slice of them in registration order, and presents
/// the user's model to `fit` as a `trainable_model`.
///
/// `tensor_sequence_model<M, Batch>` — what the user's model provides:
///   1. `m.parameter_tensors()`: a random-access range of `parameter_tensor`s — each with `name`, `value` and
///      `grad`, the latter two `tensor_like` of `float` and of one shape. It is called once, when the adapter is
///      made: the range (a `std::array` or `std::vector` of references, say) and the tensors it refers to must stay
///      where they are while the adapter lives;
///   2. `m.train_batch(batch, tensor_ready)`: forward, loss, backward; writes d(mean loss)/d(value) into each
///      `grad` and may call `tensor_ready(i)` as soon as tensor i's gradient is final (any order: a bias before its
///      weight, branches in any order), so that the reduction starts while backward goes on; returns a
///      `batch_result` (a classifier's has `correct`; any task's may carry `predictions` and `targets`);
///   3. `m.evaluate_batch(batch)`: forward and loss only.
/// Optional, forwarded when `M` has them: `fingerprint()` (appended to the adapter's own, which names every
/// tensor and shape), `step()` / `set_step(n)` (model_with_step), the sample-weighted `train_batch(b, w, ready)`
/// and `evaluate_batch(b, w)`, `threads()`, `outputs()` / `output_size()`.
///
/// What the adapter does each step: the arena's values are copied into the user's tensors before the batch (the
/// optimizer updated the arena); each gradient is copied into the gradient arena when its tensor is reported
/// final (or, for tensors never reported, when `train_batch` returns), and the final gradients are reported to
/// the synchroniser last tensor first, as a growing suffix (detail/gradient_frontier.hpp), so buckets leave in
/// DDP's reverse registration order. Nothing is allocated per step. At the end of `fit` (however it ends) the
/// final values are copied into the user's tensors (`publish_parameters`).
///
/// Adoption (no copies, DDP's `gradient_as_bucket_view`): both copies are of the model's size, a small cost beside
/// forward and backward, and a tensor type whose elements can live in memory mwstrat provides avoids them with two
/// ADL hooks (`storage_adopting_tensor`): `mwstrat_adopt_storage(t, storage)` makes `t` view `storage` (it already
/// holds `t`'s values) and `mwstrat_release_storage(t)` copies them back into `t`'s own storage and uses that again
/// (noexcept; nothing to do for a tensor that uses its own storage). When a parameter's value and grad types both have them, the adapter makes every tensor a view of
/// its arenas at construction (and checks that it really is one), copies nothing per step, and releases the
/// tensors when it is destroyed. The libtorch adapter (`mwstrat/libtorch/module_model.hpp`) does the same for
/// `torch::Tensor`.
///
/// Checkpoints, BackupAndRestore, ModelCheckpoint, `save_model`, in-memory recovery and mirroring see the arena
/// through `parameters()` and name it tensor by tensor (`named_parameters`), under the user's names.
///
/// Element types: `float` tensors. A tensor of `double` is refused at compile time: the arena, the optimizers and
/// the wire are float32, and training a double model in float32 would not be what its author asked for.
///
/// \code
///   struct my_param { std::string name; my::matrix value, grad; };
///   struct my_net {
///     std::array<my_param, 4> params;
///     std::array<my_param, 4>& parameter_tensors() { return params; }
///     mwstrat::batch_stats train_batch(const batch& b, auto&& tensor_ready);  // calls tensor_ready(3), (2), ...
///     mwstrat::batch_stats evaluate_batch(const batch& b);
///   };
///   my_net net;
///   mwstrat::tensor_model model(net);
///   mwstrat::fit(strategy, model, optimizer, train, options, progress);
/// \endcode

#include <mwstrat/error.hpp>
#include <mwstrat/tensor/concepts.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/gradient_frontier.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <ranges>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

namespace detail {
// What a tensor-sequence model's train_batch is checked with: a callback of the index of a final tensor.
struct tensor_ready_probe {
  void operator()(std::size_t) const {}
};
}  // namespace detail

/// One trainable tensor of a tensor-sequence model: `p.name` (convertible to `std::string_view`), `p.value` and
/// `p.grad`, each a `tensor_like` (the user's own type, or a reference to it).
template <class P>
concept parameter_tensor = requires(P& p) {
  { p.name } -> std::convertible_to<std::string_view>;
  requires tensor_like<std::remove_reference_t<decltype(p.value)>>;
  requires tensor_like<std::remove_reference_t<decltype(p.grad)>>;
};

/// A tensor type whose elements can live in storage mwstrat provides (the file comment's "Adoption"): after
/// `mwstrat_adopt_storage(t, s)` the elements of `t` are `s` (which holds their values already); after
/// `mwstrat_release_storage(t)` they are `t`'s own again, with the values they had.
template <class T>
concept storage_adopting_tensor = tensor_like<T> && requires(T& t, std::span<float> s) {
  mwstrat_adopt_storage(t, s);
  { mwstrat_release_storage(t) } noexcept;
};

/// A model whose parameters are a sequence of named tensors (requirement 1 of the file comment).
template <class M>
concept tensor_sequence = requires(M& m) {
  requires std::ranges::random_access_range<decltype(m.parameter_tensors())>;
  requires std::ranges::sized_range<decltype(m.parameter_tensors())>;
  requires parameter_tensor<std::remove_reference_t<std::ranges::range_reference_t<decltype(m.parameter_tensors())>>>;
};

/// A model of the user's own tensors that `tensor_model` trains on batches of type `Batch` (the file comment).
template <class M, class Batch>
concept tensor_sequence_model =
    tensor_sequence<M> && requires(M& m, const Batch& b, detail::tensor_ready_probe ready) {
      { m.train_batch(b, ready) } -> batch_result;
      { m.evaluate_batch(b) } -> batch_result;
    };

/// The adapter that makes a `tensor_sequence` model a `trainable_model` (see the file comment).
template <tensor_sequence M>
class tensor_model {
  using range_type = decltype(std::declval<M&>().parameter_tensors());
  using tensor_type = std::remove_reference_t<std::ranges::range_reference_t<range_type>>;
  using value_type = std::remove_reference_t<decltype(std::declval<tensor_type&>().value)>;
  using grad_type = std::remove_reference_t<decltype(std::declval<tensor_type&>().grad)>;
  static_assert(std::same_as<std::remove_cv_t<tensor_element_t<value_type>>, float> &&
                    std::same_as<std::remove_cv_t<tensor_element_t<grad_type>>, float>,
                "mwstrat::tensor_model: the model's parameter tensors (value and grad) must hold float elements; the "
                "arena, the optimizers and the wire are float32 (a double model would silently train in float32)");
  static_assert(!std::is_const_v<tensor_element_t<value_type>> && !std::is_const_v<tensor_element_t<grad_type>>,
                "mwstrat::tensor_model: a parameter's value and grad must be writable (the adapter copies the "
                "arena's values into them)");

 public:
  /// Whether the user's tensors live in the adapter's arenas (no copies per step; the file comment's "Adoption").
  static constexpr bool adopts = storage_adopting_tensor<value_type> && storage_adopting_tensor<grad_type>;

  /// One tensor as checkpoints see it: the user's name and shape, its values in the arena.
  struct arena_tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<const float> values;
  };

  /// Lays the model's tensors out in one arena (registration order) and copies their values in. Throws
  /// config_error naming the tensor for an empty name, a name used twice, a shape whose product is not the
  /// element count, or a gradient of another shape than its parameter — before any step.
  explicit tensor_model(M& model)
      : model_(model), tensors_(model.parameter_tensors()), frontier_(std::ranges::size(tensors_)) {
    const std::size_t n = std::ranges::size(tensors_);
    if (n == 0) refuse("the model has no parameter tensors");
    offsets_.reserve(n + 1);
    offsets_.push_back(0);
    std::set<std::string, std::less<>> names;
    fingerprint_ = "tensor_model(";
    for (std::size_t i = 0; i < n; ++i) {
      tensor_type& t = at(i);
      const std::string name(std::string_view(t.name));
      if (name.empty()) refuse("parameter tensor " + std::to_string(i) + " has no name");
      if (!names.insert(name).second) refuse("two parameter tensors are named '" + name + "'");
      const std::vector<std::size_t> extents = mwstrat::shape(std::as_const(t.value));
      const std::size_t count = mwstrat::elements(t.value).size();
      const std::size_t product =
          std::accumulate(extents.begin(), extents.end(), std::size_t{1}, std::multiplies<std::size_t>());
      if (product != count) {
        refuse("parameter '" + name + "': its shape " + shape_text(extents) + " has " + std::to_string(product) +
               " elements, the tensor " + std::to_string(count));
      }
      const std::vector<std::size_t> grad_extents = mwstrat::shape(std::as_const(t.grad));
      if (grad_extents != extents || mwstrat::elements(t.grad).size() != count) {
        refuse("parameter '" + name + "': its gradient has the shape " + shape_text(grad_extents) +
               ", the parameter " + shape_text(extents));
      }
      offsets_.push_back(offsets_.back() + count);
      if (i != 0) fingerprint_ += ',';
      fingerprint_ += name;
      fingerprint_ += shape_text(extents);
    }
    fingerprint_ += ')';
    if constexpr (requires(const M& cm) { { cm.fingerprint() } -> std::convertible_to<std::string_view>; }) {
      fingerprint_ += ' ';
      fingerprint_ += std::string_view(std::as_const(model_).fingerprint());
    }
    params_.assign(offsets_.back(), 0.0f);
    grads_.assign(offsets_.back(), 0.0f);
    named_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      tensor_type& t = at(i);
      const auto values = mwstrat::elements(t.value);
      std::copy(values.begin(), values.end(), params_.begin() + static_cast<std::ptrdiff_t>(offsets_[i]));
      const std::vector<std::size_t> extents = mwstrat::shape(std::as_const(t.value));
      named_.push_back({std::string(std::string_view(t.name)), std::vector<std::int64_t>(extents.begin(), extents.end()),
                        std::span<const float>(params_).subspan(offsets_[i], offsets_[i + 1] - offsets_[i])});
    }
    if constexpr (adopts) adopt_arenas();
  }

  /// An adopting adapter gives the tensors their own storage back, with the arena's values.
  ~tensor_model() {
    if constexpr (adopts) {
      for (std::size_t i = 0; i + 1 < offsets_.size(); ++i) {
        mwstrat_release_storage(at(i).value);
        mwstrat_release_storage(at(i).grad);
      }
    }
  }

  tensor_model(const tensor_model&) = delete;
  tensor_model& operator=(const tensor_model&) = delete;

  // ------------------------------------------------------------------------------------------ trainable_model

  /// The parameter arena: every tensor's values, in registration order.
  std::span<float> parameters() { return params_; }
  /// The gradient arena, in the same layout.
  std::span<float> gradients() { return grads_; }
  /// Every tensor's name and shape, then the model's own fingerprint when it has one.
  [[nodiscard]] const std::string& fingerprint() const { return fingerprint_; }

  /// Trains the user's model on `b`: its tensors take the arena's values, its gradients are gathered into the
  /// gradient arena and reported to `on_ready(offset, count)` last tensor first.
  template <class Batch, class OnReady>
    requires tensor_sequence_model<M, Batch>
  decltype(auto) train_batch(const Batch& b, OnReady&& on_ready) {
    begin_step();
    relay<std::remove_reference_t<OnReady>> ready{this, &on_ready};
    decltype(auto) result = model_.train_batch(b, ready);
    finish_step(on_ready);
    return result;
  }

  /// The sample-weighted step, for a model that has one.
  template <class Batch, class OnReady>
    requires requires(M& m, const Batch& b, std::span<const float> w, detail::tensor_ready_probe r) {
      { m.train_batch(b, w, r) } -> batch_result;
    }
  decltype(auto) train_batch(const Batch& b, std::span<const float> weights, OnReady&& on_ready) {
    begin_step();
    relay<std::remove_reference_t<OnReady>> ready{this, &on_ready};
    decltype(auto) result = model_.train_batch(b, weights, ready);
    finish_step(on_ready);
    return result;
  }

  /// Evaluates the user's model on `b` with the arena's values.
  template <class Batch>
    requires tensor_sequence_model<M, Batch>
  decltype(auto) evaluate_batch(const Batch& b) {
    publish_parameters();
    return model_.evaluate_batch(b);
  }

  /// The sample-weighted evaluation, for a model that has one.
  template <class Batch>
    requires requires(M& m, const Batch& b, std::span<const float> w) {
      { m.evaluate_batch(b, w) } -> batch_result;
    }
  decltype(auto) evaluate_batch(const Batch& b, std::span<const float> weights) {
    publish_parameters();
    return model_.evaluate_batch(b, weights);
  }

  // ----------------------------------------------------------------------------------------------- capabilities

  /// The tensors under the user's names, viewing the arena (checkpoints, saved models).
  [[nodiscard]] const std::vector<arena_tensor>& named_parameters() const { return named_; }

  /// The model's RNG position, where the model has one (BackupAndRestore's model_with_step group).
  [[nodiscard]] std::uint64_t step() const
    requires model_with_step<M>
  {
    return static_cast<std::uint64_t>(std::as_const(model_).step());
  }
  void set_step(std::uint64_t n)
    requires model_with_step<M>
  {
    model_.set_step(n);
  }
  /// The model's compute threads, where it says.
  [[nodiscard]] int threads() const
    requires requires(const M& m) { { m.threads() } -> std::convertible_to<int>; }
  {
    return static_cast<int>(std::as_const(model_).threads());
  }
  /// The outputs of the last forward pass, where the model exposes them.
  [[nodiscard]] std::span<const float> outputs() const
    requires requires(const M& m) { { m.outputs() } -> std::convertible_to<std::span<const float>>; }
  {
    return std::as_const(model_).outputs();
  }
  [[nodiscard]] std::size_t output_size() const
    requires requires(const M& m) { { m.output_size() } -> std::convertible_to<std::size_t>; }
  {
    return static_cast<std::size_t>(std::as_const(model_).output_size());
  }

  /// Copies the arena's values into the user's tensors. Done before every batch and at the end of `fit`; call it
  /// after changing `parameters()` by hand (a restore, say) when the user's tensors are read directly next.
  void publish_parameters() noexcept {
    if constexpr (!adopts) {  // an adopting adapter's tensors are the arena
      for (std::size_t i = 0; i < offsets_.size() - 1; ++i) {
        const auto values = mwstrat::elements(at(i).value);
        std::copy(params_.begin() + static_cast<std::ptrdiff_t>(offsets_[i]),
                  params_.begin() + static_cast<std::ptrdiff_t>(offsets_[i + 1]), values.begin());
      }
    }
  }

  /// The user's model (its tensors hold the arena's values as of the last batch or `publish_parameters`).
  M& model() { return model_; }
  /// Where tensor `i` starts in the arenas, and how many values it has.
  [[nodiscard]] std::pair<std::size_t, std::size_t> slice_of(std::size_t i) const {
    return {offsets_.at(i), offsets_.at(i + 1) - offsets_.at(i)};
  }

 private:
  // What the user's train_batch calls: tensor i's gradient is final.
  template <class OnReady>
  struct relay {
    tensor_model* self;
    OnReady* on_ready;
    void operator()(std::size_t i) const { self->tensor_final(i, *on_ready); }
  };

  void begin_step() {
    publish_parameters();
    frontier_.begin();
  }

  // Gathers tensor i's gradient and reports the tensors that have just joined the final suffix.
  template <class OnReady>
  void tensor_final(std::size_t i, OnReady& on_ready) {
    const std::size_t n = offsets_.size() - 1;
    if (i >= n) {
      refuse("train_batch reported tensor " + std::to_string(i) + " final; the model has " + std::to_string(n));
    }
    if (frontier_.is_final(i)) {
      refuse("train_batch reported parameter '" + named_[i].name + "' (tensor " + std::to_string(i) +
             ") final twice in one step");
    }
    if constexpr (!adopts) {
      const auto g = mwstrat::elements(at(i).grad);
      std::copy(g.begin(), g.end(), grads_.begin() + static_cast<std::ptrdiff_t>(offsets_[i]));
    }
    const auto [first, last] = frontier_.mark(i);
    if (first < last) on_ready(offsets_[first], offsets_[last] - offsets_[first]);
  }

  // The tensors the model did not report are final once its train_batch has returned (last first).
  template <class OnReady>
  void finish_step(OnReady& on_ready) {
    for (std::size_t i = offsets_.size() - 1; i-- > 0;) {
      if (!frontier_.is_final(i)) tensor_final(i, on_ready);
    }
  }

  // Makes every tensor a view of its slices of the arenas, and checks that the hook did so: a hook that copies
  // would train a model that never sees its updates.
  void adopt_arenas() {
    std::size_t adopted = 0;
    try {
      for (; adopted + 1 < offsets_.size(); ++adopted) {
        tensor_type& t = at(adopted);
        const std::size_t first = offsets_[adopted], count = offsets_[adopted + 1] - first;
        const std::span<float> value = std::span<float>(params_).subspan(first, count);
        const std::span<float> grad = std::span<float>(grads_).subspan(first, count);
        mwstrat_adopt_storage(t.value, value);
        mwstrat_adopt_storage(t.grad, grad);
        if (mwstrat::elements(t.value).data() != value.data() || mwstrat::elements(t.grad).data() != grad.data() ||
            mwstrat::elements(t.value).size() != count || mwstrat::elements(t.grad).size() != count) {
          refuse("parameter '" + named_[adopted].name +
                 "': mwstrat_adopt_storage did not make the tensor (value and grad) a view of the storage given");
        }
      }
    } catch (...) {
      // The tensor that failed may be half adopted; releasing one that owns its storage does nothing.
      for (std::size_t i = 0; i <= adopted && i + 1 < offsets_.size(); ++i) {
        mwstrat_release_storage(at(i).value);
        mwstrat_release_storage(at(i).grad);
      }
      throw;
    }
  }

  tensor_type& at(std::size_t i) { return std::ranges::begin(tensors_)[static_cast<std::ptrdiff_t>(i)]; }

  static std::string shape_text(const std::vector<std::size_t>& extents) {
    std::string s = "[";
    for (std::size_t i = 0; i < extents.size(); ++i) {
      if (i != 0) s += ',';
      s += std::to_string(extents[i]);
    }
    s += ']';
    return s;
  }

  [[noreturn]] static void refuse(const std::string& what) {
    std::string message = "tensor_model: ";
    message += what;
    throw config_error({"train"}, message);
  }

  M& model_;
  // The model's range, kept: a reference when parameter_tensors() returns one, else the range itself.
  std::conditional_t<std::is_lvalue_reference_v<range_type>, range_type, std::remove_cvref_t<range_type>> tensors_;
  std::vector<std::size_t> offsets_;  // tensor i is [offsets_[i], offsets_[i + 1]) of both arenas
  std::vector<float> params_, grads_;
  std::vector<arena_tensor> named_;
  std::string fingerprint_;
  detail::gradient_frontier frontier_;
};

}  // namespace mwstrat
