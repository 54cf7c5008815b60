// The tf.data-like pipeline: laziness, each operation's semantics, determinism by seed, reshuffling per
// iteration, and prefetch's thread (order kept, errors propagated at their place, clean join mid-stream).

#include <mwstrat/data/dataset.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dataset_test {

namespace data = mwstrat::data;

template <class T>
std::vector<T> collect(const data::dataset<T>& ds, std::size_t limit = 1000000) {
  std::vector<T> out;
  for (const auto& v : ds) {
    out.push_back(v);
    if (out.size() == limit) {
      break;
    }
  }
  return out;
}

std::vector<std::size_t> iota(std::size_t n, std::size_t from = 0) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(Dataset, RangeAndFromVector) {
  EXPECT_EQ(collect(data::range(5)), iota(5));
  EXPECT_TRUE(collect(data::range(0)).empty());
  EXPECT_EQ(collect(data::from_vector(std::vector<int>{3, 1, 2})), (std::vector<int>{3, 1, 2}));
}

TEST(Dataset, IsLazyAndEachPassIsIndependent) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = data::range(4).map([calls](std::size_t i) {
    ++*calls;
    return i * 10;
  });
  EXPECT_EQ(*calls, 0);  // building reads nothing
  auto it = ds.begin();  // a pass computes its first element
  EXPECT_EQ(*calls, 1);
  EXPECT_EQ(collect(ds), (std::vector<std::size_t>{0, 10, 20, 30}));
  EXPECT_EQ(*it, 0U);  // the first pass did not move
}

TEST(Dataset, PassOutlivesItsDataset) {
  data::dataset<std::size_t>::iterator it;
  {
    auto ds = data::range(3).map([](std::size_t i) { return i + 1; }).shuffle(1).batch(2).map(
        [](const std::vector<std::size_t>& b) { return b.size(); });
    it = ds.begin();
  }
  std::vector<std::size_t> sizes;
  for (; it != std::default_sentinel; ++it) {
    sizes.push_back(*it);
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 1}));
}

TEST(Dataset, BatchKeepsOrDropsTheRemainder) {
  using batches = std::vector<std::vector<std::size_t>>;
  EXPECT_EQ(collect(data::range(7).batch(3)), (batches{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(collect(data::range(7).batch(3, true)), (batches{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(collect(data::range(6).batch(3, true)), (batches{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_TRUE(collect(data::range(2).batch(3, true)).empty());
  EXPECT_TRUE(collect(data::range(0).batch(3)).empty());
  EXPECT_THROW((void)data::range(3).batch(0), mwstrat::config_error);
}

TEST(Dataset, RepeatCountAndForever) {
  EXPECT_EQ(collect(data::range(2).repeat(3)), (std::vector<std::size_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_TRUE(collect(data::range(2).repeat(0)).empty());
  EXPECT_EQ(collect(data::range(3).repeat(), 10), (std::vector<std::size_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
  // An empty dataset repeated for ever ends instead of spinning.
  EXPECT_TRUE(collect(data::range(0).repeat()).empty());
  // Batching across repeat boundaries, as tf.data does when repeat comes first.
  EXPECT_EQ(collect(data::range(3).repeat(2).batch(4)),
            (std::vector<std::vector<std::size_t>>{{0, 1, 2, 0}, {1, 2}}));
}

TEST(Dataset, ShardTakeAndMap) {
  EXPECT_EQ(collect(data::range(10).shard(3, 1)), (std::vector<std::size_t>{1, 4, 7}));
  EXPECT_EQ(collect(data::range(10).take(4)), iota(4));
  EXPECT_EQ(collect(data::range(3).take(10)), iota(3));
  EXPECT_EQ(collect(data::range(3).map([](std::size_t i) { return static_cast<double>(i) / 2; })),
            (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_THROW((void)data::range(3).shard(2, 2), mwstrat::config_error);
  // Shards of the same order are disjoint and cover it.
  std::vector<std::size_t> all;
  for (std::size_t s = 0; s < 4; ++s) {
    for (auto v : collect(data::range(23).shuffle(9, false).shard(4, s))) {
      all.push_back(v);
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(23));
}

TEST(Dataset, ShuffleIsAPermutationDeterminedBySeed) {
  const auto a = collect(data::range(1000).shuffle(42));
  const auto b = collect(data::range(1000).shuffle(42));
  const auto c = collect(data::range(1000).shuffle(43));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, iota(1000));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(1000));
  EXPECT_EQ(collect(data::range(0).shuffle(1)).size(), 0U);
  EXPECT_EQ(collect(data::range(1).shuffle(1)), iota(1));
}

TEST(Dataset, ShuffleIsUniformEnough) {
  // Each value of 8 lands at position 0 about 1/8 of 8000 shuffles (a chi-square bound far from flaky: the 1e-6
  // quantile of chi2 with 7 degrees of freedom is about 38).
  std::vector<int> first(8, 0);
  auto ds = data::range(8).shuffle(7);  // reshuffles on every pass
  for (int t = 0; t < 8000; ++t) {
    ++first[*ds.begin()];
  }
  double chi2 = 0;
  for (int f : first) {
    chi2 += (f - 1000.0) * (f - 1000.0) / 1000.0;
  }
  EXPECT_LT(chi2, 38.0);
}

TEST(Dataset, ReshuffleEachIteration) {
  auto re = data::range(50).shuffle(5).repeat(3);
  const auto all = collect(re);
  ASSERT_EQ(all.size(), 150U);
  const std::vector<std::size_t> e0(all.begin(), all.begin() + 50);
  const std::vector<std::size_t> e1(all.begin() + 50, all.begin() + 100);
  EXPECT_NE(e0, e1);
  // The first pass of a fresh pipeline with the same seed is the same order: deterministic.
  EXPECT_EQ(collect(data::range(50).shuffle(5)), e0);

  auto same = data::range(50).shuffle(5, false).repeat(3);
  const auto fixed = collect(same);
  EXPECT_EQ(std::vector<std::size_t>(fixed.begin(), fixed.begin() + 50),
            std::vector<std::size_t>(fixed.begin() + 100, fixed.end()));
  EXPECT_EQ(std::vector<std::size_t>(fixed.begin(), fixed.begin() + 50), e0);
}

TEST(Dataset, StreamingShuffleBuffer) {
  const auto a = collect(data::range(100).shuffle(3, true, 10));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
  EXPECT_NE(a, iota(100));
  // A buffer of n cannot move an element more than n - 1 places earlier.
  for (std::size_t pos = 0; pos < a.size(); ++pos) {
    EXPECT_LE(a[pos], pos + 9);
  }
  EXPECT_EQ(collect(data::range(100).shuffle(3, true, 1)), iota(100));
  EXPECT_EQ(a, collect(data::range(100).shuffle(3, true, 10)));
}

TEST(Dataset, PrefetchKeepsOrderAndContent) {
  auto plain = data::range(500).shuffle(11).batch(7).map([](const std::vector<std::size_t>& b) {
    return std::accumulate(b.begin(), b.end(), std::size_t{0});
  });
  auto pre = data::range(500).shuffle(11).batch(7).map([](const std::vector<std::size_t>& b) {
                                                      return std::accumulate(b.begin(), b.end(), std::size_t{0});
                                                    }).prefetch(3);
  EXPECT_EQ(collect(pre), collect(plain));
  EXPECT_TRUE(collect(data::range(0).prefetch(2)).empty());
  EXPECT_THROW((void)data::range(3).prefetch(0), mwstrat::config_error);
}

TEST(Dataset, PrefetchPropagatesErrorsInPlace) {
  auto ds = data::range(10)
                .map([](std::size_t i) {
                  if (i == 6) {
                    throw mwstrat::data_error({"data"}, "", "element 6 is bad");
                  }
                  return i;
                })
                .prefetch(4);
  auto it = ds.begin();
  std::vector<std::size_t> seen;
  try {
    for (; it != std::default_sentinel; ++it) {
      seen.push_back(*it);
    }
    ADD_FAILURE() << "no error";
  } catch (const mwstrat::data_error& e) {
    EXPECT_NE(std::string(e.what()).find("element 6 is bad"), std::string::npos);
  }
  EXPECT_EQ(seen, iota(6));
}

TEST(Dataset, PrefetchJoinsMidStream) {
  // Infinite upstream, full queue, consumer stops early: the destructor must stop and join the thread.
  auto produced = std::make_shared<std::atomic<std::size_t>>(0);
  for (int round = 0; round < 20; ++round) {
    auto ds = data::range(3).repeat().map([produced](std::size_t i) {
      ++*produced;
      return i;
    }).prefetch(2);
    auto it = ds.begin();
    EXPECT_EQ(*it, 0U);
    ++it;
    EXPECT_EQ(*it, 1U);
  }  // each `it` joins here
  const std::size_t after = produced->load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(produced->load(), after);  // no thread still running
  // A slow upstream and a consumer that leaves while the producer is inside next().
  {
    auto ds = data::range(100).map([](std::size_t i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return i;
    }).prefetch(1);
    auto it = ds.begin();
    EXPECT_EQ(*it, 0U);
  }
}

TEST(Dataset, PrefetchedEpochsReshuffleDeterministically) {
  auto pipeline = [] { return data::range(64).shuffle(99).repeat(4).batch(16, true).prefetch(2); };
  EXPECT_EQ(collect(pipeline()), collect(pipeline()));
}

}  // namespace dataset_test
