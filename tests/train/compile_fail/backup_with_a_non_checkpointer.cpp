// BackupAndRestore over a type that is not a checkpointer (it has save() but no restore_latest_checkpoint()).
// Expected: the unsatisfied `checkpointer` constraint.
#include <mwstrat/train/callbacks/backup_and_restore.hpp>

#include <cstdint>
#include <filesystem>

struct half_a_checkpointer {
  std::filesystem::path save(const mwstrat::training_state_view&, std::int64_t) { return {}; }
};

void misuse() {
  [[maybe_unused]] mwstrat::basic_backup_and_restore<half_a_checkpointer>* backup = nullptr;
}
