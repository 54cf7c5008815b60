// Finite-difference checks, in double precision, of every layer's backward pass and of the loss: the analytic
// gradient from train_batch against central differences of the mean training loss.
#include <mwstrat/nn.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace nn = mwstrat::nn;

namespace gradient_check_test {

struct batch_data {
  std::vector<double> x;
  std::vector<std::int64_t> y;
  std::size_t n;
};

batch_data make_batch(const nn::basic_sequential<double>& model, std::size_t n, std::uint64_t seed) {
  batch_data b{std::vector<double>(n * model.input_size()), std::vector<std::int64_t>(n), n};
  for (std::size_t i = 0; i < b.x.size(); ++i) b.x[i] = 2.0 * mwstrat::detail::random_unit(seed, 1, i) - 1.0;
  for (std::size_t i = 0; i < n; ++i)
    b.y[i] = static_cast<std::int64_t>(mwstrat::detail::random_bits(seed, 2, i) % model.output_size());
  return b;
}

// Largest relative error over all parameters; biases start at zero in Keras, so they are perturbed first to keep
// ReLUs and pooling away from ties.
double max_relative_error(nn::basic_sequential<double>& model, const batch_data& b) {
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
  ::testing::Test::RecordProperty("max_relative_error", std::to_string(worst));
  std::printf("max relative error %.3g over %zu parameters\n", worst, p.size());
  return worst;
}


TEST(NnGradientCheck, DenseReluAndDenseOnTheLastAxis) {
  nn::basic_sequential<double> model({nn::input{{3, 4}}, nn::dense{5, nn::activation::relu}, nn::flatten{},
                                      nn::dense{6}, nn::relu{}, nn::dense{3}},
                                     {.seed = 1});
  EXPECT_LT(max_relative_error(model, make_batch(model, 5, 11)), 1e-6);
}

// L2 regularizers on kernels and biases: the loss the model reports holds λ·Σw² (as Keras's and the graph model's),
// so its derivative is the gradient the backward pass gives (which holds 2λw).
TEST(NnGradientCheck, L2RegularizersAreInTheLossAsInTheGradient) {
  nn::basic_sequential<double> model(
      {nn::input{{3, 3, 2}},
       nn::conv2d{.filters = 2, .kernel_size = {2, 2}, .kernel_regularizer = 0.05, .bias_regularizer = 0.02},
       nn::flatten{}, nn::dense{3, nn::activation::linear, nn::initializer::glorot_uniform, 0.3, 0.1}},
      {.seed = 4});
  EXPECT_LT(max_relative_error(model, make_batch(model, 4, 12)), 1e-6);
}

TEST(NnGradientCheck, ConvSameStridedMaxPoolDropout) {
  nn::basic_sequential<double> model(
      {nn::input{{6, 5, 2}}, nn::conv2d{3, {3, 2}, nn::activation::relu, {1, 1}, nn::padding::same},
       nn::max_pool2d{{2, 2}}, nn::conv2d{4, {2, 2}, nn::activation::linear, {2, 1}, nn::padding::valid}, nn::flatten{},
       nn::dropout{0.3}, nn::dense{4}},
      {.seed = 2});
  EXPECT_LT(max_relative_error(model, make_batch(model, 3, 12)), 1e-6);
}

TEST(NnGradientCheck, ConvWithChannelsOverlappingPoolAndSoftmaxLayer) {
  nn::basic_sequential<double> model(
      {nn::input{{7, 7}}, nn::reshape{{7, 7, 1}}, nn::conv2d{2, {3, 3}, nn::activation::linear, {2, 2}},
       nn::conv2d{3, {2, 2}, nn::activation::relu, {1, 1}, nn::padding::same},
       nn::max_pool2d{{2, 2}, {1, 1}, nn::padding::same}, nn::flatten{}, nn::dense{5}, nn::softmax{}, nn::dense{3}},
      {.seed = 3});
  EXPECT_LT(max_relative_error(model, make_batch(model, 4, 13)), 1e-6);
}

TEST(NnGradientCheck, ReferenceArchitectureInMiniature) {
  // The reference CNN's layer sequence on a 9x9 input: conv2d(relu) -> flatten -> dense(relu) -> dense.
  nn::basic_sequential<double> model({nn::input{{9, 9}}, nn::reshape{{9, 9, 1}}, nn::conv2d{4, {3, 3}, nn::activation::relu},
                                      nn::flatten{}, nn::dense{17, nn::activation::relu}, nn::dense{10}},
                                     {.seed = 4});
  EXPECT_LT(max_relative_error(model, make_batch(model, 6, 14)), 1e-6);
}

}  // namespace gradient_check_test
