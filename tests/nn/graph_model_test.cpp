// The graph model (Keras's functional API) and the layers it brings: finite-difference checks in double of every
// new layer (batch norm in training mode, the residual add, padding, pooling, the option-A shortcut, L2
// regularisers), batch norm's inference vs training behaviour, Keras's summary, the ResNet builders' parameter
// counts, and shape errors that name the layer.
#include <mwstrat/nn.hpp>
#include <mwstrat/strategy/local_mirrored_strategy.hpp>
#include <mwstrat/train.hpp>

#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace nn = mwstrat::nn;

namespace {

struct batch_data {
  std::vector<double> x;
  std::vector<std::int64_t> y;
  std::size_t n;
};

template <class Model>
batch_data make_batch(const Model& model, std::size_t n, std::uint64_t seed) {
  batch_data b{std::vector<double>(n * model.input_size()), std::vector<std::int64_t>(n), n};
  for (std::size_t i = 0; i < b.x.size(); ++i) b.x[i] = 2.0 * mwstrat::detail::random_unit(seed, 1, i) - 1.0;
  for (std::size_t i = 0; i < n; ++i)
    b.y[i] = static_cast<std::int64_t>(mwstrat::detail::random_bits(seed, 2, i) % model.output_size());
  return b;
}

// Largest relative error of d(mean training loss, regularisers included)/d(parameter) against central differences.
template <class Model>
double max_relative_error(Model& model, const batch_data& b) {
  auto p = model.parameters();
  for (std::size_t i = 0; i < p.size(); ++i) p[i] += 0.1 * (mwstrat::detail::random_unit(99, 3, i) - 0.5);
  const std::uint64_t step = model.step();
  model.train_batch(b.x, b.y, b.n);
  model.set_step(step);
  const std::vector<double> analytic(model.gradients().begin(), model.gradients().end());
  const double h = 1e-5;
  double worst = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double up = model.training_loss(b.x, b.y, b.n).loss_sum / static_cast<double>(b.n);
    p[i] = saved - h;
    const double down = model.training_loss(b.x, b.y, b.n).loss_sum / static_cast<double>(b.n);
    p[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double scale = std::max({std::abs(numeric), std::abs(analytic[i]), 1e-4});
    worst = std::max(worst, std::abs(numeric - analytic[i]) / scale);
  }
  std::printf("max relative error %.3g over %zu parameters\n", worst, p.size());
  return worst;
}

// A small residual network with every new layer: padding, a strided biased conv with L2, batch norm, ReLU as a
// layer, a projection and an identity shortcut merged by Add, global average pooling, Dense softmax with L2.
nn::basic_graph_model<double> small_resnet(bool sync, bool option_a) {
  auto bn = [&](const nn::symbolic_tensor& t) {
    return sync ? nn::sync_batch_normalization{0.9, 1e-3}(t) : nn::batch_normalization{0.9, 1e-3}(t);
  };
  auto relu = [](const nn::symbolic_tensor& t) { return nn::activation_layer{nn::activation::relu}(t); };
  const auto in = nn::input_tensor({5, 5, 2});
  auto x = nn::zero_padding2d{{1, 0}, {0, 1}}(in);
  x = relu(bn(nn::conv2d{3, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::valid, true,
                         nn::initializer::he_normal, 0.01, 0.02}(x)));
  auto y = relu(bn(nn::conv2d{4, {3, 3}, nn::activation::linear, {2, 2}, nn::padding::same, !option_a}(x)));
  y = bn(nn::conv2d{4, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same, false}(y));
  const auto shortcut = option_a ? nn::pad_channels_shortcut{2, 4}(x)
                                 : bn(nn::conv2d{4, {1, 1}, nn::activation::linear, {2, 2}}(x));
  x = relu(nn::add{}({y, shortcut}));
  auto z = bn(nn::conv2d{4, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same}(x));
  x = relu(nn::add{}({z, x}));  // identity shortcut: x feeds two layers
  x = nn::global_average_pooling2d{}(x);
  const auto out = nn::dense{3, nn::activation::softmax, nn::initializer::glorot_uniform, 0.03, 0.01}(x);
  return nn::basic_graph_model<double>(in, out, {.seed = 5});
}

}  // namespace

TEST(NnGraphGradientCheck, ResidualBlockWithBatchNormInTrainingMode) {
  auto model = small_resnet(false, false);
  EXPECT_LT(max_relative_error(model, make_batch(model, 6, 21)), 1e-6);
}

TEST(NnGraphGradientCheck, SyncBatchNormAloneEqualsBatchNorm) {
  auto model = small_resnet(true, false);
  EXPECT_LT(max_relative_error(model, make_batch(model, 6, 22)), 1e-6);
  auto plain = small_resnet(false, false);
  const auto b = make_batch(model, 6, 23);
  std::copy(model.parameters().begin(), model.parameters().end(), plain.parameters().begin());
  EXPECT_EQ(model.training_loss(b.x, b.y, b.n).loss_sum, plain.training_loss(b.x, b.y, b.n).loss_sum);
}

TEST(NnGraphGradientCheck, OptionAShortcutWithoutBiases) {
  auto model = small_resnet(false, true);
  EXPECT_LT(max_relative_error(model, make_batch(model, 5, 24)), 1e-6);
}

TEST(NnGraphGradientCheck, BatchNormGradientThroughTheInput) {
  // Batch norm directly on a dense output (no conv before it): dx of batch norm feeds the parameters below.
  const auto in = nn::input_tensor({4});
  auto x = nn::dense{5}(in);
  x = nn::batch_normalization{0.5, 1e-2}(x);
  x = nn::activation_layer{nn::activation::relu}(x);
  x = nn::dense{3}(x);
  nn::basic_graph_model<double> model(in, x, {.seed = 7});
  EXPECT_LT(max_relative_error(model, make_batch(model, 7, 25)), 1e-6);
}

TEST(NnGraphModel, SyncBatchNormSumsAcrossReplicas) {
  // Two replicas (threads of a MirroredStrategy) of 3 samples each, their batch statistics summed through the
  // strategy: the mean of their gradients is the gradient of one replica on all 6 samples; plain batch norm's is not.
  for (const bool sync : {true, false}) {
    auto whole = small_resnet(sync, false);
    const auto b = make_batch(whole, 6, 31);
    whole.train_batch(b.x, b.y, b.n);
    const std::vector<double> expected(whole.gradients().begin(), whole.gradients().end());
    std::vector<double> mean(expected.size());
    mwstrat::run_mirrored_replicas(2, [&](mwstrat::local_mirrored_strategy& strategy) {
      auto model = small_resnet(sync, false);
      model.set_cross_replica_sum([&strategy](std::span<double> v) { strategy.sum_metrics(v); });
      const std::size_t r = static_cast<std::size_t>(strategy.replica_id());
      const std::size_t per = 3 * model.input_size();
      const std::vector<double> x(b.x.begin() + static_cast<std::ptrdiff_t>(r * per),
                                  b.x.begin() + static_cast<std::ptrdiff_t>((r + 1) * per));
      const std::vector<std::int64_t> y(b.y.begin() + static_cast<std::ptrdiff_t>(3 * r),
                                        b.y.begin() + static_cast<std::ptrdiff_t>(3 * r + 3));
      model.train_batch(x, y, 3);
      std::vector<double> g(model.gradients().begin(), model.gradients().end());
      strategy.sum_metrics(g);
      if (r == 0)
        for (std::size_t i = 0; i < g.size(); ++i) mean[i] = g[i] / 2;
    });
    double worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, std::abs(mean[i] - expected[i]) / std::max(1e-3, std::abs(expected[i])));
    if (sync) {
      EXPECT_LT(worst, 1e-12);
    } else {
      EXPECT_GT(worst, 1e-3);  // per-replica statistics: a different function
    }
  }
}

TEST(NnGraphModel, BatchNormInferenceUsesMovingStatistics) {
  const auto in = nn::input_tensor({2, 2, 3});
  const auto out = nn::flatten{}(nn::batch_normalization{0.75, 1e-3}(in));
  nn::basic_graph_model<double> model(in, nn::dense{2}(out), {.seed = 3});
  const auto b = make_batch(model, 4, 41);
  // Fresh: moving mean 0, variance 1, so inference is x / sqrt(1 + eps) through the dense layer.
  auto st = model.model_state();
  ASSERT_EQ(st.size(), 6u);
  EXPECT_EQ(st[0], 0.0);
  EXPECT_EQ(st[3], 1.0);
  const auto before = model.predict(b.x, 4);
  const std::vector<double> inference(before.begin(), before.end());
  const auto train = model.predict(b.x, 4, true);
  const std::vector<double> training(train.begin(), train.end());
  EXPECT_NE(inference, training);
  // predict(training) does not move the statistics; a training step does, by (1 - momentum) of the batch's.
  EXPECT_EQ(st[0], 0.0);
  model.train_batch(b.x, b.y, 4);
  for (std::size_t c = 0; c < 3; ++c) {
    double mean = 0, sq = 0;
    for (std::size_t s = 0; s < 4; ++s)
      for (std::size_t p = 0; p < 4; ++p) mean += b.x[s * 12 + p * 3 + c] / 16;
    for (std::size_t s = 0; s < 4; ++s)
      for (std::size_t p = 0; p < 4; ++p) sq += std::pow(b.x[s * 12 + p * 3 + c] - mean, 2) / 16;
    EXPECT_NEAR(st[c], 0.25 * mean, 1e-12);
    EXPECT_NEAR(st[3 + c], 0.75 + 0.25 * sq, 1e-12);
  }
  // With the moving statistics set to the batch's, inference equals training mode.
  for (int i = 0; i < 200; ++i) model.train_batch(b.x, b.y, 4);
  const auto after = model.predict(b.x, 4);
  const std::vector<double> inference_after(after.begin(), after.end());
  const auto train_after = model.predict(b.x, 4, true);
  for (std::size_t i = 0; i < inference_after.size(); ++i) EXPECT_NEAR(inference_after[i], train_after[i], 1e-3);
}

TEST(NnGraphModel, ResNet56ParameterCountsAsKeras) {
  // Counted by hand from TF's resnet_cifar_model (n = 9): stem 448 + 64, stage 1 43 248, stage 2 164 832,
  // stage 3 653 248, fc 650; batch norm over 2 144 channels holds 4 288 moving statistics.
  const auto model = nn::resnet_cifar(56);
  EXPECT_EQ(model.parameter_count() + model.model_state().size(), 862490u);
  EXPECT_EQ(model.parameter_count(), 858202u);
  EXPECT_EQ(model.model_state().size(), 4288u);
  EXPECT_EQ(model.layers().size(), 1u + 1 + 1 + 1 + 3 * (9 * 7) + 3 * 2 + 2);
  // He et al.'s ResNet-20 (option A): 0.27 M parameters in their table.
  // He et al.'s ResNet-20 (option A, no biases): convolutions 432 + 13 824 + 4 608 + 46 080 + 18 432 + 184 320,
  // fc 650, gamma and beta of 688 channels: 269 722 (their table: 0.27 M).
  nn::resnet_options he_options;
  he_options.variant = nn::resnet_variant::he;
  const auto he = nn::resnet_cifar(20, he_options);
  EXPECT_EQ(he.parameter_count(), 269722u);
  EXPECT_THROW(nn::resnet_cifar(21), mwstrat::config_error);
}

TEST(NnGraphModel, SummaryIsKerasTable) {
  const auto in = nn::input_tensor({8, 8, 3});
  auto x = nn::conv2d{4, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same}(in);
  x = nn::batch_normalization{}(x);
  auto y = nn::activation_layer{}(x);
  auto z = nn::add{}({x, y});
  auto out = nn::dense{10, nn::activation::softmax}(nn::global_average_pooling2d{}(z));
  const nn::graph_model model(in, out);
  std::ostringstream s;
  model.summary(s);
  const std::string rule(98, '_'), thick(98, '=');
  const std::string expected =
      "Model: \"model\"\n" + rule + "\n" +
      " Layer (type)                   Output Shape         Param #     Connected to\n" + thick + "\n" +
      " input_1 (InputLayer)           [(None, 8, 8, 3)]    0           []\n"
      "\n"
      " conv2d (Conv2D)                (None, 8, 8, 4)      112         ['input_1[0][0]']\n"
      "\n"
      " batch_normalization (BatchNorm (None, 8, 8, 4)      16          ['conv2d[0][0]']\n"
      "\n"
      " activation (Activation)        (None, 8, 8, 4)      0           ['batch_normalization[0][0]']\n"
      "\n"
      " add (Add)                      (None, 8, 8, 4)      0           ['batch_normalization[0][0]', 'activation[0][0]']\n"
      "\n"
      " global_average_pooling2d (Glob (None, 4)            0           ['add[0][0]']\n"
      "\n"
      " dense (Dense)                  (None, 10)           50          ['global_average_pooling2d[0][0]']\n" +
      thick + "\nTotal params: 178\nTrainable params: 170\nNon-trainable params: 8\n" + rule + "\n";
  EXPECT_EQ(s.str(), expected);
  EXPECT_EQ(model.named_parameters().front().name, "conv2d/kernel");
  EXPECT_EQ(model.named_parameters().back().name, "batch_normalization/moving_variance");
}

TEST(NnGraphModel, ShapeErrorsNameTheLayer) {
  const auto in = nn::input_tensor({8, 8, 3});
  const auto a = nn::conv2d{4, {3, 3}}(in);  // conv2d: (6, 6, 4)
  const auto b = nn::conv2d{4, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same}(in);  // conv2d_1
  try {
    (void)nn::add{}({a, b});
    FAIL() << "no error";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("layer add applied to (6, 6, 4), (8, 8, 4)"), std::string::npos) << e.what();
  }
  const auto flat = nn::global_average_pooling2d{}(a);
  try {
    (void)nn::conv2d{4, {3, 3}}(flat);
    FAIL() << "no error";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("layer conv2d_2 applied to (4,)"), std::string::npos) << e.what();
  }
  try {
    (void)nn::conv2d{4, {9, 9}}(in);
    FAIL() << "no error";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("layer conv2d_2 applied to (8, 8, 3): conv2d: window 9x9 larger"),
              std::string::npos) << e.what();
  }
}

// What fit, the checkpoints and the saved-model path ask of a model.
static_assert(mwstrat::trainable_model<nn::graph_model, mwstrat::data::image_batch>);
static_assert(mwstrat::stateful_model<nn::graph_model> && !mwstrat::stateful_model<nn::sequential>);
static_assert(mwstrat::cross_replica_model<nn::graph_model> && !mwstrat::cross_replica_model<nn::sequential>);
static_assert(mwstrat::named_parameters_model<nn::graph_model> && mwstrat::keras_layout_model<nn::graph_model>);
static_assert(mwstrat::model_with_step<nn::graph_model>);

TEST(NnGraphModel, SavedModelKeepsTheMovingStatisticsInKerasNames) {
  mwstrat::test::temp_dir dir("mwstrat-graph");
  nn::resnet_options options;
  options.batch_norm_momentum = 0.5;
  auto model = nn::resnet_cifar(8, options);
  std::vector<float> x(4 * model.input_size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(mwstrat::detail::random_unit(5, 0, i));
  const std::vector<std::int64_t> y{1, 2, 3, 4};
  model.train_batch(x, y, 4);  // moves the statistics away from 0 and 1
  struct none {} no_optimizer;
  mwstrat::save_model(dir.path() / "m.safetensors", model, no_optimizer, {false, 0});
  const auto s = mwstrat::load_training_state(dir.path() / "m.safetensors");
  ASSERT_FALSE(s.weights.empty());
  EXPECT_EQ(s.weights.front().name, "conv2d/kernel");
  EXPECT_EQ(s.weights.front().shape, (std::vector<std::int64_t>{3, 3, 3, 16}));
  bool found = false;
  for (const auto& t : s.weights) found = found || t.name == "batch_normalization/moving_variance";
  EXPECT_TRUE(found);
  auto fresh = nn::resnet_cifar(8, options);
  ASSERT_NE(std::vector<float>(fresh.model_state().begin(), fresh.model_state().end()),
            std::vector<float>(model.model_state().begin(), model.model_state().end()));
  mwstrat::load_model(dir.path() / "m.safetensors", fresh, no_optimizer);
  EXPECT_EQ(std::vector<float>(fresh.model_state().begin(), fresh.model_state().end()),
            std::vector<float>(model.model_state().begin(), model.model_state().end()));
  EXPECT_EQ(std::vector<float>(fresh.parameters().begin(), fresh.parameters().end()),
            std::vector<float>(model.parameters().begin(), model.parameters().end()));
}
