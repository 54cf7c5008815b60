// A joiner's identity (train/detail/job_identity.hpp) on in-process ranks: what it is made of, and the collective
// comparison that names the joiners that differ from the chief, the same verdict on every rank. The refusal with
// real processes (another job token, other data) is tests/examples/elastic_example_test.cpp.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/detail/job_identity.hpp>

#include <support/tiny_training.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace job_identity_test {

using namespace mwstrat;
using test::tiny_model;

// Training data that can say its global batches' sizes (a reshardable source): `first` examples in the first,
// `last` in the last, and a fingerprint of its content.
struct shaped_data {
  std::size_t first = 8, last = 8;
  std::uint64_t fingerprint = 42;
  void reshard(int, int) {}
  [[nodiscard]] std::size_t global_count_at(std::size_t, std::size_t step) const { return step == 0 ? first : last; }
  [[nodiscard]] std::uint64_t data_fingerprint() const { return fingerprint; }
};

// Data that says nothing of its shape.
struct opaque_data {};

TEST(job_identity, holds_the_model_the_steps_and_the_datas_shape_where_the_data_can_say_it) {
  tiny_model model;
  const shaped_data data{8, 3, 99};
  const auto id = detail::identity_of(model, data, 5);
  EXPECT_EQ(id.words[0], static_cast<std::int64_t>(detail::fnv1a64("tiny(5)")));
  EXPECT_EQ(id.words[1], 7);  // the fingerprint's length
  EXPECT_EQ(id.words[2], 5);
  EXPECT_EQ(id.words[3], 8);
  EXPECT_EQ(id.words[4], 3);
  EXPECT_EQ(id.words[5], 99);

  const auto plain = detail::identity_of(model, opaque_data{}, 5);
  EXPECT_EQ(plain.words[2], 5);
  EXPECT_EQ(plain.words[3], 0);
  EXPECT_EQ(plain.words[4], 0);
  EXPECT_EQ(plain.words[5], 0);
}

// Four ranks, ranks 2 and 3 just taken in: rank 2 has other data (its last batch), rank 3 is the job's. Every rank
// hears the same verdict: rank 2, with the numbers; rank 3 is not named. A member that differs is not judged (only
// joiners are: a member's identity was compared when it joined).
TEST(job_identity, the_joiners_that_differ_from_the_chief_are_named_with_why_on_every_rank) {
  std::mutex mutex;
  std::vector<std::vector<std::pair<int, std::string>>> verdicts(4);
  spawn_ranks(4, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    tiny_model model;
    shaped_data data;
    if (strategy.replica_id() == 2) data.last = 6;
    if (strategy.replica_id() == 1) data.fingerprint = 7;  // a member: not a joiner, so not judged
    const auto id = detail::identity_of(model, data, 10);
    auto found = detail::mismatched_joiners(strategy, id, 2);
    std::lock_guard lock(mutex);
    verdicts[static_cast<std::size_t>(strategy.replica_id())] = std::move(found);
  });
  for (std::size_t r = 0; r < verdicts.size(); ++r) {
    ASSERT_EQ(verdicts[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(verdicts[r][0].first, 2) << "rank " << r;
    EXPECT_EQ(verdicts[r][0].second, "examples in the data's last global batch: 6, the job's 8") << "rank " << r;
  }
}

// A digest is said to differ, never printed as a number.
TEST(job_identity, a_joiner_with_other_data_content_is_told_its_data_differs) {
  std::mutex mutex;
  std::vector<std::vector<std::pair<int, std::string>>> verdicts(2);
  spawn_ranks(2, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c);
    tiny_model model;
    shaped_data data;
    if (strategy.replica_id() == 1) data.fingerprint = 43;
    auto found = detail::mismatched_joiners(strategy, detail::identity_of(model, data, 10), 1);
    std::lock_guard lock(mutex);
    verdicts[static_cast<std::size_t>(strategy.replica_id())] = std::move(found);
  });
  for (const auto& v : verdicts) {
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].first, 1);
    EXPECT_EQ(v[0].second, "training data (its examples, labels, global batch or shuffle) differs from the job's");
  }
}

}  // namespace job_identity_test
