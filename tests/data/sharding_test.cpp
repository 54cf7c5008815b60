// The four sharding policies resolve as TensorFlow's do, file sharding refuses too few files, and
// any_shard_policy carries built-in and user policies alike.

#include <mwstrat/data/sharding.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sharding_test {

namespace data = mwstrat::data;

data::shard_request request(const std::vector<std::size_t>& files, int n, int w) {
  std::size_t total = 0;
  for (auto f : files) {
    total += f;
  }
  return {total, files, n, w, static_cast<std::size_t>(n) * 4};
}

TEST(Sharding, OffAndDataIgnoreFiles) {
  const std::vector<std::size_t> files{10, 10, 10};
  for (int n : {1, 2, 3, 4, 7}) {
    for (int w = 0; w < n; ++w) {
      EXPECT_EQ(data::off_shard{}.resolve(request(files, n, w)).mode, data::shard_mode::replicate);
      EXPECT_EQ(data::data_shard{}.resolve(request(files, n, w)).mode, data::shard_mode::data);
    }
  }
  EXPECT_EQ(data::off_shard::name(), "off");
  EXPECT_EQ(data::data_shard::name(), "data");
  EXPECT_EQ(data::file_shard::name(), "file");
  EXPECT_EQ(data::auto_shard::name(), "auto");
}

TEST(Sharding, FileGivesFilesRoundRobin) {
  const std::vector<std::size_t> files{5, 6, 7, 8, 9};
  EXPECT_EQ(data::file_shard{}.resolve(request(files, 2, 0)),
            (data::shard_plan{data::shard_mode::file, {0, 2, 4}}));
  EXPECT_EQ(data::file_shard{}.resolve(request(files, 2, 1)), (data::shard_plan{data::shard_mode::file, {1, 3}}));
  EXPECT_EQ(data::file_shard{}.resolve(request(files, 5, 3)), (data::shard_plan{data::shard_mode::file, {3}}));
  EXPECT_EQ(data::file_shard{}.resolve(request(files, 1, 0)),
            (data::shard_plan{data::shard_mode::file, {0, 1, 2, 3, 4}}));
  // Every file goes to exactly one worker, for every N up to the number of files.
  for (int n = 1; n <= 5; ++n) {
    std::vector<int> owners(files.size(), 0);
    for (int w = 0; w < n; ++w) {
      const data::shard_plan plan = data::file_shard{}.resolve(request(files, n, w));
      for (auto f : plan.files) {
        ++owners[f];
      }
    }
    EXPECT_EQ(owners, std::vector<int>(files.size(), 1)) << "N = " << n;
  }
}

TEST(Sharding, FileNeedsAFilePerWorker) {
  const std::vector<std::size_t> one{60000};
  try {
    (void)data::file_shard{}.resolve(request(one, 2, 1));
    ADD_FAILURE() << "no error";
  } catch (const mwstrat::data_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[mwstrat.data] rank 1: file sharding needs at least one input file per worker: 1 file(s) for 2 "
              "workers (use data_shard{} or auto_shard{})");
    EXPECT_EQ(e.rank(), 1);
  }
  EXPECT_THROW((void)data::file_shard{}.resolve(request({1, 2, 3}, 4, 0)), mwstrat::data_error);
}

TEST(Sharding, AutoPrefersFilesThenFallsBackToData) {
  EXPECT_EQ(data::auto_shard{}.resolve(request({60000}, 2, 0)).mode, data::shard_mode::data);
  EXPECT_EQ(data::auto_shard{}.resolve(request({1, 2, 3}, 4, 2)).mode, data::shard_mode::data);
  EXPECT_EQ(data::auto_shard{}.resolve(request({1, 2, 3, 4}, 4, 2)), (data::shard_plan{data::shard_mode::file, {2}}));
  // One worker reads everything; data mode keeps the global order (and exact resume) there.
  EXPECT_EQ(data::auto_shard{}.resolve(request({1, 2, 3, 4}, 1, 0)).mode, data::shard_mode::data);
}

struct last_file_only {  // a user's policy: every worker reads only the last file
  [[nodiscard]] std::string_view name() const noexcept { return "last_file_only"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request& r) const {
    return {data::shard_mode::file, {r.file_counts.size() - 1}};
  }
};
static_assert(data::sharding_policy<last_file_only>);

TEST(Sharding, AnyShardPolicyHoldsAnyPolicy) {
  data::any_shard_policy p;
  EXPECT_EQ(p.name(), "auto");
  p = data::off_shard{};
  EXPECT_EQ(p.name(), "off");
  EXPECT_EQ(p.resolve(request({3}, 2, 0)).mode, data::shard_mode::replicate);
  p = data::file_shard{};
  EXPECT_THROW((void)p.resolve(request({3}, 2, 0)), mwstrat::data_error);
  p = last_file_only{};
  EXPECT_EQ(p.name(), "last_file_only");
  EXPECT_EQ(p.resolve(request({3, 4, 5}, 2, 0)), (data::shard_plan{data::shard_mode::file, {2}}));
  const data::any_shard_policy copy = p;
  EXPECT_EQ(copy.name(), "last_file_only");
}

}  // namespace sharding_test
