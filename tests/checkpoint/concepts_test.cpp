#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/checkpoint/manager.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace {

using mwstrat::checkpointer;
using mwstrat::training_state;
using mwstrat::training_state_view;
using path = std::filesystem::path;

// The opt-in example of concepts.hpp, complete.
struct bucket_checkpointer {
  using is_checkpointer = void;
  std::string save(const training_state_view&, std::int64_t) { return "bucket/1"; }
  std::optional<path> latest() const { return std::nullopt; }
  std::optional<training_state> restore_latest() const { return std::nullopt; }
  void remove_all() {}
};
static_assert(checkpointer<bucket_checkpointer>);
static_assert(checkpointer<mwstrat::checkpoint_manager>);

// Opting in from outside, through the customisation point.
struct external {
  path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<path> latest() const { return {}; }
  std::optional<training_state> restore_latest() const { return {}; }
  void remove_all() {}
};
}  // namespace
template <>
inline constexpr bool mwstrat::enable_checkpointer<external> = true;
namespace {
static_assert(checkpointer<external>);

// Near misses: one requirement missing each.
struct no_opt_in {  // 1
  path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<path> latest() const { return {}; }
  std::optional<training_state> restore_latest() const { return {}; }
  void remove_all() {}
};
struct no_save {  // 2
  using is_checkpointer = void;
  std::optional<path> latest() const { return {}; }
  std::optional<training_state> restore_latest() const { return {}; }
  void remove_all() {}
};
struct save_returns_nothing {  // 2, wrong result
  using is_checkpointer = void;
  void save(const training_state_view&, std::int64_t) {}
  std::optional<path> latest() const { return {}; }
  std::optional<training_state> restore_latest() const { return {}; }
  void remove_all() {}
};
struct latest_not_const {  // 3
  using is_checkpointer = void;
  path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<path> latest() { return {}; }
  std::optional<training_state> restore_latest() const { return {}; }
  void remove_all() {}
};
struct restore_returns_view {  // 4
  using is_checkpointer = void;
  path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<path> latest() const { return {}; }
  std::optional<training_state_view> restore_latest() const { return {}; }
  void remove_all() {}
};
struct no_remove_all {  // 5
  using is_checkpointer = void;
  path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<path> latest() const { return {}; }
  std::optional<training_state> restore_latest() const { return {}; }
};
static_assert(!checkpointer<no_opt_in>);
static_assert(!checkpointer<no_save>);
static_assert(!checkpointer<save_returns_nothing>);
static_assert(!checkpointer<latest_not_const>);
static_assert(!checkpointer<restore_returns_view>);
static_assert(!checkpointer<no_remove_all>);
static_assert(!checkpointer<int>);

TEST(checkpointer, concept_accepts_opted_in_types_and_rejects_near_misses) {
  bucket_checkpointer k;
  EXPECT_EQ(path(k.save({}, 1)), path("bucket/1"));
}

}  // namespace
