// Near misses of sharding_policy: one type per missing requirement (see data/concepts.hpp).

#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/sharding.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string_view>

namespace {

namespace data = mwstrat::data;

struct complete {
  using sharding_policy_tag = void;
  [[nodiscard]] std::string_view name() const { return "complete"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(data::sharding_policy<complete>);

// 1. not copyable
struct move_only {
  using sharding_policy_tag = void;
  move_only() = default;
  move_only(move_only&&) = default;
  move_only& operator=(move_only&&) = default;
  std::unique_ptr<int> state;
  [[nodiscard]] std::string_view name() const { return "move_only"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<move_only>);

// 2. no opt-in tag, though structurally complete
struct no_tag {
  [[nodiscard]] std::string_view name() const { return "no_tag"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<no_tag>);

// 3. no name()
struct no_name {
  using sharding_policy_tag = void;
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<no_name>);

// 3'. name() not usable on a const policy
struct mutable_name {
  using sharding_policy_tag = void;
  [[nodiscard]] std::string_view name() { return "mutable_name"; }
  [[nodiscard]] data::shard_plan resolve(const data::shard_request&) const { return {}; }
};
static_assert(!data::sharding_policy<mutable_name>);

// 4. no resolve()
struct no_resolve {
  using sharding_policy_tag = void;
  [[nodiscard]] std::string_view name() const { return "no_resolve"; }
};
static_assert(!data::sharding_policy<no_resolve>);

// 4'. resolve() returns something other than a shard_plan
struct wrong_resolve {
  using sharding_policy_tag = void;
  [[nodiscard]] std::string_view name() const { return "wrong_resolve"; }
  [[nodiscard]] int resolve(const data::shard_request&) const { return 0; }
};
static_assert(!data::sharding_policy<wrong_resolve>);

static_assert(data::sharding_policy<data::off_shard>);
static_assert(data::sharding_policy<data::data_shard>);
static_assert(data::sharding_policy<data::file_shard>);
static_assert(data::sharding_policy<data::auto_shard>);
static_assert(data::sharding_policy<data::any_shard_policy>);
static_assert(!std::is_constructible_v<data::any_shard_policy, no_tag>);

TEST(Concepts, NearMissesAreCompileTimeChecks) {
  EXPECT_EQ(complete{}.name(), "complete");  // the checks above are the test; this keeps the file a test case
}

}  // namespace
