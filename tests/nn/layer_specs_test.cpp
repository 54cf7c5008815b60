// nn/layer_specs.hpp on its own, without a model: the descriptions start from Keras's defaults, each model's
// variant holds the layers that model accepts, and a description applies itself to any tensor type for which
// argument-dependent lookup finds an `apply_layer` (that is how nn/graph.hpp plugs in the functional API).
#include <mwstrat/nn/layer_specs.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <variant>

namespace nn = mwstrat::nn;

namespace layer_specs_test {

// A graph-building tensor of its own: applying a layer to it records which description was applied, to how many.
struct recorded {
  std::string layer;
  std::size_t inputs = 0;
};
struct probe_tensor {};
recorded apply_layer(const nn::conv2d& c, const probe_tensor&) { return {"conv2d " + std::to_string(c.filters), 1}; }
recorded apply_layer(const nn::dense& d, const probe_tensor&) { return {"dense " + std::to_string(d.units), 1}; }
recorded apply_layer(const nn::add&, std::initializer_list<probe_tensor> xs) { return {"add", xs.size()}; }
// No apply_layer takes it: no description can be applied to it.
struct plain_value {};

template <class Spec, class Tensor>
concept applies_to = requires(const Spec& spec, const Tensor& x) { spec(x); };

template <class T, class Variant>
inline constexpr bool is_alternative = false;
template <class T, class... Ts>
inline constexpr bool is_alternative<T, std::variant<Ts...>> = (std::is_same_v<T, Ts> || ...);


TEST(NnLayerSpecs, StartFromKerassDefaults) {
  const nn::conv2d conv{16};  // Conv2D(16, 3): strides 1, "valid", a bias, Glorot uniform, no activation
  EXPECT_EQ(conv.filters, 16u);
  EXPECT_EQ(conv.kernel_size, (std::array<std::size_t, 2>{3, 3}));
  EXPECT_EQ(conv.strides, (std::array<std::size_t, 2>{1, 1}));
  EXPECT_EQ(conv.padding, nn::padding::valid);
  EXPECT_TRUE(conv.use_bias);
  EXPECT_EQ(conv.kernel_initializer, nn::initializer::glorot_uniform);
  EXPECT_EQ(conv.activation, nn::activation::linear);
  EXPECT_EQ(conv.kernel_regularizer, 0.0);
  EXPECT_EQ(conv.bias_regularizer, 0.0);
  EXPECT_EQ(conv.algorithm, nn::conv_algorithm::automatic);

  const nn::dense dense{10};
  EXPECT_EQ(dense.activation, nn::activation::linear);
  EXPECT_EQ(dense.kernel_initializer, nn::initializer::glorot_uniform);

  const nn::max_pool2d pool{};  // MaxPooling2D(): 2x2, strides None (= the pool size), "valid"
  EXPECT_EQ(pool.pool_size, (std::array<std::size_t, 2>{2, 2}));
  EXPECT_EQ(pool.strides, (std::array<std::size_t, 2>{0, 0}));
  EXPECT_EQ(pool.padding, nn::padding::valid);

  const nn::batch_normalization bn{};  // BatchNormalization(): momentum 0.99, epsilon 0.001
  EXPECT_EQ(bn.momentum, 0.99);
  EXPECT_EQ(bn.epsilon, 1e-3);
  const nn::sync_batch_normalization sync_bn{};
  EXPECT_EQ(sync_bn.momentum, bn.momentum);
  EXPECT_EQ(sync_bn.epsilon, bn.epsilon);

  const nn::zero_padding2d pad{};  // ZeroPadding2D(): one row and one column on every side
  EXPECT_EQ(pad.height, (std::array<std::size_t, 2>{1, 1}));
  EXPECT_EQ(pad.width, (std::array<std::size_t, 2>{1, 1}));
}

TEST(NnLayerSpecs, ReadLikeKerassKeywordArguments) {
  // Conv2D(32, (5, 5), strides=2, padding="same", use_bias=False, kernel_initializer="he_normal")
  const nn::conv2d conv{.filters = 32,
                        .kernel_size = {5, 5},
                        .strides = {2, 2},
                        .padding = nn::padding::same,
                        .use_bias = false,
                        .kernel_initializer = nn::initializer::he_normal};
  EXPECT_EQ(conv.kernel_size, (std::array<std::size_t, 2>{5, 5}));
  EXPECT_EQ(conv.strides, (std::array<std::size_t, 2>{2, 2}));
  EXPECT_EQ(conv.padding, nn::padding::same);
  EXPECT_FALSE(conv.use_bias);
  EXPECT_EQ(conv.kernel_initializer, nn::initializer::he_normal);
  EXPECT_EQ(conv.activation, nn::activation::linear);  // what is not named keeps its default
}

TEST(NnLayerSpecs, EachModelsVariantHoldsTheLayersThatModelTakes) {
  // The sequential model: a chain of one-input layers, without batch norm or the residual pieces.
  static_assert(is_alternative<nn::input, nn::layer_spec> && is_alternative<nn::reshape, nn::layer_spec> &&
                is_alternative<nn::conv2d, nn::layer_spec> && is_alternative<nn::max_pool2d, nn::layer_spec> &&
                is_alternative<nn::relu, nn::layer_spec> && is_alternative<nn::flatten, nn::layer_spec> &&
                is_alternative<nn::dense, nn::layer_spec> && is_alternative<nn::dropout, nn::layer_spec> &&
                is_alternative<nn::softmax, nn::layer_spec>);
  static_assert(!is_alternative<nn::batch_normalization, nn::layer_spec> && !is_alternative<nn::add, nn::layer_spec> &&
                !is_alternative<nn::pad_channels_shortcut, nn::layer_spec>);
  static_assert(std::variant_size_v<nn::layer_spec> == 9);
  // The graph model: every description, the sequential ones included.
  static_assert(is_alternative<nn::batch_normalization, nn::graph_layer_spec> &&
                is_alternative<nn::sync_batch_normalization, nn::graph_layer_spec> &&
                is_alternative<nn::add, nn::graph_layer_spec> &&
                is_alternative<nn::activation_layer, nn::graph_layer_spec> &&
                is_alternative<nn::zero_padding2d, nn::graph_layer_spec> &&
                is_alternative<nn::global_average_pooling2d, nn::graph_layer_spec> &&
                is_alternative<nn::pad_channels_shortcut, nn::graph_layer_spec>);
  static_assert(std::variant_size_v<nn::graph_layer_spec> == 16);
  [&]<class... Ts>(std::variant<Ts...>*) {
    static_assert((is_alternative<Ts, nn::graph_layer_spec> && ...));
  }(static_cast<nn::layer_spec*>(nullptr));
  // A description stays a value: held by the variant, it compares and copies as its fields do.
  const nn::graph_layer_spec spec = nn::dense{.units = 4, .activation = nn::activation::relu};
  ASSERT_TRUE(std::holds_alternative<nn::dense>(spec));
  EXPECT_EQ(std::get<nn::dense>(spec).units, 4u);
  EXPECT_EQ(std::get<nn::dense>(spec).activation, nn::activation::relu);
}

TEST(NnLayerSpecs, ApplyThemselvesToAnyTensorThatLookupFindsAnApplyLayerFor) {
  const recorded conv = nn::conv2d{16}(probe_tensor{});
  EXPECT_EQ(conv.layer, "conv2d 16");
  EXPECT_EQ(conv.inputs, 1u);
  EXPECT_EQ(nn::dense{10}(probe_tensor{}).layer, "dense 10");
  const recorded sum = nn::add{}({probe_tensor{}, probe_tensor{}, probe_tensor{}});
  EXPECT_EQ(sum.layer, "add");
  EXPECT_EQ(sum.inputs, 3u);
  // Where no apply_layer fits, the call is not there at all (a failed substitution, not an error inside it).
  static_assert(applies_to<nn::conv2d, probe_tensor> && applies_to<nn::dense, probe_tensor>);
  static_assert(!applies_to<nn::relu, probe_tensor>);  // no apply_layer for relu on this tensor
  static_assert(!applies_to<nn::conv2d, plain_value>);
}

}  // namespace layer_specs_test
