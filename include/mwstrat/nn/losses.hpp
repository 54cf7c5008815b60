#pragma once
/// \file
/// Softmax and sparse categorical cross-entropy from logits (with optional label smoothing), computed stably
/// (shifted by the row maximum).

#include <mwstrat/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mwstrat::nn {

/// Row-wise softmax (the function; `nn::softmax` is the layer) of `logits` (rows of `classes`) into `out` (same size; may alias `logits`).
template <class T>
void apply_softmax(std::span<const T> logits, std::span<T> out, std::size_t classes) {
  if (classes == 0 || logits.size() % classes != 0 || out.size() != logits.size()) {
    throw config_error({"nn"}, "apply_softmax: " + std::to_string(logits.size()) + " logits, " +
                                   std::to_string(out.size()) + " outputs, " + std::to_string(classes) +
                                   " classes");
  }
  for (std::size_t r = 0; r < logits.size(); r += classes) {
    T m = logits[r];
    for (std::size_t j = 1; j < classes; ++j) m = logits[r + j] > m ? logits[r + j] : m;
    T sum{};
    for (std::size_t j = 0; j < classes; ++j) {
      out[r + j] = std::exp(logits[r + j] - m);
      sum += out[r + j];
    }
    for (std::size_t j = 0; j < classes; ++j) out[r + j] /= sum;
  }
}

/// Sparse categorical cross-entropy of one row of logits against `label`: log(sum_j exp z_j) - z_label, stable.
/// With `label_smoothing` ε the target is (1 − ε)·onehot(label) + ε/K over the K classes, as Keras's
/// `CategoricalCrossentropy(label_smoothing=ε)` makes it: the loss is log(sum_j exp z_j) − (1 − ε)·z_label −
/// (ε/K)·Σ_j z_j. If `grad` is not empty it receives scale * (softmax(z) − target). Returns the loss.
template <class T>
T sparse_categorical_crossentropy(std::span<const T> logits, std::int64_t label, std::span<T> grad = {},
                                  T scale = T{1}, T label_smoothing = T{}) {
  const std::size_t classes = logits.size();
  if (label < 0 || static_cast<std::size_t>(label) >= classes) {
    throw data_error({"nn"}, "", "label " + std::to_string(label) + " outside [0, " + std::to_string(classes) + ")");
  }
  T m = logits[0];
  for (std::size_t j = 1; j < classes; ++j) m = logits[j] > m ? logits[j] : m;
  T sum{};
  for (std::size_t j = 0; j < classes; ++j) sum += std::exp(logits[j] - m);
  const T log_sum = std::log(sum);
  const T off = label_smoothing / static_cast<T>(classes);  // every class's share of the smoothing
  const T on = T{1} - label_smoothing + off;                 // the label's target
  if (!grad.empty()) {
    for (std::size_t j = 0; j < classes; ++j) {
      const T p = std::exp(logits[j] - m - log_sum);
      grad[j] = scale * (p - (static_cast<std::int64_t>(j) == label ? on : off));
    }
  }
  const T nll = log_sum + m - logits[static_cast<std::size_t>(label)];
  if (label_smoothing == T{}) return nll;  // the plain loss keeps its bits
  // −Σ_j target_j·log p_j with log p_j = z_j − m − log_sum, and the targets summing to 1.
  T sum_nll{};
  for (std::size_t j = 0; j < classes; ++j) sum_nll += log_sum + m - logits[j];
  return (T{1} - label_smoothing) * nll + off * sum_nll;
}

/// Refuses a label smoothing outside [0, 1] (NaN included), naming `who`.
inline void check_label_smoothing(double label_smoothing, const std::string& who) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw config_error({"nn"}, who + ": label_smoothing " + std::to_string(label_smoothing) + " outside [0, 1]");
}

/// The index of the largest logit (the first one on ties): the predicted class.
template <class T>
std::size_t arg_max(std::span<const T> row) {
  std::size_t best = 0;
  for (std::size_t j = 1; j < row.size(); ++j) best = row[j] > row[best] ? j : best;
  return best;
}

}  // namespace mwstrat::nn
