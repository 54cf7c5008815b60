// The TensorBoard callback: only the chief writes, and the files are real TensorBoard event files — read back here
// with the `tensorboard` package's own reader (EventAccumulator, which checks the TFRecord CRCs), from the virtual
// environment scripts/test makes (python_test_venv in scripts/lib/common.sh). Skipped, saying so, without it.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/tensorboard.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/fit_metrics.hpp>

#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>

namespace tensorboard_test {

using namespace mwstrat;
namespace fs = std::filesystem;

const std::string python = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/.cache/py-venv/bin/python";

constexpr const char* reader = R"PY(
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
for run in ("train", "validation"):
    acc = EventAccumulator(sys.argv[1] + "/" + run, size_guidance={"scalars": 0})
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            print(run, tag, e.step, repr(e.value))
)PY";

std::string run_command(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return status = -1, output;
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  status = ::pclose(pipe);
  return output;
}

TEST(tensorboard, the_chief_writes_event_files_that_tensorboard_reads_back) {
  int status = 0;
  run_command(python + " -c 'import tensorboard'", status);
  if (status != 0) GTEST_SKIP() << "SKIPPED: no tensorboard in " << python << " (scripts/test makes it)";
  test::temp_dir dir;
  const fs::path logs = dir.path() / "logs";
  history chief_history;
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    test::softmax_regression model(6, 3, 1);
    nn::sgd opt({.learning_rate = nn::piecewise_constant_decay({12}, {0.2, 0.1}), .momentum = 0.5});
    test::blob_batches train(240, 6, 3, 24, 2, c.rank(), 9), validation(48, 6, 3, 24, 2, c.rank(), 10);
    tensorboard tb({.log_dir = logs, .update_freq = 4});
    metrics ms(mean_loss{});  // a metric given to fit is written under its own name, its val_ value in validation
    fit_options fo;
    fo.epochs = 3;
    const history h = fit(strategy, model, opt, train, validation, fo, ms, tb);
    EXPECT_EQ(tb.train_file().empty(), c.rank() != 0);
    if (c.rank() == 0) chief_history = h;
  });
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(logs)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2u) << "one train and one validation file, from the chief alone";

  const fs::path script = dir.path() / "read.py";
  std::ofstream(script) << reader;
  const std::string out = run_command(python + " " + script.string() + " " + logs.string(), status);
  ASSERT_EQ(status, 0) << out;
  std::map<std::pair<std::string, std::string>, std::map<long, double>> read;  // (run, tag) -> step -> value
  std::istringstream lines(out);
  std::string run, tag;
  long step = 0;
  double value = 0;
  while (lines >> run >> tag >> step >> value) read[{run, tag}][step] = value;

  const auto at = [&](const std::string& r, const std::string& t, long s) {
    const auto& steps = read[{r, t}];
    const auto it = steps.find(s);
    return it == steps.end() ? std::nan("") : it->second;
  };
  ASSERT_EQ(chief_history.epochs.size(), 3u);
  for (int e = 0; e < 3; ++e) {
    const auto& l = chief_history.epochs[static_cast<std::size_t>(e)];
    EXPECT_FLOAT_EQ(static_cast<float>(at("train", "epoch_loss", e)), static_cast<float>(l.loss)) << out;
    EXPECT_FLOAT_EQ(static_cast<float>(at("train", "epoch_accuracy", e)), static_cast<float>(l.accuracy));
    EXPECT_FLOAT_EQ(static_cast<float>(at("train", "epoch_learning_rate", e)), static_cast<float>(*l.learning_rate));
    EXPECT_FLOAT_EQ(static_cast<float>(at("validation", "epoch_loss", e)), static_cast<float>(*l.val_loss));
    EXPECT_FLOAT_EQ(static_cast<float>(at("validation", "epoch_accuracy", e)), static_cast<float>(*l.val_accuracy));
    ASSERT_EQ(l.metrics.size(), 2u) << "mean_loss and val_mean_loss";
    EXPECT_FLOAT_EQ(static_cast<float>(at("train", "epoch_mean_loss", e)), static_cast<float>(l.metrics[0].value));
    EXPECT_FLOAT_EQ(static_cast<float>(at("validation", "epoch_mean_loss", e)), static_cast<float>(l.metrics[1].value));
    EXPECT_TRUE(std::isnan(at("validation", "epoch_val_mean_loss", e))) << "the val_ prefix is the run, not the tag";
  }
  // 30 steps, every 4th: global steps 4, 8, ..., 28; the rate drops after update 12 (piecewise, inclusive).
  const auto& batch_loss = read[std::make_pair(std::string("train"), std::string("batch_loss"))];
  ASSERT_EQ(batch_loss.size(), 7u) << out;
  EXPECT_EQ(batch_loss.begin()->first, 4);
  EXPECT_EQ(batch_loss.rbegin()->first, 28);
  EXPECT_EQ(read[std::make_pair(std::string("train"), std::string("batch_mean_loss"))].size(), 7u) << out;
  EXPECT_FLOAT_EQ(static_cast<float>(at("train", "batch_learning_rate", 12)), 0.2f);
  EXPECT_FLOAT_EQ(static_cast<float>(at("train", "batch_learning_rate", 16)), 0.1f);
  EXPECT_FLOAT_EQ(static_cast<float>(chief_history.epochs.back().learning_rate.value()), 0.1f);
}

}  // namespace tensorboard_test
