// libtorch::module_model on its own: the module's parameters and gradients are views of the arenas, autograd's
// accumulator hooks report gradients last-first while backward runs, it trains in storage the trainer gives (the
// shared host copy) and takes its values back, fit on 2 local replicas (threads) trains what 1
// replica trains on the whole batch, the module is intact after the adapter goes, and what it cannot train is refused
// naming the tensor.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/libtorch/module_model.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace module_model_release_test {

using namespace mwstrat;

// Two dense layers on the 8 pixels of test::learnable_blobs.
struct mlp : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
};

auto classify = [](mlp& n, const data::image_batch& b) {
  const auto rows = static_cast<std::int64_t>(b.size);
  const torch::Tensor x = torch::from_blob(const_cast<float*>(b.inputs.data()), {rows, 8});
  const torch::Tensor y = torch::from_blob(const_cast<std::int64_t*>(b.labels.data()), {rows}, torch::kInt64);
  const torch::Tensor logits = n.forward(x);
  return libtorch::classified{torch::nn::functional::cross_entropy(logits, y), logits, y};
};

struct fixture_batch {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  data::image_batch batch() const { return {x, y, y.size()}; }
};
fixture_batch blobs(std::size_t n) {
  const auto images = test::learnable_blobs(n);
  fixture_batch f;
  for (const auto p : images.pixels()) f.x.push_back(static_cast<float>(p) / 255.0f);
  f.y.assign(images.labels().begin(), images.labels().end());
  return f;
}

TEST(module_model, parameters_and_gradients_are_views_of_the_arenas_reported_last_first) {
  torch::manual_seed(3);
  auto net = std::make_shared<mlp>();
  const torch::Tensor before = net->fc1->weight.detach().clone();
  libtorch::module_model model(net, classify);
  ASSERT_EQ(model.parameters().size(), 8u * 16 + 16 + 16 * 4 + 4);
  EXPECT_EQ(net->fc1->weight.data_ptr<float>(), model.parameters().data()) << "fc1.weight is the arena's start";
  EXPECT_TRUE(torch::equal(net->fc1->weight.detach(), before)) << "the values were kept";
  EXPECT_EQ(model.fingerprint(), "libtorch(fc1.weight[16,8],fc1.bias[16],fc2.weight[4,16],fc2.bias[4])");
  ASSERT_EQ(model.named_parameters().size(), 4u);
  EXPECT_EQ(model.named_parameters()[2].name, "fc2.weight");
  EXPECT_EQ(model.named_parameters()[2].shape, (std::vector<std::int64_t>{4, 16}));

  const fixture_batch f = blobs(32);
  std::vector<std::pair<std::size_t, std::size_t>> seen;
  const libtorch::classifier_result r =
      model.train_batch(f.batch(), [&](std::size_t off, std::size_t n) { seen.emplace_back(off, n); });
  EXPECT_EQ(r.count, 32);
  EXPECT_GT(r.loss_sum, 0);
  // Contiguous, last first, covering the whole arena, and more than one report: buckets can leave during backward.
  ASSERT_GE(seen.size(), 2u);
  std::size_t end = model.gradients().size();
  for (const auto& [off, n] : seen) {
    EXPECT_EQ(off + n, end);
    end = off;
  }
  EXPECT_EQ(end, 0u);
  // The gradients autograd computed are in the gradient arena (net's .grad views it).
  EXPECT_EQ(net->fc2->bias.grad().data_ptr<float>(), model.gradients().data() + model.gradients().size() - 4);
  double norm = 0;
  for (const float g : model.gradients()) norm += static_cast<double>(g) * g;
  EXPECT_GT(norm, 0);
}

TEST(module_model, the_module_keeps_its_trained_values_after_the_adapter_goes) {
  torch::manual_seed(3);
  auto net = std::make_shared<mlp>();
  std::vector<float> arena;
  {
    libtorch::module_model model(net, classify);
    for (auto& v : model.parameters()) v += 0.5f;  // what an optimizer would do
    arena.assign(model.parameters().begin(), model.parameters().end());
  }
  EXPECT_FLOAT_EQ(net->fc1->weight.data_ptr<float>()[0], arena[0]);
  EXPECT_FLOAT_EQ(net->fc2->bias.data_ptr<float>()[3], arena.back());
  // A forward and backward still work on the module's own storage.
  const fixture_batch f = blobs(8);
  auto out = classify(*net, f.batch());
  out.loss.backward();
  EXPECT_TRUE(net->fc1->weight.grad().defined());
}

// The shared host copy's hook: the parameters and gradients move into storage the synchroniser gives (a host's
// shared region), the module trains there, and its values come back to the adapter's own arenas.
TEST(module_model, it_trains_in_storage_the_trainer_gives_and_takes_its_values_back) {
  static_assert(storage_adopting_model<libtorch::module_model<mlp, decltype(classify)>>);
  torch::manual_seed(3);
  auto net = std::make_shared<mlp>();
  libtorch::module_model model(net, classify);
  const std::size_t n = model.parameters().size();
  std::vector<float> params(model.parameters().begin(), model.parameters().end());
  std::vector<float> grads(n, 7.0f);  // stale values: a step must start from zero gradients
  const fixture_batch f = blobs(32);
  std::vector<float> own_grads;
  {
    // The same step in the adapter's own arenas, for reference; then back to the first values.
    libtorch::module_model reference(std::make_shared<mlp>(), classify);  // its own tensors (a copy would share them)
    std::copy(params.begin(), params.end(), reference.parameters().begin());
    (void)reference.train_batch(f.batch(), [](std::size_t, std::size_t) {});
    own_grads.assign(reference.gradients().begin(), reference.gradients().end());
  }

  model.adopt_storage(params, grads);
  EXPECT_EQ(model.parameters().data(), params.data());
  EXPECT_EQ(net->fc1->weight.data_ptr<float>(), params.data()) << "fc1.weight views the given storage";
  EXPECT_EQ(net->fc2->bias.grad().data_ptr<float>(), grads.data() + n - 4) << "fc2.bias's gradient too";
  EXPECT_EQ(model.named_parameters()[0].values.data(), params.data()) << "checkpoints read the given storage";
  std::size_t reported = 0;
  (void)model.train_batch(f.batch(), [&](std::size_t, std::size_t count) { reported += count; });
  EXPECT_EQ(reported, n) << "autograd's hooks still report every gradient";
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(grads[i], own_grads[i]) << "gradient " << i;

  params[0] = 42.0f;  // what the shared update would do
  model.use_own_storage();
  EXPECT_NE(model.parameters().data(), params.data());
  EXPECT_EQ(model.parameters()[0], 42.0f) << "the values came back";
  EXPECT_EQ(net->fc1->weight.data_ptr<float>(), model.parameters().data());
  EXPECT_EQ(model.gradients()[n - 1], own_grads[n - 1]);
  model.use_own_storage();  // twice is nothing

  std::vector<float> short_of_one(n - 1);
  try {
    model.adopt_storage(short_of_one, grads);
    ADD_FAILURE() << "storage of another size was taken";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("adopt_storage: " + std::to_string(n - 1) + " parameters"), std::string::npos)
        << e.what();
  }
}

// fit on `replicas` threads of the local collective, a global batch of 32: the final parameters.
std::vector<float> train(int replicas) {
  const auto images = test::learnable_blobs(256);
  std::vector<float> out;
  torch::set_num_threads(1);
  spawn_ranks(replicas, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    std::shared_ptr<mlp> net;
    {
      // libtorch's generator is one per process: the replicas' threads seed and draw from it one at a time, or
      // the chief's initial weights would depend on the other thread's timing.
      static std::mutex generator;
      const std::lock_guard lock(generator);
      torch::manual_seed(static_cast<std::uint64_t>(10 + c.rank()));  // differs: fit mirrors the chief's
      net = std::make_shared<mlp>();
    }
    libtorch::module_model model(net, classify);
    test::plain_sgd sgd{0.2};
    distributed_input data(images, 32, strategy, 5, data::data_shard{});
    fit_options o;
    o.steps_per_epoch = 5;
    o.catch_preemption_signals = false;
    const history h = fit(strategy, model, sgd, data, o);
    EXPECT_TRUE(h.epochs.at(0).has_accuracy);
    if (c.rank() == 0) out.assign(model.parameters().begin(), model.parameters().end());
  });
  return out;
}

TEST(module_model, two_local_replicas_of_half_the_batch_train_what_one_replica_trains) {
  const std::vector<float> one = train(1), two = train(2);
  ASSERT_EQ(one.size(), two.size());
  float largest = 0;
  for (const float v : one) largest = std::max(largest, std::abs(v));
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(one[i], two[i], 1e-5f * largest) << "element " << i;
}

template <class Module>
void expect_refused(std::shared_ptr<Module> m, const std::string& words) {
  auto step = [](Module&, const data::image_batch&) { return libtorch::classified{}; };
  try {
    libtorch::module_model model(m, step);
    FAIL() << "accepted; expected a refusal with '" << words << "'";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

struct with_batch_norm : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  with_batch_norm() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
  }
};
struct empty_module : torch::nn::Module {};

TEST(module_model, what_it_cannot_train_is_refused_naming_the_tensor) {
  auto doubles = std::make_shared<mlp>();
  doubles->to(torch::kFloat64);
  expect_refused(doubles, "parameter 'fc1.weight' is Double; the arena, the optimizers and the wire are float32");
  expect_refused(std::make_shared<with_batch_norm>(), "the module has the buffer 'bn.running_mean'");
  expect_refused(std::make_shared<empty_module>(), "the module has no parameters");
  auto frozen = std::make_shared<mlp>();
  for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  expect_refused(frozen, "no parameter of the module requires a gradient");
}

}  // namespace module_model_release_test
