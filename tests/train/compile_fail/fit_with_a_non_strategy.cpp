// fit with something that is not a strategy (the collective itself). Expected: the unsatisfied `strategy`
// constraint.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

void misuse(mwstrat::local_collective& c) {
  mwstrat::test::softmax_regression model(6, 3, 1);
  mwstrat::test::plain_sgd sgd;
  mwstrat::test::blob_batches data(24, 6, 3, 24, 1, 0, 9);
  mwstrat::fit(c, model, sgd, data, mwstrat::fit_options{});
}
