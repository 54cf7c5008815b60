#include <mwstrat/error.hpp>
#include <mwstrat/tensor.hpp>

#include <gtest/gtest.h>

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
