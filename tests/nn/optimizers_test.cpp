// Optimizer updates against values computed by hand from Keras's update rules.
#include <mwstrat/error.hpp>
#include <mwstrat/nn/optimizers.hpp>

#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/train/concepts.hpp>

#include <gtest/gtest.h>

#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

namespace nn = mwstrat::nn;

namespace optimizers_test {

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

// What fit, BackupAndRestore, the schedules and the sharded update ask of every optimizer.
template <class O>
constexpr bool trainable_optimizer =
    mwstrat::optimizer_for<O> && mwstrat::checkpointable_optimizer<O> && mwstrat::resizable_optimizer<O> &&
    mwstrat::has_learning_rate<O> && mwstrat::check_resume_hooks<O, O>();
static_assert(trainable_optimizer<nn::sgd> && trainable_optimizer<nn::adam> && trainable_optimizer<nn::adamw> &&
              trainable_optimizer<nn::rmsprop> && trainable_optimizer<nn::adagrad>);
static_assert(mwstrat::part_update_optimizer<nn::sgd>);

TEST(NnOptimizers, OptionsThatContradictAreRefusedByName) {
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const mwstrat::config_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { nn::sgd({.clipnorm = 1, .global_clipnorm = 1}); }).find("clipnorm or global_clipnorm"),
            std::string::npos);
  EXPECT_NE(message([] { nn::adam({.clipnorm = 1, .clipvalue = 1}); }).find("adam: "), std::string::npos);
  EXPECT_NE(message([] { nn::rmsprop({.weight_decay = -1}); }).find("rmsprop: weight_decay"), std::string::npos);
  EXPECT_NE(message([] { nn::rmsprop({.rho = 1.5}); }).find("rho"), std::string::npos);
  EXPECT_NE(message([] { nn::adagrad({.initial_accumulator_value = -1}); }).find("initial_accumulator_value"),
            std::string::npos);
  EXPECT_NE(message([] { nn::piecewise_constant_decay({1, 2}, {0.1}); }).find("2 boundaries need 3 values"),
            std::string::npos);
  EXPECT_NE(message([] { nn::piecewise_constant_decay({2, 1}, {1, 2, 3}); }).find("increase"), std::string::npos);
  EXPECT_NE(message([] { nn::cosine_decay(0.1, 0); }).find("decay_steps"), std::string::npos);
}

// Keras's CosineDecay warms up only when a warm-up target is given: warmup_steps alone change nothing, and a target
// without warm-up steps is where the decay starts.
TEST(NnOptimizers, CosineDecayWarmsUpOnlyTowardsAGivenTarget) {
  const nn::cosine_decay no_target(0.1, 1000, 0.0, std::nullopt, 100);
  const nn::cosine_decay plain(0.1, 1000);
  for (const std::int64_t step : {0, 50, 100, 500, 1200}) EXPECT_EQ(no_target(step), plain(step)) << step;
  EXPECT_NEAR(no_target(50), 0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 0.05)), 1e-15);
  const nn::cosine_decay from_target(0.1, 10, 0.0, 0.3);
  EXPECT_DOUBLE_EQ(from_target(0), 0.3);
  EXPECT_DOUBLE_EQ(from_target(5), 0.15);
  const nn::cosine_decay warm(0.0, 10, 0.0, 0.3, 4);
  EXPECT_DOUBLE_EQ(warm(2), 0.15);
  EXPECT_DOUBLE_EQ(warm(4), 0.3);
}

TEST(NnOptimizers, AScheduledRateFollowsTheStepAndCannotBeSet) {
  nn::sgd opt({.learning_rate = nn::piecewise_constant_decay({1}, {0.5, 0.25})});
  std::vector<float> w{1.0f}, g{1.0f};
  EXPECT_TRUE(opt.scheduled());
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.5);
  opt.apply(w, g);  // step 0: 0.5
  opt.apply(w, g);  // step 1: 0.5 (boundary inclusive, as Keras)
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.25);
  EXPECT_FLOAT_EQ(w[0], 0.0f);
  opt.set_iterations(0);  // a restored step count restores the rate
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.5);
  EXPECT_THROW(opt.set_learning_rate(0.1), mwstrat::config_error);
  nn::sgd constant(0.1);
  constant.set_learning_rate(0.2);
  EXPECT_DOUBLE_EQ(constant.learning_rate(), 0.2);
}

TEST(NnOptimizers, LinearWarmupAndPerEpochSchedules) {
  const nn::linear_warmup warm(nn::piecewise_constant_decay({30, 45}, {0.1, 0.01, 0.001}), 4, 0.02);
  EXPECT_DOUBLE_EQ(warm(0), 0.02);
  EXPECT_DOUBLE_EQ(warm(2), 0.06);
  EXPECT_DOUBLE_EQ(warm(4), 0.1);
  EXPECT_DOUBLE_EQ(warm(31), 0.01);  // the boundaries are not shifted by the warm-up
  const auto by_epoch = nn::per_epoch(nn::piecewise_constant_decay({29, 44}, {0.1, 0.01, 0.001}));
  EXPECT_DOUBLE_EQ(by_epoch(0, 123.0), 0.1);
  EXPECT_DOUBLE_EQ(by_epoch(30, 0.1), 0.01);   // the tutorial: 0.01 from epoch 30
  EXPECT_DOUBLE_EQ(by_epoch(45, 0.01), 0.001); // and 0.001 from epoch 45
}

TEST(NnOptimizers, SlotsAreSizedPerOptionAndAdagradStartsAtItsInitialValue) {
  nn::rmsprop plain, full({.momentum = 0.9, .centered = true});
  plain.resize(10);
  full.resize(10);
  EXPECT_EQ(plain.slots().size(), 10u);
  EXPECT_EQ(full.slots().size(), 30u);
  nn::adagrad ada({.initial_accumulator_value = 0.25});
  ada.resize(4);
  for (float a : ada.slots()) EXPECT_EQ(a, 0.25f);
  std::vector<float> w(4, 1.0f), g(4, 0.5f);
  ada.apply(w, g);
  ada.reset();
  for (float a : ada.slots()) EXPECT_EQ(a, 0.25f);
  EXPECT_EQ(ada.iterations(), 0u);
}

TEST(NnOptimizers, NormClippingIsGlobalAndTheSameBitsForAnyThreadCount) {
  // Several chunks of the fixed partition; the norm is summed per chunk, then over chunks in order.
  const std::size_t n = 200000;
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = std::sin(static_cast<float>(i) * 0.37f);
  auto run = [&](int threads) {
    std::vector<float> w(n, 1.0f);
    nn::sgd opt({.learning_rate = 1.0, .clipnorm = 2.0});
    tbb::task_arena(threads).execute([&] { opt.apply(w, g); });
    return w;
  };
  const auto one = run(1), two = run(2);
  EXPECT_EQ(one, two);
  double norm = 0;
  for (std::size_t i = 0; i < n; ++i) norm += (1.0 - one[i]) * (1.0 - one[i]);
  EXPECT_NEAR(std::sqrt(norm), 2.0, 1e-4);  // the whole update has the clip norm
  // Norm clipping needs the whole gradient: such an SGD does not offer the sharded update.
  EXPECT_FALSE(nn::sgd({.clipnorm = 1.0}).elementwise_stateless());
  EXPECT_TRUE(nn::sgd({.weight_decay = 0.1, .clipvalue = 1.0}).elementwise_stateless());
}

TEST(NnOptimizers, ApplyPartMatchesApplyWithDecayAndValueClipping) {
  std::vector<float> w(1000), g(1000);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = std::cos(static_cast<float>(i));
    g[i] = 2.0f * std::sin(static_cast<float>(i));
  }
  auto whole = w, parts = w;
  nn::sgd a({.learning_rate = 0.1, .weight_decay = 0.01, .clipvalue = 0.5});
  nn::sgd b({.learning_rate = 0.1, .weight_decay = 0.01, .clipvalue = 0.5});
  a.apply(whole, g);
  const std::span<float> p(parts);
  const std::span<const float> gs(g);
  b.apply_part(p.first(300), gs.first(300));
  b.apply_part(p.subspan(300), gs.subspan(300));
  b.count_step();
  EXPECT_EQ(whole, parts);
  EXPECT_EQ(a.iterations(), b.iterations());
  EXPECT_THROW(nn::sgd({.momentum = 0.9}).apply_part(p, gs), mwstrat::config_error);
}

// apply_range updates one range of the arena, its slots included, with the whole update's bits: ranges of odd
// sizes and starts (vectors start anywhere), in an order that is not the arena's, over several steps (slots carried
// over), for every optimizer, with weight decay and clipping by value where the optimizer takes them. The whole
// update runs on 2 threads.
template <class Optimizer>
void expect_ranges_give_the_whole_update(const std::string& what, const Optimizer& prototype) {
  constexpr std::size_t n = 70001;  // more than two of the whole update's parallel chunks
  std::vector<float> w(n), g(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = std::cos(static_cast<float>(i));
  auto whole = w, ranged = w;
  Optimizer a = prototype, b = prototype;
  const std::vector<std::size_t> cuts{0, 1, 18, 4093, 4100, 33000, 65536, 65550, n};  // ranges between these
  const std::vector<std::size_t> order{5, 0, 7, 2, 6, 1, 3, 4};
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < n; ++i)
      g[i] = 2.0f * std::sin(static_cast<float>(i * 3 + static_cast<std::size_t>(step)));
    tbb::task_arena(2).execute([&] { a.apply(whole, g); });
    for (const std::size_t k : order) b.apply_range(ranged, g, cuts[k], cuts[k + 1] - cuts[k]);
    b.count_step();
    ASSERT_EQ(whole, ranged) << what << ": step " << step;
    ASSERT_EQ(a.slots().size(), b.slots().size()) << what;
    ASSERT_TRUE(a.slots().empty() ||  // (memcmp must not see plain SGD's null slots)
                std::memcmp(a.slots().data(), b.slots().data(), a.slots().size() * sizeof(float)) == 0)
        << what << ": the slots differ after step " << step;
  }
  EXPECT_EQ(a.iterations(), b.iterations()) << what;
  EXPECT_NE(whole, w) << what << ": nothing was updated";
  EXPECT_TRUE(b.elementwise()) << what;
}

TEST(NnOptimizers, ApplyRangeGivesTheWholeUpdatesBitsSlotsIncluded) {
  expect_ranges_give_the_whole_update("sgd", nn::sgd({.learning_rate = 0.1, .weight_decay = 0.01, .clipvalue = 1.5}));
  expect_ranges_give_the_whole_update("sgd momentum", nn::sgd({.learning_rate = 0.1, .momentum = 0.9}));
  expect_ranges_give_the_whole_update(
      "sgd nesterov", nn::sgd({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-3}));
  expect_ranges_give_the_whole_update("adam", nn::adam({.learning_rate = 0.01, .clipvalue = 1.5}));
  expect_ranges_give_the_whole_update("adamw", nn::adamw(0.01, 0.05));
  expect_ranges_give_the_whole_update(
      "rmsprop", nn::rmsprop({.learning_rate = 0.01, .momentum = 0.5, .centered = true, .weight_decay = 1e-3}));
  expect_ranges_give_the_whole_update("adagrad", nn::adagrad({.learning_rate = 0.05, .clipvalue = 1.5}));
}

// A range needs an elementwise update (no global norm: it would be the range's) and must lie in the arena; both
// refusals name the optimizer and change nothing.
TEST(NnOptimizers, ApplyRangeRefusesNormClippingAndRangesOutsideTheArena) {
  std::vector<float> w(10, 1.0f), g(10, 0.5f);
  nn::adam clipped({.learning_rate = 0.1, .clipnorm = 1.0});
  EXPECT_FALSE(clipped.elementwise());
  try {
    clipped.apply_range(w, g, 0, 5);
    ADD_FAILURE() << "a norm-clipping range was accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("adam: apply_range cannot clip by the global norm"), std::string::npos)
        << e.what();
  }
  nn::rmsprop opt;
  try {
    opt.apply_range(w, g, 8, 3);
    ADD_FAILURE() << "a range past the arena's end was accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("rmsprop: apply_range [8, 11) lies outside the 10 parameters"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(w, std::vector<float>(10, 1.0f));
  EXPECT_EQ(opt.iterations(), 0U);
  // After a refusal the optimizer updates its whole arena again.
  opt.apply(w, g);
  EXPECT_NE(w[9], 1.0f);
  EXPECT_EQ(opt.iterations(), 1U);
}

// The rules with a square root run a whole vector at a time (nn/detail/elementwise.hpp) and the arena's tail one
// element at a time. Each element of a 1031-element arena must get the bits it gets alone in an arena of one
// (which is all tail), with clipping by value and weight decay on.
template <class Make>
void expect_vector_and_tail_agree(const char* name, Make make) {
  constexpr std::size_t n = 1031;  // not a multiple of any vector width
  std::vector<float> w(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = std::sin(0.37f * static_cast<float>(i)) * 0.5f;
    g[i] = std::cos(0.11f * static_cast<float>(i)) * (i % 5 == 0 ? 3.0f : 0.2f);  // some beyond the clip value
  }
  auto whole_w = w;
  auto whole = make();
  for (int step = 0; step < 3; ++step) whole.apply(whole_w, g);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<float> one_w{w[i]};
    const std::vector<float> one_g{g[i]};
    auto alone = make();
    for (int step = 0; step < 3; ++step) alone.apply(one_w, one_g);
    ASSERT_EQ(std::memcmp(&one_w[0], &whole_w[i], sizeof(float)), 0)
        << name << ": element " << i << " is " << whole_w[i] << " in the arena, " << one_w[0] << " alone";
  }
}

TEST(NnOptimizers, VectorisedRulesGiveEachElementTheBitsOfTheScalarPath) {
  expect_vector_and_tail_agree("adam", [] { return nn::adam(); });
  expect_vector_and_tail_agree("adamw+clipvalue", [] {
    nn::adamw_options o;
    o.learning_rate = 0.01;
    o.clipvalue = 1.0;
    return nn::adamw(o);
  });
  expect_vector_and_tail_agree("rmsprop centered+momentum+clipvalue+decay", [] {
    nn::rmsprop_options o;
    o.momentum = 0.9;
    o.centered = true;
    o.clipvalue = 1.0;
    o.weight_decay = 0.01;
    return nn::rmsprop(o);
  });
  expect_vector_and_tail_agree("adagrad+decay", [] {
    nn::adagrad_options o;
    o.learning_rate = 0.1;
    o.weight_decay = 0.004;
    return nn::adagrad(o);
  });
}

}  // namespace optimizers_test
