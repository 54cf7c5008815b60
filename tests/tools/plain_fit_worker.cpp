// A worker with no recovery wiring of its own: the strategy from TF_CONFIG, a small model, `fit` with default options.
// Whatever `mwstrat-launch --replace-lost` makes of it (in-memory recovery, the survivors' reports) is the library's.
// Its one fault: with `kill-rank R` and `kill-step N` on the command line, rank R SIGKILLs itself after global step N
// in the job's first start (a replacement, or a restarted group, runs clean). It prints its parameters' sum at the end.
#include <mwstrat/cluster/launcher_environment.hpp>
#include <mwstrat/strategy.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <string>

namespace {

struct kill_at {
  int rank = -1;
  std::uint64_t step = 0;
  static constexpr bool stops_one_worker = false;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs&) {
    if (ctx.strategy.replica_id() == rank && ctx.global_step() == step) {
      std::printf("rank %d kills itself after global step %llu\n", rank, static_cast<unsigned long long>(step));
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    kill_at fault;
    if (argc == 3 && !mwstrat::launcher_environment::read().restarted()) {
      fault.rank = std::atoi(argv[1]);
      fault.step = std::strtoull(argv[2], nullptr, 10);
    }
    auto strategy = mwstrat::make_multi_worker_mirrored_strategy();
    const int workers = strategy.num_replicas_in_sync();
    mwstrat::test::softmax_regression model(6, 3, 1);
    mwstrat::test::plain_sgd sgd;
    mwstrat::test::blob_batches data(96, 6, 3, 24, workers, strategy.replica_id(), 9);
    mwstrat::fit_options options;
    options.epochs = 3;
    options.catch_preemption_signals = false;
    mwstrat::fit(strategy, model, sgd, data, options, fault);
    const auto p = model.parameters();
    std::printf("rank %d done: parameter sum %.9g\n", strategy.replica_id(),
                static_cast<double>(std::accumulate(p.begin(), p.end(), 0.0f)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
