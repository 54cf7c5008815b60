// The nn family's internal headers on their own: the window geometry of convolutions and pooling
// (nn/detail/window_2d.hpp) against Keras's padding rules, the layer interface's helpers (nn/detail/layer_impl.hpp:
// shapes, L2 terms, JSON), the loss step both models share (nn/detail/loss_pass.hpp) against a hand-computed
// reference and across thread counts, the graph front end's cut from input to output (nn/graph.hpp), and the part
// of every optimizer that is not its rule (nn/optimizers/optimizer_base.hpp): clipping, weight decay, the serial
// part path and the refusals; and the fast convolution (nn/kernels/conv2d_direct.hpp) called directly: its tile
// plans, its padded copy, and its three passes against their definitions; the graph executor's ReLU fusion against
// the unfused passes, and its shared gradient buffers against one buffer per layer.
#include <mwstrat/nn/detail/layer_fusions.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/graph_executor.hpp>
#include <mwstrat/nn/detail/graph_fusion_plan.hpp>
#include <mwstrat/nn/detail/graph_layer_factory.hpp>
#include <mwstrat/nn/detail/graph_layer_info.hpp>
#include <mwstrat/nn/detail/graph_summary.hpp>
#include <mwstrat/nn/detail/loss_pass.hpp>
#include <mwstrat/nn/detail/counter_random.hpp>
#include <mwstrat/nn/detail/window_2d.hpp>
#include <mwstrat/nn/graph.hpp>
#include <mwstrat/nn/graph_model.hpp>
#include <mwstrat/nn/layers/add.hpp>
#include <mwstrat/nn/layers/batch_normalization.hpp>
#include <mwstrat/nn/layers/conv2d.hpp>
#include <mwstrat/nn/layers/dense.hpp>
#include <mwstrat/nn/layers/relu.hpp>
#include <mwstrat/nn/kernels/conv2d_direct.hpp>
#include <mwstrat/nn/kernels/conv2d_direct_filter.hpp>
#include <mwstrat/nn/optimizers/optimizer_base.hpp>
#include <mwstrat/nn/step_stats.hpp>

#include <gtest/gtest.h>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace nn = mwstrat::nn;
namespace d = mwstrat::detail;

namespace internals_test {

// The message of the config_error `f` throws ("" when it throws none).
template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const mwstrat::config_error& e) {
    return e.what();
  }
  return "";
}

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }


// ---------------------------------------------------------------------------------------------------- window_2d

TEST(NnWindow2d, ValidAndSameFollowKerasForEveryExtentKernelAndStride) {
  for (std::size_t h = 1; h <= 9; ++h)
    for (std::size_t k = 1; k <= 4; ++k)
      for (std::size_t s = 1; s <= 3; ++s) {
        SCOPED_TRACE("h=" + std::to_string(h) + " k=" + std::to_string(k) + " s=" + std::to_string(s));
        // same: ceil(h / s) outputs; TensorFlow pads max((out - 1) * s + k - h, 0), the smaller half on top.
        const auto same = d::window_2d::make("conv2d", {h, h + 1, 2}, {k, k}, {s, s}, nn::padding::same);
        EXPECT_EQ(same.oh, ceil_div(h, s));
        EXPECT_EQ(same.ow, ceil_div(h + 1, s));
        const std::size_t need = (same.oh - 1) * s + k;
        EXPECT_EQ(same.pad_top, need > h ? (need - h) / 2 : 0);
        // Every window of `same` starts at most pad_top above the image and ends inside image + bottom padding.
        EXPECT_EQ(same.in_row(0, 0), -static_cast<std::ptrdiff_t>(same.pad_top));
        const std::size_t bottom = (need > h ? need - h : 0) - same.pad_top;
        EXPECT_LE(same.in_row(same.oh - 1, k - 1), static_cast<std::ptrdiff_t>(h - 1 + bottom));
        if (h < k) {
          EXPECT_NE(config_error_of([&] { (void)d::window_2d::make("conv2d", {h, h, 1}, {k, k}, {s, s}, nn::padding::valid); }),
                    "");
          continue;
        }
        const auto valid = d::window_2d::make("conv2d", {h, h, 1}, {k, k}, {s, s}, nn::padding::valid);
        EXPECT_EQ(valid.oh, (h - k) / s + 1);
        EXPECT_EQ(valid.pad_top, 0u);
        EXPECT_EQ(valid.pad_left, 0u);
        // The last window of `valid` ends inside the image, and one more stride would not fit.
        EXPECT_LE(valid.in_row(valid.oh - 1, k - 1), static_cast<std::ptrdiff_t>(h - 1));
        EXPECT_GT(valid.oh * s + k - 1, h - 1);
      }
}

TEST(NnWindow2d, RefusalsNameTheLayerAndTheShape) {
  const std::string big =
      config_error_of([] { (void)d::window_2d::make("max_pool2d", {2, 2, 1}, {3, 3}, {1, 1}, nn::padding::valid); });
  EXPECT_NE(big.find("max_pool2d: window 3x3 larger than input (2, 2, 1)"), std::string::npos) << big;
  const std::string flat = config_error_of([] { (void)d::window_2d::make("conv2d", {4, 4}, {3, 3}, {1, 1}, nn::padding::same); });
  EXPECT_NE(flat.find("conv2d: input shape (4, 4) is not (height, width, channels)"), std::string::npos) << flat;
  const std::string zero = config_error_of([] { (void)d::window_2d::make("conv2d", {4, 4, 1}, {3, 3}, {0, 1}, nn::padding::same); });
  EXPECT_NE(zero.find("window and strides must be positive"), std::string::npos) << zero;
  const std::string empty = config_error_of([] { (void)d::window_2d::make("conv2d", {4, 4, 0}, {3, 3}, {1, 1}, nn::padding::same); });
  EXPECT_NE(empty.find("conv2d: empty output for input (4, 4, 0)"), std::string::npos) << empty;
}

// ---------------------------------------------------------------------------------------------------- layer_impl

TEST(NnLayerImpl, ShapesPrintAsPythonTuples) {
  EXPECT_EQ(d::shape_size({}), 1u);
  EXPECT_EQ(d::shape_size({2, 3, 4}), 24u);
  EXPECT_EQ(d::shape_size({5, 0}), 0u);
  EXPECT_EQ(d::shape_string({3}), "(3,)");  // a 1-tuple keeps its comma, as Python prints it
  EXPECT_EQ(d::shape_string({32, 32, 3}), "(32, 32, 3)");
  EXPECT_EQ(d::shape_string({}), "()");
  EXPECT_EQ(d::json_list({}), "[]");
  EXPECT_EQ(d::json_list({32, 32, 3}), "[32, 32, 3]");
}

TEST(NnLayerImpl, L2GradientIsTheDerivativeOfTheL2Penalty) {
  const std::vector<double> w = {0.5, -1.25, 3.0, 0.0, -0.003};
  const double lambda = 2e-3;
  EXPECT_DOUBLE_EQ(d::l2_penalty(lambda, w.data(), w.size()), lambda * (0.25 + 1.5625 + 9.0 + 0.0 + 9e-6));
  std::vector<double> g(w.size(), 1.0);
  d::add_l2_gradient(lambda, w.data(), g.data(), g.size());  // adds, does not overwrite
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::vector<double> up = w, down = w;
    up[i] += 1e-4;
    down[i] -= 1e-4;
    const double numeric =
        (d::l2_penalty(lambda, up.data(), up.size()) - d::l2_penalty(lambda, down.data(), down.size())) / 2e-4;
    EXPECT_NEAR(g[i] - 1.0, numeric, 1e-9) << i;
  }
  // λ = 0: no term and nothing added.
  EXPECT_EQ(d::l2_penalty(0.0, w.data(), w.size()), 0.0);
  std::vector<double> untouched(w.size(), 7.0);
  d::add_l2_gradient(0.0, w.data(), untouched.data(), untouched.size());
  EXPECT_EQ(untouched, std::vector<double>(w.size(), 7.0));
}

TEST(NnLayerImpl, JsonNumbersRoundTripAndRegularizersReadAsKeras) {
  for (double v : {0.1, 2e-4, 5e-5, 1.0 / 3.0, 0.997, 1e-300, 12345.0})
    EXPECT_EQ(std::stod(d::json_number(v)), v) << d::json_number(v);
  EXPECT_EQ(d::json_number(0.5), "0.5");
  EXPECT_EQ(d::regularizer_json(0), "null");
  EXPECT_EQ(d::regularizer_json(0.5), "{\"class_name\": \"L2\", \"config\": {\"l2\": 0.5}}");
  EXPECT_EQ(d::activation_name(nn::activation::linear), "linear");
  EXPECT_EQ(d::activation_name(nn::activation::relu), "relu");
  EXPECT_EQ(d::activation_name(nn::activation::softmax), "softmax");
}

// Fusions are small interfaces a layer derives from (layer_fusions.hpp): a layer that takes part in none offers none,
// each layer offers only its own, and a convolution off the float kernels refuses with the library's own error.
TEST(NnLayerFusions, LayersOfferOnlyTheFusionInterfacesTheyTakePartIn) {
  d::dense_layer<float> dense(nn::dense{4}, {6});
  const d::fusion_roles<float> none(dense);
  EXPECT_EQ(none.affine_map, nullptr);
  EXPECT_EQ(none.affine_reader, nullptr);
  EXPECT_EQ(none.deferrable, nullptr);
  EXPECT_EQ(none.map_reader, nullptr);
  EXPECT_EQ(none.input_sums, nullptr);
  EXPECT_EQ(none.output_hook, nullptr);
  EXPECT_EQ(none.gradient_sums, nullptr);
  EXPECT_FALSE(none.adds_to_dx());
  EXPECT_FALSE(none.one_gradient);
  EXPECT_EQ(d::fusion_role<d::plain_relu>(dense), nullptr);
  EXPECT_EQ(d::fusion_role<d::relu_fusable>(dense), nullptr);

  d::batch_normalization_layer<float> bn(0.99, 1e-3, false, {4, 4, 8});
  const d::fusion_roles<float> norm(bn);
  EXPECT_NE(norm.affine_map, nullptr);
  EXPECT_NE(norm.deferrable, nullptr);
  EXPECT_NE(norm.input_sums, nullptr);
  EXPECT_NE(norm.gradient_sums, nullptr);
  EXPECT_EQ(norm.affine_reader, nullptr);
  EXPECT_NE(d::fusion_role<d::relu_fusable>(bn), nullptr);

  d::add_layer<float> add({{4, 4, 8}, {4, 4, 8}});
  const d::fusion_roles<float> sum(add);
  EXPECT_TRUE(sum.one_gradient);
  EXPECT_NE(sum.map_reader, nullptr);
  EXPECT_EQ(sum.affine_map, nullptr);

  d::relu_layer<float> relu({4});
  ASSERT_NE(d::fusion_role<d::plain_relu>(relu), nullptr);
  EXPECT_TRUE(d::fusion_role<d::plain_relu>(relu)->is_plain_relu());

  d::conv2d_layer<double> conv(nn::conv2d{8, {3, 3}}, {6, 6, 8});
  const d::fusion_roles<double> reader(conv);
  ASSERT_NE(reader.affine_reader, nullptr);
  EXPECT_FALSE(reader.affine_reader->takes_input_affine());  // double runs off the float kernels
  EXPECT_FALSE(reader.adds_to_dx());
  const d::forward_args<double> a{};
  double v = 0;
  try {
    reader.affine_reader->forward_with_input_affine(a, &v, &v, false);
    ADD_FAILURE() << "a double convolution applied an input map";
  } catch (const mwstrat::config_error& e) {
    EXPECT_EQ(e.component(), "nn");
    EXPECT_NE(std::string(e.what()).find("conv2d: "), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------------- loss_pass

TEST(NnLossPass, WeightedCrossEntropyGradientAndHitsAgainstAHandComputedReference) {
  constexpr std::size_t batch = 3, k = 4;
  const std::vector<double> logits = {1.0, 2.0, 0.5, -1.0,   //
                                      0.0, 0.0, 0.0, 0.0,    // a tie: arg-max is the first
                                      -3.0, 4.0, 1.0, 2.0};
  const std::vector<std::int64_t> labels = {1, 2, 3};
  const std::vector<float> weights = {0.5f, 0.0f, 2.0f};
  std::vector<double> dlogits(batch * k, -99.0), losses(batch);
  std::vector<std::uint8_t> hits(batch);
  const auto st = d::weighted_loss_pass<double>(logits.data(), dlogits.data(), k, labels, weights, batch,
                                                losses.data(), hits.data());
  double expected_sum = 0;
  for (std::size_t s = 0; s < batch; ++s) {
    double z = 0;
    for (std::size_t j = 0; j < k; ++j) z += std::exp(logits[s * k + j]);
    const double ce = std::log(z) - logits[s * k + static_cast<std::size_t>(labels[s])];
    expected_sum += weights[s] * ce;
    EXPECT_NEAR(losses[s], weights[s] * ce, 1e-12) << s;
    for (std::size_t j = 0; j < k; ++j) {
      const double p = std::exp(logits[s * k + j]) / z;
      const double onehot = static_cast<std::int64_t>(j) == labels[s] ? 1.0 : 0.0;
      EXPECT_NEAR(dlogits[s * k + j], static_cast<double>(weights[s]) / batch * (p - onehot), 1e-12) << s << "," << j;
    }
  }
  EXPECT_NEAR(st.loss_sum, expected_sum, 1e-12);
  EXPECT_EQ(st.count, batch);
  EXPECT_EQ(st.correct, 1u);  // sample 0 (argmax 1 == label 1); sample 1's tie picks class 0, sample 2 picks 1
  EXPECT_EQ(hits, (std::vector<std::uint8_t>{1, 0, 0}));

  // No weights: every example weighs 1. No gradient buffer: none is written.
  const auto plain = d::weighted_loss_pass<double>(logits.data(), nullptr, k, labels, {}, batch, losses.data(),
                                                   hits.data());
  double unweighted = 0;
  for (std::size_t s = 0; s < batch; ++s) {
    double z = 0;
    for (std::size_t j = 0; j < k; ++j) z += std::exp(logits[s * k + j]);
    unweighted += std::log(z) - logits[s * k + static_cast<std::size_t>(labels[s])];
  }
  EXPECT_NEAR(plain.loss_sum, unweighted, 1e-12);
  EXPECT_EQ(plain.correct, st.correct);
}

TEST(NnLossPass, SameBitsOnOneAndFourThreads) {
  constexpr std::size_t batch = 333, k = 10;  // more than one chunk of 64, and a ragged last one
  std::vector<float> logits(batch * k), weights(batch);
  std::vector<std::int64_t> labels(batch);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(8.0 * d::random_unit(3, 1, i) - 4.0);
  for (std::size_t s = 0; s < batch; ++s) {
    labels[s] = static_cast<std::int64_t>(d::random_bits(3, 2, s) % k);
    weights[s] = static_cast<float>(2.0 * d::random_unit(3, 3, s));
  }
  auto run = [&](int threads, std::vector<float>& grad) {
    std::vector<float> losses(batch);
    std::vector<std::uint8_t> hits(batch);
    grad.assign(batch * k, 0.0f);
    tbb::task_arena arena(threads);
    return arena.execute([&] {
      return d::weighted_loss_pass<float>(logits.data(), grad.data(), k, labels, weights, batch, losses.data(),
                                          hits.data());
    });
  };
  std::vector<float> g1, g4;
  const auto a = run(1, g1);
  const auto b = run(4, g4);
  EXPECT_EQ(std::memcmp(&a.loss_sum, &b.loss_sum, sizeof(double)), 0);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_EQ(std::memcmp(g1.data(), g4.data(), g1.size() * sizeof(float)), 0);
}

// ---------------------------------------------------------------------------------------------------- graph plan

TEST(NnGraphPlan, KeepsOnlyWhatTheOutputDependsOnWithModelNodeIndices) {
  auto x = nn::input_tensor({4, 4, 1});
  auto flat = nn::flatten{}(x);
  auto a = nn::dense{6, nn::activation::relu}(flat);
  auto unused = nn::dense{3}(a);  // applied, but not on the way to the output
  auto out = nn::dense{2, nn::activation::softmax}(nn::add{}({a, nn::dense{6}(flat)}));
  EXPECT_EQ(unused.layer_name(), "dense_1");
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  EXPECT_EQ(plan.input_shape, (nn::shape_t{4, 4, 1}));
  ASSERT_EQ(plan.layers.size(), 5u);  // flatten, dense, dense_2, add, dense_3
  std::vector<std::string> names;
  for (const auto& l : plan.layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"flatten", "dense", "dense_2", "add", "dense_3"}));
  EXPECT_EQ(plan.layers[0].inputs, (std::vector<std::size_t>{0}));      // the input
  EXPECT_EQ(plan.layers[2].inputs, (std::vector<std::size_t>{1}));      // flatten, model node 1
  EXPECT_EQ(plan.layers[3].inputs, (std::vector<std::size_t>{2, 3}));   // dense and dense_2
  EXPECT_EQ(plan.layers[3].inbound, (std::vector<std::string>{"dense", "dense_2"}));
  EXPECT_EQ(plan.layers[3].input_shapes, (std::vector<nn::shape_t>{{6}, {6}}));
  EXPECT_TRUE(plan.output_softmax);
  // The model built from it lists the same layers.
  nn::graph_model m(x, out);
  ASSERT_EQ(m.layers().size(), 5u);
  EXPECT_EQ(m.layers()[3].inbound, plan.layers[3].inbound);
}

TEST(NnGraphPlan, RefusesASoftmaxDenseBeforeTheOutputAndOutputsOfAnotherInput) {
  auto x = nn::input_tensor({3});
  auto hidden = nn::dense{4, nn::activation::softmax}(x);
  auto out = nn::dense{2}(hidden);
  const std::string inner = config_error_of([&] { (void)d::plan_model(*out.graph(), x.node(), out.node()); });
  EXPECT_NE(inner.find("graph_model: layer dense (Dense) has a softmax activation but is not the output"),
            std::string::npos) << inner;
  EXPECT_EQ(config_error_of([&] { nn::graph_model m(x, out); }), inner);

  auto other = nn::input_tensor({3});
  const std::string foreign = config_error_of([&] { nn::graph_model m(x, nn::dense{2}(other)); });
  EXPECT_NE(foreign.find("the inputs must be the input_tensor the outputs were built from"), std::string::npos) << foreign;
  const std::string none = config_error_of([&] { (void)d::plan_model(*x.graph(), x.node(), x.node()); });
  EXPECT_NE(none.find("graph_model: no layers between the inputs and the outputs"), std::string::npos) << none;
}

// ---------------------------------------------------------------------------------------------------- optimizer_base


// The smallest rule on top of optimizer_base: plain descent, w -= lr * g.
class descent : public d::optimizer_base<double> {
 public:
  explicit descent(double lr, const d::common_options& c = {}) : optimizer_base("descent", lr, c) {}
  void apply(std::span<double> w, std::span<const double> g) {
    run(w, g, [&](std::size_t i, double gi, double lr) { w[i] -= lr * gi; });
  }
  void apply_part(std::span<double> w, std::span<const double> g) const {
    run_part(w, g, [&](std::size_t i, double gi, double lr) { w[i] -= lr * gi; });
  }
};


TEST(NnOptimizerBase, ClipValueAndWeightDecayAreTheSameOnTheWholeAndOnParts) {
  const std::vector<double> g = {3.0, -0.2, 0.05, -7.0, 0.0};
  std::vector<double> whole = {1.0, 2.0, -1.0, 0.5, -4.0};
  std::vector<double> parts = whole;
  descent a(0.1, {.weight_decay = 0.01, .clipvalue = 1.0});
  const descent b(0.1, {.weight_decay = 0.01, .clipvalue = 1.0});
  const std::vector<double> start = whole;
  a.apply(whole, g);
  b.apply_part(std::span(parts).first(2), std::span(g).first(2));
  b.apply_part(std::span(parts).subspan(2), std::span(g).subspan(2));
  EXPECT_EQ(whole, parts);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double decayed = start[i] - start[i] * 0.01 * 0.1;
    EXPECT_DOUBLE_EQ(whole[i], decayed - 0.1 * std::clamp(g[i], -1.0, 1.0)) << i;
  }
  EXPECT_EQ(a.iterations(), 1u);
  EXPECT_EQ(b.iterations(), 0u);  // parts do not count a step: the caller does (count_step)
}

TEST(NnOptimizerBase, GlobalNormClippingScalesTheWholeGradient) {
  const std::vector<double> g = {3.0, 4.0};  // norm 5
  std::vector<double> w = {0.0, 0.0};
  descent clipped(1.0, {.global_clipnorm = 1.0});
  clipped.apply(w, g);
  EXPECT_NEAR(w[0], -0.6, 1e-12);
  EXPECT_NEAR(w[1], -0.8, 1e-12);
  std::vector<double> v = {0.0, 0.0};
  descent loose(1.0, {.clipnorm = 10.0});  // under the threshold: unchanged
  loose.apply(v, g);
  EXPECT_NEAR(v[0], -3.0, 1e-12);
  EXPECT_NEAR(v[1], -4.0, 1e-12);
  const std::string part = config_error_of([&] { loose.apply_part(v, g); });
  EXPECT_NE(part.find("descent: apply_part cannot clip by the global norm of a part"), std::string::npos) << part;
}

TEST(NnOptimizerBase, RefusalsNameTheOptimizer) {
  using opts = d::common_options;
  EXPECT_NE(config_error_of([] { descent o(0.1, opts{.weight_decay = -1}); }).find("descent: weight_decay"),
            std::string::npos);
  EXPECT_NE(config_error_of([] { descent o(0.1, opts{.clipnorm = 1, .global_clipnorm = 1}); })
                .find("descent: set clipnorm or global_clipnorm, not both"),
            std::string::npos);
  EXPECT_NE(config_error_of([] { descent o(0.1, opts{.clipnorm = 1, .clipvalue = 1}); })
                .find("descent: set a norm clipping or clipvalue, not both"),
            std::string::npos);
  EXPECT_NE(config_error_of([] { descent o(0.1, opts{.clipvalue = -1}); }).find("must not be negative"),
            std::string::npos);
  descent o(0.1);
  std::vector<double> w(3), g(2);
  EXPECT_NE(config_error_of([&] { o.apply(w, g); }).find("descent: 3 parameters but 2 gradients"), std::string::npos);
  EXPECT_EQ(o.iterations(), 0u);
  o.set_learning_rate(0.5);
  EXPECT_DOUBLE_EQ(o.learning_rate(), 0.5);
}

// ---------------------------------------------------------------------------------------------------- conv2d_direct

namespace direct = mwstrat::nn::kernels::direct;

TEST(NnConv2dDirect, PlansTileTheExtentWithinTheRegisterBudget) {
  for (std::size_t extent = 1; extent <= 40; ++extent)
    for (std::size_t vectors = 1; vectors <= 8; ++vectors)
      for (std::size_t tap_bytes : {std::size_t{64}, std::size_t{1} << 20}) {
        SCOPED_TRACE(std::to_string(extent) + " x " + std::to_string(vectors) + ", " + std::to_string(tap_bytes));
        for (const auto b : {direct::plan(extent, vectors, tap_bytes), direct::filter_plan(extent, vectors)}) {
          ASSERT_GE(b.nv, 1);
          ASSERT_GE(b.mr, 1);
          EXPECT_EQ(vectors % static_cast<std::size_t>(b.nv), 0u);  // whole tiles of output channels
          EXPECT_LE(static_cast<std::size_t>(b.mr), extent);
          EXPECT_LE(b.nv, direct::max_nv);
          EXPECT_LE(b.mr * b.nv, direct::accumulator_budget);  // the accumulators fit the register file
        }
      }
}

// Where the cycle counts are close, the plan streams the input fewer times: ResNet's 16x16 32->64 stride-2 layer
// (7 windows inside a row, a kernel row of 3 x 32 values) takes the widest tile of output channels.
TEST(NnConv2dDirect, PlansFewerPassesOverTheInputWhenTheCyclesAreClose) {
  constexpr std::size_t out_c = 64, K = 3 * 32;
  const std::size_t vectors = out_c / static_cast<std::size_t>(direct::lanes);
  const auto b = direct::plan(7, vectors, K * out_c * sizeof(float));
  EXPECT_EQ(b.nv, std::min<int>(direct::max_nv, static_cast<int>(vectors)));
}

TEST(NnConv2dDirect, PaddedImageIsZeroOutsideAndTransformedInside) {
  constexpr std::size_t h = 2, w = 3, ch = 2, rows = 5, cols = 6, top = 1, left = 2;
  std::vector<float> src(h * w * ch);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) - 5.0f;
  const float scale[ch] = {2.0f, -1.0f}, shift[ch] = {0.5f, 1.0f};
  const mwstrat::nn::kernels::conv2d_input_transform relu{scale, shift, true};
  for (const auto* transform : {static_cast<const mwstrat::nn::kernels::conv2d_input_transform*>(nullptr), &relu}) {
    std::vector<float> dst(rows * cols * ch, 42.0f);
    direct::pad_image(src.data(), h, w, ch, dst.data(), rows, cols, top, left, transform);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        for (std::size_t k = 0; k < ch; ++k) {
          const bool inside = r >= top && r < top + h && c >= left && c < left + w;
          float expected = 0.0f;
          if (inside) {
            expected = src[((r - top) * w + (c - left)) * ch + k];
            if (transform != nullptr) expected = std::max(0.0f, expected * scale[k] + shift[k]);
          }
          EXPECT_EQ(dst[(r * cols + c) * ch + k], expected) << r << "," << c << "," << k;
        }
  }
  EXPECT_EQ(direct::padded_extent(8, 1, 3, 2, 3), 9u);  // the input after its top pad
  EXPECT_EQ(direct::padded_extent(4, 0, 4, 2, 3), 9u);  // what the last window reads
}

// The three passes called directly (not through conv2d.hpp's dispatch) against their definitions, in double.
TEST(NnConv2dDirect, ForwardAndBothGradientsMatchTheDefinition) {
  const std::size_t L = static_cast<std::size_t>(direct::lanes);
  using geometry = mwstrat::nn::kernels::conv2d_geometry;
  // {batch, in_h, in_w, in_c, out_c, kh, kw, sh, sw, pad_top, pad_left, out_h, out_w}: Keras same, stride 2 (one
  // row and column of zeros on each side), and valid, stride 1, a non-square kernel.
  for (const geometry& g : {geometry{2, 5, 7, L, 2 * L, 3, 3, 2, 2, 1, 1, 3, 4},
                           geometry{3, 6, 5, L, L, 2, 3, 1, 1, 0, 0, 5, 3}}) {
    ASSERT_TRUE(direct::applies(g.out_c));
    ASSERT_TRUE(direct::backward_data_applies(g));
    const std::size_t nx = g.batch * g.in_h * g.in_w * g.in_c, ny = g.batch * g.out_h * g.out_w * g.out_c;
    const std::size_t nk = g.kernel_h * g.kernel_w * g.in_c * g.out_c;
    std::vector<float> x(nx), k(nk), b(g.out_c), dy(ny);
    for (std::size_t i = 0; i < nx; ++i) x[i] = static_cast<float>(2 * d::random_unit(9, 1, i) - 1);
    for (std::size_t i = 0; i < nk; ++i) k[i] = static_cast<float>(2 * d::random_unit(9, 2, i) - 1);
    for (std::size_t i = 0; i < g.out_c; ++i) b[i] = static_cast<float>(d::random_unit(9, 3, i));
    for (std::size_t i = 0; i < ny; ++i) dy[i] = static_cast<float>(2 * d::random_unit(9, 4, i) - 1);
    std::vector<double> y_ref(ny), dx_ref(nx, 0.0), dk_ref(nk, 0.0), db_ref(g.out_c, 0.0);
    for (std::size_t n = 0; n < g.batch; ++n)
      for (std::size_t oy = 0; oy < g.out_h; ++oy)
        for (std::size_t ox = 0; ox < g.out_w; ++ox)
          for (std::size_t o = 0; o < g.out_c; ++o) {
            const std::size_t yi = ((n * g.out_h + oy) * g.out_w + ox) * g.out_c + o;
            double s = b[o];
            for (std::size_t ky = 0; ky < g.kernel_h; ++ky)
              for (std::size_t kx = 0; kx < g.kernel_w; ++kx) {
                const auto iy = static_cast<std::ptrdiff_t>(oy * g.stride_h + ky) - static_cast<std::ptrdiff_t>(g.pad_top);
                const auto ix = static_cast<std::ptrdiff_t>(ox * g.stride_w + kx) - static_cast<std::ptrdiff_t>(g.pad_left);
                if (iy < 0 || ix < 0 || iy >= static_cast<std::ptrdiff_t>(g.in_h) || ix >= static_cast<std::ptrdiff_t>(g.in_w))
                  continue;
                for (std::size_t c = 0; c < g.in_c; ++c) {
                  const std::size_t xi = ((n * g.in_h + static_cast<std::size_t>(iy)) * g.in_w + static_cast<std::size_t>(ix)) * g.in_c + c;
                  const std::size_t ki = ((ky * g.kernel_w + kx) * g.in_c + c) * g.out_c + o;
                  s += static_cast<double>(x[xi]) * k[ki];
                  dx_ref[xi] += static_cast<double>(dy[yi]) * k[ki];
                  dk_ref[ki] += static_cast<double>(dy[yi]) * x[xi];
                }
              }
            y_ref[yi] = s;
            db_ref[o] += dy[yi];
          }
    mwstrat::nn::kernels::conv2d_workspace ws;
    std::vector<float> y(ny, -1.0f), dx(nx, -1.0f), dk(nk, -1.0f), db(g.out_c, -1.0f);
    direct::forward(g, x.data(), nullptr, k.data(), b.data(), y.data(), ws);
    direct::backward_data(g, dy.data(), k.data(), dx.data(), ws);
    direct::backward_filter(g, x.data(), dy.data(), dk.data(), db.data(), ws);
    const auto near = [](const std::vector<float>& got, const std::vector<double>& want, const char* what) {
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << what << " " << i;
    };
    near(y, y_ref, "output");
    near(dx, dx_ref, "input gradient");
    near(dk, dk_ref, "kernel gradient");
    near(db, db_ref, "bias gradient");
  }
}

// ---------------------------------------------------------------------------------------------------- fusion plan

TEST(NnGraphFusionPlan, SoleReadersCountEveryReadOfANode) {
  // Every fusion removes a value that one layer alone reads. Node 0 is the input, node i + 1 layer i's output (the
  // last is the model's, which no layer reads).
  const std::vector<std::vector<std::size_t>> inputs = {
      {0},     // layer 0 reads the input
      {1},     // layer 1 and layer 2 both read layer 0
      {1},
      {3, 3},  // layer 3 reads layer 2 twice
      {2, 4},  // layer 4 reads layers 1 and 3
  };
  const std::size_t none = d::no_layer;
  EXPECT_EQ(d::sole_readers(inputs), (std::vector<std::size_t>{0, none, 4, none, 4, none}));
}

// ---------------------------------------------------------------------------------------------------- ReLU fusion


// The bits of two training passes on different inputs (outputs, gradients, moving statistics: the second pass
// catches a layer that reads what the first left in a shared gradient buffer) and of one inference pass of `plan`,
// with or without ReLU fusion and shared gradient buffers (nn/detail/graph_executor.hpp); `fused` says how many
// ReLUs ran inside their producers, `buffers` how many gradient buffers there were.
struct pass_bits {
  std::vector<float> train_out, grads, state, infer_out;
  std::size_t fused = 0, buffers = 0, deferred = 0, aliased = 0, sums = 0, gradient_sums = 0;
};

pass_bits run_passes(const d::graph_plan& plan, bool fuse, bool share, std::size_t batch) {
  d::graph_executor<float> exec(plan, fuse, share);
  exec.initialize(7);
  exec.reserve(batch);
  // Every parameter off its initial value, so that each batch norm's γ and β count (β = 0 would hide a ReLU mask
  // formed without it).
  for (std::size_t i = 0; i < exec.parameter_count(); ++i)
    exec.parameters()[i] += static_cast<float>(0.5 * d::random_unit(13, 0, i) - 0.25);
  std::vector<float> x(batch * exec.input_size());
  std::vector<std::int64_t> labels(batch);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(2 * d::random_unit(11, 0, i) - 1);
  for (std::size_t i = 0; i < batch; ++i) labels[i] = static_cast<std::int64_t>(i % exec.output_size());
  const std::vector<float> weights(batch, 1.0f);
  pass_bits b;
  b.fused = exec.fusion().fused_relus();
  b.deferred = exec.fusion().deferred_batch_norms();
  b.buffers = exec.gradient_buffers();
  b.aliased = exec.aliased_gradients();
  b.sums = exec.fusion().sums_in_producers();
  b.gradient_sums = exec.fusion().gradient_sums_in_readers();
  auto ready = [](std::size_t, std::size_t) {};
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1)
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(2 * d::random_unit(12, 0, i) - 1);
    exec.forward_pass(x.data(), batch, true, true);
    (void)exec.loss_pass(labels, weights, batch, true, 0.0);
    exec.backward_pass(batch, ready);
  }
  b.train_out.assign(exec.outputs().begin(), exec.outputs().end());
  b.grads.assign(exec.gradients(), exec.gradients() + exec.parameter_count());
  b.state.assign(exec.state().begin(), exec.state().end());
  exec.forward_pass(x.data(), batch, false, false);
  b.infer_out.assign(exec.outputs().begin(), exec.outputs().end());
  return b;
}

// Empty vectors (a graph without batch norms has no state) compare equal without memcmp, whose pointers must not be
// null even for zero bytes.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The optimised passes left what the plain ones left, bit for bit; and not vacuously: the passes moved the
// statistics and left non-zero gradients nearly everywhere.
void expect_same_passes(const pass_bits& fused, const pass_bits& plain) {
  EXPECT_TRUE(same_bits(fused.train_out, plain.train_out));
  EXPECT_TRUE(same_bits(fused.grads, plain.grads));
  EXPECT_TRUE(same_bits(fused.state, plain.state));
  EXPECT_TRUE(same_bits(fused.infer_out, plain.infer_out));
  EXPECT_GT(std::count_if(fused.grads.begin(), fused.grads.end(), [](float g) { return g != 0.0f; }),
            static_cast<std::ptrdiff_t>(fused.grads.size() * 9 / 10));
}

// For each batch: the passes with the executor's optimisations against the plain ones (gradient buffers shared in
// both), bit for bit, and `count` of them applied `expected` times (none in the plain passes).
void expect_optimised_like_plain(const d::graph_plan& plan, std::initializer_list<std::size_t> batches,
                                 std::size_t pass_bits::*count, std::size_t expected) {
  for (std::size_t batch : batches) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const pass_bits fused = run_passes(plan, true, true, batch);
    const pass_bits plain = run_passes(plan, false, true, batch);
    EXPECT_EQ(fused.*count, expected);
    EXPECT_EQ(plain.*count, 0u);
    expect_same_passes(fused, plain);
  }
}


TEST(NnGraphExecutor, FusedReluAndSharedGradientBuffersGiveTheBitsOfThePlainPasses) {
  // A residual block as resnet_cifar builds it (BN → Activation(relu), Add → ReLU), plus the cases that must not be
  // fused: a batch norm whose output is also read by another layer, and a ReLU after a layer that cannot fuse one.
  // 20 channels: the batch norm's vector path on every ISA, and its scalar tail where a vector holds 8 or 16 floats.
  auto x = nn::input_tensor({6, 6, 3});
  auto conv = [](std::size_t f) { return nn::conv2d{f, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same}; };
  auto relu = [](const nn::symbolic_tensor& t) { return nn::activation_layer{nn::activation::relu}(t); };
  auto stem = relu(nn::batch_normalization{0.9, 1e-3}(conv(20)(x)));                 // fused
  auto y = relu(nn::batch_normalization{0.9, 1e-3}(conv(20)(stem)));                 // fused
  auto shared_bn = nn::batch_normalization{0.9, 1e-3}(conv(20)(y));                  // two readers: not fused
  auto z = nn::relu{}(nn::add{}({relu(shared_bn), shared_bn, stem}));                // the Add's ReLU: fused
  auto tail = relu(conv(4)(z));                                                       // after a Conv2D: not fused
  auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(tail));
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  for (std::size_t batch : {std::size_t{5}, std::size_t{16}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const pass_bits fused = run_passes(plan, true, true, batch);
    const pass_bits plain = run_passes(plan, false, false, batch);
    // Each optimisation alone too: a fault in one must not hide behind the other.
    for (const auto& [fuse, share] : {std::pair{true, false}, std::pair{false, true}}) {
      const pass_bits one = run_passes(plan, fuse, share, batch);
      EXPECT_TRUE(same_bits(one.grads, plain.grads)) << "fuse " << fuse << ", share " << share;
      EXPECT_TRUE(same_bits(one.state, plain.state)) << "fuse " << fuse << ", share " << share;
      EXPECT_TRUE(same_bits(one.infer_out, plain.infer_out)) << "fuse " << fuse << ", share " << share;
    }
    EXPECT_EQ(fused.fused, 3u);
    EXPECT_EQ(plain.fused, 0u);
    EXPECT_LT(fused.buffers, plain.buffers / 2);  // 13 layers' gradients in a few buffers
    expect_same_passes(fused, plain);
  }
}

TEST(NnGraphExecutor, ReshapeAndFlattenPassTheirGradientThroughInTheirInputsBuffer) {
  // A chain of them, each the only reader of its input: no copy forward, and each input's gradient is its reader's
  // output gradient in one buffer (the chain joins up: the convolution's gradient is the last Flatten's). The
  // optimised passes give the plain ones' bits.
  auto x = nn::input_tensor({6, 6, 3});
  auto c = nn::conv2d{4, {3, 3}}(x);  // 4x4x4, linear: every gradient counts
  auto f = nn::flatten{}(c);
  auto r = nn::reshape{{8, 8}}(f);
  auto out = nn::dense{3}(nn::flatten{}(r));
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  for (std::size_t batch : {std::size_t{2}, std::size_t{5}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const pass_bits fused = run_passes(plan, true, true, batch);
    const pass_bits plain = run_passes(plan, false, false, batch);
    EXPECT_EQ(fused.aliased, 3u);  // the convolution's, the Flatten's and the Reshape's output gradients
    EXPECT_EQ(plain.aliased, 3u);  // not a fusion: the plain passes pass through too
    expect_same_passes(fused, plain);
  }
}


// Inference outputs of `plan` with every parameter and moving statistic moved off its initial value (so that each
// batch norm's γ, β, mean and variance all count), and how many batch norms the executor folded.
std::pair<std::vector<float>, std::size_t> inference_bits(const d::graph_plan& plan, bool fuse,
                                                          std::size_t batch) {
  d::graph_executor<float> exec(plan, fuse, true);
  exec.initialize(7);
  exec.reserve(batch);
  for (std::size_t i = 0; i < exec.parameter_count(); ++i)
    exec.parameters()[i] += static_cast<float>(0.5 * d::random_unit(13, 0, i) - 0.25);
  // Every state value here is a batch norm's moving mean or variance: positive either way.
  for (std::size_t i = 0; i < exec.state().size(); ++i)
    exec.state()[i] = static_cast<float>(0.5 + d::random_unit(14, 0, i));
  std::vector<float> x(batch * exec.input_size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(2 * d::random_unit(15, 0, i) - 1);
  exec.forward_pass(x.data(), batch, false, false);
  return {std::vector<float>(exec.outputs().begin(), exec.outputs().end()), exec.fusion().folded_batch_norms()};
}


TEST(NnGraphExecutor, BatchNormsFoldedIntoTheirConvolutionInInferenceGiveTheBitsOfThePlainPasses) {
  // Each kernel path a folded map goes through: Winograd (3x3 stride 1, 16 channels), the direct path (3x3 stride 2
  // to 32 channels), the reference path (1x1 to 20 channels, not whole vectors), with and without a fused ReLU;
  // and the batch norms that must stay: one read twice, one read by an Add, the last before the head.
  auto x = nn::input_tensor({9, 9, 3});
  auto conv = [](std::size_t f, std::size_t k, std::size_t s) {
    return nn::conv2d{f, {k, k}, nn::activation::linear, {s, s}, nn::padding::same};
  };
  auto bn = [] { return nn::batch_normalization{0.9, 1e-3}; };
  auto relu = [](const nn::symbolic_tensor& t) { return nn::activation_layer{nn::activation::relu}(t); };
  auto a = relu(bn()(conv(16, 3, 1)(x)));           // folded into the Winograd convolution, with its ReLU
  auto b = bn()(conv(16, 3, 1)(a));                 // folded into the strided convolution, no ReLU
  auto c = relu(bn()(conv(32, 3, 2)(b)));           // folded into the 1x1 convolution (reference path)
  auto e = bn()(conv(20, 1, 1)(c));                 // read twice: stays
  auto f = relu(bn()(conv(20, 3, 1)(e)));           // read by an Add: stays
  auto z = nn::add{}({f, e});
  auto tail = bn()(conv(16, 3, 1)(z));              // read by pooling: stays
  auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(tail));
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  for (std::size_t batch : {std::size_t{1}, std::size_t{6}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const auto [folded, n_folded] = inference_bits(plan, true, batch);
    const auto [plain, n_plain] = inference_bits(plan, false, batch);
    EXPECT_EQ(n_folded, 3u);
    EXPECT_EQ(n_plain, 0u);
    EXPECT_TRUE(same_bits(folded, plain));
    EXPECT_TRUE(std::all_of(folded.begin(), folded.end(), [](float v) { return std::isfinite(v); }));
  }
}


// What the executor tests build their residual graphs from: 3x3 `same` convolutions of `ch` filters, batch norms
// and plain ReLUs (which the executor fuses into their producers).
struct block_layers {
  std::size_t ch;
  [[nodiscard]] nn::conv2d conv() const {
    return nn::conv2d{ch, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same};
  }
  [[nodiscard]] nn::batch_normalization bn() const { return nn::batch_normalization{0.9, 1e-3}; }
  [[nodiscard]] nn::symbolic_tensor relu(const nn::symbolic_tensor& t) const {
    return nn::activation_layer{nn::activation::relu}(t);
  }
};


TEST(NnGraphExecutor, BatchNormsDeferredToTheirAddInTrainingGiveTheBitsOfThePlainPasses) {
  // Two residual blocks as resnet_cifar builds them: the second batch norm of each (no ReLU, read by the Add only)
  // leaves its map to the Add; in the second block on either input of the Add, and a third input plain. Batch
  // norms that must stay: one with a fused ReLU before an Add, one read twice. 16 and 20 channels: whole vectors,
  // and a scalar tail on every ISA.
  for (std::size_t ch : {std::size_t{16}, std::size_t{20}}) {
    SCOPED_TRACE(std::to_string(ch) + " channels");
    auto x = nn::input_tensor({6, 6, 3});
    const block_layers lay{ch};
    auto stem = lay.relu(lay.bn()(lay.conv()(x)));
    // deferred: 1
    auto b1 = lay.relu(nn::add{}({lay.bn()(lay.conv()(lay.relu(lay.bn()(lay.conv()(stem))))), stem}));
    auto twice = lay.bn()(lay.conv()(b1));  // read twice: stays
    // deferred: 1 (the second input)
    auto b2 = lay.relu(nn::add{}({b1, lay.bn()(lay.conv()(b1)), lay.relu(lay.bn()(lay.conv()(twice))), twice}));
    auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(b2));
    const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
    expect_optimised_like_plain(plan, {3, 8}, &pass_bits::deferred, 2);
  }
}

TEST(NnGraphExecutor, BatchNormSumsMadeByTheConvolutionThatWritesTheirInputGiveTheBitsOfThePlainPasses) {
  // Each batch norm's sums made on each image as the convolution before it writes the image: on the direct path
  // (3 input channels; stride 2; 1x1 stride 2), on Winograd's (3x3 stride 1) and on the reference (20 filters, not
  // whole vectors: the batch norm's scalar tail too), with chunks of 1, 4 and 8 samples (32x32, 16x16 and 8x8
  // outputs), a deferred batch norm among them, and batches that leave the last chunk short. Not where the
  // convolution's output has another reader.
  auto x = nn::input_tensor({32, 32, 3});
  const auto conv = [](std::size_t f, std::size_t k, std::size_t s) {
    return nn::conv2d{f, {k, k}, nn::activation::linear, {s, s}, nn::padding::same};
  };
  const block_layers lay{16};
  auto a = lay.relu(lay.bn()(conv(16, 3, 1)(x)));                                  // direct, chunks of 1
  auto b = lay.relu(lay.bn()(conv(16, 3, 1)(a)));                                  // Winograd
  auto c = lay.relu(lay.bn()(conv(32, 3, 2)(b)));                                  // direct stride 2, chunks of 4
  auto d = lay.relu(nn::add{}({lay.bn()(conv(32, 3, 1)(c)), lay.bn()(conv(32, 1, 2)(b))}));  // deferred; 1x1
  auto e = lay.relu(lay.bn()(conv(20, 3, 2)(d)));                                  // reference, chunks of 8
  auto twice = conv(16, 3, 1)(e);                                                  // read twice: its own pass
  auto f = lay.relu(nn::add{}({lay.bn()(twice), twice}));
  auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(f));
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  expect_optimised_like_plain(plan, {3, 9}, &pass_bits::sums, 6);
}

TEST(NnGraphExecutor, BatchNormGradientSumsMadeByTheConvolutionThatReadsTheirOutputGiveTheBitsOfThePlainPasses) {
  // Each batch norm's backward sums made on each image of its output gradient as the one convolution reading its
  // output writes that gradient: on Winograd's data gradient (3x3 stride 1), the scattered or direct one (stride 2
  // from one vector of channels, or two on AVX2), the direct one (stride 2 from 32 channels; 1x1) and the
  // reference (20 input channels), with and without a fused ReLU, chunks of 4 and 8 samples (16x16, 8x8 and 4x4),
  // and batches that leave the last chunk short. Not where two layers read the output, nor for a deferred one.
  auto x = nn::input_tensor({16, 16, 3});
  const auto conv = [](std::size_t f, std::size_t k, std::size_t s) {
    return nn::conv2d{f, {k, k}, nn::activation::linear, {s, s}, nn::padding::same};
  };
  const block_layers lay{16};
  auto a = lay.relu(lay.bn()(conv(16, 3, 1)(x)));  // read by a Winograd data gradient
  auto b = lay.relu(lay.bn()(conv(16, 3, 1)(a)));  // by a stride-2 one from 16 channels
  auto c = lay.relu(lay.bn()(conv(32, 3, 2)(b)));  // by a direct stride-2 one
  auto d = lay.bn()(conv(32, 3, 2)(c));            // no ReLU; by a direct 1x1 one
  auto e = lay.relu(lay.bn()(conv(20, 1, 1)(d)));  // by the reference
  auto f = lay.relu(lay.bn()(conv(16, 3, 1)(e)));  // read twice: its own pass
  auto g = lay.relu(nn::add{}({lay.bn()(conv(16, 1, 1)(f)), conv(16, 3, 1)(f)}));  // deferred: its own pass
  auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(g));
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  expect_optimised_like_plain(plan, {3, 9}, &pass_bits::gradient_sums, 5);
}

TEST(NnGraphExecutor, GradientsSharedByAnAddsInputsOrAddedInPlaceGiveTheBitsOfThePlainPasses) {
  // An Add gives every input its output's gradient: written once, to the input read last in the backward pass; an
  // input only the Add reads takes it from there in place, unless another reader of that first input adds its part
  // before the second input's layer reads it (`late` reads `block` between `a` and the Add; the first of `twice`'s
  // two convolutions of `merged`), and never an input the Add reads twice. Aliased: the first block's batch norm,
  // the second convolution of `merged` and `same` (whose Add is read after `late`'s). The convolutions that read
  // `p`, `block` and `merged` after another reader add their part of its gradient in place: through the kernels'
  // buffer with 8 channels, as the Winograd path stores it with 16 (a whole vector on every ISA). The passes must
  // give the plain passes' bits either way.
  for (std::size_t ch : {std::size_t{8}, std::size_t{16}}) {
    SCOPED_TRACE(std::to_string(ch) + " channels");
    auto x = nn::input_tensor({6, 6, 3});
    const block_layers lay{ch};
    auto p = lay.relu(lay.bn()(lay.conv()(x)));
    auto block = lay.relu(nn::add{}({lay.bn()(lay.conv()(p)), p}));  // the batch norm takes p's gradient: aliased
    auto a = lay.bn()(lay.conv()(block));
    auto late = lay.conv()(block);  // reads block after a: a keeps its own buffer
    auto merged = nn::add{}({block, a});
    auto twice = nn::add{}({merged, lay.conv()(merged), lay.conv()(merged)});
    auto same = lay.relu(nn::add{}({twice, twice, lay.bn()(lay.conv()(twice))}));  // twice read twice: not aliased
    auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(nn::add{}({same, late})));
    const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
    for (std::size_t batch : {std::size_t{3}, std::size_t{8}}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      const pass_bits shared = run_passes(plan, true, true, batch);
      const pass_bits plain = run_passes(plan, true, false, batch);
      EXPECT_EQ(shared.aliased, 3u);
      EXPECT_EQ(plain.aliased, 0u);
      expect_same_passes(shared, plain);
      expect_same_passes(run_passes(plan, false, true, batch), run_passes(plan, false, false, batch));
    }
  }
}

TEST(NnGraphExecutor, LayersLaidOutInOrderSummarisedAndTheLossCountsTheBatch) {
  // The factory's layers (graph_layer_factory.hpp), their places in the arenas (graph_layer_info.hpp), Keras's
  // summary of them (graph_summary.hpp) and a step's counts (step_stats.hpp), on one small graph.
  auto x = nn::input_tensor({4, 4, 3});
  auto y = nn::conv2d{8, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same}(x);
  y = nn::activation_layer{nn::activation::relu}(nn::batch_normalization{0.9, 1e-3}(y));
  auto out = nn::dense{3, nn::activation::softmax}(nn::global_average_pooling2d{}(y));
  const auto plan = d::plan_model(*out.graph(), x.node(), out.node());
  d::graph_executor<float> exec(plan);
  const std::vector<d::graph_layer_info>& info = exec.info();
  ASSERT_EQ(info.size(), 5u);
  const std::vector<std::string> types{"Conv2D", "BatchNormalization", "Activation", "GlobalAveragePooling2D",
                                       "Dense"};
  const std::vector<std::size_t> counts{3 * 3 * 3 * 8 + 8, 2 * 8, 0, 0, 8 * 3 + 3};
  const std::vector<std::size_t> states{0, 2 * 8, 0, 0, 0};
  std::size_t offset = 0, state_offset = 0;
  for (std::size_t i = 0; i < info.size(); ++i) {
    SCOPED_TRACE(info[i].name);
    EXPECT_EQ(info[i].type, types[i]);
    EXPECT_EQ(info[i].count, counts[i]);
    EXPECT_EQ(info[i].state_count, states[i]);
    EXPECT_EQ(info[i].offset, offset);  // the arenas hold the layers back to back, in order
    EXPECT_EQ(info[i].state_offset, state_offset);
    if (i > 0) {
      EXPECT_EQ(info[i].inbound, std::vector<std::string>{info[i - 1].name});
    }
    offset += info[i].count;
    state_offset += info[i].state_count;
  }
  EXPECT_EQ(exec.parameter_count(), offset);
  EXPECT_EQ(exec.state().size(), state_offset);

  std::ostringstream summary;
  d::print_graph_summary(summary, exec.input_shape(), info, offset, state_offset);
  // Keras's row: the first column cut at 32 characters, the parameters and the model state counted together.
  EXPECT_NE(summary.str().find("\n batch_normalization (BatchNorm (None, 4, 4, 8)      32          ['conv2d[0][0]']\n"),
            std::string::npos)
      << summary.str();
  EXPECT_NE(summary.str().find("Total params: 283\nTrainable params: 267\nNon-trainable params: 16\n"),
            std::string::npos)
      << summary.str();
  EXPECT_EQ(d::grouped(860874), "860,874");
  EXPECT_EQ(d::grouped(999), "999");

  // A step's stats: every sample counted, and `correct` the samples whose arg-max output is their label.
  const std::size_t batch = 6;
  exec.initialize(5);
  exec.reserve(batch);
  std::vector<float> in(batch * exec.input_size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(2 * d::random_unit(21, 0, i) - 1);
  const std::vector<std::int64_t> labels{0, 1, 2, 0, 1, 2};
  const std::vector<float> weights(batch, 1.0f);
  exec.forward_pass(in.data(), batch, true, false);
  const nn::step_stats st = exec.loss_pass(labels, weights, batch, false, 0.0);
  std::size_t correct = 0;
  for (std::size_t s = 0; s < batch; ++s) {
    const auto row = exec.outputs().subspan(s * 3, 3);
    correct += static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin()) ==
               static_cast<std::size_t>(labels[s]);
  }
  EXPECT_EQ(st.count, batch);
  EXPECT_EQ(st.correct, correct);
  // Neither none nor all right, so that neither a zero nor the batch size passes for the count.
  EXPECT_GT(correct, 0u);
  EXPECT_LT(correct, batch);
  EXPECT_TRUE(std::isfinite(st.loss_sum));
  EXPECT_GT(st.loss_sum, 0.0);
}

TEST(NnGraphExecutor, BatchNormInferenceIsKerasMapOfTheMovingStatistics) {
  // The map both the plain and the folded passes apply: γ·(x − mean)/√(variance + ε) + β, each factor its own
  // (γ, β, mean and variance of 20 channels all different), against double sums.
  auto x = nn::input_tensor({2, 3, 20});
  auto y = nn::batch_normalization{0.9, 1e-3}(x);
  const auto plan = d::plan_model(*y.graph(), x.node(), y.node());
  d::graph_executor<float> exec(plan);
  exec.initialize(7);
  exec.reserve(2);
  const std::size_t c = 20;
  for (std::size_t j = 0; j < c; ++j) {
    exec.parameters()[j] = static_cast<float>(0.5 + d::random_unit(16, 0, j));            // γ
    exec.parameters()[c + j] = static_cast<float>(d::random_unit(16, 1, j) - 0.5);        // β
    exec.state()[j] = static_cast<float>(2 * d::random_unit(16, 2, j) - 1);              // moving mean
    exec.state()[c + j] = static_cast<float>(0.1 + 2 * d::random_unit(16, 3, j));        // moving variance
  }
  std::vector<float> in(2 * 6 * c);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(4 * d::random_unit(17, 0, i) - 2);
  exec.forward_pass(in.data(), 2, false, false);
  const auto out = exec.outputs();
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::size_t j = i % c;
    const double want = static_cast<double>(exec.parameters()[j]) *
                            (static_cast<double>(in[i]) - static_cast<double>(exec.state()[j])) /
                            std::sqrt(static_cast<double>(exec.state()[c + j]) + 1e-3) +
                        static_cast<double>(exec.parameters()[c + j]);
    EXPECT_NEAR(static_cast<double>(out[i]), want, 1e-6 * (1 + std::abs(want))) << "element " << i;
  }
}

}  // namespace internals_test
