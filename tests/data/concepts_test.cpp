// Near misses of sharding_policy: one type per missing requirement (see data/concepts.hpp).

#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/sharding.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string_view>

namespace concepts_test {

namespace data = mwstrat::data;

struct complete {
  [[nodiscard]] std::string_view name() const { return "complete"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(data::sharding_policy<complete>);

// 1. not copyable
struct move_only {
  move_only() = default;
  move_only(move_only&&) = default;
  move_only& operator=(move_only&&) = default;
  std::unique_ptr<int> state;
  [[nodiscard]] std::string_view name() const { return "move_only"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<move_only>);

// 2. no name()
struct no_name {
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<no_name>);

// 2'. name() not usable on a const policy
struct mutable_name {
  [[nodiscard]] std::string_view name() { return "mutable_name"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<mutable_name>);

// 3. no resolve()
struct no_resolve {
  [[nodiscard]] std::string_view name() const { return "no_resolve"; }
};
static_assert(!data::sharding_policy<no_resolve>);

// 3'. resolve() returns something other than a shard_plan
struct wrong_resolve {
  [[nodiscard]] std::string_view name() const { return "wrong_resolve"; }
  [[nodiscard]] int resolve(const data::shard_request&) const { return 0; }
};
static_assert(!data::sharding_policy<wrong_resolve>);

static_assert(data::sharding_policy<data::off_shard>);
static_assert(data::sharding_policy<data::data_shard>);
static_assert(data::sharding_policy<data::file_shard>);
static_assert(data::sharding_policy<data::auto_shard>);
static_assert(data::sharding_policy<data::any_shard_policy>);
static_assert(!std::is_constructible_v<data::any_shard_policy, no_name>);
static_assert(!std::is_constructible_v<data::any_shard_policy, int>);

TEST(Concepts, NearMissesAreCompileTimeChecks) {
  EXPECT_EQ(complete{}.name(), "complete");  // the checks above are the test; this keeps the file a test case
}

}  // namespace concepts_test
