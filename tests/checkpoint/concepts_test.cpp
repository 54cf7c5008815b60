#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/checkpoint/manager.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace concepts_test {

using mwstrat::checkpointer;
using mwstrat::restored_checkpoint;
using mwstrat::training_state;
using mwstrat::training_state_view;
using file_path = std::filesystem::path;  // not "path": the other checkpoint tests name their files so

// The example of concepts.hpp, complete: structural, no tag to declare.
struct bucket_checkpointer {
  std::string save(const training_state_view&, std::int64_t) { return "bucket/1"; }
  std::optional<file_path> latest() const { return std::nullopt; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const { return std::nullopt; }
  void remove_all() {}
};
static_assert(checkpointer<bucket_checkpointer>);
static_assert(checkpointer<mwstrat::checkpoint_manager>);

// Near misses: one requirement missing each.
struct no_save {  // 1
  std::optional<file_path> latest() const { return {}; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const { return {}; }
  void remove_all() {}
};
struct save_returns_nothing {  // 1, wrong result
  void save(const training_state_view&, std::int64_t) {}
  std::optional<file_path> latest() const { return {}; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const { return {}; }
  void remove_all() {}
};
struct no_latest {  // 2
  file_path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const { return {}; }
  void remove_all() {}
};
struct latest_not_const {  // 2, not on a const checkpointer
  file_path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<file_path> latest() { return {}; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const { return {}; }
  void remove_all() {}
};
struct restore_without_path {  // 3, the state alone: BackupAndRestore could not say what it resumed from
  file_path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<file_path> latest() const { return {}; }
  std::optional<training_state> restore_latest_checkpoint() const { return {}; }
  void remove_all() {}
};
struct restore_not_const {  // 3, not on a const checkpointer
  file_path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<file_path> latest() const { return {}; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() { return {}; }
  void remove_all() {}
};
struct no_remove_all {  // 4
  file_path save(const training_state_view&, std::int64_t) { return {}; }
  std::optional<file_path> latest() const { return {}; }
  std::optional<restored_checkpoint> restore_latest_checkpoint() const { return {}; }
};
static_assert(!checkpointer<no_save>);
static_assert(!checkpointer<save_returns_nothing>);
static_assert(!checkpointer<no_latest>);
static_assert(!checkpointer<latest_not_const>);
static_assert(!checkpointer<restore_without_path>);
static_assert(!checkpointer<restore_not_const>);
static_assert(!checkpointer<no_remove_all>);
static_assert(!checkpointer<int>);

TEST(checkpointer, concept_accepts_structural_types_and_rejects_near_misses) {
  bucket_checkpointer k;
  EXPECT_EQ(file_path(k.save({}, 1)), file_path("bucket/1"));
}

}  // namespace concepts_test
