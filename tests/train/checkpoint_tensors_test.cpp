// train/checkpoint_tensors.hpp: how weights and optimizer slots move between a model and a checkpoint training_state;
// train/train_context.hpp: the position a callback reads.
#include <mwstrat/train/checkpoint_tensors.hpp>
#include <mwstrat/train/train_context.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

namespace checkpoint_tensors_test {

using namespace mwstrat;

// A model that names its tensors, as a Python reader wants them.
struct named_model {
  std::vector<float> arena{1, 2, 3, 4, 5};
  struct tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<float> values;
  };
  std::vector<tensor> named_parameters() {
    return {{"dense/kernel", {2, 2}, std::span<float>(arena).first(4)}, {"dense/bias", {1}, std::span<float>(arena).last(1)}};
  }
  std::span<float> parameters() { return arena; }
};

TEST(model_state, named_tensors_are_kept_and_unnamed_arenas_become_one_tensor) {
  named_model named;
  const auto views = weight_views(named);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].name, "dense/kernel");
  EXPECT_EQ(views[0].shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(views[1].values[0], 5.0f);

  test::softmax_regression plain(3, 2, 1);
  const auto one = weight_views(plain);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "parameters");
  EXPECT_EQ(one[0].shape, (std::vector<std::int64_t>{8}));
}

TEST(model_state, optimizer_slots_are_sized_for_the_model_and_stateless_optimizers_have_none) {
  test::momentum_sgd with_slots(8);
  static_assert(checkpointable_optimizer<test::momentum_sgd>);
  EXPECT_EQ(slot_views(with_slots, 8).at(0).values.size(), 8u);
  test::plain_sgd stateless;
  static_assert(!checkpointable_optimizer<test::plain_sgd>);
  EXPECT_TRUE(slot_views(stateless, 8).empty());
}

TEST(model_state, copying_refuses_a_size_mismatch_and_names_the_file) {
  std::vector<float> into(3);
  const std::vector<float_tensor> from{{"a", {2}, {1, 2}}, {"b", {1}, {3}}};
  copy_tensors_into(from, into, "weights", "f.safetensors", 0);
  EXPECT_EQ(into, (std::vector<float>{1, 2, 3}));
  std::vector<float> wrong(4);
  try {
    copy_tensors_into(from, wrong, "the file's weights", "f.safetensors", 0);
    FAIL();
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.path(), "f.safetensors");
    EXPECT_NE(std::string(e.what()).find("the file's weights hold 3 values, the model has 4"), std::string::npos);
  }
}

TEST(train_context, global_step_counts_whole_epochs_and_the_current_position) {
  int strategy = 0, model = 0, optimizer = 0;
  train_context<int, int, int> ctx(strategy, model, optimizer);
  ctx.steps_per_epoch = 70;
  ctx.epoch = 2;
  ctx.step = 5;
  EXPECT_EQ(ctx.global_step(), 145u);
}

}  // namespace checkpoint_tensors_test
