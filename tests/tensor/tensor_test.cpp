#include <mwstrat/error.hpp>
#include <mwstrat/tensor.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

TEST(Tensor, ShapeIndexingAndRowMajorLayout) {
  mwstrat::tensor t{2, 3, 4};
  EXPECT_EQ(t.rank(), 3u);
  EXPECT_EQ(t.size(), 24u);
  t(1, 2, 3) = 5.0f;
  EXPECT_EQ(t.values()[1 * 12 + 2 * 4 + 3], 5.0f);
  EXPECT_EQ(mwstrat::shape(t), (std::vector<std::size_t>{2, 3, 4}));
  EXPECT_EQ(mwstrat::elements(t).data(), t.data());
}

TEST(Tensor, DoubleElementsAndReshape) {
  mwstrat::basic_tensor<double> t({2, 2}, {1.0, 2.0, 3.0, 4.0});
  EXPECT_EQ(t(1, 0), 3.0);
  t.reshape({4});
  EXPECT_EQ(t(3), 4.0);
  EXPECT_THROW(t.reshape({3}), mwstrat::config_error);
}

TEST(Tensor, MismatchedValuesAndIndicesAreConfigErrors) {
  EXPECT_THROW(mwstrat::basic_tensor<float>({2, 2}, {1.0f}), mwstrat::config_error);
  mwstrat::tensor t{2, 2};
  try {
    (void)t(1);
    FAIL() << "expected config_error";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("[mwstrat.tensor]"), std::string::npos);
  }
}

TEST(Tensor, EmptyTensor) {
  mwstrat::tensor t;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(mwstrat::elements(t).size(), 0u);
}

// Every index is checked against its own extent: none may alias another element or run off the end.
TEST(Tensor, EachIndexMustLieInsideItsExtent) {
  mwstrat::tensor t{2, 3};
  for (std::size_t i = 0; i < t.size(); ++i) t.values()[i] = static_cast<float>(i);
  EXPECT_EQ(t(1, 2), 5.0f);
  EXPECT_EQ(t(std::size_t{1}, 0u), 3.0f);
  EXPECT_EQ(t(std::int64_t{0}, short{2}), 2.0f);

  const auto expect_refused = [](auto access, const std::string& what) {
    try {
      (void)access();
      ADD_FAILURE() << "expected config_error for " << what;
    } catch (const mwstrat::config_error& e) {
      EXPECT_NE(std::string(e.what()).find("[mwstrat.tensor] " + what), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { return t(0, 5); }, "index 5 on axis 1 is outside its extent 3 (shape [2, 3])");
  expect_refused([&] { return t(0, 3); }, "index 3 on axis 1 is outside its extent 3");
  expect_refused([&] { return t(2, 0); }, "index 2 on axis 0 is outside its extent 2");
  expect_refused([&] { return t(-1, 0); }, "index -1 on axis 0 is outside its extent 2");
  expect_refused([&] { return t(0, -1); }, "index -1 on axis 1 is outside its extent 3");
  constexpr std::size_t huge = std::numeric_limits<std::size_t>::max();
  expect_refused([&] { return t(huge, 0); }, "index " + std::to_string(huge) + " on axis 0");
  const mwstrat::tensor& c = t;
  expect_refused([&] { return c(1, 3); }, "index 3 on axis 1 is outside its extent 3");
  expect_refused([&] { return c(std::int8_t{-2}, 0); }, "index -2 on axis 0");
  EXPECT_EQ(c(1, 1), 4.0f);

  mwstrat::tensor empty{0, 4};
  expect_refused([&] { return empty(0, 0); }, "index 0 on axis 0 is outside its extent 0");
  mwstrat::tensor scalar(std::vector<std::size_t>{});  // rank 0: one element, no index
  scalar() = 7.0f;
  EXPECT_EQ(scalar.size(), 1u);
  EXPECT_EQ(scalar.values()[0], 7.0f);
}

// An element count that std::size_t cannot hold is refused, not wrapped into a small allocation.
TEST(Tensor, ShapesWhoseElementCountOverflowsAreConfigErrors) {
  constexpr std::size_t root = std::size_t{1} << (std::numeric_limits<std::size_t>::digits / 2);  // root * root == 0
  constexpr std::size_t half = std::numeric_limits<std::size_t>::max() / 2 + 1;
  const std::string root_text = std::to_string(root);
  try {
    mwstrat::tensor t({root, root});
    ADD_FAILURE() << "accepted a shape of " << t.size() << " elements";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("[mwstrat.tensor] shape [" + root_text + ", " + root_text + "]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(mwstrat::tensor({half, 2}), mwstrat::config_error);
  EXPECT_THROW(mwstrat::tensor({2, 2, half}), mwstrat::config_error);
  EXPECT_THROW(mwstrat::tensor({half, 2}, std::vector<float>{}), mwstrat::config_error);
  EXPECT_THROW(mwstrat::tensor({root, root}, std::vector<float>{}), mwstrat::config_error);

  mwstrat::tensor e;
  EXPECT_THROW(e.reshape({root, root}), mwstrat::config_error);
  EXPECT_EQ(e.shape(), (std::vector<std::size_t>{0}));
  mwstrat::tensor four{2, 2};
  EXPECT_THROW(four.reshape({half, 2, 2}), mwstrat::config_error);
  EXPECT_EQ(four.shape(), (std::vector<std::size_t>{2, 2}));

  // A zero extent holds no elements, in any position.
  EXPECT_EQ(mwstrat::tensor({3, 0, 5}).size(), 0u);
  EXPECT_EQ(mwstrat::tensor({half, 2, 0}).size(), 0u);
}

// basic_tensor holds any tensor element but bool (refused at compile time: tests/tensor/compile_fail/).
static_assert(mwstrat::tensor_like<mwstrat::basic_tensor<std::uint8_t>>);
static_assert(mwstrat::tensor_like<mwstrat::basic_tensor<std::int64_t>>);
static_assert(mwstrat::tensor_like<const mwstrat::basic_tensor<std::int8_t>>);
