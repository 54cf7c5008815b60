// fit/evaluate over the local collective (replicas as threads) with a model on the test's own types.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/csv_logger.hpp>
#include <mwstrat/train/callbacks/learning_rate_scheduler.hpp>
#include <mwstrat/train/callbacks/progress_logger.hpp>
#include <mwstrat/train/callbacks/terminate_on_nan.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/fit_metrics.hpp>

#include <support/comma_locale.hpp>
#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace fit_test {

using namespace mwstrat;
using test::blob_batches;
using test::plain_sgd;
using test::softmax_regression;

constexpr std::size_t features = 8, classes = 4, examples = 512;

// Trains `workers` replicas on global batch `global_batch` for `steps` steps; returns rank 0's parameters.
std::vector<float> train_replicas(int workers, std::size_t global_batch, int epochs, std::size_t bucket_bytes,
                                  std::uint32_t data_seed = 7) {
  std::vector<float> result;
  std::mutex m;
  spawn_ranks(workers, [&](local_collective& c) {
    gradient_sync_options sync;  // bucket_bytes 0: one reduction after backward
    if (bucket_bytes == 0) sync.overlap = reduction_overlap::never;
    else sync.bucket_bytes = bucket_bytes;
    mirrored_strategy<local_collective&> strategy(c, sync);
    softmax_regression model(features, classes, 100u + static_cast<std::uint32_t>(c.rank()));  // differ: mirrored
    plain_sgd sgd;
    blob_batches data(examples, features, classes, global_batch, c.size(), c.rank(), data_seed);
    fit_options options;
    options.epochs = epochs;
    fit(strategy, model, sgd, data, options);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      result.assign(model.parameters().begin(), model.parameters().end());
    }
  });
  return result;
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max({1e-3, std::abs(double(a[i])), std::abs(double(b[i]))});
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / scale);
  }
  return worst;
}

TEST(fit, n_replicas_of_batch_b_equal_one_replica_of_batch_nb) {
  const auto one = train_replicas(1, 64, 2, 0);
  for (int n : {2, 4}) {
    const auto many = train_replicas(n, 64, 2, 0);
    ASSERT_EQ(one.size(), many.size());
    EXPECT_LT(max_relative_difference(one, many), 1e-5) << n << " replicas";
  }
}

TEST(fit, same_world_size_and_seed_give_identical_bits) {
  const auto a = train_replicas(3, 48, 2, 64);
  const auto b = train_replicas(3, 48, 2, 64);
  EXPECT_EQ(a, b);
}

TEST(fit, bucketed_overlap_gives_the_same_bits_as_one_reduction_per_step) {
  // Buckets of 1 float force one bucket per layer; 0 disables overlap. Each element is reduced the same way.
  EXPECT_EQ(train_replicas(2, 32, 1, 4), train_replicas(2, 32, 1, 0));
}

// update_placement::sharded with plain SGD (each replica updates the part it reduced; the updated parameters are
// gathered) against every replica updating everything: the same bits on every replica, and the same step count.
TEST(fit, a_sharded_sgd_update_gives_the_same_bits_as_updating_everything) {
  const auto run = [](bool shard) {
    std::vector<std::vector<float>> all(3);
    std::vector<std::uint64_t> steps(3);
    spawn_ranks(3, [&](local_collective& c) {
      gradient_sync_options sync;
      sync.overlap = reduction_overlap::never;  // one reduction after backward: where the sharded update applies
      sync.update = shard ? update_placement::sharded : update_placement::replicated;
      mirrored_strategy<local_collective&> strategy(c, sync);
      softmax_regression model(features, classes, 55u + static_cast<std::uint32_t>(c.rank()));
      nn::sgd sgd(0.1);
      blob_batches data(examples, features, classes, 48, c.size(), c.rank(), 5);
      fit_options options;
      options.epochs = 2;
      fit(strategy, model, sgd, data, options);
      const auto r = static_cast<std::size_t>(c.rank());
      all[r].assign(model.parameters().begin(), model.parameters().end());
      steps[r] = sgd.iterations();
    });
    for (std::size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "replica " << r;
    EXPECT_EQ(steps[0], 2u * (examples / 48));
    return all[0];
  };
  EXPECT_EQ(run(true), run(false));
}

// The strategy concept's own example: a single process with no peers, nothing but the concept's members.
struct solo_strategy {
  int num_replicas_in_sync() const { return 1; }
  int replica_id() const { return 0; }
  bool is_chief() const { return true; }
  void verify_same(std::string_view, std::string_view) {}
  void mirror(std::span<float>) {}
  void mirror(std::span<double>) {}
  void mean_gradients(std::span<float>) {}
  void sum_metrics(std::span<double>) {}
  void barrier() {}
};
static_assert(strategy<solo_strategy>);
static_assert(!gradient_sync_strategy<solo_strategy, softmax_regression, plain_sgd>);

// A user's minimal strategy trains through fit on the replicated path, with the bits of one mirrored replica.
TEST(fit, a_strategy_with_only_the_concepts_members_trains) {
  solo_strategy solo;
  softmax_regression model(features, classes, 100u);
  plain_sgd sgd;
  blob_batches data(examples, features, classes, 64, 1, 0, 7);
  fit_options options;
  options.epochs = 2;
  const history h = fit(solo, model, sgd, data, options);
  EXPECT_EQ(h.epochs.size(), 2u);
  EXPECT_EQ(std::vector<float>(model.parameters().begin(), model.parameters().end()), train_replicas(1, 64, 2, 0));
}

TEST(fit, every_replica_ends_with_the_same_parameters) {
  std::vector<std::vector<float>> all(3);
  spawn_ranks(3, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 1000u * static_cast<std::uint32_t>(c.rank() + 1));
    plain_sgd sgd;
    blob_batches data(examples, features, classes, 30, 3, c.rank(), 3);
    fit(strategy, model, sgd, data, fit_options{});
    all[static_cast<std::size_t>(c.rank())].assign(model.parameters().begin(), model.parameters().end());
  });
  EXPECT_EQ(all[0], all[1]);
  EXPECT_EQ(all[0], all[2]);
}

TEST(fit, learns_and_reports_history_and_validation) {
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd{0.5};
    blob_batches train(examples, features, classes, 32, 2, c.rank(), 11);
    blob_batches val(256, features, classes, 64, 2, c.rank(), 12);
    fit_options options;
    options.epochs = 3;
    const history h = fit(strategy, model, sgd, train, val, options);
    ASSERT_EQ(h.epochs.size(), 3u);
    EXPECT_LT(h.epochs[2].loss, h.epochs[0].loss);
    ASSERT_TRUE(h.epochs[2].val_accuracy.has_value());
    EXPECT_GT(*h.epochs[2].val_accuracy, 0.8);
    EXPECT_EQ(h.epochs[0].steps, examples / 32);
    const evaluation e = evaluate(strategy, model, val);
    EXPECT_EQ(e.count, 256.0);  // each example once, all workers together
    EXPECT_DOUBLE_EQ(e.accuracy, *h.epochs[2].val_accuracy);
  });
}

// Records every hook, to check Keras's order.
struct recorder {
  std::vector<std::string>* events;
  template <class Ctx> void on_train_begin(Ctx&) { events->push_back("train_begin"); }
  template <class Ctx> void on_train_end(Ctx&, const history&) { events->push_back("train_end"); }
  template <class Ctx> void on_epoch_begin(Ctx&, int e) { events->push_back("epoch_begin " + std::to_string(e)); }
  template <class Ctx> void on_epoch_end(Ctx&, int e, const epoch_logs&) {
    events->push_back("epoch_end " + std::to_string(e));
  }
  template <class Ctx> void on_train_batch_begin(Ctx&, std::size_t s) {
    events->push_back("batch_begin " + std::to_string(s));
  }
  template <class Ctx> void on_train_batch_end(Ctx& ctx, std::size_t s, const batch_logs&) {
    events->push_back("batch_end " + std::to_string(s) + " global " + std::to_string(ctx.global_step()));
  }
  template <class Ctx> void on_test_begin(Ctx&) { events->push_back("test_begin"); }
  template <class Ctx> void on_test_end(Ctx&, const evaluation&) { events->push_back("test_end"); }
};

TEST(fit, callbacks_fire_in_keras_order) {
  std::vector<std::string> events;
  spawn_ranks(1, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(64, features, classes, 32, 1, 0, 1), val(64, features, classes, 32, 1, 0, 2);
    recorder r{&events};
    fit_options options;
    options.epochs = 2;
    options.validation_freq = 2;
    fit(strategy, model, sgd, train, val, options, r);
  });
  const std::vector<std::string> expected{
      "train_begin",  "epoch_begin 0", "batch_begin 0", "batch_end 0 global 1", "batch_begin 1",
      "batch_end 1 global 2", "epoch_end 0", "epoch_begin 1", "batch_begin 0", "batch_end 0 global 3",
      "batch_begin 1", "batch_end 1 global 4", "test_begin", "test_end", "epoch_end 1", "train_end"};
  EXPECT_EQ(events, expected);
}

struct stop_after {
  std::size_t steps;
  template <class Ctx> void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.global_step() >= steps) ctx.stop_training = true;
  }
};

TEST(fit, stop_training_ends_after_the_current_step_on_every_worker) {
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(examples, features, classes, 32, 2, c.rank(), 1);
    stop_after stop{5};
    fit_options options;
    options.epochs = 4;
    const history h = fit(strategy, model, sgd, train, options, stop);
    EXPECT_TRUE(h.stopped_early);
    ASSERT_EQ(h.epochs.size(), 1u);
    EXPECT_EQ(h.epochs[0].steps, 5u);
  });
}

// A model whose loss becomes NaN at a given step, for TerminateOnNaN.
struct nan_after : softmax_regression {
  using softmax_regression::softmax_regression;
  int calls = 0;
  template <class OnReady>
  batch_stats train_batch(const data::image_batch& b, OnReady&& r) {
    batch_stats s = softmax_regression::train_batch(b, r);
    if (++calls >= 3) s.loss_sum = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
};

TEST(fit, terminate_on_nan_stops_at_the_first_invalid_loss) {
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    nan_after model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(examples, features, classes, 32, 2, c.rank(), 1);
    std::ostringstream out;
    terminate_on_nan stop(out);
    fit_options options;
    options.epochs = 2;
    const history h = fit(strategy, model, sgd, train, options, stop);
    EXPECT_TRUE(h.stopped_early);
    EXPECT_EQ(h.epochs.at(0).steps, 3u);
    EXPECT_EQ(out.str().empty(), c.rank() != 0);
  });
}

TEST(fit, learning_rate_schedule_applies_on_every_worker) {
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd{0.4};
    blob_batches train(128, features, classes, 32, 2, c.rank(), 1);
    learning_rate_scheduler schedule([](int epoch, double lr) { return epoch == 0 ? lr : lr / 2; });
    fit_options options;
    options.epochs = 3;
    const history h = fit(strategy, model, sgd, train, options, schedule);
    EXPECT_DOUBLE_EQ(*h.epochs[0].learning_rate, 0.4);
    EXPECT_DOUBLE_EQ(*h.epochs[2].learning_rate, 0.1);
  });
}

// With all_workers, every line a worker prints carries its rank, the live bar's redraws included.
TEST(fit, every_workers_progress_lines_carry_its_rank) {
  std::vector<std::string> printed(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(128, features, classes, 32, 2, c.rank(), 1);
    std::ostringstream out;
    progress_logger progress({&out, true, 1, std::chrono::milliseconds(0)});
    fit_options options;
    options.epochs = 1;
    fit(strategy, model, sgd, train, options, progress);
    printed[static_cast<std::size_t>(c.rank())] = out.str();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    EXPECT_NE(printed[r].find("\r" + prefix + "1/4 ["), std::string::npos) << printed[r];
    std::size_t lines = 0;
    for (std::size_t at = printed[r].find('\r'); at != std::string::npos; at = printed[r].find('\r', at + 1), ++lines)
      EXPECT_EQ(printed[r].compare(at + 1, prefix.size(), prefix), 0) << "a redraw without the rank: " << printed[r];
    EXPECT_GE(lines, 4u);
  }
}

// Keras's CSVLogger: a column for each metric and its val_ form, and the separator asked for.
TEST(fit, the_csv_log_has_a_column_per_metric_and_its_separator) {
  static_assert(!std::is_constructible_v<csv_logger, std::string, const char*>,
                "a separator string must not convert to the append flag");
  const test::temp_dir dir("mwstrat-csv");
  const std::filesystem::path file = dir.path() / "log.csv";
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(128, features, classes, 32, 2, c.rank(), 1);
    blob_batches val(64, features, classes, 32, 2, c.rank(), 2);
    metrics ms(mean_loss{});
    csv_logger csv(file.string(), {.separator = ';'});
    fit_options options;
    options.epochs = 2;
    fit(strategy, model, sgd, train, val, options, ms, csv);
    fit(strategy, model, sgd, train, val, options, ms, csv);  // the same logger again: a fresh file, with its header
  });
  std::ifstream in(file);
  std::string header, row;
  std::getline(in, header);
  EXPECT_EQ(header, "epoch;loss;accuracy;val_loss;val_accuracy;learning_rate;mean_loss;val_mean_loss");
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE(std::getline(in, row));
    std::vector<std::string> cells;
    std::stringstream cut(row);
    for (std::string cell; std::getline(cut, cell, ';');) cells.push_back(cell);
    ASSERT_EQ(cells.size(), 8u) << row;
    EXPECT_EQ(cells[0], std::to_string(epoch));
    EXPECT_EQ(cells[6], cells[1]) << "mean_loss is the epoch's loss: " << row;
    EXPECT_EQ(cells[7], cells[3]) << "val_mean_loss is the validation loss: " << row;
  }
}

// Under a locale with a decimal comma and a thousands separator (a program that called setlocale(LC_ALL, "") on a
// German system), the CSV log keeps its comma-separated columns and the progress lines read as Keras's: numbers in
// the C locale's form, whatever the locale of the streams.
TEST(fit, logs_keep_a_decimal_point_under_a_comma_locale) {
  const test::comma_locale comma;
  const test::temp_dir dir("mwstrat-csv");
  const std::filesystem::path file = dir.path() / "log.csv";
  std::ostringstream printed;  // made under the locale, as std::cout would be in such a program
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(128, features, classes, 32, 2, c.rank(), 1);
    blob_batches val(64, features, classes, 32, 2, c.rank(), 2);
    csv_logger csv(file.string());
    progress_logger progress({&printed, false, 0});
    fit_options options;
    options.initial_epoch = 1000;
    options.epochs = 1001;
    fit(strategy, model, sgd, train, val, options, csv, progress);
  });
  std::ifstream in(file);
  std::string header, row;
  std::getline(in, header);
  ASSERT_TRUE(std::getline(in, row));
  std::vector<std::string> cells;
  std::stringstream cut(row);
  for (std::string cell; std::getline(cut, cell, ',');) cells.push_back(cell);
  ASSERT_EQ(cells.size(), 6u) << row;
  EXPECT_EQ(cells[0], "1000");
  for (std::size_t i = 1; i < cells.size(); ++i)
    EXPECT_TRUE(mwstrat::detail::parse_number(cells[i]).has_value()) << "column " << i << " of " << row;
  const std::string text = printed.str();
  EXPECT_NE(text.find("Epoch 1001/1001\n"), std::string::npos) << text;
  // "- loss: <digits>.<4 digits>" (std::regex would do, but GCC 12 warns inside it under the sanitizers' -O1).
  const auto decimal_after = [&](const std::string& label) {
    const std::size_t at = text.find(label);
    if (at == std::string::npos) return false;
    std::size_t i = at + label.size(), digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
    if (digits == 0 || i >= text.size() || text[i] != '.') return false;
    for (std::size_t k = 1; k <= 4; ++k)
      if (i + k >= text.size() || text[i + k] < '0' || text[i + k] > '9') return false;
    return true;
  };
  EXPECT_TRUE(decimal_after(" - loss: ")) << text;
  EXPECT_TRUE(decimal_after(" - accuracy: ")) << text;
  EXPECT_EQ(text.find(','), std::string::npos) << text;
}

TEST(fit, only_the_chief_prints_progress_and_writes_the_csv_log) {
  const test::temp_dir scratch("mwstrat-fit");  // removed with its logs at the end (it was left behind before)
  const std::filesystem::path& dir = scratch.path();
  std::vector<std::string> printed(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(features, classes, 5);
    plain_sgd sgd;
    blob_batches train(128, features, classes, 32, 2, c.rank(), 1);
    std::ostringstream out;
    progress_logger progress({&out, false, 0});
    csv_logger csv((dir / ("log" + std::to_string(c.rank()) + ".csv")).string());
    fit_options options;
    options.epochs = 2;
    fit(strategy, model, sgd, train, options, progress, csv);
    printed[static_cast<std::size_t>(c.rank())] = out.str();
  });
  EXPECT_TRUE(printed[1].empty());
  EXPECT_NE(printed[0].find("Epoch 1/2\n4/4 [==============================] - "), std::string::npos) << printed[0];
  EXPECT_NE(printed[0].find("ms/step - loss: "), std::string::npos);
  EXPECT_NE(printed[0].find(" - accuracy: "), std::string::npos);
  EXPECT_NE(printed[0].find("Epoch 2/2\n"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir / "log0.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir / "log1.csv"));
  std::ifstream csv(dir / "log0.csv");
  std::string header, row1, row2, extra;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  EXPECT_EQ(header, "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate");
  EXPECT_EQ(row1.rfind("0,", 0), 0u);
  EXPECT_EQ(row2.rfind("1,", 0), 0u);
  EXPECT_FALSE(std::getline(csv, extra));
  std::filesystem::remove_all(dir);
}

TEST(fit, a_different_model_on_one_worker_is_named) {
  std::vector<std::string> messages(3);
  spawn_ranks(3, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    softmax_regression model(c.rank() == 2 ? features + 1 : features, classes, 5);
    plain_sgd sgd;
    blob_batches train(128, features + (c.rank() == 2 ? 1 : 0), classes, 30, 3, c.rank(), 1);
    try {
      fit(strategy, model, sgd, train, fit_options{});
    } catch (const config_error& e) {
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(messages[static_cast<std::size_t>(r)].find("model fingerprint differs from the chief's (rank 0) on rank(s) 2"),
              std::string::npos)
        << messages[static_cast<std::size_t>(r)];
  }
  EXPECT_NE(messages[2].find("softmax_regression(9x4)"), std::string::npos);
}

}  // namespace fit_test
