// fit on a set streamed from TFRecord shards, over the local collective (replicas as threads): the same bits as
// the same examples in memory under data and file sharding (file sharding's counts exchanged over the collective,
// each worker opening only its files); a backup written mid-pass resumes bitwise; prefetch changes no batch, and a
// corrupt record fails the step that reads it, not the one before.
#include <mwstrat/checkpoint/manager.hpp>
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/distributed_input.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/record_shards.hpp>
#include <support/softmax_regression.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace record_input_test {

using namespace mwstrat;
using test::momentum_sgd;
using test::softmax_regression;
namespace fs = std::filesystem;

constexpr std::size_t rows = 2, cols = 4, features = rows * cols, classes = 4;
const std::vector<std::size_t> eight_files = {13, 12, 13, 12, 13, 12, 13, 12};

data::labeled_images blobs(std::size_t count, std::vector<std::size_t> file_counts) {
  return test::learnable_blobs(count, 3, std::move(file_counts));
}

data::distribution_options training(data::any_shard_policy policy) {
  data::distribution_options o;
  o.global_batch = 16;
  o.seed = 11;
  o.policy = std::move(policy);
  return o;
}

struct run_result {
  std::vector<float> params;
  std::vector<float> velocity;
  std::vector<std::vector<std::size_t>> opened;  // per rank: the files its input opened
  std::optional<std::uint64_t> resumed_at;
  bool failed = false;
};

// Throws on every worker once `global_step` steps are done: a job that dies mid-run.
struct die_at {
  std::uint64_t global_step;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs&) {
    if (ctx.global_step() == global_step) throw std::runtime_error("injected failure");
  }
};

// 2 workers, 100 examples, global batch 16, 2 epochs of 9 steps (1.5 passes), from memory or from `shards`;
// with `backup_dir`, backups every 4 steps; with `die`, a failure after that global step.
run_result train(const data::labeled_images& set, const std::vector<fs::path>* shards,
                 data::any_shard_policy policy, const fs::path* backup_dir = nullptr,
                 std::optional<std::uint64_t> die = std::nullopt, std::uint32_t init_seed = 1) {
  run_result out;
  out.opened.resize(2);
  std::mutex m;
  try {
    spawn_ranks(2, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c);
      softmax_regression model(features, classes, init_seed);
      momentum_sgd sgd(model.parameters().size());
      data::distribution_options o = training(policy);
      o.num_workers = 2;
      o.worker_index = c.rank();
      distributed_input input =
          shards != nullptr
              ? distributed_input::from_records(*shards, test::raw_image_format({rows, cols, 1}), o, strategy)
              : distributed_input(data::distributed_batches(set, o));
      fit_options fo;
      fo.epochs = 2;
      fo.steps_per_epoch = 9;
      std::ostringstream silent;
      backup_options bo{backup_dir != nullptr ? *backup_dir : fs::path(), save_frequency::every(4)};
      bo.log = &silent;
      die_at d{die.value_or(~std::uint64_t{0})};
      if (backup_dir != nullptr) {
        backup_and_restore backup(bo);
        fit(strategy, model, sgd, input, fo, backup, d);
        if (c.rank() == 0) out.resumed_at = backup.resumed_at();
      } else {
        fit(strategy, model, sgd, input, fo, d);
      }
      const std::lock_guard lock(m);
      if (shards != nullptr) out.opened[static_cast<std::size_t>(c.rank())] = input.records().opened_files();
      if (c.rank() == 0) {
        out.params.assign(model.parameters().begin(), model.parameters().end());
        out.velocity = sgd.velocity;
      }
    });
  } catch (const std::exception&) {
    out.failed = true;
  }
  return out;
}

TEST(fit_from_records, data_sharding_trains_to_the_bits_of_the_same_examples_in_memory) {
  const auto set = blobs(100, eight_files);
  test::temp_dir dir("record-input");
  const auto shards = test::write_record_shards(set, dir.path());
  const run_result memory = train(set, nullptr, data::data_shard{});
  const run_result records = train(set, &shards, data::data_shard{});
  ASSERT_FALSE(memory.failed);
  ASSERT_FALSE(records.failed);
  EXPECT_EQ(records.params, memory.params);
  EXPECT_EQ(records.velocity, memory.velocity);
  EXPECT_EQ(records.opened[0].size(), 8U);  // data sharding reads every file
}

TEST(fit_from_records, file_sharding_exchanges_counts_opens_only_each_workers_files_and_matches_memory) {
  const auto set = blobs(100, eight_files);
  test::temp_dir dir("record-input");
  const auto shards = test::write_record_shards(set, dir.path());
  const run_result memory = train(set, nullptr, data::file_shard{});
  const run_result records = train(set, &shards, data::auto_shard{});  // 8 files >= 2 workers: file
  ASSERT_FALSE(memory.failed);
  ASSERT_FALSE(records.failed);
  EXPECT_EQ(records.params, memory.params);
  EXPECT_EQ(records.opened[0], (std::vector<std::size_t>{0, 2, 4, 6}));
  EXPECT_EQ(records.opened[1], (std::vector<std::size_t>{1, 3, 5, 7}));
}

TEST(fit_from_records, a_backup_written_mid_pass_resumes_bitwise) {
  const auto set = blobs(100, eight_files);
  test::temp_dir data_dir("record-input"), ref_dir, dir;
  const auto shards = test::write_record_shards(set, data_dir.path());
  const fs::path ref_backup = ref_dir.path() / "b", backup = dir.path() / "b";
  const run_result reference = train(set, &shards, data::data_shard{}, &ref_backup);
  ASSERT_FALSE(reference.failed);
  const run_result crashed = train(set, &shards, data::data_shard{}, &backup, 10);  // last backup: step 8
  ASSERT_TRUE(crashed.failed);
  const run_result resumed = train(set, &shards, data::data_shard{}, &backup, std::nullopt, 99);
  ASSERT_FALSE(resumed.failed);
  EXPECT_EQ(resumed.resumed_at, std::optional<std::uint64_t>(8));
  EXPECT_EQ(resumed.params, reference.params);
  EXPECT_EQ(resumed.velocity, reference.velocity);
}

TEST(distributed_input_prefetch, changes_no_batch_and_fails_only_the_step_that_reads_a_corrupt_record) {
  const auto set = blobs(64, {64});
  test::temp_dir dir("record-input");
  const auto shards = test::write_record_shards(set, dir.path());
  data::distribution_options o;
  o.global_batch = 8;
  o.shuffle = false;  // file order: step s reads records [8s, 8s + 8)
  const auto format = test::raw_image_format({rows, cols, 1});
  distributed_input fetched{data::record_batches(shards, format, o)};
  distributed_input direct{data::record_batches(shards, format, o)};
  direct.set_prefetch(false);
  for (std::size_t s = 0; s < 8; ++s) {
    const auto a = fetched.batch_at(0, s);
    const std::vector<float> seen(a.inputs.begin(), a.inputs.end());
    const auto b = direct.batch_at(0, s);
    ASSERT_EQ(seen, std::vector<float>(b.inputs.begin(), b.inputs.end())) << "step " << s;
  }

  // Corrupt one data byte of record 20 (step 2): step 1, whose return starts the prefetch of step 2, succeeds.
  auto bytes = [&] {
    std::ifstream in(shards[0], std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  }();
  const std::size_t record = bytes.size() / 64;  // every record has the same length here
  bytes[20 * record + 12 + 3] ^= 0x10;
  std::ofstream(dir / "corrupt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  distributed_input input{data::record_batches(std::vector<fs::path>{dir / std::string("corrupt")}, format, o)};
  EXPECT_NO_THROW((void)input.batch_at(0, 0));
  EXPECT_NO_THROW((void)input.batch_at(0, 1));
  try {
    (void)input.batch_at(0, 2);
    FAIL() << "the corrupt record was delivered";
  } catch (const data_error& e) {
    EXPECT_NE(std::string(e.what()).find("record at byte " + std::to_string(20 * record) + ": bad data CRC"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW((void)input.batch_at(0, 3));  // the stream goes on past it
}

}  // namespace record_input_test
