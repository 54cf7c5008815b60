#pragma once
// The loss step both models share: sparse softmax cross-entropy of a batch of logits, weighted per example, with
// its gradient, the per-example hits, and the batch's sums. One definition, so that nn::sequential and
// nn::graph_model round alike: the per-example terms are computed in parallel into buffers and summed in example
// order on one thread, which makes the sums the same bits for any thread count.

#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/losses.hpp>
#include <mwstrat/nn/step_stats.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace mwstrat::detail {

// `logits`: batch rows of `classes`. `dlogits` null: no gradient; else row s receives (w_s / batch) ·
// (softmax − onehot), the derivative of Keras's `sum_over_batch_size` mean. `weights` empty: every example weighs
// 1; else example s contributes weights[s] · loss_s to `loss_sum` (`correct` and `count` stay unweighted).
// `losses` and `hits` are the caller's buffers of at least `batch` elements. `label_smoothing`: the model's
// (`nn::model_options`), the targets smoothed as in nn/losses.hpp.
template <class T>
nn::step_stats weighted_loss_pass(const T* logits, T* dlogits, std::size_t classes,
                                  std::span<const std::int64_t> labels, std::span<const float> weights,
                                  std::size_t batch, T* losses, std::uint8_t* hits, T label_smoothing = T{}) {
  const std::size_t k = classes;
  const T scale = T{1} / static_cast<T>(batch);
  parallel_chunks(batch, 64, [&](std::size_t b, std::size_t e) {
    for (std::size_t s = b; s < e; ++s) {
      std::span<const T> row(logits + s * k, k);
      const T w = weights.empty() ? T{1} : static_cast<T>(weights[s]);
      losses[s] = w * nn::sparse_categorical_crossentropy<T>(
                          row, labels[s], dlogits != nullptr ? std::span<T>(dlogits + s * k, k) : std::span<T>{},
                          scale * w, label_smoothing);
      hits[s] = static_cast<std::int64_t>(nn::arg_max(row)) == labels[s] ? 1 : 0;
    }
  });
  nn::step_stats st;
  st.count = batch;
  for (std::size_t s = 0; s < batch; ++s) {
    st.loss_sum += static_cast<double>(losses[s]);
    st.correct += hits[s];
  }
  return st;
}

}  // namespace mwstrat::detail
