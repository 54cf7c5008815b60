// tensor_model: a model made of separate tensors of the user's own type, trained by fit with no arena of its own —
// the frontier that turns any readiness order into last-first reports, the same training on 2 replicas × B as on
// 1 × 2B, a non-classifier (no accuracy anywhere, its metric from predictions and targets), resume through
// BackupAndRestore, and the refusals that name the tensor.
#include <mwstrat/checkpoint/manager.hpp>
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train.hpp>

#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tensor_model_test {

using namespace mwstrat;

// The user's tensor: a flat vector with a shape (tensor_like through its hooks).
struct tensor {
  std::vector<std::size_t> dims;
  std::vector<float> data;
  explicit tensor(std::vector<std::size_t> d = {}) : dims(std::move(d)) {
    std::size_t n = 1;
    for (auto e : dims) n *= e;
    data.assign(n, 0.0f);
  }
};
std::span<float> mwstrat_elements(tensor& t) { return t.data; }
std::span<const float> mwstrat_elements(const tensor& t) { return t.data; }
const std::vector<std::size_t>& mwstrat_shape(const tensor& t) { return t.dims; }

struct parameter {
  std::string name;
  tensor value, grad;
};

// The same tensor with the adoption hooks: its elements are a view, of its own vector or of storage mwstrat gives.
struct viewing_tensor {
  std::vector<std::size_t> dims;
  std::vector<float> own;
  std::span<float> view;
  explicit viewing_tensor(std::vector<std::size_t> d = {}) : dims(std::move(d)) {
    std::size_t n = 1;
    for (auto e : dims) n *= e;
    own.assign(n, 0.0f);
    view = own;
  }
  viewing_tensor(const viewing_tensor& o) : dims(o.dims), own(o.view.begin(), o.view.end()), view(own) {}
};
std::span<float> mwstrat_elements(viewing_tensor& t) { return t.view; }
std::span<const float> mwstrat_elements(const viewing_tensor& t) { return t.view; }
const std::vector<std::size_t>& mwstrat_shape(const viewing_tensor& t) { return t.dims; }
void mwstrat_adopt_storage(viewing_tensor& t, std::span<float> s) { t.view = s; }
void mwstrat_release_storage(viewing_tensor& t) noexcept {
  if (t.view.data() == t.own.data()) return;
  std::copy(t.view.begin(), t.view.end(), t.own.begin());
  t.view = t.own;
}
static_assert(storage_adopting_tensor<viewing_tensor> && !storage_adopting_tensor<tensor>);

struct viewing_parameter {
  std::string name;
  viewing_tensor value, grad;
};

// Softmax regression over separate tensors W (features × classes) and b (classes), in fixed-order arithmetic;
// reports b then W final (or never reports, or reports W first: `order`).
// `Parameter` is `parameter` (the adapter copies) or `viewing_parameter` (the adapter adopts).
enum class report_order { bias_first, weight_first, silent };
template <class Parameter>
class basic_separate_softmax {
  using tensor_type = std::remove_cvref_t<decltype(std::declval<Parameter&>().value)>;

 public:
  using order = report_order;
  basic_separate_softmax(std::size_t features, std::size_t classes, std::uint32_t seed, order o = order::bias_first)
      : f_(features), c_(classes), order_(o),
        params_{Parameter{"dense/kernel", tensor_type({features, classes}), tensor_type({features, classes})},
                Parameter{"dense/bias", tensor_type({classes}), tensor_type({classes})}},
        probs_(classes) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (auto& v : elements(params_[0].value)) v = u(rng);
  }
  std::array<Parameter, 2>& parameter_tensors() { return params_; }

  template <class Ready>
  batch_stats train_batch(const data::image_batch& b, Ready&& ready) {
    for (auto& p : params_) std::ranges::fill(elements(p.grad), 0.0f);
    const batch_stats s = forward(b, true);
    const float scale = b.size == 0 ? 0.0f : 1.0f / static_cast<float>(b.size);
    for (auto& p : params_)
      for (auto& g : elements(p.grad)) g *= scale;
    if (order_ == order::bias_first) ready(1), ready(0);
    if (order_ == order::weight_first) ready(0), ready(1);
    return s;
  }
  batch_stats evaluate_batch(const data::image_batch& b) { return forward(b, false); }

 private:
  batch_stats forward(const data::image_batch& b, bool backward) {
    batch_stats s;
    const std::span<const float> w = elements(std::as_const(params_[0].value));
    const std::span<const float> bias = elements(std::as_const(params_[1].value));
    const std::span<float> gw = elements(params_[0].grad), gb = elements(params_[1].grad);
    for (std::size_t i = 0; i < b.size; ++i) {
      const float* x = b.inputs.data() + i * f_;
      float top = -INFINITY;
      std::size_t best = 0;
      for (std::size_t k = 0; k < c_; ++k) {
        float z = bias[k];
        for (std::size_t f = 0; f < f_; ++f) z += x[f] * w[f * c_ + k];
        probs_[k] = z;
        if (z > top) best = k, top = z;
      }
      float total = 0;
      for (auto& p : probs_) total += (p = std::exp(p - top));
      const auto label = static_cast<std::size_t>(b.labels[i]);
      s.loss_sum -= std::log(static_cast<double>(probs_[label] / total));
      s.correct += best == label ? 1.0 : 0.0;
      s.count += 1;
      if (!backward) continue;
      for (std::size_t k = 0; k < c_; ++k) {
        const float d = probs_[k] / total - (k == label ? 1.0f : 0.0f);
        gb[k] += d;
        for (std::size_t f = 0; f < f_; ++f) gw[f * c_ + k] += x[f] * d;
      }
    }
    return s;
  }
  std::size_t f_, c_;
  order order_;
  std::array<Parameter, 2> params_;
  std::vector<float> probs_;
};
using separate_softmax = basic_separate_softmax<parameter>;
using adopted_softmax = basic_separate_softmax<viewing_parameter>;

static_assert(tensor_sequence_model<separate_softmax, data::image_batch>);
static_assert(trainable_model<tensor_model<separate_softmax>, data::image_batch>);
static_assert(named_parameters_model<tensor_model<separate_softmax>>);
static_assert(!trainable_model<separate_softmax, data::image_batch>, "no arena of its own");
static_assert(!tensor_model<separate_softmax>::adopts && tensor_model<adopted_softmax>::adopts);

// -------------------------------------------------------------------------------------------------------- frontier

TEST(gradient_frontier, tensors_final_in_any_order_are_reported_as_a_suffix_growing_last_first) {
  detail::gradient_frontier f(4);
  f.begin();
  EXPECT_EQ(f.mark(1), (std::pair<std::size_t, std::size_t>{4, 4}));  // 2 and 3 still missing
  EXPECT_EQ(f.mark(3), (std::pair<std::size_t, std::size_t>{3, 4}));
  EXPECT_EQ(f.mark(0), (std::pair<std::size_t, std::size_t>{3, 3}));
  EXPECT_EQ(f.mark(2), (std::pair<std::size_t, std::size_t>{0, 3}));  // 2 completes 0..2
  EXPECT_EQ(f.unreported(), 0u);
  f.begin();
  EXPECT_FALSE(f.is_final(3));
}

// The slices fit's synchroniser sees, whatever order the model reports in: contiguous, last first, all of them.
TEST(tensor_model, reports_reach_the_synchroniser_as_contiguous_slices_last_first) {
  for (const auto o : {separate_softmax::order::bias_first, separate_softmax::order::weight_first,
                       separate_softmax::order::silent}) {
    separate_softmax net(8, 4, 1, o);
    tensor_model model(net);
    const auto data = test::learnable_blobs(16);
    std::vector<float> x(16 * 8);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(data.pixels()[i]) / 255.0f;
    const data::image_batch b{x, data.labels(), 16};
    std::vector<std::pair<std::size_t, std::size_t>> seen;
    model.train_batch(b, [&](std::size_t off, std::size_t n) { seen.emplace_back(off, n); });
    if (o == separate_softmax::order::weight_first) {
      // W final first cannot be sent before b (it is not at the end): both leave together.
      EXPECT_EQ(seen, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 36}}));
    } else {
      EXPECT_EQ(seen, (std::vector<std::pair<std::size_t, std::size_t>>{{32, 4}, {0, 32}}));
    }
    // The arena holds the user's gradients.
    for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(model.gradients()[i], net.parameter_tensors()[0].grad.data[i]);
  }
}

// --------------------------------------------------------------------------------------------------- equivalence

// fit on `replicas` local replicas of a global batch of 32, `steps` steps; the final weights from the user's
// tensors (fit leaves them there).
template <class Net = separate_softmax>
std::vector<float> train_separate(int replicas, int steps) {
  const auto images = test::learnable_blobs(256);
  std::vector<float> result;
  spawn_ranks(replicas, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    Net net(8, 4, 7u + static_cast<std::uint32_t>(c.rank()));  // fit mirrors the chief's
    tensor_model model(net);
    test::plain_sgd sgd{0.5};
    distributed_input train(images, 32, strategy, 5, data::data_shard{});
    fit_options o;
    o.steps_per_epoch = static_cast<std::size_t>(steps);
    o.catch_preemption_signals = false;
    fit(strategy, model, sgd, train, o);
    if (c.rank() == 0) {
      for (const auto& p : net.parameter_tensors()) {
        const auto v = elements(p.value);
        result.insert(result.end(), v.begin(), v.end());
      }
    }
  });
  return result;
}

TEST(tensor_model, two_replicas_of_half_the_batch_train_what_one_replica_trains) {
  const std::vector<float> one = train_separate(1, 5), two = train_separate(2, 5);
  ASSERT_EQ(one.size(), two.size());
  float largest = 0;
  for (const float v : one) largest = std::max(largest, std::abs(v));
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(one[i], two[i], 1e-5f * largest) << "element " << i;
}

// ------------------------------------------------------------------------------------------------------ adoption

// Tensors that can live in mwstrat's memory: the same bits as the copying path, no copy made, and the user's own
// storage back (with the trained values) once the adapter is gone.
TEST(tensor_model, adopted_tensors_view_the_arenas_and_train_the_same_bits_as_copied_ones) {
  EXPECT_EQ(train_separate<adopted_softmax>(2, 5), train_separate<separate_softmax>(2, 5));

  adopted_softmax net(8, 4, 3);
  const std::vector<float> initial(net.parameter_tensors()[0].value.own);
  std::vector<float> trained;
  {
    tensor_model model(net);
    auto& w = net.parameter_tensors()[0];
    EXPECT_EQ(w.value.view.data(), model.parameters().data());
    EXPECT_EQ(w.grad.view.data(), model.gradients().data());
    EXPECT_EQ(net.parameter_tensors()[1].value.view.data(), model.parameters().data() + 32);
    EXPECT_EQ(std::vector<float>(model.parameters().begin(), model.parameters().begin() + 32), initial);
    const auto data = test::learnable_blobs(16);
    std::vector<float> x(16 * 8);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(data.pixels()[i]) / 255.0f;
    model.train_batch(data::image_batch{x, data.labels(), 16}, [](std::size_t, std::size_t) {});
    for (std::size_t i = 0; i < 32; ++i) model.parameters()[i] -= model.gradients()[i];  // an optimizer's update
    trained.assign(model.parameters().begin(), model.parameters().begin() + 32);
    EXPECT_NE(trained, initial);
  }
  const auto& w = net.parameter_tensors()[0];
  EXPECT_EQ(w.value.view.data(), w.value.own.data()) << "released to its own storage";
  EXPECT_EQ(w.value.own, trained);
}

// A hook that does not really alias would train a model that never sees its updates: refused, naming the tensor.
struct pretending_tensor : viewing_tensor {
  using viewing_tensor::viewing_tensor;
};
std::span<float> mwstrat_elements(pretending_tensor& t) { return t.view; }
std::span<const float> mwstrat_elements(const pretending_tensor& t) { return t.view; }
const std::vector<std::size_t>& mwstrat_shape(const pretending_tensor& t) { return t.dims; }
void mwstrat_adopt_storage(pretending_tensor&, std::span<float>) {}
void mwstrat_release_storage(pretending_tensor&) noexcept {}
struct pretending_model {
  struct param {
    std::string name;
    pretending_tensor value, grad;
  };
  std::array<param, 1> params{param{"only/kernel", pretending_tensor({2}), pretending_tensor({2})}};
  std::array<param, 1>& parameter_tensors() { return params; }
};

TEST(tensor_model, an_adoption_hook_that_does_not_alias_is_refused_naming_the_tensor) {
  pretending_model m;
  try {
    tensor_model model(m);
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'only/kernel': mwstrat_adopt_storage did not make the tensor"),
              std::string::npos)
        << e.what();
  }
}

// ------------------------------------------------------------------------------------------------ non-classifier

// Linear regression y = w·x + b with a squared-error loss: no `correct`, predictions and targets in its results.
struct regression_result {
  double loss_sum = 0;
  double count = 0;
  std::span<const float> predictions, targets;
};
static_assert(batch_result<regression_result> && !classification_result<regression_result>);
static_assert(result_with_targets<regression_result>);

class linear_regression {
 public:
  linear_regression() : params_{parameter{"w", tensor({8}), tensor({8})}, parameter{"b", tensor({1}), tensor({1})}} {}
  std::array<parameter, 2>& parameter_tensors() { return params_; }

  template <class Ready>
  regression_result train_batch(const data::image_batch& b, Ready&& ready) {
    auto r = forward(b);
    auto& gw = params_[0].grad.data;
    auto& gb = params_[1].grad.data;
    std::fill(gw.begin(), gw.end(), 0.0f);
    gb[0] = 0;
    for (std::size_t i = 0; i < b.size; ++i) {
      const float d = 2.0f * (pred_[i] - target_[i]) / static_cast<float>(b.size);
      gb[0] += d;
      for (std::size_t f = 0; f < 8; ++f) gw[f] += d * b.inputs[i * 8 + f];
    }
    ready(1);
    ready(0);
    return r;
  }
  regression_result evaluate_batch(const data::image_batch& b) { return forward(b); }

 private:
  // The target of an example: a fixed linear function of its pixels.
  regression_result forward(const data::image_batch& b) {
    pred_.assign(b.size, 0.0f);
    target_.assign(b.size, 0.0f);
    regression_result r;
    for (std::size_t i = 0; i < b.size; ++i) {
      float p = params_[1].value.data[0], t = 0.25f;
      for (std::size_t f = 0; f < 8; ++f) {
        p += params_[0].value.data[f] * b.inputs[i * 8 + f];
        t += (f % 2 == 0 ? 0.5f : -0.3f) * b.inputs[i * 8 + f];
      }
      pred_[i] = p;
      target_[i] = t;
      r.loss_sum += static_cast<double>((p - t) * (p - t));
    }
    r.count = static_cast<double>(b.size);
    r.predictions = pred_;
    r.targets = target_;
    return r;
  }
  std::array<parameter, 2> params_;
  std::vector<float> pred_, target_;
};

TEST(tensor_model, a_regression_reports_its_loss_and_metrics_and_no_accuracy) {
  const auto images = test::learnable_blobs(512);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    linear_regression net;
    tensor_model model(net);
    test::plain_sgd sgd{0.3};
    distributed_input train(images, 64, strategy, 5, data::data_shard{});
    auto validation = distributed_input::for_evaluation(images, 128, strategy);
    std::ostringstream lines;
    progress_options po;
    po.out = &lines;
    po.live = false;
    progress_logger progress(po);
    metrics m(mean_squared_error{}, mean_absolute_error{});
    fit_options o;
    o.epochs = 4;
    o.catch_preemption_signals = false;
    const history h = fit(strategy, model, sgd, train, validation, o, m, progress);
    ASSERT_EQ(h.epochs.size(), 4u);
    for (const auto& e : h.epochs) {
      EXPECT_FALSE(e.has_accuracy);
      EXPECT_FALSE(e.val_accuracy.has_value());
      EXPECT_FALSE(logged_value(e, "accuracy").has_value());
      ASSERT_TRUE(logged_value(e, "mean_squared_error").has_value());
      // The loss is the squared error summed per example, over one output: the metric is the same number.
      EXPECT_NEAR(*logged_value(e, "mean_squared_error"), e.loss, 1e-6 * e.loss);
      ASSERT_TRUE(logged_value(e, "val_mean_absolute_error").has_value());
    }
    EXPECT_LT(*logged_value(h.epochs.back(), "mean_squared_error"),
              0.2 * *logged_value(h.epochs.front(), "mean_squared_error"));
    if (c.rank() == 0) {
      const std::string text = lines.str();
      EXPECT_EQ(text.find("accuracy"), std::string::npos) << text;
      EXPECT_NE(text.find(" - mean_squared_error: "), std::string::npos) << text;
      EXPECT_NE(text.find(" - val_mean_absolute_error: "), std::string::npos) << text;
    }
    const evaluation e = evaluate(strategy, model, validation, 0, m);
    EXPECT_FALSE(e.has_accuracy);
    EXPECT_TRUE(std::isnan(e.accuracy));
  });
}

// ---------------------------------------------------------------------------------------------------- resume

TEST(tensor_model, backup_and_restore_resumes_the_user_tensors_exactly_under_their_names) {
  test::temp_dir dir;
  const auto images = test::learnable_blobs(256);
  const auto run = [&](int epochs, bool backup) {
    std::vector<float> out;
    spawn_ranks(2, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      separate_softmax net(8, 4, 11);
      tensor_model model(net);
      test::momentum_sgd sgd(36);
      distributed_input train(images, 32, strategy, 5, data::data_shard{});
      backup_options bo;
      bo.backup_dir = (dir.path() / "backup").string();
      bo.delete_checkpoint = false;
      backup_and_restore restore(bo);
      fit_options o;
      o.epochs = epochs;
      o.catch_preemption_signals = false;
      if (backup) fit(strategy, model, sgd, train, o, restore);
      else fit(strategy, model, sgd, train, o);
      if (c.rank() == 0) {
        for (const auto& p : net.parameter_tensors()) out.insert(out.end(), p.value.data.begin(), p.value.data.end());
        if (backup) {
          ASSERT_NE(restore.backup_checkpointer(), nullptr);
          const auto latest = restore.backup_checkpointer()->latest();
          ASSERT_TRUE(latest.has_value());
          const training_state s = load_training_state(*latest);
          ASSERT_EQ(s.weights.size(), 2u);
          EXPECT_EQ(s.weights[0].name, "dense/kernel");
          EXPECT_EQ(s.weights[0].shape, (std::vector<std::int64_t>{8, 4}));
          EXPECT_EQ(s.weights[1].name, "dense/bias");
        }
      }
    });
    return out;
  };
  const std::vector<float> straight = run(3, false);
  run(1, true);                                // one epoch, backed up
  const std::vector<float> resumed = run(3, true);  // resumes at epoch 1 from the backup
  EXPECT_EQ(straight, resumed) << "the resumed run must be bit-identical";
}

// ------------------------------------------------------------------------------------------------------ refusals

struct two_params {
  std::array<parameter, 2> params;
  std::array<parameter, 2>& parameter_tensors() { return params; }
  template <class Ready>
  batch_stats train_batch(const data::image_batch&, Ready&& ready) {
    ready(1);
    ready(1);  // twice
    return {};
  }
  batch_stats evaluate_batch(const data::image_batch&) { return {}; }
};

void expect_refused(two_params& m, const std::string& words) {
  try {
    tensor_model model(m);
    FAIL() << "accepted; expected a refusal with '" << words << "'";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(tensor_model, misuses_are_refused_before_any_step_naming_the_tensor) {
  two_params shape{{parameter{"conv/kernel", tensor({3, 4}), tensor({4, 3})}, parameter{"b", tensor({1}), tensor({1})}}};
  expect_refused(shape, "parameter 'conv/kernel': its gradient has the shape [4,3], the parameter [3,4]");
  two_params same{{parameter{"w", tensor({2}), tensor({2})}, parameter{"w", tensor({1}), tensor({1})}}};
  expect_refused(same, "two parameter tensors are named 'w'");
  two_params unnamed{{parameter{"w", tensor({2}), tensor({2})}, parameter{"", tensor({1}), tensor({1})}}};
  expect_refused(unnamed, "parameter tensor 1 has no name");
  two_params bad_shape{{parameter{"w", tensor({2}), tensor({2})}, parameter{"b", tensor({1}), tensor({1})}}};
  bad_shape.params[0].value.dims = {3};
  bad_shape.params[0].grad.dims = {3};
  expect_refused(bad_shape, "parameter 'w': its shape [3] has 3 elements, the tensor 2");

  two_params twice{{parameter{"w", tensor({2}), tensor({2})}, parameter{"b", tensor({1}), tensor({1})}}};
  tensor_model model(twice);
  std::vector<float> x(8);
  std::vector<std::int64_t> y(1);
  try {
    model.train_batch(data::image_batch{x, y, 1}, [](std::size_t, std::size_t) {});
    FAIL() << "a tensor reported twice was accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("reported parameter 'b' (tensor 1) final twice in one step"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace tensor_model_test
