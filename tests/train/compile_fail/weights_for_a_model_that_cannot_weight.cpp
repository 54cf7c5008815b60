// Sample weights (a weighted_batch_source) given to fit with a model that cannot weight its per-example losses: it
// would train as if every example weighed 1. Expected: the static_assert naming sample_weighted_model.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/sample_weights.hpp>

#include <support/softmax_regression.hpp>

#include <vector>

void misuse(mwstrat::local_collective& c, const mwstrat::data::labeled_images& set) {
  mwstrat::mirrored_strategy<mwstrat::local_collective&> strategy(c);
  mwstrat::test::softmax_regression model(set.example_size(), 10, 1);
  mwstrat::test::plain_sgd sgd;
  auto data = mwstrat::sample_weighted_input::with_sample_weight(mwstrat::distributed_input(set, 32, strategy, 1),
                                                                 std::vector<float>(set.count(), 1.0f));
  mwstrat::fit(strategy, model, sgd, data, mwstrat::fit_options{});
}
