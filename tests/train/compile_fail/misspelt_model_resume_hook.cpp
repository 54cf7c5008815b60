// A model with `step()` whose `set_step` is misspelt, saved by BackupAndRestore: its RNG position would silently not
// be restored. Expected: the static_assert that names the missing member.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

#include <cstdint>

struct model_with_a_typo : mwstrat::test::softmax_regression {
  using softmax_regression::softmax_regression;
  std::uint64_t position = 0;
  std::uint64_t step() const { return position; }
  void set_stp(std::uint64_t n) { position = n; }  // misspelt
};

void misuse(mwstrat::local_collective& c) {
  mwstrat::mirrored_strategy<mwstrat::local_collective&> strategy(c);
  model_with_a_typo model(6, 3, 1);
  mwstrat::test::momentum_sgd sgd(model.parameters().size());
  mwstrat::test::blob_batches data(24, 6, 3, 24, 1, 0, 9);
  mwstrat::backup_and_restore backup({"backup"});
  mwstrat::fit(strategy, model, sgd, data, mwstrat::fit_options{}, backup);
}
