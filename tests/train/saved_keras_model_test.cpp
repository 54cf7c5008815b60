// Defect 4 of issue 18: a saved model of the sequential reference CNN names every weight per layer in Keras's names
// and layouts, with the architecture (contract 1) in the metadata; load_model reads such files whoever wrote them
// and refuses another architecture without touching the model. Backups keep the arena layout.
#include <mwstrat/checkpoint/safetensors.hpp>
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/model_checkpoint.hpp>
#include <mwstrat/train/train_context.hpp>
#include <mwstrat/nn/graph_model.hpp>
#include <mwstrat/nn/sequential.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/train/saved_model.hpp>

#include <support/temp_dir.hpp>

#include <boost/json.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace saved_keras_model_test {

using namespace mwstrat;
namespace nn = mwstrat::nn;
using mwstrat::test::temp_dir;

nn::sequential small_cnn(std::uint64_t seed, std::size_t units = 16) {
  return nn::sequential({nn::input{{8, 8}}, nn::reshape{{8, 8, 1}}, nn::conv2d{4, {3, 3}, nn::activation::relu},
                         nn::flatten{}, nn::dense{units, nn::activation::relu}, nn::dense{10}},
                        {.threads = 1, .seed = seed});
}

std::vector<float> inputs(std::size_t n) {
  std::vector<float> x(n * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.1f);
  return x;
}

TEST(saved_keras_model, reference_cnn_tensors_have_keras_names_layouts_and_architecture) {
  temp_dir dir;
  auto model = nn::reference_cnn({.seed = 3});
  nn::sgd opt({.learning_rate = 0.1, .momentum = 0.9});
  save_model(dir.path() / "m.safetensors", model, opt);
  const auto file = safetensors_file::open(dir.path() / "m.safetensors");
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected{
      {"conv2d/kernel", {3, 3, 1, 32}}, {"conv2d/bias", {32}},  {"dense/kernel", {21632, 128}},
      {"dense/bias", {128}},            {"dense_1/kernel", {128, 10}}, {"dense_1/bias", {10}}};
  for (const auto& [name, shape] : expected) {
    const tensor_view* t = file.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  EXPECT_EQ(file.find("parameters"), nullptr);
  ASSERT_NE(file.find("optimizer/state"), nullptr);
  // Keras's dense kernel is [in, out]: element (i, o) is the arena's (o, i) (the arena keeps [out][in]).
  const auto& info = model.layers().back();
  const auto kernel = *file.find("dense_1/kernel")->try_values<float>();
  const auto arena = model.parameters().subspan(info.offset);
  for (std::size_t i = 0; i < 128; i += 7)
    for (std::size_t o = 0; o < 10; ++o) ASSERT_EQ(kernel[i * 10 + o], arena[o * 128 + i]) << i << "," << o;

  const auto arch = boost::json::parse(file.metadata().at(std::string(architecture_metadata_key))).as_array();
  ASSERT_EQ(arch.size(), 6u);
  const std::vector<std::string> names{"input_layer", "reshape", "conv2d", "flatten", "dense", "dense_1"};
  const std::vector<std::string> classes{"InputLayer", "Reshape", "Conv2D", "Flatten", "Dense", "Dense"};
  const std::vector<std::int64_t> params{0, 0, 320, 0, 2769024, 1290};
  for (std::size_t i = 0; i < arch.size(); ++i) {
    const auto& l = arch[i].as_object();
    EXPECT_EQ(l.at("name").as_string(), names[i]);
    EXPECT_EQ(l.at("class_name").as_string(), classes[i]);
    EXPECT_EQ(l.at("params").as_int64(), params[i]);
    if (i > 0) {
      EXPECT_EQ(l.at("inbound").as_array().at(0).as_string(), names[i - 1]);
    }
  }
  EXPECT_EQ(boost::json::serialize(arch[2].at("output_shape")), "[null,26,26,32]");
  EXPECT_EQ(arch[2].at("config").at("activation").as_string(), "relu");
  EXPECT_EQ(arch[4].at("config").at("units").as_int64(), 128);
}

TEST(saved_keras_model, load_model_restores_weights_predictions_and_optimizer) {
  temp_dir dir;
  auto a = small_cnn(1);
  nn::sgd sa({.learning_rate = 0.1, .momentum = 0.9});
  const auto x = inputs(4);
  const std::vector<std::int64_t> y{1, 2, 3, 4};
  for (int s = 0; s < 3; ++s) {
    a.train_batch(x, y, 4);
    a.execute([&] { sa.apply(a.parameters(), a.gradients()); });
  }
  save_model(dir.path() / "a.safetensors", a, sa);
  auto b = small_cnn(2);
  nn::sgd sb({.learning_rate = 0.1, .momentum = 0.9});
  load_model(dir.path() / "a.safetensors", b, sb);
  EXPECT_TRUE(std::ranges::equal(a.parameters(), b.parameters()));
  EXPECT_TRUE(std::ranges::equal(sa.slots(), sb.slots()));
  EXPECT_EQ(sb.iterations(), 3u);
  const auto pa = a.predict(x, 4);
  const std::vector<float> first(pa.begin(), pa.end());
  const auto pb = b.predict(x, 4);
  EXPECT_TRUE(std::ranges::equal(first, pb));
}

TEST(saved_keras_model, another_architecture_is_refused_by_name_and_the_model_is_untouched) {
  temp_dir dir;
  auto a = small_cnn(1);
  save_weights(dir.path() / "a.safetensors", a);
  auto other = small_cnn(5, 32);
  const std::vector<float> before(other.parameters().begin(), other.parameters().end());
  try {
    load_weights(dir.path() / "a.safetensors", other);
    FAIL() << "loaded another architecture";
  } catch (const checkpoint_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a.safetensors: the file holds another architecture"), std::string::npos) << what;
    EXPECT_NE(what.find("[null,16]"), std::string::npos) << what;
    EXPECT_NE(what.find("[null,32]"), std::string::npos) << what;
  }
  EXPECT_TRUE(std::ranges::equal(before, other.parameters()));
}

TEST(saved_keras_model, a_file_with_only_keras_tensors_loads_and_a_missing_or_misshapen_weight_is_named) {
  // What Python's safetensors writes: tensors by name, no metadata at all.
  temp_dir dir;
  auto a = small_cnn(1);
  std::vector<std::vector<float>> copies;
  std::vector<tensor_entry> entries;
  for (const auto& w : a.keras_weights()) copies.emplace_back(w.values.begin(), w.values.end());
  const auto weights = a.keras_weights();
  for (std::size_t i = 0; i < weights.size(); ++i)
    entries.push_back(make_tensor_entry(weights[i].name, std::span<const float>(copies[i]), weights[i].shape));
  save_safetensors(dir.path() / "py.safetensors", entries);
  auto b = small_cnn(9);
  load_weights(dir.path() / "py.safetensors", b);
  EXPECT_TRUE(std::ranges::equal(a.parameters(), b.parameters()));

  auto c = small_cnn(9);
  const std::vector<float> before(c.parameters().begin(), c.parameters().end());
  save_safetensors(dir.path() / "missing.safetensors", std::span(entries).first(entries.size() - 1));
  try {
    load_weights(dir.path() / "missing.safetensors", c);
    FAIL() << "loaded a file without dense_1/bias";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("no weight 'dense_1/bias'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::ranges::equal(before, c.parameters())) << "a refused file changes nothing";
  entries[0].shape = {3, 3, 4, 1};  // conv2d/kernel, transposed wrongly
  save_safetensors(dir.path() / "shape.safetensors", entries);
  try {
    load_weights(dir.path() / "shape.safetensors", c);
    FAIL() << "loaded a misshapen kernel";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'conv2d/kernel' has shape [3, 3, 4, 1]; the model's is [3, 3, 1, 4]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::ranges::equal(before, c.parameters()));
}

TEST(saved_keras_model, model_checkpoint_files_have_the_keras_layout_and_load_back) {
  temp_dir dir;
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    auto model = small_cnn(4);
    nn::adam opt(0.01);
    model_checkpoint cb({.filepath = (dir.path() / "ckpt-{epoch:02d}.safetensors").string(), .monitor = "loss"});
    train_context<mirrored_strategy<local_collective&>, nn::sequential, nn::adam> ctx(strategy, model, opt);
    epoch_logs logs;
    logs.loss = 1.0;
    cb.on_epoch_end(ctx, 0, logs);
    const auto file = safetensors_file::open(dir.path() / "ckpt-01.safetensors");
    ASSERT_NE(file.find("dense/kernel"), nullptr);
    EXPECT_EQ(file.find("dense/kernel")->shape, (std::vector<std::int64_t>{144, 16}));
    EXPECT_TRUE(file.metadata().contains(std::string(architecture_metadata_key)));
    auto again = small_cnn(8);
    load_weights(dir.path() / "ckpt-01.safetensors", again);
    EXPECT_TRUE(std::ranges::equal(model.parameters(), again.parameters()));
  });
}

// A file refused for its optimizer part (slots of another optimizer, a step count that is not a number) leaves
// the model and the optimizer as they were, and the error is a checkpoint_error naming the file.
TEST(saved_keras_model, a_refused_optimizer_state_leaves_the_model_and_optimizer_untouched) {
  temp_dir dir;
  auto a = small_cnn(1);
  nn::adam adam({});  // two slots per parameter; sgd with momentum has one
  const auto x = inputs(4);
  const std::vector<std::int64_t> y{1, 2, 3, 4};
  a.train_batch(x, y, 4);
  a.execute([&] { adam.apply(a.parameters(), a.gradients()); });
  save_model(dir.path() / "adam.safetensors", a, adam);
  auto b = small_cnn(2);
  nn::sgd sgd({.learning_rate = 0.1, .momentum = 0.9});
  const std::vector<float> before(b.parameters().begin(), b.parameters().end());
  try {
    load_model(dir.path() / "adam.safetensors", b, sgd);
    FAIL() << "loaded another optimizer's slots";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("adam.safetensors: optimizer/state holds"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::ranges::equal(b.parameters(), before));

  nn::sgd momentum({.learning_rate = 0.1, .momentum = 0.9});
  save_model(dir.path() / "sgd.safetensors", a, momentum);
  const safetensors_file file = safetensors_file::open(dir.path() / "sgd.safetensors");
  std::vector<tensor_entry> entries;
  for (const auto& t : file.tensors()) entries.push_back({t.name, t.type, t.shape, t.data});
  metadata_map metadata;
  for (const auto& [key, value] : file.metadata())
    if (!key.starts_with("mwstrat.crc") && !key.starts_with("mwstrat.header")) metadata[key] = value;
  metadata["mwstrat.optimizer_iterations"] = "lots";
  save_safetensors(dir.path() / "lots.safetensors", entries, metadata);
  try {
    load_model(dir.path() / "lots.safetensors", b, sgd);
    FAIL() << "loaded a step count of 'lots'";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("lots.safetensors: metadata mwstrat.optimizer_iterations is 'lots'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::ranges::equal(b.parameters(), before));
  EXPECT_EQ(sgd.iterations(), 0u);
}

// A graph model's Keras weights include batch norm's moving statistics (its model state): a refused file puts
// them back too.
TEST(saved_keras_model, a_refused_file_leaves_a_graph_models_moving_statistics_untouched) {
  temp_dir dir;
  const auto make = [](std::uint64_t seed) {
    const auto x = nn::input_tensor({4});
    const auto y = nn::batch_normalization{}(x);
    const auto z = nn::dense{2}(y);
    return nn::graph_model(x, z, {.seed = seed});
  };
  auto saved = make(1);
  for (float& v : saved.model_state()) v = 7.0f;
  std::vector<tensor_entry> entries;
  std::vector<std::vector<float>> kept;
  kept.reserve(8);
  for (const auto& w : saved.keras_weights()) {
    if (w.name == "dense/bias") continue;  // the file lacks one weight, listed after the moving statistics
    kept.emplace_back(w.values.begin(), w.values.end());
    entries.push_back({w.name, dtype::f32, w.shape, std::as_bytes(std::span<const float>(kept.back()))});
  }
  save_safetensors(dir.path() / "g.safetensors", entries);
  auto model = make(2);
  const std::vector<float> params(model.parameters().begin(), model.parameters().end());
  const std::vector<float> state(model.model_state().begin(), model.model_state().end());
  try {
    load_weights(dir.path() / "g.safetensors", model);
    FAIL() << "loaded a file without dense/bias";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("no weight 'dense/bias'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::ranges::equal(model.parameters(), params));
  EXPECT_TRUE(std::ranges::equal(model.model_state(), state)) << "the moving statistics were left overwritten";
}

}  // namespace saved_keras_model_test
