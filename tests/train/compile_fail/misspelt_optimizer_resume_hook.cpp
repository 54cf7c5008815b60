// An optimizer whose `set_iterations` is misspelt, given to BackupAndRestore: without the check, the resume would
// silently restart its step count (the optimizer would just not be a checkpointable_optimizer). Expected: the
// static_assert that names the missing member.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

#include <cstdint>
#include <span>
#include <vector>

struct momentum_with_a_typo {
  std::vector<float> velocity;
  std::int64_t steps = 0;
  void apply(std::span<float>, std::span<const float>) { ++steps; }
  std::span<float> state() { return velocity; }
  std::int64_t iterations() const { return steps; }
  void set_iteraton(std::int64_t n) { steps = n; }  // misspelt
};

void misuse(mwstrat::local_collective& c) {
  mwstrat::mirrored_strategy<mwstrat::local_collective&> strategy(c);
  mwstrat::test::softmax_regression model(6, 3, 1);
  momentum_with_a_typo sgd;
  mwstrat::test::blob_batches data(24, 6, 3, 24, 1, 0, 9);
  mwstrat::backup_and_restore backup({"backup"});
  mwstrat::fit(strategy, model, sgd, data, mwstrat::fit_options{}, backup);
}
