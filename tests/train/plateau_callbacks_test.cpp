// EarlyStopping and ReduceLROnPlateau: Keras's decisions on given sequences of monitored values, and in `fit` with
// two replicas, which see the same reduced logs and decide the same at the same epoch.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/early_stopping.hpp>
#include <mwstrat/train/callbacks/reduce_lr_on_plateau.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace plateau_callbacks_test {

using namespace mwstrat;
using test::blob_batches;
using test::plain_sgd;
using test::softmax_regression;

// The parts of a train_context the two callbacks use, for driving them epoch by epoch.
struct fake_ctx {
  struct {
    bool is_chief() const { return true; }
    int replica_id() const { return 0; }
  } strategy;
  struct {
    std::vector<float> p{0.0f, 0.0f};
    std::span<float> parameters() { return p; }
  } model;
  plain_sgd optimizer;
  bool stop_training = false;
};

epoch_logs with(const std::string& name, double value, int epoch) {
  epoch_logs l;
  l.epoch = epoch;
  if (name == "loss") l.loss = value;
  if (name == "accuracy") l.accuracy = value;
  if (name == "val_loss") l.val_loss = value;
  return l;
}

// Feeds `values` epoch by epoch; the model's weights are the epoch number. Returns the epoch it stopped at.
std::optional<int> run_early_stopping(early_stopping& es, fake_ctx& ctx, const std::string& monitor,
                                      const std::vector<double>& values) {
  es.on_train_begin(ctx);
  for (int e = 0; e < static_cast<int>(values.size()); ++e) {
    ctx.model.p.assign(2, static_cast<float>(e));
    es.on_epoch_end(ctx, e, with(monitor, values[static_cast<std::size_t>(e)], e));
    if (ctx.stop_training) return e;
  }
  return std::nullopt;
}

TEST(early_stopping, stops_after_patience_epochs_without_improvement) {
  std::ostringstream log;
  early_stopping_options o;
  o.monitor = "val_loss";
  o.patience = 3;
  o.log = &log;
  early_stopping es(o);
  fake_ctx ctx;
  // Best 0.9 at epoch 1; epochs 2, 3, 4 do not beat it: stop at epoch 4.
  EXPECT_EQ(run_early_stopping(es, ctx, "val_loss", {1.0, 0.9, 0.95, 0.92, 0.91, 0.5}), 4);
  EXPECT_EQ(es.best_epoch(), 1);
  EXPECT_EQ(es.best(), 0.9);
  EXPECT_NE(log.str().find("Epoch 5: early stopping"), std::string::npos) << log.str();
  EXPECT_EQ(ctx.model.p[0], 4.0f) << "without restore_best_weights the weights stay";
}

TEST(early_stopping, min_delta_mode_baseline_and_restore_best_weights) {
  fake_ctx ctx;
  {
    early_stopping_options o;  // min_delta: 0.89 is not 0.05 better than 0.9
    o.monitor = "loss";
    o.patience = 1;
    o.min_delta = 0.05;
    o.log = nullptr;
    early_stopping es(o);
    EXPECT_EQ(run_early_stopping(es, ctx, "loss", {1.0, 0.9, 0.89, 0.5}), 2);
  }
  {
    early_stopping_options o;  // auto mode: accuracy goes up; restore epoch 1's weights at the stop
    o.monitor = "accuracy";
    o.patience = 2;
    o.restore_best_weights = true;
    o.log = nullptr;
    early_stopping es(o);
    ctx.stop_training = false;
    EXPECT_EQ(run_early_stopping(es, ctx, "accuracy", {0.5, 0.8, 0.7, 0.79, 0.9}), 3);
    EXPECT_EQ(es.best_epoch(), 1);
    EXPECT_EQ(ctx.model.p[0], 1.0f) << "the best epoch's weights are back";
  }
  {
    early_stopping_options o;  // mode max on a loss: falling values never improve
    o.monitor = "loss";
    o.mode = "max";
    o.patience = 1;
    o.log = nullptr;
    early_stopping es(o);
    ctx.stop_training = false;
    EXPECT_EQ(run_early_stopping(es, ctx, "loss", {1.0, 0.9, 0.8}), 1);
  }
  {
    early_stopping_options o;  // baseline: improvements that do not beat 0.5 do not reset the count
    o.monitor = "loss";
    o.patience = 2;
    o.baseline = 0.5;
    o.log = nullptr;
    early_stopping es(o);
    ctx.stop_training = false;
    // As in Keras: improving epochs never stop, but the first epoch that does not improve stops at once, since
    // the count was never reset; without the baseline it would be the first epoch of patience 2.
    EXPECT_EQ(run_early_stopping(es, ctx, "loss", {1.0, 0.9, 0.8, 0.7, 0.75, 0.74}), 4);
    o.baseline.reset();
    early_stopping no_baseline(o);
    ctx.stop_training = false;
    EXPECT_EQ(run_early_stopping(no_baseline, ctx, "loss", {1.0, 0.9, 0.8, 0.7, 0.75, 0.74}), 5);
  }
  EXPECT_THROW(early_stopping(early_stopping_options{.mode = "upward"}), config_error);
  early_stopping typo(early_stopping_options{.monitor = "los"});
  fake_ctx c2;
  typo.on_train_begin(c2);
  EXPECT_THROW(typo.on_epoch_end(c2, 0, epoch_logs{}), config_error);
}

TEST(reduce_lr_on_plateau, reduces_by_factor_after_patience_with_cooldown_down_to_min_lr) {
  std::ostringstream log;
  reduce_lr_on_plateau_options o;
  o.monitor = "val_loss";
  o.factor = 0.5;
  o.patience = 2;
  o.cooldown = 1;
  o.min_lr = 0.01;
  o.log = &log;
  reduce_lr_on_plateau r(o);
  fake_ctx ctx;
  ctx.optimizer.rate = 0.1;
  r.on_train_begin(ctx);
  std::vector<double> rates;
  for (int e = 0; e < 11; ++e) {
    r.on_epoch_end(ctx, e, with("val_loss", 1.0, e));  // a plateau from the start
    rates.push_back(ctx.optimizer.rate);
  }
  // Epoch 0 sets the best; 1, 2 wait; reduce at 2; a cooldown epoch; wait 2 more; ... never below 0.01.
  const std::vector<double> expected{0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125, 0.01, 0.01, 0.01};
  ASSERT_EQ(rates.size(), expected.size());
  for (std::size_t i = 0; i < rates.size(); ++i) EXPECT_DOUBLE_EQ(rates[i], expected[i]) << "epoch " << i;
  EXPECT_NE(log.str().find("Epoch 3: ReduceLROnPlateau reducing learning rate to 0.05."), std::string::npos)
      << log.str();

  // An improvement larger than min_delta resets the count.
  reduce_lr_on_plateau r2(reduce_lr_on_plateau_options{.monitor = "loss", .factor = 0.5, .patience = 2,
                                                       .log = nullptr});
  ctx.optimizer.rate = 0.1;
  r2.on_train_begin(ctx);
  for (const double v : {1.0, 1.0, 0.5, 0.5, 0.49995}) r2.on_epoch_end(ctx, 0, with("loss", v, 0));
  EXPECT_DOUBLE_EQ(ctx.optimizer.rate, 0.05) << "0.49995 is within min_delta 1e-4 of 0.5: the second plateau";
  EXPECT_THROW(reduce_lr_on_plateau(reduce_lr_on_plateau_options{.factor = 1.0}), config_error);
}

// Records every epoch's logs, as this worker saw them.
struct log_recorder {
  std::vector<epoch_logs>* logs;
  template <class Ctx>
  void on_epoch_end(Ctx&, int, const epoch_logs& l) {
    logs->push_back(l);
  }
};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(plateau_callbacks, every_worker_sees_the_same_logs_and_decides_the_same_at_the_same_epoch) {
  constexpr std::size_t features = 8, classes = 4;
  std::vector<std::vector<epoch_logs>> logs(2);
  std::vector<std::vector<float>> params(2);
  std::vector<std::optional<int>> stopped(2);
  std::vector<double> final_rate(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    sgd.rate = 0.5;
    blob_batches train(256, features, classes, 32, 2, c.rank(), 4), val(64, features, classes, 32, 2, c.rank(), 6);
    fit_options fo;
    fo.epochs = 30;
    // Demands a val_loss 0.05 better each epoch: it soon cannot, and stops 2 epochs later, restoring the best.
    early_stopping es(early_stopping_options{.monitor = "val_loss", .min_delta = 0.05, .patience = 2,
                                             .restore_best_weights = true, .log = nullptr});
    reduce_lr_on_plateau lr(reduce_lr_on_plateau_options{.monitor = "val_loss", .factor = 0.5, .patience = 1,
                                                         .min_delta = 0.05, .log = nullptr});
    const auto r = static_cast<std::size_t>(c.rank());
    log_recorder rec{&logs[r]};
    const history h = fit(strategy, model, sgd, train, val, fo, lr, rec, es);
    EXPECT_TRUE(h.stopped_early);
    params[r].assign(model.parameters().begin(), model.parameters().end());
    stopped[r] = es.stopped_epoch();
    final_rate[r] = sgd.rate;
  });
  ASSERT_TRUE(stopped[0].has_value());
  EXPECT_LT(*stopped[0], 29);
  EXPECT_EQ(stopped[0], stopped[1]);
  EXPECT_EQ(params[0], params[1]);
  EXPECT_EQ(final_rate[0], final_rate[1]);
  EXPECT_LT(final_rate[0], 0.5) << "the plateau reduced the rate";
  ASSERT_EQ(logs[0].size(), logs[1].size());
  for (std::size_t e = 0; e < logs[0].size(); ++e) {
    EXPECT_TRUE(same_bits(logs[0][e].loss, logs[1][e].loss)) << "epoch " << e;
    EXPECT_TRUE(same_bits(*logs[0][e].val_loss, *logs[1][e].val_loss)) << "epoch " << e;
    EXPECT_TRUE(same_bits(*logs[0][e].val_accuracy, *logs[1][e].val_accuracy)) << "epoch " << e;
  }
}

}  // namespace plateau_callbacks_test
