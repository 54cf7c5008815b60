#pragma once
// A test double for the trainer: multinomial logistic regression on the test's own types (no nn/), with its
// parameters in one arena [W (features × classes), b (classes)] and per-layer gradient readiness (b, then W). It can
// work in storage the trainer provides (`storage_adopting_model`), as a user's model may.
// Arithmetic is done in a fixed order so results are reproducible bit for bit.

#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/train/concepts.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::test {

/// `count` images of 2×4 bytes whose class shows in the pixels (learnable by a softmax_regression(8, 4)), labels
/// 0..3, from one file or from the files of `file_counts`.
inline data::labeled_images learnable_blobs(std::size_t count, std::uint32_t seed = 3,
                                            std::vector<std::size_t> file_counts = {}) {
  constexpr std::size_t features = 8, classes = 4;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(0, 90);
  std::vector<std::uint8_t> pixels(count * features);
  std::vector<std::int64_t> labels(count);
  for (std::size_t i = 0; i < count; ++i) {
    labels[i] = static_cast<std::int64_t>(i % classes);
    for (std::size_t f = 0; f < features; ++f) {
      pixels[i * features + f] = static_cast<std::uint8_t>(noise(rng) + (f % classes == i % classes ? 160 : 0));
    }
  }
  return {std::move(pixels), std::move(labels), data::image_shape{2, 4, 1}, std::move(file_counts)};
}

class softmax_regression {
 public:
  softmax_regression(std::size_t features, std::size_t classes, std::uint32_t seed)
      : features_(features), classes_(classes), params_(features * classes + classes), grads_(params_.size()),
        probs_(classes) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (std::size_t i = 0; i < features * classes; ++i) params_[i] = u(rng);
  }

  std::span<float> parameters() { return adopted_ ? ext_params_ : std::span<float>(params_); }
  std::span<float> gradients() { return adopted_ ? ext_grads_ : std::span<float>(grads_); }
  void adopt_storage(std::span<float> params, std::span<float> grads) {
    ext_params_ = params;
    ext_grads_ = grads;
    adopted_ = true;
  }
  void use_own_storage() {
    if (!adopted_) return;
    std::copy(ext_params_.begin(), ext_params_.end(), params_.begin());
    std::copy(ext_grads_.begin(), ext_grads_.end(), grads_.begin());
    adopted_ = false;
  }
  bool adopted() const { return adopted_; }
  std::string fingerprint() const {
    return "softmax_regression(" + std::to_string(features_) + "x" + std::to_string(classes_) + ")";
  }

  template <class OnReady>
  batch_stats train_batch(std::span<const float> x, std::span<const std::int64_t> y, std::size_t n,
                          OnReady&& on_ready) {
    const auto grads = gradients();
    std::fill(grads.begin(), grads.end(), 0.0f);
    batch_stats stats = forward(x, y, n, true);
    const float scale = n == 0 ? 0.0f : 1.0f / static_cast<float>(n);
    for (auto& g : grads) g *= scale;
    const std::size_t w = features_ * classes_;
    on_ready(w, classes_);  // the bias is "the last layer"
    on_ready(std::size_t{0}, w);
    return stats;
  }

  batch_stats evaluate_batch(std::span<const float> x, std::span<const std::int64_t> y, std::size_t n) {
    return forward(x, y, n, false);
  }

  // The forms fit uses (trainable_model): the data family's image batch.
  template <class OnReady>
  batch_stats train_batch(const data::image_batch& b, OnReady&& on_ready) {
    return train_batch(b.inputs, b.labels, b.size, std::forward<OnReady>(on_ready));
  }
  batch_stats evaluate_batch(const data::image_batch& b) { return evaluate_batch(b.inputs, b.labels, b.size); }

 private:
  batch_stats forward(std::span<const float> x, std::span<const std::int64_t> y, std::size_t n, bool backward) {
    batch_stats stats;
    const std::size_t w = features_ * classes_;
    const auto params = parameters();
    const auto grads = gradients();
    for (std::size_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * features_;
      float top = -INFINITY;
      std::size_t best = 0;  // the arg-max of the logits (taken before they are exponentiated in place)
      for (std::size_t k = 0; k < classes_; ++k) {
        float z = params[w + k];
        for (std::size_t f = 0; f < features_; ++f) z += xi[f] * params[f * classes_ + k];
        probs_[k] = z;
        if (z > top) best = k;
        top = std::max(top, z);
      }
      float total = 0;
      for (std::size_t k = 0; k < classes_; ++k) {
        probs_[k] = std::exp(probs_[k] - top);
        total += probs_[k];
      }
      const auto label = static_cast<std::size_t>(y[i]);
      stats.loss_sum += -std::log(static_cast<double>(probs_[label] / total));
      stats.correct += best == label ? 1.0 : 0.0;
      stats.count += 1.0;
      if (!backward) continue;
      for (std::size_t k = 0; k < classes_; ++k) {
        const float d = probs_[k] / total - (k == label ? 1.0f : 0.0f);
        grads[w + k] += d;
        for (std::size_t f = 0; f < features_; ++f) grads[f * classes_ + k] += xi[f] * d;
      }
    }
    return stats;
  }

  std::size_t features_, classes_;
  std::vector<float> params_, grads_, probs_;
  bool adopted_ = false;
  std::span<float> ext_params_, ext_grads_;
};

/// Plain SGD on the test's side (the trainer needs only `apply`).
struct plain_sgd {
  double rate = 0.1;
  double learning_rate() const { return rate; }
  void set_learning_rate(double r) { rate = r; }
  void apply(std::span<float> p, std::span<const float> g) const {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= static_cast<float>(rate) * g[i];
  }
};

/// Gaussian blobs, one per class: `count` examples, a seeded global order reshuffled every epoch, and this
/// worker's contiguous share of each global batch — the semantics of the data family, reimplemented small.
class blob_batches {
 public:
  blob_batches(std::size_t count, std::size_t features, std::size_t classes, std::size_t global_batch, int workers,
               int worker, std::uint32_t seed)
      : features_(features), global_batch_(global_batch), per_worker_(global_batch / static_cast<std::size_t>(workers)),
        worker_(static_cast<std::size_t>(worker)), seed_(seed), x_(count * features), y_(count), order_(count),
        xb_(per_worker_ * features), yb_(per_worker_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (std::size_t i = 0; i < count; ++i) {
      y_[i] = static_cast<std::int64_t>(i % classes);
      for (std::size_t f = 0; f < features; ++f) {
        x_[i * features + f] = noise(rng) + (f % classes == i % classes ? 2.0f : 0.0f);
      }
    }
  }

  std::size_t steps_per_epoch() const { return y_.size() / global_batch_; }

  data::image_batch batch_at(std::size_t epoch, std::size_t step) {
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::mt19937_64 rng(seed_ * 1000003u + epoch);
    std::shuffle(order_.begin(), order_.end(), rng);
    const std::size_t first = step * global_batch_ + worker_ * per_worker_;
    for (std::size_t j = 0; j < per_worker_; ++j) {
      const std::size_t e = order_[first + j];
      std::copy_n(x_.begin() + static_cast<std::ptrdiff_t>(e * features_), features_,
                  xb_.begin() + static_cast<std::ptrdiff_t>(j * features_));
      yb_[j] = y_[e];
    }
    return {xb_, yb_, per_worker_};
  }

 private:
  std::size_t features_, global_batch_, per_worker_, worker_;
  std::uint32_t seed_;
  std::vector<float> x_;
  std::vector<std::int64_t> y_;
  std::vector<std::size_t> order_;
  std::vector<float> xb_;
  std::vector<std::int64_t> yb_;
};

}  // namespace mwstrat::test

namespace mwstrat::test {

/// SGD with momentum and a step count: an optimizer with slots, for exact-resume tests.
struct momentum_sgd {
  float rate = 0.1f;
  float momentum = 0.9f;
  std::vector<float> velocity;
  std::int64_t steps = 0;

  explicit momentum_sgd(std::size_t n) : velocity(n) {}
  std::span<float> state() { return velocity; }
  std::int64_t iterations() const { return steps; }
  void set_iterations(std::int64_t n) { steps = n; }
  float learning_rate() const { return rate; }
  void set_learning_rate(float r) { rate = r; }
  void apply(std::span<float> p, std::span<const float> g) {
    ++steps;
    const float decay = 1.0f / (1.0f + 0.01f * static_cast<float>(steps));  // makes the step count matter
    for (std::size_t i = 0; i < p.size(); ++i) {
      velocity[i] = momentum * velocity[i] - rate * decay * g[i];
      p[i] += velocity[i];
    }
  }
};

}  // namespace mwstrat::test
