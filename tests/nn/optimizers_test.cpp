// Optimizer updates against values computed by hand from Keras's update rules.
#include <mwstrat/error.hpp>
#include <mwstrat/nn/optimizers.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace nn = mwstrat::nn;

TEST(NnOptimizers, PlainSgd) {
  nn::basic_sgd<double> opt(0.1);
  std::vector<double> w{1.0, -2.0}, g{0.5, -1.0};
  opt.apply(w, g);
  EXPECT_DOUBLE_EQ(w[0], 0.95);
  EXPECT_DOUBLE_EQ(w[1], -1.9);
  EXPECT_EQ(opt.iterations(), 1u);
  EXPECT_TRUE(opt.slots().empty());
  EXPECT_DOUBLE_EQ(nn::sgd().learning_rate(), 0.01);
}

TEST(NnOptimizers, SgdMomentumAndNesterov) {
  nn::basic_sgd<double> momentum(0.1, 0.9);
  nn::basic_sgd<double> nesterov(0.1, 0.9, true);
  std::vector<double> w1{1.0}, w2{1.0}, g{0.5};
  momentum.apply(w1, g);  // v = -0.05, w = 0.95
  nesterov.apply(w2, g);  // v = -0.05, w = 1 + 0.9 * -0.05 - 0.05 = 0.905
  EXPECT_DOUBLE_EQ(w1[0], 0.95);
  EXPECT_DOUBLE_EQ(w2[0], 0.905);
  momentum.apply(w1, g);  // v = 0.9 * -0.05 - 0.05 = -0.095, w = 0.855
  nesterov.apply(w2, g);  // v = -0.095, w = 0.905 + 0.9 * -0.095 - 0.05 = 0.7695
  EXPECT_NEAR(w1[0], 0.855, 1e-15);
  EXPECT_NEAR(w2[0], 0.7695, 1e-15);
  ASSERT_EQ(momentum.slots().size(), 1u);
  EXPECT_NEAR(momentum.slots()[0], -0.095, 1e-15);
}

TEST(NnOptimizers, AdamKerasDefaultsAndTwoSteps) {
  nn::basic_adam<double> opt;
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.001);
  EXPECT_DOUBLE_EQ(opt.beta_1(), 0.9);
  EXPECT_DOUBLE_EQ(opt.beta_2(), 0.999);
  EXPECT_DOUBLE_EQ(opt.epsilon(), 1e-7);
  std::vector<double> w{1.0}, g{0.5};
  opt.apply(w, g);
  // t=1: m = 0.05, v = 0.00025, alpha = 0.001 * sqrt(0.001) / 0.1
  double m = 0.05, v = 0.00025;
  double alpha = 0.001 * std::sqrt(1 - 0.999) / (1 - 0.9);
  double expected = 1.0 - alpha * m / (std::sqrt(v) + 1e-7);
  EXPECT_NEAR(w[0], expected, 1e-15);
  g = {-0.25};
  opt.apply(w, g);
  m = m + (-0.25 - m) * 0.1;
  v = v + (0.0625 - v) * 0.001;
  alpha = 0.001 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  expected -= alpha * m / (std::sqrt(v) + 1e-7);
  EXPECT_NEAR(w[0], expected, 1e-15);
  ASSERT_EQ(opt.slots().size(), 2u);
  EXPECT_NEAR(opt.slots()[0], m, 1e-15);
  EXPECT_NEAR(opt.slots()[1], v, 1e-15);
  EXPECT_EQ(opt.iterations(), 2u);
}

TEST(NnOptimizers, SlotsAndIterationsRestoreExactly) {
  std::vector<float> w(1000), g(1000);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<float>(i) * 0.001f;
    g[i] = std::sin(static_cast<float>(i));
  }
  nn::adam a(0.01);
  a.apply(w, g);
  // Save, continue, restore into a fresh optimizer, continue: identical.
  std::vector<float> slots(a.slots().begin(), a.slots().end());
  const auto iterations = a.iterations();
  auto w_saved = w;
  a.apply(w, g);
  nn::adam b(0.01);
  b.resize(w.size());
  std::copy(slots.begin(), slots.end(), b.slots().begin());
  b.set_iterations(iterations);
  b.apply(w_saved, g);
  EXPECT_EQ(w, w_saved);
  b.reset();
  EXPECT_EQ(b.iterations(), 0u);
  for (float s : b.slots()) EXPECT_EQ(s, 0.0f);
}

TEST(NnOptimizers, MismatchedSpansAreConfigErrors) {
  std::vector<float> w(3), g(2);
  nn::sgd s;
  nn::adam a;
  EXPECT_THROW(s.apply(w, g), mwstrat::config_error);
  EXPECT_THROW(a.apply(w, g), mwstrat::config_error);
  EXPECT_THROW(nn::sgd(0.1, -1.0), mwstrat::config_error);
}
