#include <mwstrat/nn/metrics.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace nn = mwstrat::nn;

namespace metrics_test {

TEST(NnMetrics, MeanIsWeighted) {
  nn::mean_metric m;
  EXPECT_EQ(m.result(), 0.0);
  m.update_state(2.0, 3.0);
  m.update_sum(4.0, 1.0);
  EXPECT_DOUBLE_EQ(m.result(), 2.5);
  m.reset_state();
  EXPECT_EQ(m.count(), 0.0);
}

TEST(NnMetrics, SparseCategoricalAccuracy) {
  nn::sparse_categorical_accuracy acc;
  std::vector<float> scores{0.1f, 0.9f, 0.8f, 0.2f, 0.5f, 0.5f};
  std::vector<std::int64_t> labels{1, 1, 0};
  acc.update_state<float>(labels, scores, 2);
  EXPECT_EQ(acc.correct(), 2u);
  acc.update_counts(1, 1);
  EXPECT_DOUBLE_EQ(acc.result(), 0.75);
  acc.reset_state();
  EXPECT_EQ(acc.result(), 0.0);
}

}  // namespace metrics_test
