// ModelCheckpoint's monitor, save_best_only, mode and save_freq (epoch or a number of global steps), each on a
// known sequence of logs or a known number of steps.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/model_checkpoint.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/fit_metrics.hpp>
#include <mwstrat/train/saved_model.hpp>
#include <mwstrat/train/train_context.hpp>

#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace model_checkpoint_test {

using namespace mwstrat;
using test::blob_batches;
using test::momentum_sgd;
using test::softmax_regression;
namespace fs = std::filesystem;

constexpr std::size_t features = 6, classes = 3;

std::vector<std::string> names(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.filename().string());
  return out;
}

// Drives `checkpoint` through epochs whose `monitor` takes `values`; the model's weights are all set to the epoch
// number before each epoch ends. Returns the file names written.
std::vector<std::string> feed(model_checkpoint_options o, const std::string& monitor, const std::vector<double>& values,
                              const fs::path& dir, std::vector<float>* last_saved_weights = nullptr) {
  std::vector<std::string> written;
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    train_context<mirrored_strategy<local_collective&>, softmax_regression, momentum_sgd> ctx(strategy, model, sgd);
    ctx.steps_per_epoch = 5;
    o.filepath = (dir / o.filepath).string();
    model_checkpoint checkpoint(o);
    for (int e = 0; e < static_cast<int>(values.size()); ++e) {
      std::fill(model.parameters().begin(), model.parameters().end(), static_cast<float>(e + 1));
      epoch_logs logs;
      logs.epoch = e;
      logs.loss = 1.0;
      logs.accuracy = 0.5;
      const double v = values[static_cast<std::size_t>(e)];
      if (monitor == "loss") logs.loss = v;
      if (monitor == "accuracy") logs.accuracy = v;
      if (monitor == "val_loss") logs.val_loss = v;
      if (monitor == "val_accuracy") logs.val_accuracy = v;
      if (monitor.find("top_k") != std::string::npos) {  // a metric of the user's (train/fit_metrics.hpp)
        logs.val_loss = 1.0;                              // validated
        logs.metrics.push_back({monitor, v});
      }
      ctx.epoch = e + 1;
      ctx.step = 0;
      checkpoint.on_epoch_end(ctx, e, logs);
    }
    written = names(checkpoint.saved());
    if (last_saved_weights && !checkpoint.saved().empty()) {
      softmax_regression loaded(features, classes, 2);
      load_weights(checkpoint.saved().back(), loaded);
      last_saved_weights->assign(loaded.parameters().begin(), loaded.parameters().end());
    }
  });
  return written;
}

TEST(model_checkpoint_options, save_best_only_saves_when_the_monitored_value_improves_in_its_mode) {
  test::temp_dir dir;
  const std::vector<double> losses{1.0, 0.8, 0.9, 0.7, 0.7};
  model_checkpoint_options o;
  o.filepath = "min/w.{epoch:02d}.safetensors";
  o.monitor = "val_loss";
  o.save_best_only = true;  // mode auto: a loss improves downward; an equal value is no improvement
  std::vector<float> weights;
  EXPECT_EQ(feed(o, "val_loss", losses, dir.path(), &weights),
            (std::vector<std::string>{"w.01.safetensors", "w.02.safetensors", "w.04.safetensors"}));
  EXPECT_EQ(weights, std::vector<float>(weights.size(), 4.0f)) << "the file holds epoch 4's weights";

  o.filepath = "max/w.{epoch:02d}.safetensors";
  o.mode = "max";  // the same numbers, upward
  EXPECT_EQ(feed(o, "val_loss", {1.0, 0.8, 1.2, 0.7}, dir.path()),
            (std::vector<std::string>{"w.01.safetensors", "w.03.safetensors"}));

  o.filepath = "acc/w.{epoch:02d}-{val_accuracy:.2f}.safetensors";
  o.mode = "auto";  // an accuracy improves upward
  o.monitor = "val_accuracy";
  EXPECT_EQ(feed(o, "val_accuracy", {0.5, 0.7, 0.6, 0.9}, dir.path()),
            (std::vector<std::string>{"w.01-0.50.safetensors", "w.02-0.70.safetensors", "w.04-0.90.safetensors"}));

  o.filepath = "train/w.{epoch:02d}.safetensors";
  o.mode = "min";
  o.monitor = "loss";  // the training loss
  EXPECT_EQ(feed(o, "loss", {2.0, 3.0, 1.0}, dir.path()),
            (std::vector<std::string>{"w.01.safetensors", "w.03.safetensors"}));

  o.save_best_only = false;  // without it, every epoch
  o.filepath = "all/w.{epoch:02d}.safetensors";
  EXPECT_EQ(feed(o, "loss", {2.0, 3.0, 1.0}, dir.path()).size(), 3u);

  // A metric's name, as monitor and in the file name (the README and docs/training.md promise both).
  o.filepath = "metric/w.{epoch:02d}-{val_sparse_top_k_accuracy:.2f}.safetensors";
  o.mode = "auto";
  o.save_best_only = true;
  o.monitor = "val_sparse_top_k_accuracy";
  EXPECT_EQ(feed(o, "val_sparse_top_k_accuracy", {0.5, 0.4, 0.75}, dir.path()),
            (std::vector<std::string>{"w.01-0.50.safetensors", "w.03-0.75.safetensors"}));
  o.filepath = "metric/w.{epoch:02d}-{val_sparse_top_k_acuracy:.2f}.safetensors";  // misspelt: named at the save
  try {
    (void)feed(o, "val_sparse_top_k_accuracy", {0.5}, dir.path());
    ADD_FAILURE() << "a misspelt field was formatted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("{val_sparse_top_k_acuracy:.2f}: unknown field"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("val_sparse_top_k_accuracy)"), std::string::npos) << e.what();
  }

  model_checkpoint_options bad;
  bad.filepath = (dir.path() / "x").string();
  bad.mode = "best";
  EXPECT_THROW(model_checkpoint{bad}, config_error);
  bad.mode = "auto";
  bad.save_best_only = true;
  bad.monitor = "val_los";
  EXPECT_THROW(feed(bad, "val_loss", {1.0}, dir.path()), config_error) << "a monitor not in the logs is named";
}

TEST(model_checkpoint_options, save_freq_in_steps_saves_every_n_global_steps_across_epochs) {
  test::temp_dir dir;
  std::vector<std::vector<std::string>> saved(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches train(240, features, classes, 24, 2, c.rank(), 9);  // 10 steps an epoch
    model_checkpoint_options o;
    // A metric's name in a step save's file name: the batch logs carry the metrics' values so far.
    o.filepath = (dir.path() / "s.{epoch:02d}-{loss:.6f}-{mean_loss:.6f}.safetensors").string();
    o.save_freq = save_frequency::every(4);
    model_checkpoint every4(o);
    metrics ms(mean_loss{});
    fit_options fo;
    fo.epochs = 3;
    fit(strategy, model, sgd, train, fo, ms, every4);
    saved[static_cast<std::size_t>(c.rank())] = names(every4.saved());
  });
  // Global steps 4, 8 (epoch 1), 12, 16, 20 (epoch 2), 24, 28 (epoch 3): seven saves, none at the epochs' ends.
  ASSERT_EQ(saved[0].size(), 7u);
  EXPECT_TRUE(saved[1].empty()) << "only the chief writes";
  const std::vector<std::string> epochs_of_saves{"01", "01", "02", "02", "02", "03", "03"};
  for (std::size_t i = 0; i < saved[0].size(); ++i) {
    EXPECT_EQ(saved[0][i].substr(2, 2), epochs_of_saves[i]) << saved[0][i];
    EXPECT_TRUE(fs::exists(dir.path() / saved[0][i]));
    const std::string loss = saved[0][i].substr(5, 8);  // s.EE-<loss>-<mean_loss>.safetensors: the same value
    EXPECT_EQ(saved[0][i].substr(14, 8), loss) << saved[0][i];
  }

  // Per step, save_best_only compares the running training loss; val_* is not in a step's logs.
  std::vector<std::string> best;
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1);
    momentum_sgd sgd(model.parameters().size());
    blob_batches train(240, features, classes, 24, 1, 0, 9);
    model_checkpoint_options o;
    o.filepath = (dir.path() / "best/b.{epoch:02d}-{loss:.6f}.safetensors").string();
    o.save_freq = save_frequency::every(2);
    o.save_best_only = true;
    o.monitor = "loss";
    model_checkpoint best_steps(o);
    fit_options fo;
    fo.epochs = 1;
    fit(strategy, model, sgd, train, fo, best_steps);
    best = names(best_steps.saved());
    // A val_* monitor at save points that have no validation (every N steps): skipped, as Keras does, not an
    // error on the chief alone.
    o.monitor = "val_loss";
    model_checkpoint needs_validation(o);
    EXPECT_NO_THROW(fit(strategy, model, sgd, train, fo, needs_validation));
    EXPECT_TRUE(needs_validation.saved().empty());
  });
  ASSERT_GE(best.size(), 1u);
  EXPECT_LE(best.size(), 5u);
  for (std::size_t i = 1; i < best.size(); ++i) {
    EXPECT_LT(std::stod(best[i].substr(5, 8)), std::stod(best[i - 1].substr(5, 8))) << "each save improved";
  }
}

}  // namespace model_checkpoint_test
