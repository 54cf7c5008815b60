// Streaming an image set from TFRecord shards: the same bits as the same examples in memory (data, file and OFF
// sharding; 1, 2 and 4 workers; with augmentation), whatever the number of decode threads; file sharding opens only
// this worker's files (checked in /proc/self/fd); exact resume from any cursor; compressed shards; peak memory
// independent of the set's size; every refusal names the file and the record's offset.
#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/example.hpp>
#include <mwstrat/data/image_augmentation.hpp>
#include <mwstrat/data/indexed_tfrecord_file.hpp>
#include <mwstrat/data/record_batches.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>

#include <support/record_shards.hpp>
#include <support/temp_dir.hpp>

#include "byte_files.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace record_batches_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;

constexpr image_shape shape{8, 6, 3};
constexpr std::size_t per = 8 * 6 * 3;

// `count` images whose bytes differ from image to image, labels 0..9.
labeled_images make_set(std::size_t count, std::vector<std::size_t> file_counts) {
  std::vector<std::uint8_t> pixels(count * per);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
  std::vector<std::int64_t> labels(count);
  for (std::size_t i = 0; i < count; ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  return {std::move(pixels), std::move(labels), shape, std::move(file_counts)};
}

record_image_format raw_format() { return test::raw_image_format(shape); }

distribution_options options(std::size_t g, int n, int w, any_shard_policy policy, bool augment) {
  distribution_options o;
  o.global_batch = g;
  o.num_workers = n;
  o.worker_index = w;
  o.seed = 11;
  o.policy = std::move(policy);
  if (augment) {
    augmentation_options a;
    a.pad = 2;
    a.seed = 3;
    o.transform = image_augmentation(a).transform();
  }
  return o;
}

// The true per-file counts, as the workers' exchange would give them.
record_batch_options known_counts(const labeled_images& set, std::size_t threads = 2) {
  record_batch_options r;
  r.decode_threads = threads;
  const std::vector<std::size_t> counts(set.file_counts().begin(), set.file_counts().end());
  r.exchange_counts = [counts](std::span<const std::size_t> mine) {
    for (std::size_t f = 0; f < mine.size(); ++f) {
      if (mine[f] != 0 && mine[f] != counts[f]) ADD_FAILURE() << "file " << f << " counted " << mine[f];
    }
    return counts;
  };
  return r;
}

// Every step of two passes of worker w, read from memory and from the shards, compared bit for bit.
void expect_same_batches(const labeled_images& set, const std::vector<fs::path>& shards, std::size_t g, int n,
                         any_shard_policy policy, bool augment, std::size_t threads = 2) {
  for (int w = 0; w < n; ++w) {
    distributed_batches memory(set, options(g, n, w, policy, augment));
    record_batches records(shards, raw_format(), options(g, n, w, policy, augment), known_counts(set, threads));
    ASSERT_EQ(records.steps_per_epoch(), memory.steps_per_epoch());
    ASSERT_EQ(records.mode(), memory.mode());
    const std::size_t b = memory.per_worker_batch();
    std::vector<float> a(b * per), r(b * per);
    std::vector<std::int64_t> la(b), lr(b);
    for (std::uint64_t e = 0; e < 2; ++e) {
      for (std::uint64_t s = 0; s < memory.steps_per_epoch(); ++s) {
        const data_cursor at{e, s, 11};
        const std::size_t na = memory.fill(at, a, la);
        const std::size_t nr = records.fill(at, r, lr);
        ASSERT_EQ(na, nr);
        ASSERT_EQ(la, lr) << "worker " << w << " pass " << e << " step " << s;
        ASSERT_EQ(a, r) << "worker " << w << " pass " << e << " step " << s;
        ASSERT_EQ(memory.global_count(at), records.global_count(at));
      }
    }
  }
}

TEST(RecordBatches, DataShardingGivesTheInMemoryBitsForEveryWorkerCount) {
  const auto set = make_set(203, {30, 25, 26, 24, 25, 25, 24, 24});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  for (const int n : {1, 2, 4}) expect_same_batches(set, shards, 16, n, data_shard{}, true);
  expect_same_batches(set, shards, 16, 2, off_shard{}, false);
}

TEST(RecordBatches, FileShardingGivesTheInMemoryBits) {
  const auto set = make_set(203, {30, 25, 26, 24, 25, 25, 24, 24});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  expect_same_batches(set, shards, 16, 2, file_shard{}, true);
  expect_same_batches(set, shards, 16, 4, auto_shard{}, true);  // 8 files >= 4 workers: file
}

TEST(RecordBatches, TheDecodeThreadCountChangesNoBit) {
  const auto set = make_set(120, {60, 60});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  for (const std::size_t threads : {1, 3}) expect_same_batches(set, shards, 24, 1, data_shard{}, true, threads);
}

TEST(RecordBatches, TwoWorkersTimesBReadWhatOneWorkerTimesTwoBReads) {
  const auto set = make_set(100, {50, 50});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  record_batches one(shards, raw_format(), options(20, 1, 0, data_shard{}, true));
  record_batches w0(shards, raw_format(), options(20, 2, 0, data_shard{}, true));
  record_batches w1(shards, raw_format(), options(20, 2, 1, data_shard{}, true));
  std::vector<float> big(20 * per), h0(10 * per), h1(10 * per);
  std::vector<std::int64_t> lb(20), l0(10), l1(10);
  for (std::uint64_t s = 0; s < one.steps_per_epoch(); ++s) {
    (void)one.fill({1, s, 11}, big, lb);
    (void)w0.fill({1, s, 11}, h0, l0);
    (void)w1.fill({1, s, 11}, h1, l1);
    h0.insert(h0.end(), h1.begin(), h1.end());
    ASSERT_EQ(big, h0);
    h0.resize(10 * per);
  }
}

// The paths this process has open under `dir`.
std::set<std::string> open_files_under(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = fs::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind(dir.string(), 0) == 0) out.insert(target.filename().string());
  }
  return out;
}

TEST(RecordBatches, FileShardingOpensOnlyThisWorkersFiles) {
  const auto set = make_set(160, {20, 20, 20, 20, 20, 20, 20, 20});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  const auto canonical = fs::canonical(dir.path());
  {
    record_batches w1(shards, raw_format(), options(8, 2, 1, file_shard{}, false), known_counts(set));
    EXPECT_EQ(w1.opened_files(), (std::vector<std::size_t>{1, 3, 5, 7}));
    EXPECT_EQ(open_files_under(canonical),
              (std::set<std::string>{"train-1-of-8", "train-3-of-8", "train-5-of-8", "train-7-of-8"}));
    std::vector<float> images(4 * per);
    std::vector<std::int64_t> labels(4);
    for (std::uint64_t s = 0; s < w1.steps_per_epoch(); ++s) (void)w1.fill({0, s, 11}, images, labels);
    EXPECT_EQ(open_files_under(canonical).size(), 4U);
  }
  EXPECT_TRUE(open_files_under(canonical).empty());
  {
    record_batches all(shards, raw_format(), options(8, 2, 1, data_shard{}, false));
    EXPECT_EQ(all.opened_files().size(), 8U);
  }
}

TEST(RecordBatches, FileShardingOfSeveralWorkersWithoutACountExchangeIsRefused) {
  const auto set = make_set(40, {10, 10, 10, 10});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  try {
    record_batches w0(shards, raw_format(), options(8, 2, 0, file_shard{}, false));
    FAIL() << "no exchange, yet built";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("needs every worker's record counts"), std::string::npos) << e.what();
  }
  EXPECT_THROW(record_batches(shards, raw_format(), options(8, 8, 0, file_shard{}, false), known_counts(set)),
               data_error);  // 4 files for 8 workers
}

TEST(RecordBatches, ACursorResumesExactly) {
  const auto set = make_set(90, {45, 45});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  record_batches running(shards, raw_format(), options(10, 1, 0, data_shard{}, true));
  std::vector<float> a(10 * per), b(10 * per);
  std::vector<std::int64_t> la(10), lb(10);
  for (std::uint64_t s = 0; s < 12; ++s) (void)running.fill({0, s, 11}, a, la);  // into the second pass
  record_batches resumed(shards, raw_format(), options(10, 1, 0, data_shard{}, true));
  for (std::uint64_t s = 12; s < 20; ++s) {
    (void)running.fill({0, s, 11}, a, la);
    (void)resumed.fill(resumed.normalised({0, s, 11}), b, lb);
    ASSERT_EQ(a, b) << "step " << s;
    ASSERT_EQ(la, lb);
  }
}

TEST(RecordBatches, CompressedShardsReadAsTheirUncompressedRecordsAndLeaveNoCopy) {
  const auto set = make_set(64, {32, 32});
  mwstrat::test::temp_dir dir("record-batches");
  mwstrat::test::temp_dir inflated("record-inflated");
  fs::create_directory(dir / "p");
  fs::create_directory(dir / "z");
  const auto plain = test::write_record_shards(set, dir / "p");
  const auto gz = test::write_record_shards(set, dir / "z", tfrecord_compression::gzip);
  record_batch_options r;
  r.files.inflate_directory = inflated.path();
  {
    record_batches a(plain, raw_format(), options(16, 1, 0, data_shard{}, true));
    record_batches b(gz, raw_format(), options(16, 1, 0, data_shard{}, true), r);
    EXPECT_EQ(std::distance(fs::directory_iterator(inflated.path()), fs::directory_iterator()), 2);
    std::vector<float> x(16 * per), y(16 * per);
    std::vector<std::int64_t> lx(16), ly(16);
    for (std::uint64_t s = 0; s < a.steps_per_epoch(); ++s) {
      (void)a.fill({0, s, 11}, x, lx);
      (void)b.fill({0, s, 11}, y, ly);
      ASSERT_EQ(x, y);
    }
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(inflated.path()), fs::directory_iterator()), 0);
}

// --- refusals: each names the file and, where there is one, the record's offset ---

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const data_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("other exception: ") + e.what();
  }
  return "no exception";
}

TEST(RecordBatches, RefusesAFileCutInsideARecord) {
  const auto set = make_set(10, {10});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  const auto size = fs::file_size(shards[0]);
  fs::resize_file(shards[0], size - 3);
  const auto m = message_of([&] { indexed_tfrecord_file f(shards[0]); });
  EXPECT_NE(m.find(shards[0].string() + ": record at byte "), std::string::npos) << m;
  EXPECT_NE(m.find("truncated record"), std::string::npos) << m;
  fs::resize_file(shards[0], 5);
  const auto h = message_of([&] { indexed_tfrecord_file f(shards[0]); });
  EXPECT_NE(h.find("record at byte 0: truncated record: the file ends 5 bytes into its 12-byte header"),
            std::string::npos) << h;
}

TEST(RecordBatches, RefusesABadLengthCrcAtOpeningAndABadDataCrcAtRead) {
  const auto set = make_set(4, {4});
  mwstrat::test::temp_dir dir("record-batches");
  const auto shards = test::write_record_shards(set, dir.path());
  auto bytes = byte_files::read_bytes(shards[0]);
  const std::size_t second = tfrecord_header_bytes + test::image_example(set.image(0), 0).size() + tfrecord_footer_bytes;
  auto length_bad = bytes;
  length_bad[second + 9] ^= std::byte{0x40};  // the second record's length CRC
  byte_files::write_bytes(dir / "length_bad", length_bad);
  const auto m = message_of([&] { indexed_tfrecord_file f(dir / "length_bad"); });
  EXPECT_NE(m.find("record at byte " + std::to_string(second) + ": bad length CRC"), std::string::npos) << m;

  auto data_bad = bytes;
  data_bad[second + tfrecord_header_bytes + 20] ^= std::byte{0x01};  // inside the second record's data
  byte_files::write_bytes(dir / "data_bad", data_bad);
  record_batches batches(std::vector<fs::path>{dir / std::string("data_bad")}, raw_format(),
                         [] {
                           distribution_options o;
                           o.global_batch = 4;
                           o.shuffle = false;
                           return o;
                         }());
  std::vector<float> images(4 * per, -1.0f);
  std::vector<std::int64_t> labels(4, -1);
  const auto d = message_of([&] { (void)batches.fill({0, 0, 0}, images, labels); });
  EXPECT_NE(d.find((dir / "data_bad").string() + ": record at byte " + std::to_string(second) + ": bad data CRC"),
            std::string::npos) << d;
}

TEST(RecordBatches, RefusesAnEmptyFileADirectoryAndAGlobMatchingNothing) {
  mwstrat::test::temp_dir dir("record-batches");
  byte_files::write_bytes(dir / "empty", {});
  fs::create_directory(dir / "folder");
  const auto e = message_of([&] { indexed_tfrecord_file f(dir / "empty"); });
  EXPECT_NE(e.find((dir / "empty").string() + ": empty file"), std::string::npos) << e;
  const auto f = message_of([&] { indexed_tfrecord_file x(dir / "folder"); });
  EXPECT_NE(f.find("a directory, not a TFRecord file"), std::string::npos) << f;
  const std::vector<std::string> nothing{(dir / std::string("train-*")).string()};
  const auto g = message_of([&] { record_batches b(nothing, raw_format(), options(4, 1, 0, data_shard{}, false)); });
  EXPECT_NE(g.find("train-*"), std::string::npos) << g;
}

TEST(RecordBatches, RefusesARecordWhoseImageOrLabelIsNotAsStated) {
  mwstrat::test::temp_dir dir("record-batches");
  const std::vector<std::uint8_t> small(per - 1, 7);
  example no_label;
  no_label.features["image"] = bytes_list{{std::string(per, 'x')}};
  {
    tfrecord_writer w(dir / "bad");
    w.write(test::image_example(small, 1));  // one byte short
    w.write(encode_example(no_label));
    w.close();
  }
  distribution_options o;
  o.global_batch = 1;
  o.shuffle = false;
  record_batches b(std::vector<fs::path>{dir / std::string("bad")}, raw_format(), o);
  std::vector<float> images(per);
  std::vector<std::int64_t> labels(1);
  const auto short_image = message_of([&] { (void)b.fill({0, 0, 0}, images, labels); });
  EXPECT_NE(short_image.find("record at byte 0: feature 'image': holds 143 bytes, raw 8 x 6 x 3 pixels are 144"),
            std::string::npos) << short_image;
  const auto missing = message_of([&] { (void)b.fill({0, 1, 0}, images, labels); });
  EXPECT_NE(missing.find("lacks feature 'label'"), std::string::npos) << missing;
}

// --- memory: what streaming holds does not grow with the set ---

std::size_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

TEST(RecordBatches, AGibibyteOfShardsStreamsInBoundedMemory) {
  // 8 shards of 64 x 64 x 4 raw images, 1 GiB of records in all; one pass in batches of 256 on 2 decode threads.
  constexpr image_shape big{64, 64, 4};
  constexpr std::size_t image_bytes = 64 * 64 * 4;
  constexpr std::size_t records = (std::size_t{1} << 30) / image_bytes;
  mwstrat::test::temp_dir dir("record-stream");
  if (fs::space(dir.path()).available < (std::size_t{3} << 29)) {  // 1 GiB of shards and some room
    GTEST_SKIP() << "SKIPPED: less than 1.5 GiB free in " << dir.path() << " for the 1 GiB of shards";
  }
  std::vector<fs::path> shards;
  {
    // One shard written, seven copies of it: the reader's memory does not depend on what the records hold.
    std::vector<std::uint8_t> image(image_bytes);
    shards.push_back(dir / "big-0");
    tfrecord_writer w(shards.back());
    for (std::size_t i = 0; i < records / 8; ++i) {
      std::fill(image.begin(), image.end(), static_cast<std::uint8_t>(i));
      w.write(test::image_example(image, static_cast<std::int64_t>(i % 10)));
    }
    w.close();
    for (std::size_t f = 1; f < 8; ++f) {
      shards.push_back(dir / ("big-" + std::to_string(f)));
      fs::copy_file(shards[0], shards.back());
    }
  }
  // Reset the peak to what the process holds now (writing "5" to clear_refs resets VmHWM), then stream.
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const std::size_t before = peak_rss_kib();
  record_image_format format;
  format.shape = big;
  distribution_options o;
  o.global_batch = 256;
  o.seed = 1;
  record_batch_options r;
  r.decode_threads = 2;
  record_batches stream(shards, format, o, r);
  ASSERT_EQ(stream.count(), records);
  std::vector<float> images(256 * image_bytes);
  std::vector<std::int64_t> labels(256);
  std::int64_t sum = 0;
  for (std::uint64_t s = 0; s < stream.steps_per_epoch(); ++s) {
    (void)stream.fill({0, s, 1}, images, labels);
    sum += labels[0];
  }
  const std::size_t grown_kib = peak_rss_kib() - before;
  const std::size_t batch_kib = images.size() * sizeof(float) / 1024;
  std::printf("streamed %zu records (1 GiB) with the peak RSS %zu KiB above the start (of which %zu the float "
              "batch buffer), label sum %lld\n",
              records, grown_kib, batch_kib, static_cast<long long>(sum));
  EXPECT_LT(grown_kib, std::size_t{100} * 1024 + batch_kib);
}

}  // namespace record_batches_test
