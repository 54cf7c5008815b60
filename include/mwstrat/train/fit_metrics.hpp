#pragma once
/// \file
/// Metrics as a concept: what `fit` and `evaluate` report besides the loss, each reduced across workers by its own
/// rule, shown by name in the history, the callbacks' logs and the progress line. (Not nn/metrics.hpp: those are the
/// nn family's streaming metric objects, kept on one worker.)
///
/// `metric_for<M, Batch>` — a metric over batches of type `Batch`:
///   1. `m.name()`: its name in the logs (`sparse_top_k_categorical_accuracy`); validation prefixes `val_`;
///   2. `M::state_size`: how many doubles its state has. Like Keras's metric variables under a distribution
///      strategy, the state holds *sums* (totals, counts): each worker adds its examples, and one all-reduce sums
///      the workers' states — in the same reduction as the loss, so metrics cost no extra message;
///   3. `m.update_state(state, in)`: adds one batch of this worker to `state` (a `metric_input`: the batch, the
///      model's loss sum / correct / count for it, and its outputs when the model exposes them);
///   4. `m.result(state)`: its value from the state summed over workers and steps — its own rule (a ratio, a mean,
///      anything the sums determine).
/// A metric that needs the model's outputs (top-k accuracy) needs a model with `outputs()` (`model_with_outputs`:
/// the last forward pass's outputs, rows × classes); without it, `update_state` throws a config_error naming it.
///
/// Metrics reach `fit` and `evaluate` as one `metrics<Ms...>` object among the callbacks:
/// \code
///   mwstrat::metrics m(mwstrat::sparse_categorical_accuracy{}, mwstrat::sparse_top_k_accuracy{3});
///   auto h = mwstrat::fit(strategy, model, optimizer, train, validation, options, m, progress);
///   // h.epochs[0].metrics: {"sparse_categorical_accuracy", ...}, {"sparse_top_k_categorical_accuracy", ...},
///   //                      {"val_sparse_categorical_accuracy", ...}, ...
/// \endcode

#include <mwstrat/error.hpp>
#include <mwstrat/train/logs.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// What a metric sees of one batch on one worker.
template <class Batch>
struct metric_input {
  const Batch& batch;                  ///< the batch as the dataset yields it
  double loss_sum = 0;                 ///< the model's sum of per-example losses for it
  double correct = 0;                  ///< examples the model classified right
  double count = 0;                    ///< examples
  std::span<const float> outputs = {}; ///< the model's outputs or predictions (count × classes), when it gives them
  std::size_t classes = 0;             ///< outputs per example (0 when there are no outputs)
  std::span<const float> targets = {}; ///< what the outputs should have been (same size), when the result has them
};

/// A metric over batches of type `Batch` (requirements in the file comment).
template <class M, class Batch>
concept metric_for = requires(M& m, const M& cm, std::span<double> state, std::span<const double> reduced,
                              const metric_input<Batch>& in) {
  { cm.name() } -> std::convertible_to<std::string_view>;
  { M::state_size } -> std::convertible_to<std::size_t>;
  m.update_state(state, in);
  { cm.result(reduced) } -> std::convertible_to<double>;
};

/// Capability: `m.outputs()`, the outputs of the model's last forward pass (rows × `m.output_size()`), as floats.
template <class M>
concept model_with_outputs = requires(const M& m) {
  { m.outputs() } -> std::convertible_to<std::span<const float>>;
  { m.output_size() } -> std::convertible_to<std::size_t>;
};

// ---------------------------------------------------------------------------------------------- built-in metrics

/// The mean of the loss over examples (`keras.metrics.Mean` of the loss): state [loss sum, examples].
struct mean_loss {
  static constexpr std::size_t state_size = 2;
  std::string label = "mean_loss";
  [[nodiscard]] std::string_view name() const { return label; }
  template <class B>
  void update_state(std::span<double> s, const metric_input<B>& in) const {
    s[0] += in.loss_sum;
    s[1] += in.count;
  }
  [[nodiscard]] double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};

/// Keras's `SparseCategoricalAccuracy` from the model's own count of right answers: state [correct, examples].
struct sparse_categorical_accuracy {
  static constexpr std::size_t state_size = 2;
  [[nodiscard]] std::string_view name() const { return "sparse_categorical_accuracy"; }
  template <class B>
  void update_state(std::span<double> s, const metric_input<B>& in) const {
    s[0] += in.correct;
    s[1] += in.count;
  }
  [[nodiscard]] double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};

/// Keras's `SparseTopKCategoricalAccuracy`: the label is among the k highest outputs (a tie with the k-th counts
/// as in, as Keras's `in_top_k` does). State [hits, examples]. Needs `model_with_outputs` and a batch with
/// `labels`.
struct sparse_top_k_accuracy {
  static constexpr std::size_t state_size = 2;
  std::size_t k = 5;
  [[nodiscard]] std::string_view name() const { return "sparse_top_k_categorical_accuracy"; }
  template <class B>
  void update_state(std::span<double> s, const metric_input<B>& in) const {
    const auto n = static_cast<std::size_t>(in.count);
    if (n == 0) return;
    if constexpr (requires { in.batch.labels[0]; }) {
      if (in.classes == 0 || in.outputs.size() < n * in.classes) {
        throw config_error({"train.metrics"}, "sparse_top_k_categorical_accuracy needs the model's outputs: a model "
                                              "with outputs() and output_size() (model_with_outputs)");
      }
      for (std::size_t i = 0; i < n; ++i) {
        const auto row = in.outputs.subspan(i * in.classes, in.classes);
        const auto label = static_cast<std::size_t>(in.batch.labels[i]);
        if (label >= in.classes) continue;
        const float target = row[label];
        std::size_t above = 0;  // outputs strictly greater than the label's
        bool finite = true;     // a NaN or infinite output makes the row a miss, as Keras's in_top_k
        for (const float v : row) {
          above += v > target ? 1 : 0;
          finite = finite && std::isfinite(v);
        }
        s[0] += finite && above < k ? 1.0 : 0.0;
      }
      s[1] += static_cast<double>(n);
    } else {
      throw config_error({"train.metrics"}, "sparse_top_k_categorical_accuracy needs a batch with labels");
    }
  }
  [[nodiscard]] double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};

namespace detail {
// The predictions and targets of `in`, checked to be there and of one size; `metric` names the metric in the error.
template <class B>
void check_targets(const metric_input<B>& in, std::string_view metric) {
  if (in.count > 0 && (in.targets.empty() || in.targets.size() != in.outputs.size())) {
    throw config_error({"train.metrics"},
                       std::string(metric) + " needs the model's predictions and targets of one size (a batch result "
                                             "with `predictions` and `targets`: result_with_targets); got " +
                           std::to_string(in.outputs.size()) + " predictions and " +
                           std::to_string(in.targets.size()) + " targets");
  }
}
}  // namespace detail

/// Keras's `MeanSquaredError` metric: the mean of (prediction - target)² over every output of every example. State
/// [sum of squared errors, outputs]. Needs results with `predictions` and `targets` (`result_with_targets`).
struct mean_squared_error {
  static constexpr std::size_t state_size = 2;
  [[nodiscard]] std::string_view name() const { return "mean_squared_error"; }
  template <class B>
  void update_state(std::span<double> s, const metric_input<B>& in) const {
    detail::check_targets(in, name());
    for (std::size_t i = 0; i < in.targets.size(); ++i) {
      const double d = static_cast<double>(in.outputs[i]) - static_cast<double>(in.targets[i]);
      s[0] += d * d;
    }
    s[1] += static_cast<double>(in.targets.size());
  }
  [[nodiscard]] double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};

/// Keras's `MeanAbsoluteError` metric: the mean of |prediction - target|. State [sum of absolute errors, outputs].
struct mean_absolute_error {
  static constexpr std::size_t state_size = 2;
  [[nodiscard]] std::string_view name() const { return "mean_absolute_error"; }
  template <class B>
  void update_state(std::span<double> s, const metric_input<B>& in) const {
    detail::check_targets(in, name());
    for (std::size_t i = 0; i < in.targets.size(); ++i) {
      s[0] += std::abs(static_cast<double>(in.outputs[i]) - static_cast<double>(in.targets[i]));
    }
    s[1] += static_cast<double>(in.targets.size());
  }
  [[nodiscard]] double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};

// ----------------------------------------------------------------------------------------------------- metric sets

/// The metrics of a `fit` or `evaluate` call (see the file comment). Holds nothing but the metrics: `fit` keeps
/// their states.
template <class... Ms>
class metrics {
 public:
  explicit metrics(Ms... ms) : ms_(std::move(ms)...) {}

  /// The doubles all the metrics' states take together.
  static constexpr std::size_t state_size = (std::size_t{0} + ... + Ms::state_size);

  /// Adds one batch of this worker to `state` (state_size doubles).
  template <class Batch>
  void update_state(std::span<double> state, const metric_input<Batch>& in) {
    static_assert((metric_for<Ms, Batch> && ...), "mwstrat: every metric must be a metric_for the dataset's batch");
    std::size_t at = 0;
    std::apply([&](auto&... m) { ((m.update_state(state.subspan(at, m.state_size), in), at += m.state_size), ...); },
               ms_);
  }

  /// Each metric's result from `state` (summed over workers and steps), as `prefix` + name.
  void results(std::span<const double> state, std::vector<named_value>& out, std::string_view prefix = {}) const {
    std::size_t at = 0;
    std::apply(
        [&](const auto&... m) {
          ((out.push_back({std::string(prefix) + std::string(m.name()), m.result(state.subspan(at, m.state_size))}),
            at += m.state_size),
           ...);
        },
        ms_);
  }

 private:
  std::tuple<Ms...> ms_;
};

namespace detail {
template <class T>
struct is_metrics : std::false_type {};
template <class... Ms>
struct is_metrics<metrics<Ms...>> : std::true_type {};
}  // namespace detail

/// `T` is a `metrics<...>` set (what `fit` and `evaluate` take among their callbacks).
template <class T>
concept metric_set = detail::is_metrics<std::remove_cvref_t<T>>::value;

namespace detail {

// The metric sets among `fit`'s callbacks, as one: their total state size, and update/results over all of them.
template <class... Cs>
constexpr std::size_t metric_state_size() {
  return (std::size_t{0} + ... + [] {
    if constexpr (metric_set<Cs>) return std::remove_cvref_t<Cs>::state_size;
    else return std::size_t{0};
  }());
}

template <class Batch, class... Cs>
void update_metric_sets(std::span<double> state, const metric_input<Batch>& in, Cs&... cs) {
  std::size_t at = 0;
  ([&] {
    if constexpr (metric_set<Cs>) {
      constexpr std::size_t n = std::remove_cvref_t<Cs>::state_size;
      cs.update_state(state.subspan(at, n), in);
      at += n;
    }
  }(), ...);
}

template <class... Cs>
void metric_set_results(std::span<const double> state, std::vector<named_value>& out, std::string_view prefix,
                        const Cs&... cs) {
  std::size_t at = 0;
  ([&] {
    if constexpr (metric_set<Cs>) {
      constexpr std::size_t n = std::remove_cvref_t<Cs>::state_size;
      cs.results(state.subspan(at, n), out, prefix);
      at += n;
    }
  }(), ...);
}

// The outputs of the model's last forward pass, when it exposes them.
template <class Model>
std::pair<std::span<const float>, std::size_t> model_outputs(const Model& m) {
  if constexpr (model_with_outputs<Model>) {
    return {std::span<const float>(m.outputs()), static_cast<std::size_t>(m.output_size())};
  } else {
    return {{}, 0};
  }
}

}  // namespace detail
}  // namespace mwstrat
