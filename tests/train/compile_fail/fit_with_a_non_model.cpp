// fit with something that is not a trainable_model (here: a model of another batch type's images form only).
// Expected: the unsatisfied `trainable_model` constraint.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

struct not_a_model {
  std::span<float> parameters() { return {}; }
};

void misuse(mwstrat::local_collective& c) {
  mwstrat::mirrored_strategy<mwstrat::local_collective&> strategy(c);
  not_a_model model;
  mwstrat::test::plain_sgd sgd;
  mwstrat::test::blob_batches data(24, 6, 3, 24, 1, 0, 9);
  mwstrat::fit(strategy, model, sgd, data, mwstrat::fit_options{});
}
