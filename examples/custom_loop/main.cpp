// A custom training loop using the strategy directly (TensorFlow's "custom training loop with
// MultiWorkerMirroredStrategy"): no fit, no callbacks — each step is written out, so every collective call is
// visible. Run it like the other examples, one process per worker:
//   mwstrat-launch -n 2 -- custom_loop --data-dir .cache/mnist --steps 100
#include <mwstrat/data.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/strategy.hpp>
#include <mwstrat/train/distributed_input.hpp>

#include "common/flags.hpp"

#include <array>
#include <cstdio>
#include <exception>
#include <iostream>
#include <span>
#include <string>

namespace {
const char* const usage =
    "usage: custom_loop [--data-dir DIR (.cache/mnist)] [--steps N (100)] [--help]\n"
    "Run one process per worker (TF_CONFIG), e.g. mwstrat-launch -n 2 -- custom_loop.\n"
    "A bad flag or value is refused at once (status 2). Exit status: 0 trained, 1 an error.\n";
}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = ".cache/mnist";
  std::size_t steps = 100;
  example_flags::reader args(argc, argv, "custom_loop", usage);
  while (args.next()) {
    if (args.is("--data-dir")) data_dir = args.value();
    else if (args.is("--steps")) steps = args.whole<std::size_t>(1, std::size_t{1} << 40);
    else args.unknown();
  }
  try {
    // One strategy per process, from TF_CONFIG; blocks until every worker has joined.
    auto strategy = mwstrat::make_multi_worker_mirrored_strategy();
    const std::size_t per_worker = 32;
    const std::size_t global_batch = per_worker * static_cast<std::size_t>(strategy.num_replicas_in_sync());
    mwstrat::distributed_input train(mwstrat::data::load_mnist(data_dir, mwstrat::data::mnist_split::train),
                                     global_batch, strategy, /*seed=*/5);

    using namespace mwstrat::nn;
    sequential model({input{{28, 28}}, flatten{}, dense{64, activation::relu}, dense{10}});
    model.initialize(11);
    sgd optimizer(0.1);

    // 1. Same architecture everywhere, then the chief's initial weights everywhere.
    strategy.verify_same("model fingerprint", model.fingerprint());
    strategy.mirror(model.parameters());

    for (std::size_t step = 0; step < steps; ++step) {
      // 2. This worker's share of global step `step`.
      const mwstrat::data::image_batch batch = train.batch_at(step / train.steps_per_epoch(), step % train.steps_per_epoch());
      // 3. Local gradients of the mean loss over the local examples...
      const step_stats local = model.train_batch(batch.inputs, batch.labels, batch.size);
      // 4. ...averaged over the workers, so every replica applies the same update.
      strategy.mean_gradients(model.gradients());
      optimizer.apply(model.parameters(), model.gradients());
      // 5. Metrics summed over the workers, then divided: weighted by examples.
      std::array<double, 3> m{local.loss_sum, static_cast<double>(local.correct), static_cast<double>(local.count)};
      strategy.sum_metrics(m);
      if (strategy.is_chief() && (step + 1) % 25 == 0) {
        std::printf("step %zu: loss=%.4f accuracy=%.4f\n", step + 1, m[0] / m[2], m[1] / m[2]);
      }
    }
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "custom_loop: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
