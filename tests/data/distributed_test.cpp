// distributed_batches: disjoint shards that cover each epoch, global batches that do not depend on the number
// of workers, off replicating, seeds, the uneven last batch both ways, file sharding, the evaluation pass, exact
// resume from a data_cursor (N = 1..4 and N changing), and no allocation in the steady state.

#include "idx_files.hpp"

#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/image_augmentation.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <numeric>
#include <set>
#include <vector>

// Counts allocations made through operator new, to prove the steady state allocates nothing. ThreadSanitizer's
// runtime defines operator new itself (a second definition would not link), so under it the count is not kept.
#if defined(__SANITIZE_THREAD__)
#define MWSTRAT_DATA_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MWSTRAT_DATA_TEST_TSAN 1
#endif
#endif

// GCC takes the replaced new/delete pair built on malloc/free for a mismatch once it inlines them (-O1 and up).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace distributed_test {
std::atomic<std::size_t> allocations{0};
}  // namespace distributed_test
#ifndef MWSTRAT_DATA_TEST_TSAN
void* operator new(std::size_t size) {
  ++distributed_test::allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace distributed_test {

namespace data = mwstrat::data;
using index_list = std::vector<std::size_t>;

// C examples of 2x2 pixels; the label of example i is i, so a batch's labels name its examples.
data::labeled_images numbered(std::size_t count, std::vector<std::size_t> files = {}) {
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  for (std::size_t i = 0; i < count; ++i) {
    pixels.insert(pixels.end(), {static_cast<std::uint8_t>(i % 256), static_cast<std::uint8_t>(i / 256 % 256), 255, 0});
    labels.push_back(static_cast<std::int64_t>(i));
  }
  return {std::move(pixels), std::move(labels), 2, 2, std::move(files)};
}

data::distribution_options options(std::size_t g, int n, int w, std::uint64_t seed = 7, bool drop = true,
                                   data::any_shard_policy policy = data::data_shard{}) {
  data::distribution_options o;
  o.global_batch = g;
  o.num_workers = n;
  o.worker_index = w;
  o.seed = seed;
  o.drop_remainder = drop;
  o.policy = std::move(policy);
  return o;
}

// The examples (labels) of the next batch, checking the images against the labels on the way.
index_list next_indices(data::distributed_batches& b) {
  std::vector<float> images(b.per_worker_batch() * 4, -1.0F);
  std::vector<std::int64_t> labels(b.per_worker_batch(), -1);
  const std::size_t n = b.next(images, labels);
  index_list out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto e = static_cast<std::size_t>(labels[i]);
    EXPECT_EQ(images[i * 4 + 0], static_cast<float>(e % 256) * (1.0F / 255.0F));
    EXPECT_EQ(images[i * 4 + 1], static_cast<float>(e / 256 % 256) * (1.0F / 255.0F));
    EXPECT_EQ(images[i * 4 + 2], 1.0F);
    EXPECT_EQ(images[i * 4 + 3], 0.0F);
    out.push_back(e);
  }
  return out;
}

// The global batch of the next step: the workers' parts in worker order.
index_list next_global(std::vector<data::distributed_batches>& workers) {
  index_list out;
  for (auto& w : workers) {
    const auto part = next_indices(w);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<data::distributed_batches> make_workers(const data::labeled_images& set, std::size_t g, int n,
                                                    std::uint64_t seed = 7, bool drop = true,
                                                    const data::any_shard_policy& policy = data::data_shard{}) {
  std::vector<data::distributed_batches> workers;
  for (int w = 0; w < n; ++w) {
    workers.emplace_back(set, options(g, n, w, seed, drop, policy));
  }
  return workers;
}

TEST(Distributed, DataShardsAreDisjointAndCoverEachEpoch) {
  for (const std::size_t count : {std::size_t{1}, std::size_t{101}, std::size_t{1000}}) {
    for (const int n : {1, 2, 3, 4, 7}) {
      for (const std::size_t per : {std::size_t{1}, std::size_t{4}}) {
        const std::size_t g = per * static_cast<std::size_t>(n);
        const auto set = numbered(count);
        // Without drop_remainder: every example exactly once per epoch, for two epochs.
        if (count >= 1) {
          auto workers = make_workers(set, g, n, 3, false);
          const std::size_t steps = workers[0].steps_per_epoch();
          EXPECT_EQ(steps, (count + g - 1) / g);
          for (int epoch = 0; epoch < 2; ++epoch) {
            std::multiset<std::size_t> seen;
            for (std::size_t s = 0; s < steps; ++s) {
              for (auto& w : workers) {
                for (auto e : next_indices(w)) {
                  seen.insert(e);
                }
              }
            }
            ASSERT_EQ(seen.size(), count) << "C " << count << " N " << n << " G " << g;
            EXPECT_EQ(std::set<std::size_t>(seen.begin(), seen.end()).size(), count);
          }
        }
        // With drop_remainder: full global batches only, disjoint, the C mod G tail left out.
        if (count >= g) {
          auto workers = make_workers(set, g, n, 3, true);
          const std::size_t steps = workers[0].steps_per_epoch();
          EXPECT_EQ(steps, count / g);
          std::set<std::size_t> seen;
          for (std::size_t s = 0; s < steps; ++s) {
            for (auto& w : workers) {
              const auto part = next_indices(w);
              EXPECT_EQ(part.size(), per);
              seen.insert(part.begin(), part.end());
            }
          }
          EXPECT_EQ(seen.size(), steps * g);
        } else {
          EXPECT_THROW((void)data::distributed_batches(set, options(g, n, 0, 3, true)), mwstrat::data_error);
        }
      }
    }
  }
}

TEST(Distributed, EmptySetIsADataError) {
  try {
    (void)data::distributed_batches(numbered(0), options(4, 2, 1, 0, false));
    ADD_FAILURE() << "no error";
  } catch (const mwstrat::data_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[mwstrat.data] rank 1: a data set of 0 examples gives no step of global batch 4 over 2 workers (data "
              "sharding, drop_remainder false)");
  }
}

TEST(Distributed, GlobalBatchIsTheSameWhateverTheNumberOfWorkers) {
  const auto set = numbered(250);
  auto one = make_workers(set, 12, 1);
  auto two = make_workers(set, 12, 2);
  auto three = make_workers(set, 12, 3);
  auto four = make_workers(set, 12, 4);
  ASSERT_EQ(one[0].steps_per_epoch(), 20U);
  for (auto* group : {&two, &three, &four}) {
    for (auto& w : *group) {
      EXPECT_EQ(w.steps_per_epoch(), 20U);
      EXPECT_EQ(w.per_worker_batch() * group->size(), 12U);
    }
  }
  for (std::size_t s = 0; s < 45; ++s) {  // crosses two epoch boundaries
    const auto g1 = next_global(one);
    EXPECT_EQ(next_global(two), g1) << "step " << s;
    EXPECT_EQ(next_global(three), g1) << "step " << s;
    EXPECT_EQ(next_global(four), g1) << "step " << s;
  }
}

TEST(Distributed, ReshardingKeepsEveryGlobalBatchWithUnevenShares) {
  // An elastic job: 15 per step over 3 workers, then (from step 7, mid-epoch) over 2 (7 + 8), then over 4 (3, 4, 4,
  // 4): the global batches stay those of one worker, in the same order, and the shares are ⌊15·w/N⌋ cuts.
  const auto set = numbered(100);
  auto one = make_workers(set, 15, 1);
  auto group = make_workers(set, 15, 3);
  for (std::size_t s = 0; s < 20; ++s) {
    if (s == 7 || s == 13) {
      const int n = s == 7 ? 2 : 4;
      const data::data_cursor at = group[0].cursor();
      group.resize(std::min(group.size(), static_cast<std::size_t>(n)), group[0]);
      while (group.size() < static_cast<std::size_t>(n)) group.push_back(group[0]);
      for (int w = 0; w < n; ++w) {
        group[static_cast<std::size_t>(w)].reshard(n, w);
        group[static_cast<std::size_t>(w)].restore(at);
      }
      EXPECT_EQ(group[0].per_worker_batch(), n == 2 ? 8U : 4U);
      EXPECT_EQ(group[0].steps_per_epoch(), 6U);
    }
    const auto expected = next_global(one);
    std::vector<std::size_t> sizes;
    index_list global;
    for (auto& w : group) {
      const auto part = next_indices(w);
      sizes.push_back(part.size());
      global.insert(global.end(), part.begin(), part.end());
    }
    EXPECT_EQ(global, expected) << "step " << s;
    if (s >= 7 && s < 13) {
      EXPECT_EQ(sizes, (std::vector<std::size_t>{7, 8})) << "step " << s;
    } else if (s >= 13) {
      EXPECT_EQ(sizes, (std::vector<std::size_t>{3, 4, 4, 4})) << "step " << s;
    }
  }
}

TEST(Distributed, ReshardingRefusesAnythingButDataSharding) {
  const auto set = numbered(100, {50, 50});
  data::distributed_batches files(set, options(10, 2, 0, 7, true, data::file_shard{}));
  try {
    files.reshard(1, 0);
    ADD_FAILURE() << "file sharding was resharded";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("only data sharding keeps every global batch"), std::string::npos)
        << e.what();
  }
  data::distributed_batches shared(set, options(10, 2, 0));
  EXPECT_THROW(shared.reshard(2, 2), mwstrat::config_error);
  EXPECT_THROW(shared.reshard(11, 0), mwstrat::config_error);  // a worker would have no example
}

TEST(Distributed, TheDataFingerprintIsTheSameOnEveryWorkerAndAfterAReshardAndDiffersForOtherData) {
  // What an elastic job compares with a joiner's: equal for the same set and options whatever the worker and after a
  // reshard; different for another seed, global batch or shuffle, another label, and another pixel of a sampled
  // example (every 64th: 0 and 64 here).
  const auto set = numbered(100);
  const std::uint64_t job = data::distributed_batches(set, options(10, 2, 0)).data_fingerprint();
  EXPECT_EQ(data::distributed_batches(set, options(10, 2, 1)).data_fingerprint(), job);
  data::distributed_batches resharded(set, options(10, 2, 1));
  resharded.reshard(5, 3);
  EXPECT_EQ(resharded.data_fingerprint(), job);
  EXPECT_NE(data::distributed_batches(set, options(10, 2, 0, 8)).data_fingerprint(), job) << "another seed";
  EXPECT_NE(data::distributed_batches(set, options(20, 2, 0)).data_fingerprint(), job) << "another global batch";
  auto unshuffled = options(10, 2, 0);
  unshuffled.shuffle = false;
  EXPECT_NE(data::distributed_batches(set, unshuffled).data_fingerprint(), job) << "no shuffle";
  std::vector<std::uint8_t> pixels(set.pixels().begin(), set.pixels().end());
  std::vector<std::int64_t> labels(set.labels().begin(), set.labels().end());
  auto relabelled = labels;
  relabelled[99] = 3;
  EXPECT_NE(data::distributed_batches(data::labeled_images(pixels, relabelled, 2, 2), options(10, 2, 0))
                .data_fingerprint(),
            job)
      << "another label";
  auto repainted = pixels;
  repainted[64 * 4 + 3] = 7;  // example 64's last pixel
  EXPECT_NE(data::distributed_batches(data::labeled_images(repainted, labels, 2, 2), options(10, 2, 0))
                .data_fingerprint(),
            job)
      << "another pixel of a sampled example";
}

TEST(Distributed, WorkersTakeContiguousParts) {
  const auto set = numbered(48);
  auto one = make_workers(set, 12, 1);
  auto three = make_workers(set, 12, 3);
  const auto global = next_indices(one[0]);
  for (std::size_t w = 0; w < 3; ++w) {
    EXPECT_EQ(next_indices(three[w]), index_list(global.begin() + static_cast<long>(4 * w),
                                                 global.begin() + static_cast<long>(4 * w + 4)));
  }
}

TEST(Distributed, OffRepeatsEveryExampleOnEveryWorker) {
  const auto set = numbered(30);
  auto workers = make_workers(set, 6, 3, 5, true, data::off_shard{});
  EXPECT_EQ(workers[0].mode(), data::shard_mode::replicate);
  EXPECT_EQ(workers[0].per_worker_batch(), 2U);
  EXPECT_EQ(workers[0].steps_per_epoch(), 15U);  // C / B: every worker walks the whole set
  std::vector<std::multiset<std::size_t>> seen(3);
  for (std::size_t s = 0; s < 15; ++s) {
    const auto a = next_indices(workers[0]);
    EXPECT_EQ(next_indices(workers[1]), a);  // same seed: the same batch on every worker
    EXPECT_EQ(next_indices(workers[2]), a);
    seen[0].insert(a.begin(), a.end());
  }
  EXPECT_EQ(std::set<std::size_t>(seen[0].begin(), seen[0].end()).size(), 30U);
  EXPECT_EQ(seen[0].size(), 30U);
  EXPECT_EQ(workers[0].global_count({0, 0, 5}), 6U);
}

TEST(Distributed, SeedsDetermineTheOrder) {
  const auto set = numbered(200);
  auto a = make_workers(set, 200, 1, 1);
  auto b = make_workers(set, 200, 1, 1);
  auto c = make_workers(set, 200, 1, 2);
  const auto ea0 = next_indices(a[0]);
  EXPECT_EQ(next_indices(b[0]), ea0);
  EXPECT_NE(next_indices(c[0]), ea0);
  index_list identity(200);
  std::iota(identity.begin(), identity.end(), std::size_t{0});
  EXPECT_NE(ea0, identity);
  auto sorted = ea0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(next_indices(a[0]), ea0);  // epoch 1 is reshuffled

  auto fixed_opts = options(200, 1, 0, 1);
  fixed_opts.reshuffle_each_epoch = false;
  data::distributed_batches fixed(set, fixed_opts);
  EXPECT_EQ(next_indices(fixed), ea0);
  EXPECT_EQ(next_indices(fixed), ea0);

  auto plain_opts = options(200, 1, 0, 1);
  plain_opts.shuffle = false;
  data::distributed_batches plain(set, plain_opts);
  EXPECT_EQ(next_indices(plain), identity);
}

TEST(Distributed, UnevenLastBatchDropped) {
  const auto set = numbered(103);  // G = 12: 8 full steps, 7 examples left over
  auto workers = make_workers(set, 12, 4, 9, true);
  EXPECT_EQ(workers[0].steps_per_epoch(), 8U);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::set<std::size_t> seen;
    for (std::size_t s = 0; s < 8; ++s) {
      EXPECT_EQ(workers[0].global_count(workers[0].cursor()), 12U);
      for (auto& w : workers) {
        const auto part = next_indices(w);
        EXPECT_EQ(part.size(), 3U);
        seen.insert(part.begin(), part.end());
      }
    }
    EXPECT_EQ(seen.size(), 96U);
    EXPECT_EQ(workers[0].cursor(), (data::data_cursor{static_cast<std::uint64_t>(epoch) + 1, 0, 9}));
  }
}

TEST(Distributed, UnevenLastBatchKeptAndCorrectlyWeighted) {
  const auto set = numbered(103);
  auto workers = make_workers(set, 12, 4, 9, false);
  ASSERT_EQ(workers[0].steps_per_epoch(), 9U);
  double weighted_sum = 0;  // sum over steps of the count-weighted mean over workers of per-worker means
  std::size_t total = 0;
  for (std::size_t s = 0; s < 9; ++s) {
    const std::size_t global = workers[0].global_count(workers[0].cursor());
    EXPECT_EQ(global, s < 8 ? 12U : 7U);
    double step_sum = 0;
    std::size_t step_count = 0;
    std::vector<std::size_t> counts;
    for (auto& w : workers) {
      const auto part = next_indices(w);
      counts.push_back(part.size());
      if (!part.empty()) {
        const double mean = std::accumulate(part.begin(), part.end(), 0.0) / static_cast<double>(part.size());
        step_sum += mean * static_cast<double>(part.size());  // what an all-reduce of count-weighted means sums
      }
      step_count += part.size();
    }
    EXPECT_EQ(step_count, global);
    if (s == 8) {
      EXPECT_EQ(counts, (std::vector<std::size_t>{1, 2, 2, 2}));  // ⌊7w/4⌋ boundaries: 0, 1, 3, 5, 7
    }
    weighted_sum += step_sum;
    total += step_count;
  }
  EXPECT_EQ(total, 103U);
  EXPECT_DOUBLE_EQ(weighted_sum / static_cast<double>(total), 51.0);  // the mean of 0..102: nothing lost or doubled
  // Fewer examples than workers on the last step: some workers get none, and say so.
  auto sparse = make_workers(numbered(13), 12, 4, 1, false);
  (void)next_global(sparse);
  std::size_t empty = 0;
  for (auto& w : sparse) {
    empty += next_indices(w).empty() ? 1 : 0;
  }
  EXPECT_EQ(empty, 3U);
}

TEST(Distributed, FileSharding) {
  const auto set = numbered(37, {10, 7, 3, 12, 5});
  const std::vector<std::pair<std::size_t, std::size_t>> ranges{{0, 10}, {10, 17}, {17, 20}, {20, 32}, {32, 37}};
  auto workers = make_workers(set, 4, 2, 3, false, data::file_shard{});
  // worker 0: files 0, 2, 4 (18 examples); worker 1: files 1, 3 (19): B = 2, ⌈19/2⌉ = 10 steps
  EXPECT_EQ(workers[0].mode(), data::shard_mode::file);
  EXPECT_EQ(workers[0].steps_per_epoch(), 10U);
  EXPECT_EQ(workers[1].steps_per_epoch(), 10U);
  std::vector<std::set<std::size_t>> seen(2);
  for (std::size_t s = 0; s < 10; ++s) {
    for (std::size_t w = 0; w < 2; ++w) {
      for (auto e : next_indices(workers[w])) {
        EXPECT_TRUE(seen[w].insert(e).second);
      }
    }
  }
  auto owner = [&](std::size_t e) {
    for (std::size_t f = 0; f < ranges.size(); ++f) {
      if (e >= ranges[f].first && e < ranges[f].second) {
        return f % 2;
      }
    }
    return std::size_t{99};
  };
  EXPECT_EQ(seen[0].size(), 18U);
  EXPECT_EQ(seen[1].size(), 19U);
  for (std::size_t w = 0; w < 2; ++w) {
    for (auto e : seen[w]) {
      EXPECT_EQ(owner(e), w) << "example " << e;
    }
  }
  auto dropping = make_workers(set, 4, 2, 3, true, data::file_shard{});
  EXPECT_EQ(dropping[0].steps_per_epoch(), 9U);  // the smaller worker's ⌊18/2⌋
  EXPECT_THROW((void)data::distributed_batches(set, options(12, 6, 0, 3, true, data::file_shard{})),
               mwstrat::data_error);
  // auto: files when there are enough, else data.
  EXPECT_EQ(data::distributed_batches(set, options(4, 2, 0, 3, true, data::auto_shard{})).mode(),
            data::shard_mode::file);
  EXPECT_EQ(data::distributed_batches(set, options(12, 6, 0, 3, true, data::auto_shard{})).mode(),
            data::shard_mode::data);
}

TEST(Distributed, EvaluationPassIsInOrderAndComplete) {
  const auto set = numbered(10000);
  auto single = data::distributed_batches::for_evaluation(set, 64, 1, 0);
  EXPECT_EQ(single.steps_per_epoch(), 157U);  // ⌈10000 / 64⌉
  index_list all;
  for (std::size_t s = 0; s < single.steps_per_epoch(); ++s) {
    const auto part = next_indices(single);
    all.insert(all.end(), part.begin(), part.end());
  }
  index_list identity(10000);
  std::iota(identity.begin(), identity.end(), std::size_t{0});
  EXPECT_EQ(all, identity);
  for (const int n : {2, 3, 4}) {
    std::vector<data::distributed_batches> workers;
    for (int w = 0; w < n; ++w) {
      workers.push_back(data::distributed_batches::for_evaluation(set, 48, n, w));
    }
    index_list global;
    for (std::size_t s = 0; s < workers[0].steps_per_epoch(); ++s) {
      const auto g = next_global(workers);
      global.insert(global.end(), g.begin(), g.end());
    }
    EXPECT_EQ(global, identity) << "N = " << n;
  }
}

// Saves the cursor after `cut` steps, builds fresh workers (possibly a different number), restores, and checks
// that the next global batches equal those of an uninterrupted run.
void check_resume(std::size_t count, std::size_t g, int before, int after, std::size_t cut, std::size_t more) {
  const auto set = numbered(count);
  auto reference = make_workers(set, g, 1, 77);
  std::vector<index_list> expected;
  for (std::size_t s = 0; s < cut + more; ++s) {
    expected.push_back(next_global(reference));
  }
  auto first = make_workers(set, g, before, 77);
  for (std::size_t s = 0; s < cut; ++s) {
    EXPECT_EQ(next_global(first), expected[s]);
  }
  const data::data_cursor saved = first[0].cursor();
  for (auto& w : first) {
    EXPECT_EQ(w.cursor(), saved);  // the cursor is global: the same on every worker
  }
  // The checkpoint keeps three integers; the restarted job may use another seed in its options.
  const std::uint64_t stored[3] = {saved.epoch, saved.step, saved.seed};
  auto second = make_workers(set, g, after, 12345);
  for (auto& w : second) {
    w.restore({stored[0], stored[1], stored[2]});
  }
  for (std::size_t s = cut; s < cut + more; ++s) {
    EXPECT_EQ(next_global(second), expected[s]) << before << " -> " << after << " workers, step " << s;
  }
}

TEST(Distributed, CursorResumeSameWorkers) {
  for (const int n : {1, 2, 3, 4}) {
    check_resume(100, 12, n, n, 5, 20);  // 8 steps an epoch: the resumed run crosses epochs
    check_resume(100, 12, n, n, 8, 9);   // cut exactly at an epoch boundary
    check_resume(100, 12, n, n, 19, 3);  // cut in the third epoch
  }
}

TEST(Distributed, CursorResumeOtherNumberOfWorkers) {
  check_resume(100, 12, 2, 4, 5, 20);
  check_resume(100, 12, 4, 2, 11, 10);
  check_resume(100, 12, 3, 1, 7, 10);
  check_resume(100, 12, 1, 3, 0, 10);
}

TEST(Distributed, CursorRandomAccessAndNormalisation) {
  const auto set = numbered(100);
  data::distributed_batches b(set, options(10, 2, 1, 4));
  std::vector<float> images(5 * 4);
  std::vector<std::int64_t> labels(5);
  std::vector<std::int64_t> direct(5);
  EXPECT_EQ(b.fill({3, 4, 4}, images, direct), 5U);
  for (int s = 0; s < 34; ++s) {  // to epoch 3, step 4
    (void)b.next(images, labels);
  }
  EXPECT_EQ(b.cursor(), (data::data_cursor{3, 4, 4}));
  (void)b.next(images, labels);
  EXPECT_EQ(labels, direct);
  // step == steps_per_epoch is the start of the next pass; beyond it the cursor reads on into later passes, as
  // a repeated pipeline does (fit with steps_per_epoch larger than a pass)
  b.restore({2, 10, 4});
  EXPECT_EQ(b.cursor(), (data::data_cursor{3, 0, 4}));
  b.restore({2, 11, 4});
  EXPECT_EQ(b.cursor(), (data::data_cursor{3, 1, 4}));
  b.restore({1, 24, 4});
  EXPECT_EQ(b.cursor(), (data::data_cursor{3, 4, 4}));
  std::vector<std::int64_t> folded(5);
  EXPECT_EQ(b.fill({0, 34, 4}, images, folded), 5U);
  EXPECT_EQ(folded, direct) << "step 34 of pass 0 is step 4 of pass 3";
  EXPECT_EQ(data::stream_position(34, 10, 4), (data::data_cursor{3, 4, 4}));
  // batch_view form: the same batch, in the object's own buffers
  b.restore({3, 4, 4});
  const data::batch_view view = b.next();
  EXPECT_EQ(view.count, 5U);
  EXPECT_EQ(view.cursor, (data::data_cursor{3, 4, 4}));
  EXPECT_EQ(std::vector<std::int64_t>(view.labels.begin(), view.labels.end()), direct);
  EXPECT_EQ(view.images.size(), 20U);
}

TEST(Distributed, OptionErrors) {
  const auto set = numbered(100);
  try {
    (void)data::distributed_batches(set, options(10, 3, 2));
    ADD_FAILURE() << "no error";
  } catch (const mwstrat::config_error& e) {
    EXPECT_EQ(std::string(e.what()), "[mwstrat.data] rank 2: global batch 10 is not a positive multiple of the 3 workers");
  }
  EXPECT_THROW((void)data::distributed_batches(set, options(0, 1, 0)), mwstrat::config_error);
  EXPECT_THROW((void)data::distributed_batches(set, options(4, 2, 2)), mwstrat::config_error);
  EXPECT_THROW((void)data::distributed_batches(set, options(4, 0, 0)), mwstrat::config_error);
  data::distributed_batches b(set, options(8, 2, 0));
  std::vector<float> images(4 * 4 - 1);
  std::vector<std::int64_t> labels(4);
  EXPECT_THROW((void)b.next(images, labels), mwstrat::config_error);
}

TEST(Distributed, SteadyStateAllocatesNothing) {
#ifdef MWSTRAT_DATA_TEST_TSAN
  GTEST_SKIP() << "operator new is ThreadSanitizer's in this build: allocations are not counted";
#endif
  const auto set = numbered(1000);
  data::distributed_batches b(set, options(64, 2, 1, 3));
  std::vector<float> images(32 * 4);
  std::vector<std::int64_t> labels(32);
  (void)b.next(images, labels);  // the first epoch's order is computed into the buffer made at construction
  const std::size_t before = allocations.load();
  std::size_t examples = 0;
  for (int s = 0; s < 200; ++s) {  // about 13 epochs: each reshuffle reuses the buffer
    examples += b.next(images, labels);
    examples += b.next().count;
  }
  EXPECT_EQ(allocations.load(), before);
  EXPECT_EQ(examples, 400U * 32U);
}

// The same with image_augmentation's transform: a crop, a flip and a standardization per example allocate nothing.
TEST(Distributed, AugmentedSteadyStateAllocatesNothing) {
#ifdef MWSTRAT_DATA_TEST_TSAN
  GTEST_SKIP() << "operator new is ThreadSanitizer's in this build: allocations are not counted";
#endif
  std::vector<std::uint8_t> pixels(200 * 8 * 8 * 3);
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<std::uint8_t>(i * 13 % 256);
  }
  const data::labeled_images set(std::move(pixels), std::vector<std::int64_t>(200, 1), data::image_shape{8, 8, 3});
  data::distribution_options o = options(32, 2, 0, 3);
  o.transform = data::image_augmentation(data::augmentation_options{}).transform();
  data::distributed_batches b(set, o);
  std::vector<float> images(16 * set.example_size());
  std::vector<std::int64_t> labels(16);
  (void)b.next(images, labels);
  const std::size_t before = allocations.load();
  for (int s = 0; s < 50; ++s) {
    (void)b.next(images, labels);
  }
  EXPECT_EQ(allocations.load(), before);
}

}  // namespace distributed_test
