// Keras's sample_weight and class_weight in fit and evaluate: the weighted loss and gradient of the reference models
// against hand-computed references (double), class_weight ≡ the equivalent sample_weight, 2 workers × B ≡ 1 × 2B
// with weights, evaluate with weights (workers left with nothing included), refusals naming the argument; and the
// reference models' last outputs (model_with_outputs): top-k accuracy on the MNIST CNN.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/data/mnist.hpp>
#include <mwstrat/detail/splitmix64.hpp>
#include <mwstrat/nn/graph_model.hpp>
#include <mwstrat/nn/sequential.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/fit_metrics.hpp>
#include <mwstrat/train/sample_weights.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sample_weight_test {

using namespace mwstrat;

static_assert(sample_weighted_model<nn::sequential, data::image_batch>);
static_assert(sample_weighted_model<nn::graph_model, data::image_batch>);
static_assert(model_with_outputs<nn::sequential>);
static_assert(model_with_outputs<nn::graph_model>);
static_assert(!weighted_batch_source<distributed_input>);

// Near miss: weighted training without weighted evaluation is not the capability.
struct weights_in_training_only {
  std::span<float> parameters();
  std::span<float> gradients();
  std::string fingerprint() const;
  template <class OnReady>
  batch_stats train_batch(const data::image_batch&, OnReady&&);
  template <class OnReady>
  batch_stats train_batch(const data::image_batch&, std::span<const float>, OnReady&&);
  batch_stats evaluate_batch(const data::image_batch&);
};
static_assert(trainable_model<weights_in_training_only, data::image_batch>);
static_assert(!sample_weighted_model<weights_in_training_only, data::image_batch>);

// ------------------------------------------------------------------------------ the models' weighted loss, in double

struct small_batch {
  std::vector<double> x;
  std::vector<std::int64_t> y;
  std::vector<float> w;
  std::size_t n = 0;
};

small_batch make_batch(std::size_t n, std::size_t features, std::size_t classes) {
  small_batch b{std::vector<double>(n * features), std::vector<std::int64_t>(n), {0.5f, 2.0f, 0.0f, 1.5f, 3.0f}, n};
  for (std::size_t i = 0; i < b.x.size(); ++i) b.x[i] = 2.0 * mwstrat::detail::random_unit(11, 1, i) - 1.0;
  for (std::size_t i = 0; i < n; ++i) b.y[i] = static_cast<std::int64_t>(mwstrat::detail::random_bits(11, 2, i) % classes);
  return b;
}

// Checks model.train_batch(x, y, w) against two references: (1) the closed form of the last layer's bias gradient,
// sum_i w_i (softmax(z_i) - onehot(y_i)) / n, and of the loss sum, sum_i w_i (logsumexp(z_i) - z_i[y_i]), from the
// logits; (2) every gradient as sum_i w_i g_i / n, g_i the gradient of example i alone (a batch of one).
template <class Model>
void check_weighted_step(Model& model, const small_batch& b, std::size_t classes, bool bias_is_last) {
  const std::size_t features = b.x.size() / b.n;
  const auto logits_view = model.predict(b.x, b.n);
  const std::vector<double> logits(logits_view.begin(), logits_view.end());
  std::vector<double> bias_grad(classes, 0.0);
  double loss_sum = 0;
  for (std::size_t i = 0; i < b.n; ++i) {
    const double* z = logits.data() + i * classes;
    double m = z[0];
    for (std::size_t j = 1; j < classes; ++j) m = std::max(m, z[j]);
    double s = 0;
    for (std::size_t j = 0; j < classes; ++j) s += std::exp(z[j] - m);
    loss_sum += b.w[i] * (std::log(s) + m - z[b.y[i]]);
    for (std::size_t j = 0; j < classes; ++j) {
      const double p = std::exp(z[j] - m) / s;
      bias_grad[j] += b.w[i] * (p - (static_cast<std::int64_t>(j) == b.y[i] ? 1.0 : 0.0)) / static_cast<double>(b.n);
    }
  }

  std::vector<double> per_example(model.gradients().size(), 0.0);
  for (std::size_t i = 0; i < b.n; ++i) {
    const auto r = model.train_batch(std::span<const double>(b.x).subspan(i * features, features),
                                     std::span<const std::int64_t>(b.y).subspan(i, 1), 1);
    (void)r;
    const auto g = model.gradients();
    for (std::size_t p = 0; p < g.size(); ++p) per_example[p] += b.w[i] * g[p] / static_cast<double>(b.n);
  }

  const auto r = model.train_batch(std::span<const double>(b.x), std::span<const std::int64_t>(b.y),
                                   std::span<const float>(b.w), b.n, [](std::size_t, std::size_t) {});
  EXPECT_NEAR(r.loss_sum, loss_sum, 1e-12);
  EXPECT_EQ(r.count, b.n);
  const auto g = model.gradients();
  for (std::size_t p = 0; p < g.size(); ++p) EXPECT_NEAR(g[p], per_example[p], 1e-12) << "parameter " << p;
  if (bias_is_last) {
    for (std::size_t j = 0; j < classes; ++j) EXPECT_NEAR(g[g.size() - classes + j], bias_grad[j], 1e-12) << j;
  }
  // Weighted evaluation: the same loss sum, unweighted counts.
  const auto e = model.evaluate_batch(std::span<const double>(b.x), std::span<const std::int64_t>(b.y),
                                      std::span<const float>(b.w), b.n);
  EXPECT_NEAR(e.loss_sum, loss_sum, 1e-12);
  const auto u = model.evaluate_batch(std::span<const double>(b.x), std::span<const std::int64_t>(b.y), b.n);
  EXPECT_EQ(e.correct, u.correct);
  EXPECT_GT(std::abs(u.loss_sum - e.loss_sum), 1e-3);  // the weights do change the loss
}

TEST(sample_weight, sequential_weighted_loss_and_gradient_match_a_hand_computed_reference) {
  constexpr std::size_t features = 3, classes = 4, n = 5;
  nn::basic_sequential<double> model({nn::input{{features}}, nn::dense{6, nn::activation::relu}, nn::dense{classes}},
                                     {.seed = 3});
  check_weighted_step(model, make_batch(n, features, classes), classes, true);
}

TEST(sample_weight, graph_model_weighted_loss_and_gradient_match_a_hand_computed_reference) {
  constexpr std::size_t features = 3, classes = 4, n = 5;
  const auto in = nn::input_tensor({features});
  const auto h = nn::dense{6, nn::activation::relu}(in);
  const auto out = nn::dense{classes}(h);
  nn::basic_graph_model<double> model(in, out, {.seed = 3});
  check_weighted_step(model, make_batch(n, features, classes), classes, true);
}

TEST(sample_weight, the_models_refuse_weights_of_the_wrong_length_or_sign) {
  constexpr std::size_t features = 3, classes = 4, n = 5;
  nn::basic_sequential<double> model({nn::input{{features}}, nn::dense{classes}}, {.seed = 3});
  const small_batch b = make_batch(n, features, classes);
  const std::vector<float> short_w(n - 1, 1.0f);
  const auto noop = [](std::size_t, std::size_t) {};
  try {
    model.train_batch(std::span<const double>(b.x), std::span<const std::int64_t>(b.y), std::span<const float>(short_w),
                      n, noop);
    FAIL() << "4 weights for 5 examples accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("sample_weight has 4 weights for a batch of 5"), std::string::npos) << e.what();
  }
  std::vector<float> negative(n, 1.0f);
  negative[2] = -1.0f;
  try {
    model.evaluate_batch(std::span<const double>(b.x), std::span<const std::int64_t>(b.y),
                         std::span<const float>(negative), n);
    FAIL() << "a negative weight accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("sample_weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sample 2"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------------------------------ fit and evaluate on MNIST

const data::labeled_images& mnist_train() {
  static const data::labeled_images set = data::load_mnist(MWSTRAT_TEST_MNIST_DIR, data::mnist_split::train);
  return set;
}

// The first `n` MNIST training examples as one set.
data::labeled_images mnist_head(std::size_t n) {
  const auto& all = mnist_train();
  const auto px = all.pixels().first(n * all.example_size());
  const auto lb = all.labels().first(n);
  return {std::vector<std::uint8_t>(px.begin(), px.end()), std::vector<std::int64_t>(lb.begin(), lb.end()), all.rows(),
          all.cols()};
}

nn::sequential small_mlp() {
  return nn::sequential({nn::input{{28, 28}}, nn::flatten{}, nn::dense{16, nn::activation::relu}, nn::dense{10}},
                        {.seed = 21});
}

// A weight per example that depends on the example (index and label), so a wrong gather shows.
std::vector<float> example_weights(const data::labeled_images& set) {
  std::vector<float> w(set.count());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.25f + 0.5f * static_cast<float>(i % 7) + 0.1f * static_cast<float>(set.label(i));
  return w;
}

enum class weighting { none, sample, class_map };

struct run_result {
  std::vector<float> parameters;
  std::vector<double> losses;   // per epoch
  std::vector<double> accuracy; // per epoch
  std::vector<double> val_losses; // per epoch
};

const std::map<std::int64_t, float> class_weights{{0, 0.5f}, {3, 4.0f}, {7, 2.5f}, {9, 0.0f}};

// Trains the MLP on 512 MNIST examples, global batch 64, for 2 epochs of 4 steps on `workers` workers.
run_result train_mlp(int workers, weighting how) {
  run_result out;
  std::mutex m;
  const data::labeled_images set = mnist_head(512);
  spawn_ranks(workers, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    nn::sequential model = small_mlp();
    nn::sgd sgd(0.1);
    distributed_input input(set, 64, strategy, 5);
    fit_options fo;
    fo.epochs = 2;
    fo.steps_per_epoch = 4;
    fo.catch_preemption_signals = false;
    history h;
    if (how == weighting::none) {
      h = fit(strategy, model, sgd, input, fo);
    } else if (how == weighting::sample) {
      std::vector<float> w = example_weights(set);
      for (std::size_t i = 0; i < w.size(); ++i) {
        const auto it = class_weights.find(set.label(i));
        w[i] = it == class_weights.end() ? 1.0f : it->second;
      }
      auto weighted = sample_weighted_input::with_sample_weight(std::move(input), std::move(w));
      h = fit(strategy, model, sgd, weighted, fo);
    } else {
      auto weighted = sample_weighted_input::with_class_weight(std::move(input), class_weights);
      h = fit(strategy, model, sgd, weighted, fo);
    }
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      out.parameters.assign(model.parameters().begin(), model.parameters().end());
      for (const auto& e : h.epochs) {
        out.losses.push_back(e.loss);
        out.accuracy.push_back(e.accuracy);
      }
    }
  });
  return out;
}

TEST(sample_weight, class_weight_trains_exactly_as_the_equivalent_sample_weight) {
  const run_result by_class = train_mlp(1, weighting::class_map);
  const run_result by_sample = train_mlp(1, weighting::sample);
  const run_result plain = train_mlp(1, weighting::none);
  ASSERT_EQ(by_class.parameters.size(), by_sample.parameters.size());
  EXPECT_EQ(by_class.parameters, by_sample.parameters);  // bitwise: the same weights reach the same arithmetic
  EXPECT_EQ(by_class.losses, by_sample.losses);
  double differs = 0;
  for (std::size_t i = 0; i < plain.parameters.size(); ++i)
    differs = std::max(differs, static_cast<double>(std::abs(plain.parameters[i] - by_class.parameters[i])));
  EXPECT_GT(differs, 1e-4) << "class weights changed nothing";
}

// 2 workers × 32 with sample weights ≡ 1 worker × 64: the weights travel with their examples through the shuffle and
// the sharding, and the reduction divides by the global batch.
run_result train_weighted(int workers) {
  run_result out;
  std::mutex m;
  const data::labeled_images set = mnist_head(512);
  spawn_ranks(workers, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    nn::sequential model = small_mlp();
    nn::sgd sgd(0.1);
    auto weighted = sample_weighted_input::with_sample_weight(distributed_input(set, 64, strategy, 5),
                                                              example_weights(set));
    fit_options fo;
    fo.epochs = 2;
    fo.steps_per_epoch = 5;  // crosses into the second, reshuffled pass
    fo.catch_preemption_signals = false;
    // Validation data with weights too (Keras's validation_data=(x, y, sample_weight)): 100 examples in batches of
    // 64, the last one partial.
    const data::labeled_images held_out = mnist_head(100);
    auto validation = sample_weighted_input::with_sample_weight(
        distributed_input::for_evaluation(held_out, 64, strategy), example_weights(held_out));
    const history h = fit(strategy, model, sgd, weighted, validation, fo);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      out.parameters.assign(model.parameters().begin(), model.parameters().end());
      for (const auto& e : h.epochs) {
        out.losses.push_back(e.loss);
        out.val_losses.push_back(e.val_loss.value_or(-1.0));
      }
    }
  });
  return out;
}

TEST(sample_weight, two_workers_with_b_examples_equal_one_worker_with_2b) {
  const run_result one = train_weighted(1);
  const run_result two = train_weighted(2);
  ASSERT_EQ(one.parameters.size(), two.parameters.size());
  double worst = 0;
  for (std::size_t i = 0; i < one.parameters.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(one.parameters[i] - two.parameters[i])));
  EXPECT_LT(worst, 1e-5);
  ASSERT_EQ(one.losses.size(), 2u);
  ASSERT_EQ(two.losses.size(), 2u);
  ASSERT_EQ(two.val_losses.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(one.losses[e], two.losses[e], 1e-5 * std::abs(one.losses[e]));
    EXPECT_GT(one.val_losses[e], 0.0);
    EXPECT_NEAR(one.val_losses[e], two.val_losses[e], 1e-5 * std::abs(one.val_losses[e]));
  }
}

// Evaluation with weights on 3 workers over 61 examples in global batches of 30 (the last global batch of 1 leaves
// two workers nothing): loss = sum(w_i · loss_i) / 61 as one weighted batch of all 61 gives; accuracy unweighted.
TEST(sample_weight, evaluate_with_weights_is_the_weighted_sum_over_the_example_count) {
  const data::labeled_images set = mnist_head(61);
  const std::vector<float> w = example_weights(set);
  // Reference: one batch of every example, on one model.
  nn::sequential reference = small_mlp();
  std::vector<float> x(set.count() * set.example_size());
  for (std::size_t i = 0; i < set.count(); ++i)
    set.normalized(i, std::span<float>(x).subspan(i * set.example_size(), set.example_size()));
  const auto r = reference.evaluate_batch(std::span<const float>(x), set.labels(), std::span<const float>(w), set.count());
  const auto u = reference.evaluate_batch(std::span<const float>(x), set.labels(), set.count());
  const double expected_loss = r.loss_sum / static_cast<double>(set.count());
  const double expected_accuracy = static_cast<double>(u.correct) / static_cast<double>(set.count());

  std::mutex m;
  std::vector<evaluation> results;
  spawn_ranks(3, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    nn::sequential model = small_mlp();
    auto test = sample_weighted_input::with_sample_weight(distributed_input::for_evaluation(set, 30, strategy), w);
    const evaluation e = evaluate(strategy, model, test);
    const std::lock_guard lock(m);
    results.push_back(e);
  });
  ASSERT_EQ(results.size(), 3u);
  for (const auto& e : results) {
    EXPECT_NEAR(e.loss, expected_loss, 1e-5 * expected_loss);
    EXPECT_DOUBLE_EQ(e.accuracy, expected_accuracy);
    EXPECT_EQ(e.count, 61.0);
  }
  EXPECT_GT(std::abs(expected_loss - u.loss_sum / 61.0), 1e-3);  // the weights matter
}

// Bad input is refused with a message naming the argument.
TEST(sample_weight, bad_weights_are_refused_naming_the_argument) {
  const data::labeled_images set = mnist_head(64);
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    const auto input = [&] { return distributed_input(set, 32, strategy, 1); };
    const auto message = [](auto&& f) {
      try {
        f();
      } catch (const config_error& e) {
        return std::string(e.what());
      }
      return std::string("(accepted)");
    };
    const std::string wrong_length =
        message([&] { (void)sample_weighted_input::with_sample_weight(input(), std::vector<float>(63, 1.0f)); });
    EXPECT_NE(wrong_length.find("sample_weight: 63 weights for 64 examples"), std::string::npos) << wrong_length;
    std::vector<float> negative(64, 1.0f);
    negative[5] = -0.5f;
    const std::string neg = message([&] { (void)sample_weighted_input::with_sample_weight(input(), negative); });
    EXPECT_NE(neg.find("sample_weight: weight -0.5"), std::string::npos) << neg;
    EXPECT_NE(neg.find("example 5"), std::string::npos) << neg;
    std::vector<float> nan_weight(64, 1.0f);
    nan_weight[0] = std::nanf("");
    const std::string not_a_number =
        message([&] { (void)sample_weighted_input::with_sample_weight(input(), nan_weight); });
    EXPECT_NE(not_a_number.find("sample_weight"), std::string::npos) << not_a_number;
    const std::string no_class =
        message([&] { (void)sample_weighted_input::with_class_weight(input(), {{1, 2.0f}, {10, 2.0f}}); });
    EXPECT_NE(no_class.find("class_weight: class 10 does not exist"), std::string::npos) << no_class;
    const std::string negative_class =
        message([&] { (void)sample_weighted_input::with_class_weight(input(), {{-1, 2.0f}}); });
    EXPECT_NE(negative_class.find("class_weight: class -1 does not exist"), std::string::npos) << negative_class;
    const std::string negative_class_weight =
        message([&] { (void)sample_weighted_input::with_class_weight(input(), {{2, -1.0f}}); });
    EXPECT_NE(negative_class_weight.find("class_weight: weight -1"), std::string::npos) << negative_class_weight;
  });
}

// -------------------------------------------------------------------------------- the reference CNN's outputs: top-k

// The reference CNN (nn::reference_cnn) exposes its last outputs: top-1 accuracy is the accuracy, top-10 (all
// classes) is 1, and top-5 lies between. Briefly trained, so the accuracy is neither 0 nor 1.
TEST(model_outputs, top_k_accuracy_on_the_mnist_cnn) {
  const data::labeled_images set = mnist_head(192);
  std::mutex m;
  evaluation result;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    nn::sequential model = nn::reference_cnn({.seed = 4});
    nn::sgd sgd(0.05);
    distributed_input train(set, 64, strategy, 2);
    fit_options fo;
    fo.epochs = 1;
    fo.steps_per_epoch = 2;
    fo.catch_preemption_signals = false;
    (void)fit(strategy, model, sgd, train, fo);
    auto test = distributed_input::for_evaluation(set, 64, strategy);
    metrics top(sparse_categorical_accuracy{}, sparse_top_k_accuracy{1}, sparse_top_k_accuracy{5},
                sparse_top_k_accuracy{10});
    const evaluation e = evaluate(strategy, model, test, 0, top);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      result = e;
    }
  });
  ASSERT_EQ(result.metrics.size(), 4u);
  const double accuracy = result.metrics[0].value;
  EXPECT_EQ(result.metrics[1].name, "sparse_top_k_categorical_accuracy");
  EXPECT_DOUBLE_EQ(result.metrics[1].value, accuracy);
  EXPECT_DOUBLE_EQ(result.metrics[1].value, result.accuracy);
  EXPECT_GE(result.metrics[2].value, accuracy);
  EXPECT_LE(result.metrics[2].value, 1.0);
  EXPECT_DOUBLE_EQ(result.metrics[3].value, 1.0);
  EXPECT_GT(accuracy, 0.0);
  EXPECT_LT(accuracy, 1.0);
}

}  // namespace sample_weight_test
