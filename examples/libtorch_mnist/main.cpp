// The MNIST multi-worker tutorial's CNN written as a libtorch module (torch::nn), trained by mwstrat::fit with
// MultiWorkerMirroredStrategy: DistributedDataParallel for libtorch's C++ API. One process per worker:
//
//   mwstrat-launch -n 2 -- libtorch_mnist --data-dir .cache/mnist
//
// --task autoencoder trains a model that is not a classifier instead (784 → 64 → 784 on the pixels, mean squared
// error), reported by its loss and the mean_squared_error metric alone. The chief prints Keras's progress lines;
// --backup-dir resumes a restarted job exactly (BackupAndRestore); --model-dir saves the weights under the module's
// own names (conv1.weight, ...), which examples/python/evaluate_libtorch_model.py loads into the same network in
// PyTorch.
#include <mwstrat/data.hpp>
#include <mwstrat/libtorch/module_model.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy.hpp>
#include <mwstrat/train.hpp>

#include <torch/torch.h>

#include "common/flags.hpp"
#include "tutorial_cnn.hpp"

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

namespace {

// Not a classifier: the pixels through a 64-wide bottleneck and back.
struct autoencoder : torch::nn::Module {
  torch::nn::Linear encode{nullptr}, decode{nullptr};
  autoencoder() {
    encode = register_module("encode", torch::nn::Linear(784, 64));
    decode = register_module("decode", torch::nn::Linear(64, 784));
  }
  torch::Tensor forward(torch::Tensor x) { return torch::sigmoid(decode->forward(torch::relu(encode->forward(x)))); }
};

// Writes each step's loss (over every worker's examples) to a file, on the chief: loss curves to compare.
struct step_losses {
  std::ofstream* out;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs& logs) {
    if (out && ctx.strategy.is_chief()) *out << ctx.global_step() << ' ' << logs.batch_loss << '\n' << std::flush;
  }
};

// A worker lost at a step, after the backup of that step is durable (so the resume point does not depend on the
// timing of the background write): the chief waits for it, everyone meets, then the chosen rank kills itself. Once
// per process (with in-memory recovery the survivors run the step again with the replacement), and never in a
// restarted job or a replacement.
struct kill_at_step {
  std::optional<std::uint64_t> step;
  int rank = 1;
  mwstrat::backup_and_restore* backup = nullptr;
  bool fired = false;
  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const mwstrat::batch_logs&) {
    if (!step || fired || ctx.relaunched || ctx.global_step() != *step) return;  // once, not again after a restart
    fired = true;
    if (backup) backup->wait_for_backup();
    ctx.strategy.barrier();
    if (ctx.strategy.replica_id() == rank) std::raise(SIGKILL);
  }
};

const char* const usage =
    "usage: libtorch_mnist [--data-dir D (.cache/mnist)] [--task classifier|autoencoder] [--batch N per worker (64)]\n"
    "  [--epochs N (1)] [--steps-per-epoch N (0: the whole set)] [--learning-rate X (0.05; 5 for the autoencoder)] [--threads N (1)]\n"
    "  [--backup-dir DIR] [--save-freq epoch|N] [--model-dir DIR] [--weights-out FILE] [--losses-out FILE]\n"
    "  [--kill-at-step N [--kill-rank R (1)]] [--help]\n"
    "Run one process per worker (TF_CONFIG), e.g. mwstrat-launch -n 2 -- libtorch_mnist.\n"
    "A bad flag or value is refused at once (status 2). Exit status: 0 trained, 1 an error, 75 preempted.\n";

struct flags {
  std::string data_dir = ".cache/mnist", task = "classifier", backup_dir, save_freq = "epoch", model_dir, weights_out,
              losses_out;
  std::size_t batch = 64, steps_per_epoch = 0;
  int epochs = 1, threads = 1, kill_rank = 1;
  std::optional<double> learning_rate;  // default: 0.05 for the classifier, 5 for the autoencoder
  std::optional<std::uint64_t> kill_step;
};

template <class Module, class Step>
int train(const flags& f, std::shared_ptr<Module> net, Step step, bool classifier) {
  auto strategy = mwstrat::make_multi_worker_mirrored_strategy();  // from TF_CONFIG; waits for every worker
  const bool chief = strategy.is_chief();
  const std::size_t global_batch = f.batch * static_cast<std::size_t>(strategy.num_replicas_in_sync());
  mwstrat::distributed_input train_data(mwstrat::data::load_mnist(f.data_dir, mwstrat::data::mnist_split::train),
                                        global_batch, strategy, /*seed=*/7);
  mwstrat::libtorch::module_model model(net, step);  // the module's parameters now live in mwstrat's arena
  mwstrat::nn::sgd optimizer(f.learning_rate.value_or(classifier ? 0.05 : 5.0));

  mwstrat::fit_options options;
  options.epochs = f.epochs;
  options.steps_per_epoch = f.steps_per_epoch;
  mwstrat::progress_logger progress;
  std::optional<mwstrat::backup_and_restore> backup;
  if (!f.backup_dir.empty()) {
    backup.emplace(mwstrat::backup_options{f.backup_dir, mwstrat::save_frequency::parse(f.save_freq, "--save-freq")});
  }
  std::ofstream losses;
  if (chief && !f.losses_out.empty()) losses.open(f.losses_out);
  step_losses log{losses.is_open() ? &losses : nullptr};
  kill_at_step fault{f.kill_step, f.kill_rank, backup ? &*backup : nullptr};
  mwstrat::metrics measures(mwstrat::mean_squared_error{});  // the autoencoder's; a classifier shows accuracy
  try {
    if (classifier && backup) mwstrat::fit(strategy, model, optimizer, train_data, options, progress, log, fault, *backup);
    if (classifier && !backup) mwstrat::fit(strategy, model, optimizer, train_data, options, progress, log, fault);
    if (!classifier && backup)
      mwstrat::fit(strategy, model, optimizer, train_data, options, measures, progress, log, fault, *backup);
    if (!classifier && !backup) mwstrat::fit(strategy, model, optimizer, train_data, options, measures, progress, log, fault);
  } catch (const mwstrat::preempted& p) {
    std::cerr << p.what() << "\n";
    return mwstrat::preempted_exit_code;
  }
  if (!f.model_dir.empty()) {
    const auto path = std::filesystem::path(f.model_dir) / "model.safetensors";
    if (mwstrat::save_model(strategy, path, model, optimizer)) std::cout << "saved " << path.string() << "\n";
  }
  if (chief && !f.weights_out.empty()) {
    std::ofstream out(f.weights_out, std::ios::binary);
    const auto w = model.parameters();
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size_bytes()));
    if (!out) throw mwstrat::io_error({"libtorch_mnist"}, f.weights_out + ": write failed");
  }
  auto test = mwstrat::distributed_input::for_evaluation(
      mwstrat::data::load_mnist(f.data_dir, mwstrat::data::mnist_split::test), global_batch, strategy);
  const mwstrat::evaluation e = classifier ? mwstrat::evaluate(strategy, model, test)
                                           : mwstrat::evaluate(strategy, model, test, 0, measures);
  if (chief) {
    if (e.has_accuracy) {
      std::printf("test: loss=%.6f accuracy=%.6f examples=%.0f\n", e.loss, e.accuracy, e.count);
    } else {
      std::printf("test: loss=%.6f mean_squared_error=%.6f examples=%.0f\n", e.loss, e.metrics.at(0).value, e.count);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  flags f;
  example_flags::reader args(argc, argv, "libtorch_mnist", usage);
  while (args.next()) {
    if (args.is("--data-dir")) f.data_dir = args.value();
    else if (args.is("--task")) f.task = args.value();
    else if (args.is("--batch")) f.batch = args.whole<std::size_t>(1, 60000);
    else if (args.is("--epochs")) f.epochs = args.whole(1);
    else if (args.is("--steps-per-epoch")) f.steps_per_epoch = args.whole<std::size_t>(0, std::size_t{1} << 40);
    else if (args.is("--learning-rate")) f.learning_rate = args.positive();
    else if (args.is("--threads")) f.threads = args.whole(1, 256);
    else if (args.is("--backup-dir")) f.backup_dir = args.value();
    else if (args.is("--save-freq")) f.save_freq = args.value();
    else if (args.is("--model-dir")) f.model_dir = args.value();
    else if (args.is("--weights-out")) f.weights_out = args.value();
    else if (args.is("--losses-out")) f.losses_out = args.value();
    else if (args.is("--kill-at-step")) f.kill_step = args.whole<std::uint64_t>(1);
    else if (args.is("--kill-rank")) f.kill_rank = args.whole(0);
    else args.unknown();
  }
  if (f.task != "classifier" && f.task != "autoencoder") {
    std::cerr << "libtorch_mnist: --task: '" << f.task << "' is not classifier or autoencoder\n" << usage;
    return 2;
  }
  try {
    torch::set_num_threads(f.threads);
    torch::manual_seed(1);  // every worker builds the same initial weights (fit mirrors the chief's anyway)
    if (f.task == "classifier") {
      return train(f, std::make_shared<libtorch_mnist::cnn>(), libtorch_mnist::classify, true);
    }
    return train(f, std::make_shared<autoencoder>(), [](autoencoder& n, const mwstrat::data::image_batch& b) {
      const torch::Tensor pixels = libtorch_mnist::images(b).flatten(1);
      const torch::Tensor out = n.forward(pixels);
      // The mean over each example's 784 outputs, then over the batch: the loss per example is that mean.
      return mwstrat::libtorch::regressed{torch::mse_loss(out, pixels), out, pixels};
    }, false);
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "libtorch_mnist: " << e.what() << "\n";
    return 1;
  }
}
