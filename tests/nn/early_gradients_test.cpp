// Gradients reported before a layer's backward returns (nn/detail/layer_impl.hpp's `gradient_ready`): a dense or
// convolution layer reports its parameter gradients before it computes its input gradient, a large dense kernel in
// chunks of units from the last, so that a strategy's buckets can leave early; the one executor (both models) passes
// each report on at once. What is reported must already be
// final, arrive as a growing contiguous suffix, and every value — the parameter and the input gradients — must be the
// same bits as the layer's backward without a listener (one product over all units).
#include <mwstrat/nn.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/detail/counter_random.hpp>
#include <mwstrat/nn/detail/graph_executor.hpp>
#include <mwstrat/nn/layers/conv2d.hpp>
#include <mwstrat/nn/layers/dense.hpp>
#include <mwstrat/strategy/after_backward.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace nn = mwstrat::nn;
namespace d = mwstrat::detail;

namespace early_gradients_test {

std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One report: where, and the values it covered at the moment it was made.
struct report {
  std::size_t offset, count;
  std::vector<float> values;
};

// Runs one layer's forward then backward, with or without a listener; returns the parameter gradients, the input
// gradients and what was reported.
struct backward_result {
  std::vector<float> grads, dx;
  std::vector<report> reports;
};

backward_result run_backward(d::layer_impl<float>& layer, std::size_t batch, bool listen) {
  const std::size_t n = layer.param_count();
  std::vector<float> params(n);
  layer.initialize(params, 7, 3);
  // A bias that is not all zeros, so that the ReLU mask is mixed on both sides of zero.
  for (std::size_t i = 0; i < n; ++i) params[i] += 0.01f * static_cast<float>(i % 13) - 0.05f;
  layer.reserve(batch);
  const auto x = random_values(batch * layer.input_size(), 11);
  std::vector<float> y(batch * layer.output_size());
  const float* xp = x.data();
  layer.forward({batch, x.data(), y.data(), params.data(), true, 1, nullptr, nullptr, &xp});
  const auto dy = random_values(y.size(), 12);
  backward_result r;
  r.grads.assign(n, -99.0f);
  r.dx.assign(x.size(), -99.0f);
  struct context {
    backward_result* r;
    const float* grads;
  } ctx{&r, r.grads.data()};
  const d::gradient_ready ready{&ctx, [](void* c, std::size_t offset, std::size_t count) {
                                  auto& k = *static_cast<context*>(c);
                                  k.r->reports.push_back(
                                      {offset, count, std::vector<float>(k.grads + offset, k.grads + offset + count)});
                                }};
  float* dx = r.dx.data();
  layer.backward({batch, x.data(), y.data(), dy.data(), dx, params.data(), r.grads.data(), 1, nullptr, &dx, true,
                  listen ? &ready : nullptr});
  return r;
}

// The reports cover [end - covered, end) contiguously from the end and each held its final values.
void expect_final_suffix(const backward_result& r, std::size_t end, std::size_t covered) {
  std::size_t ready = end;
  for (const auto& rep : r.reports) {
    ASSERT_EQ(rep.offset + rep.count, ready) << "reports must grow as a contiguous suffix";
    ASSERT_GT(rep.count, 0u);
    ready = rep.offset;
    EXPECT_TRUE(same_bits(rep.values, std::vector<float>(r.grads.begin() + static_cast<std::ptrdiff_t>(rep.offset),
                                                         r.grads.begin() +
                                                             static_cast<std::ptrdiff_t>(rep.offset + rep.count))))
        << "gradient [" << rep.offset << ", " << rep.offset + rep.count << ") changed after it was reported";
  }
  EXPECT_EQ(end - ready, covered);
}


TEST(NnEarlyGradients, LargeDenseReportsBiasThenKernelChunksWithTheBitsOfOneProduct) {
  // 60 units x 40 000 inputs: above the split-invariant size, so the kernel is reported in two parts (its last 27
  // units, the fewest that make at least 2^20 elements, a default bucket, then the other 33), with a ReLU and both L2 terms (added before each report). Batch 7: rows no multiple
  // of a tile.
  nn::dense spec{60, nn::activation::relu};
  spec.kernel_regularizer = 0.01;
  spec.bias_regularizer = 0.02;
  d::dense_layer<float> whole(spec, {40000});
  d::dense_layer<float> early(spec, {40000});
  const auto plain = run_backward(whole, 7, false);
  const auto listened = run_backward(early, 7, true);
  EXPECT_TRUE(plain.reports.empty());
  EXPECT_TRUE(same_bits(plain.grads, listened.grads)) << "parameter gradients differ from the whole-layer product";
  EXPECT_TRUE(same_bits(plain.dx, listened.dx)) << "input gradients differ";
  const std::size_t n = whole.param_count();
  expect_final_suffix(listened, n, n);
  // The bias first, then the kernel in two parts.
  ASSERT_EQ(listened.reports.size(), 3u);
  EXPECT_EQ(listened.reports[0].offset, 60u * 40000u);
  EXPECT_EQ(listened.reports[0].count, 60u);
  EXPECT_EQ(listened.reports[1].count, 27u * 40000u);
}

// A layer that reports its whole gradient at once, before its input gradient: the same bits with and without a
// listener, and one report, final when made.
template <class Layer>
void expect_one_report_with_the_same_bits(Layer& whole, Layer& early, std::size_t batch) {
  const auto plain = run_backward(whole, batch, false);
  const auto listened = run_backward(early, batch, true);
  EXPECT_TRUE(same_bits(plain.grads, listened.grads));
  EXPECT_TRUE(same_bits(plain.dx, listened.dx));
  ASSERT_EQ(listened.reports.size(), 1u);
  expect_final_suffix(listened, whole.param_count(), whole.param_count());
}

TEST(NnEarlyGradients, SmallDenseAndConvolutionReportTheirWholeGradientBeforeTheInputGradient) {
  {
    d::dense_layer<float> whole(nn::dense{10}, {50});
    d::dense_layer<float> early(nn::dense{10}, {50});
    expect_one_report_with_the_same_bits(whole, early, 5);
  }
  {
    nn::conv2d spec{6, {3, 3}, nn::activation::relu};
    spec.kernel_regularizer = 0.01;
    d::conv2d_layer<float> whole(spec, {9, 8, 3});
    d::conv2d_layer<float> early(spec, {9, 8, 3});
    expect_one_report_with_the_same_bits(whole, early, 3);
  }
}

// Trains `a` with a listener and `b` without on one batch of four: `a`'s reports must tile its arena from the end,
// each final when made, and both must end with the same gradient bits. Returns how many reports `a` made.
template <class Model>
std::size_t expect_final_ordered_reports(Model& a, Model& b, const std::vector<float>& x) {
  const std::size_t batch = 4;
  const std::vector<std::int64_t> labels{1, 7, 3, 0};
  std::vector<std::pair<std::size_t, std::size_t>> slices;
  std::vector<std::vector<float>> at_report;
  a.train_batch(x, labels, batch, [&](std::size_t offset, std::size_t count) {
    slices.emplace_back(offset, count);
    auto g = a.gradients();
    at_report.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(offset),
                           g.begin() + static_cast<std::ptrdiff_t>(offset + count));
  });
  b.train_batch(x, labels, batch);
  const auto ga = a.gradients();
  const auto gb = b.gradients();
  EXPECT_EQ(ga.size(), gb.size());
  if (ga.size() != gb.size()) return 0;
  EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)), 0);
  std::size_t ready = ga.size();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i].first + slices[i].second, ready);
    if (slices[i].first + slices[i].second != ready) return slices.size();
    ready = slices[i].first;
    EXPECT_EQ(std::memcmp(at_report[i].data(), ga.data() + slices[i].first, slices[i].second * sizeof(float)), 0)
        << "slice " << i << " changed after it was reported";
  }
  EXPECT_EQ(ready, 0u);
  return slices.size();
}

TEST(NnEarlyGradients, ModelPassesEveryReportOnFinalAndInOrder) {
  // A model whose large dense layer is chunked: the model's on_ready sees slices that tile the arena from the end,
  // several for that layer, each already final; and the gradients equal those of a model trained without a
  // listener (the other overload passes `after_backward`: no reports wanted, the dense kernel in one product).
  auto make = [] {
    return nn::sequential({nn::input{{28, 28}}, nn::reshape{{28, 28, 1}}, nn::conv2d{8, {3, 3}, nn::activation::relu},
                           nn::flatten{}, nn::dense{300, nn::activation::relu}, nn::dense{10}});
  };
  auto a = make();
  auto b = make();
  const std::size_t batch = 4;
  const auto x = random_values(batch * 784, 5);
  const std::size_t reports = expect_final_ordered_reports(a, b, x);
  EXPECT_GT(reports, 4u) << "the large dense kernel should be reported in chunks";
}

// ------------------------------------------------------------------------------------- the one executor's reports


// A layer of three parameters that reports them during its backward, logging when it is given a hook and when it
// returns; its output is its input.
struct reporting_probe final : d::layer_impl<float> {
  explicit reporting_probe(std::vector<std::string>* events) : d::layer_impl<float>({4}, {4}), events_(events) {}
  std::string keras_type() const override { return "Probe"; }
  std::string base_name() const override { return "probe"; }
  std::string config() const override { return "probe"; }
  std::size_t param_count() const override { return 3; }
  void forward(const d::forward_args<float>& a) override { std::copy_n(a.x, a.batch * 4, a.y); }
  void backward(const d::backward_args<float>& a) override {
    std::fill_n(a.grads, 3, 1.0f);
    if (a.ready != nullptr) {
      events_->push_back("given a hook");
      (*a.ready)(0, 3);
    }
    if (a.dx != nullptr) std::copy_n(a.dy, a.batch * 4, a.dx);
    events_->push_back("backward returns");
  }
  std::vector<std::string>* events_;
};

// The log of one training step of an executor over one probe, with `on_ready` logging each report.
template <class OnReady>
std::vector<std::string> probe_step(OnReady make_on_ready) {
  std::vector<std::string> events;
  std::vector<d::executor_layer<float>> layers;
  layers.push_back({std::make_unique<reporting_probe>(&events), {0}, "probe", {"input_layer"}});
  d::graph_executor<float> exec({4}, std::move(layers), false, {});
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 1.0f, -3.0f, 0.25f};
  const std::vector<std::int64_t> labels{2, 0};
  exec.reserve(2);
  exec.forward_pass(x.data(), 2, true, true);
  (void)exec.loss_pass(labels, {}, 2, true, 0.0);
  auto on_ready = make_on_ready(events);
  exec.backward_pass(2, on_ready);
  return events;
}


// What the sequential model always did, now the executor's for both models: a layer is given a hook, and a report it
// makes during its backward is passed on at once, before the layer computes its input gradient and returns.
TEST(NnEarlyGradients, ExecutorPassesALayersReportOnBeforeTheLayerReturns) {
  const auto events = probe_step([](std::vector<std::string>& l) {
    return [&l](std::size_t offset, std::size_t count) {
      l.push_back("report " + std::to_string(offset) + " " + std::to_string(count));
    };
  });
  EXPECT_EQ(events, (std::vector<std::string>{"given a hook", "report 0 3", "backward returns"}));
  // A step that reduces after backward wants no reports: no hook, and `after_backward` ignores the whole slice.
  const auto quiet = probe_step([](std::vector<std::string>&) { return mwstrat::after_backward{}; });
  EXPECT_EQ(quiet, (std::vector<std::string>{"backward returns"}));
}

// ResNet's convolutions and its dense layer report during their backward now: every report is final when made, the
// reports tile the arena from its end, and the gradients are the bits of a step without a listener.
TEST(NnEarlyGradients, ResNetReportsAreFinalInOrderAndKeepTheBits) {
  nn::resnet_options options;
  options.model = {.threads = 2, .seed = 3};
  auto a = nn::resnet_cifar(8, options);
  auto b = nn::resnet_cifar(8, options);
  const std::size_t batch = 4;
  const auto x = random_values(batch * a.input_size(), 9);
  expect_final_ordered_reports(a, b, x);
}

}  // namespace early_gradients_test
