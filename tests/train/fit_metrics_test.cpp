// Metrics as a concept: accuracy, sparse top-k accuracy, the mean of the loss and a user's metric, reduced across
// workers in the step's own reduction, by name in the history, the logs, `evaluate` and the progress line.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/callbacks/progress_logger.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/fit_metrics.hpp>

#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

namespace fit_metrics_test {

using namespace mwstrat;
using test::blob_batches;
using test::plain_sgd;
using test::softmax_regression;

constexpr std::size_t features = 8, classes = 4;

// softmax_regression that keeps the logits of its last batch: a model_with_outputs.
struct regression_with_outputs : softmax_regression {
  using softmax_regression::softmax_regression;
  std::vector<float> logits;
  template <class OnReady>
  batch_stats train_batch(const data::image_batch& b, OnReady&& r) {
    keep_logits(b);
    return softmax_regression::train_batch(b, r);
  }
  batch_stats evaluate_batch(const data::image_batch& b) {
    keep_logits(b);
    return softmax_regression::evaluate_batch(b);
  }
  std::span<const float> outputs() const { return logits; }
  std::size_t output_size() const { return classes; }

 private:
  void keep_logits(const data::image_batch& b) {
    const auto p = parameters();
    logits.assign(b.size * classes, 0.0f);
    for (std::size_t i = 0; i < b.size; ++i) {
      for (std::size_t k = 0; k < classes; ++k) {
        float z = p[features * classes + k];
        for (std::size_t f = 0; f < features; ++f) z += b.inputs[i * features + f] * p[f * classes + k];
        logits[i * classes + k] = z;
      }
    }
  }
};
static_assert(model_with_outputs<regression_with_outputs>);

// A user's metric: the mean label of the examples seen (sums of labels and of examples).
struct mean_label {
  static constexpr std::size_t state_size = 2;
  std::string_view name() const { return "mean_label"; }
  void update_state(std::span<double> s, const metric_input<data::image_batch>& in) const {
    for (std::size_t i = 0; i < in.batch.size; ++i) s[0] += static_cast<double>(in.batch.labels[i]);
    s[1] += in.count;
  }
  double result(std::span<const double> s) const { return s[1] > 0 ? s[0] / s[1] : 0.0; }
};
static_assert(metric_for<mean_label, data::image_batch>);
static_assert(metric_for<sparse_top_k_accuracy, data::image_batch>);

std::map<std::string, double> by_name(const std::vector<named_value>& v) {
  std::map<std::string, double> m;
  for (const auto& x : v) m[x.name] = x.value;
  return m;
}

struct metric_run {
  std::vector<epoch_logs> epochs;
  evaluation test;
  std::string progress;
};

metric_run train_with_metrics(int workers) {
  metric_run out;
  std::mutex m;
  spawn_ranks(workers, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    regression_with_outputs model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(256, features, classes, 32, c.size(), c.rank(), 4);
    blob_batches val(64, features, classes, 32, c.size(), c.rank(), 6);
    metrics ms(sparse_categorical_accuracy{}, sparse_top_k_accuracy{2}, mean_loss{}, mean_label{});
    std::ostringstream text;
    progress_logger progress(progress_options{.out = &text, .live = 0});
    fit_options fo;
    fo.epochs = 2;
    const history h = fit(strategy, model, sgd, train, val, fo, ms, progress);
    metrics top(sparse_top_k_accuracy{1}, sparse_top_k_accuracy{classes});
    const evaluation e = evaluate(strategy, model, val, 0, top);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      out.epochs = h.epochs;
      out.test = e;
      out.progress = text.str();
    }
  });
  return out;
}

TEST(metrics, are_reduced_across_workers_by_their_rule_and_reported_by_name) {
  const metric_run two = train_with_metrics(2);
  const metric_run one = train_with_metrics(1);
  ASSERT_EQ(two.epochs.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    auto m2 = by_name(two.epochs[e].metrics);
    auto m1 = by_name(one.epochs[e].metrics);
    ASSERT_EQ(m2.size(), 8u) << "four metrics and their val_ values";
    // Each metric over the whole global batch, whatever the number of workers.
    for (const auto& [name, value] : m1) EXPECT_NEAR(m2[name], value, 1e-5) << name << ", epoch " << e;
    // Its own rule: accuracy and the mean loss agree with fit's own figures; a mean label of classes 0..3 drawn
    // evenly is 1.5.
    EXPECT_DOUBLE_EQ(m2["sparse_categorical_accuracy"], two.epochs[e].accuracy);
    EXPECT_DOUBLE_EQ(m2["mean_loss"], two.epochs[e].loss);
    EXPECT_DOUBLE_EQ(m2["val_mean_loss"], *two.epochs[e].val_loss);
    EXPECT_DOUBLE_EQ(m2["val_sparse_categorical_accuracy"], *two.epochs[e].val_accuracy);
    EXPECT_DOUBLE_EQ(m2["mean_label"], 1.5);
    EXPECT_GE(m2["sparse_top_k_categorical_accuracy"], m2["sparse_categorical_accuracy"]);
    EXPECT_LE(m2["sparse_top_k_categorical_accuracy"], 1.0);
    EXPECT_EQ(logged_value(two.epochs[e], "val_sparse_top_k_categorical_accuracy"),
              m2["val_sparse_top_k_categorical_accuracy"]) << "callbacks can monitor a metric by name";
  }
  // evaluate: top-1 is the accuracy, top-(all classes) is 1.
  ASSERT_EQ(two.test.metrics.size(), 2u);
  EXPECT_DOUBLE_EQ(two.test.metrics[0].value, two.test.accuracy);
  EXPECT_DOUBLE_EQ(two.test.metrics[1].value, 1.0);
  // The progress line names them, training metrics first, validation ones last.
  EXPECT_NE(two.progress.find("- accuracy: "), std::string::npos) << two.progress;
  EXPECT_NE(two.progress.find(" - sparse_top_k_categorical_accuracy: "), std::string::npos) << two.progress;
  EXPECT_NE(two.progress.find(" - mean_label: 1.5000 - val_loss: "), std::string::npos) << two.progress;
  EXPECT_NE(two.progress.find(" - val_mean_label: 1.5000\n"), std::string::npos) << two.progress;
}

// Throws at a global step, like a worker that dies there (the backup of an earlier step survives).
struct die_at_step {
  std::optional<std::uint64_t> at;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (at && ctx.global_step() == *at) throw std::runtime_error("injected failure");
  }
};

// 2 workers, 3 epochs of 8 steps, a backup every 3 steps; the chief's epoch logs.
std::vector<epoch_logs> train_resumably(const std::filesystem::path& backup_dir, std::optional<std::uint64_t> die) {
  std::vector<epoch_logs> out;
  std::mutex m;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    regression_with_outputs model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(256, features, classes, 32, c.size(), c.rank(), 4);
    metrics ms(sparse_top_k_accuracy{2}, mean_label{});
    std::ostringstream silent;
    backup_options bo{backup_dir, save_frequency::every(3)};
    bo.log = &silent;
    backup_and_restore backup(bo);
    die_at_step crash{die};
    fit_options fo;
    fo.epochs = 3;
    const history h = fit(strategy, model, sgd, train, fo, ms, backup, crash);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      out = h.epochs;
    }
  });
  return out;
}

TEST(metrics, a_mid_epoch_resume_reports_the_same_epoch_metrics_as_the_uninterrupted_run) {
  test::temp_dir reference_dir, dir;
  const std::vector<epoch_logs> reference = train_resumably(reference_dir.path() / "backup", std::nullopt);
  ASSERT_EQ(reference.size(), 3u);
  EXPECT_THROW(train_resumably(dir.path() / "backup", 13), std::exception);  // dies mid-epoch 2 (8 steps each)
  const std::vector<epoch_logs> resumed = train_resumably(dir.path() / "backup", std::nullopt);
  ASSERT_EQ(resumed.size(), 2u) << "the resumed run reports epochs 2 and 3";
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(resumed[e].metrics, reference[e + 1].metrics) << "epoch " << e + 2 << ": the metrics' sums from the "
                                                               "epoch's start come back with the backup";
    EXPECT_EQ(resumed[e].loss, reference[e + 1].loss);
  }
}

TEST(metrics, top_k_without_the_models_outputs_is_an_error_naming_what_is_missing) {
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);  // no outputs()
    blob_batches val(64, features, classes, 32, 1, 0, 6);
    metrics top(sparse_top_k_accuracy{2});
    try {
      (void)evaluate(strategy, model, val, 0, top);
      ADD_FAILURE() << "no error";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("needs the model's outputs"), std::string::npos) << e.what();
    }
  });
}

TEST(metrics, top_k_counts_a_row_with_a_nan_or_infinite_output_as_a_miss) {
  // Without the check a NaN label output has nothing "greater" than it and would count as a hit.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> outputs{nan, 0.1f, 0.2f,   // label 0 is NaN
                                   0.3f, nan, 0.1f,   // another output is NaN
                                   0.9f, inf, 0.1f,   // an infinite output
                                   0.9f, 0.1f, 0.2f}; // finite: label 0 is the top
  const std::vector<std::int64_t> labels{0, 0, 0, 0};
  const data::image_batch batch{{}, labels, 4};
  const metric_input<data::image_batch> in{batch, 0, 0, 4, outputs, 3};
  std::vector<double> state(2, 0.0);
  sparse_top_k_accuracy{2}.update_state(state, in);
  EXPECT_EQ(state[0], 1.0);
  EXPECT_EQ(state[1], 4.0);
}

}  // namespace fit_metrics_test
