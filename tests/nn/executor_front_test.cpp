// nn/detail/executor_front.hpp, the front end that the sequential and the graph model share over their one
// executor, tested as one contract on both: what a step refuses (naming the call, and changing nothing), which calls
// advance the step and write the gradients, sample weights of one as no weights, storage adopted and given back,
// and the thread count leaving the bits alone.
#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/graph.hpp>
#include <mwstrat/nn/graph_model.hpp>
#include <mwstrat/nn/sequential.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace nn = mwstrat::nn;

namespace executor_front_test {

// The same small architecture in both models: 4 inputs, a dense layer of 3 logits.
template <class Model>
Model make(int threads = 1);
template <>
nn::sequential make<nn::sequential>(int threads) {
  return nn::sequential({nn::input{{4}}, nn::dense{3}}, {.threads = threads, .seed = 7});
}
template <>
nn::graph_model make<nn::graph_model>(int threads) {
  const auto in = nn::input_tensor({4});
  return nn::graph_model(in, nn::dense{3}(in), {.threads = threads, .seed = 7});
}
// The model's name in its messages.
template <class Model>
const char* kind() {
  return std::is_same_v<Model, nn::sequential> ? "sequential" : "graph_model";
}

const std::vector<float> inputs = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, 0.0f, -2.0f};  // 2 samples of 4
const std::vector<std::int64_t> labels = {0, 2};

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

template <class Error, class F>
void expect_refusal(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

template <class Model>
class executor_front_suite : public ::testing::Test {};
using models = ::testing::Types<nn::sequential, nn::graph_model>;
TYPED_TEST_SUITE(executor_front_suite, models);

TYPED_TEST(executor_front_suite, RefusesWhatDoesNotFitTheModelNamingTheCallAndChangesNothing) {
  auto model = make<TypeParam>();
  const auto before = copy(model.parameters());
  const std::span<const float> x(inputs);
  const std::span<const std::int64_t> y(labels);
  using mwstrat::config_error;
  expect_refusal<config_error>([&] { (void)model.train_batch(x, y, 0); }, "train_batch: empty batch");
  expect_refusal<config_error>([&] { (void)model.train_batch(x.first(7), y, 2); },
                               "train_batch: 7 input values for a batch of 2 samples of 4");
  expect_refusal<config_error>([&] { (void)model.evaluate_batch(x, y.first(1), 2); },
                               "evaluate_batch: 1 labels for a batch of 2");
  const std::vector<std::int64_t> outside = {0, 3};
  expect_refusal<mwstrat::data_error>([&] { (void)model.training_loss(x, outside, 2); },
                                      "training_loss: label 3 of sample 1 outside [0, 3)");
  const std::vector<float> one_weight = {1.0f}, nan_weight = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  expect_refusal<config_error>([&] { (void)model.train_batch(x, y, one_weight, 2, [](std::size_t, std::size_t) {}); },
                               "train_batch: sample_weight has 1 weights for a batch of 2");
  expect_refusal<config_error>([&] { (void)model.evaluate_batch(x, y, nan_weight, 2); },
                               "of sample 1 is not a finite weight >= 0");
  EXPECT_EQ(copy(model.parameters()), before);
  EXPECT_EQ(model.step(), 0u);
}

TYPED_TEST(executor_front_suite, RefusesZeroThreadsNamingTheModel) {
  auto model = make<TypeParam>(2);
  expect_refusal<mwstrat::config_error>([&] { model.set_threads(0); },
                                        std::string(kind<TypeParam>()) + ": threads must be at least 1, got 0");
  EXPECT_EQ(model.threads(), 2);
}

TYPED_TEST(executor_front_suite, TrainingAdvancesTheStepAndWritesGradientsEvaluationDoesNeither) {
  auto model = make<TypeParam>();
  ASSERT_EQ(model.parameter_count(), 4u * 3u + 3u);
  ASSERT_EQ(model.input_size(), 4u);
  ASSERT_EQ(model.output_size(), 3u);
  const auto probe = model.training_loss(inputs, labels, 2);  // no gradients, no step
  EXPECT_EQ(model.step(), 0u);
  std::vector<std::size_t> reported;  // elements reported ready, over every callback
  const auto trained = model.train_batch(inputs, labels, 2, [&](std::size_t, std::size_t n) { reported.push_back(n); });
  EXPECT_EQ(model.step(), 1u);
  EXPECT_DOUBLE_EQ(trained.loss_sum, probe.loss_sum);  // the same parameters, the same loss
  EXPECT_EQ(trained.count, 2u);
  std::size_t total = 0;
  for (const std::size_t n : reported) total += n;
  EXPECT_EQ(total, model.parameter_count());  // every gradient element reported once
  const auto gradients = copy(model.gradients());
  EXPECT_NE(gradients, std::vector<float>(gradients.size(), 0.0f));
  const auto evaluated = model.evaluate_batch(inputs, labels, 2);
  EXPECT_EQ(model.step(), 1u);
  EXPECT_EQ(copy(model.gradients()), gradients);
  EXPECT_EQ(evaluated.count, 2u);
  EXPECT_EQ(model.outputs().size(), 2u * 3u);  // the logits of the last forward pass
}

TYPED_TEST(executor_front_suite, SampleWeightsOfOneAreNoWeights) {
  auto weighted = make<TypeParam>(), plain = make<TypeParam>();
  const std::vector<float> ones = {1.0f, 1.0f};
  const auto a = weighted.train_batch(inputs, labels, ones, 2, [](std::size_t, std::size_t) {});
  const auto b = plain.train_batch(inputs, labels, 2);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(copy(weighted.gradients()), copy(plain.gradients()));
}

TYPED_TEST(executor_front_suite, StepsWriteIntoAdoptedStorageUntilTheModelTakesItsOwnBack) {
  auto model = make<TypeParam>(), twin = make<TypeParam>();
  mwstrat::detail::aligned_vector<float> params(model.parameter_count()), grads(model.parameter_count());
  std::copy(model.parameters().begin(), model.parameters().end(), params.begin());
  model.adopt_storage(params, grads);
  EXPECT_FALSE(model.uses_own_storage());
  EXPECT_EQ(model.parameters().data(), params.data());
  (void)model.train_batch(inputs, labels, 2);
  (void)twin.train_batch(inputs, labels, 2);
  EXPECT_EQ(std::vector<float>(grads.begin(), grads.end()), copy(twin.gradients()));
  params[0] += 1.0f;  // what another replica's update would do to the shared copy
  model.use_own_storage();
  EXPECT_TRUE(model.uses_own_storage());
  EXPECT_NE(model.parameters().data(), params.data());
  EXPECT_EQ(copy(model.parameters()), std::vector<float>(params.begin(), params.end()));
  EXPECT_EQ(copy(model.gradients()), std::vector<float>(grads.begin(), grads.end()));
}

TYPED_TEST(executor_front_suite, TheThreadCountLeavesTheBitsAlone) {
  auto one = make<TypeParam>(1), two = make<TypeParam>(2);
  const auto a = one.train_batch(inputs, labels, 2);
  const auto b = two.train_batch(inputs, labels, 2);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(copy(one.gradients()), copy(two.gradients()));
}

}  // namespace executor_front_test
