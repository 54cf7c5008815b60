// The multi-node tutorial's program (ResNet-56 on CIFAR-10 with MultiWorkerMirroredStrategy), in C++.
//
// Every worker runs this same program with its own TF_CONFIG (mwstrat-launch sets it):
//   mwstrat-launch -n 2 -- cifar10_resnet --data-dir .cache/cifar10
// or, from TFRecord shards of tf.train.Example (features image: PNG/JPEG or raw 32x32x3 bytes, label: int64;
// tools/tfrecord_convert writes them), streamed rather than loaded, each worker opening only its own shards:
//   mwstrat-launch -n 2 -- cifar10_resnet --data 'tfrecord:shards/cifar10-train.tfrecord-*' --shard-policy auto
// Each trains TF's official Keras ResNet (resnet_cifar_model) on its share of every global batch (per-worker
// batch × workers) with SGD (momentum 0.9) and the tutorial's piecewise learning rate (×1 until epoch 30, ×0.1
// until 45, ×0.01 after; `--schedule cosine` decays it by step over --epochs instead, the short recipe of
// benchmarks/resnet/time_to_accuracy.py; `--warmup-epochs` puts a linear warm-up from 0 in front of either); the
// data is augmented as in the tutorial (pad 4, random crop, flip, per-image standardization). The chief logs
// Keras's progress and the validation on the test set after every epoch (every n-th with --validation-freq), saves
// the model to --model-dir and prints `test: loss=<x> accuracy=<y>`.
#include <mwstrat/mwstrat.hpp>
#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/image_augmentation.hpp>
#ifdef CIFAR10_RESNET_IMAGES
#include <mwstrat/data/images/image_decode.hpp>
#endif
#include <mwstrat/nn/optimizers/schedules.hpp>
#include <mwstrat/nn/optimizers/sgd.hpp>
#include <mwstrat/nn/resnet_cifar.hpp>
#include <mwstrat/train/callbacks/learning_rate_scheduler.hpp>

#include "common/flags.hpp"
#include "common/step_times.hpp"
#include "tutorial_schedule.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

namespace {

struct flags {
  std::string data_dir = ".cache/cifar10";
  std::string train_records;  // --data tfrecord:GLOB: the training set from these shards instead of data_dir
  std::string test_records;   // --test-data tfrecord:GLOB: the test set from these shards instead of data_dir
  std::string shard_policy = "data";
  std::size_t decode_threads = 0;  // 0: one per hardware thread
  std::size_t depth = 56;
  int epochs = 60;
  std::size_t steps_per_epoch = 0;  // 0: a full pass
  std::size_t batch_size = 128;     // per worker
  double learning_rate = 0.1;
  std::string schedule = "piecewise";  // the tutorial's, or cosine
  double warmup_epochs = 0;
  bool nesterov = false;
  double label_smoothing = 0;
  std::string variant = "tf";
  bool sync_batch_norm = false;
  double bn_momentum = 0.997;  // TF's resnet_cifar_model; short runs (tests) use less
  std::uint64_t seed = 42;
  int threads = 1;
  std::string model_dir;
  std::string backup_dir;
  std::string step_times;  // --step-times PREFIX (benchmarks: each worker's steps and their wall-clock times)
  std::string save_freq = "epoch";
  std::size_t validation_steps = 0;  // 0: the whole test set
  int validation_freq = 1;           // validate after every n-th epoch (Keras's validation_freq)
  double connect_timeout_s = 60;
  double op_timeout_s = 300;
  bool evaluate_test = true;
};

const char* const usage =
    "usage: cifar10_resnet [--data-dir D] [--data tfrecord:GLOB] [--test-data tfrecord:GLOB]\n"
    "  [--shard-policy data|file|auto|off] [--decode-threads N (0: one per CPU)] [--depth 6n+2] [--epochs N] [--steps-per-epoch N (0: a full pass)]\n"
    "  [--batch-size B (per worker)] [--learning-rate X] [--schedule piecewise|cosine] [--warmup-epochs E]\n"
    "  [--nesterov] [--label-smoothing E (0..1)] [--variant tf|he] [--sync-batch-norm] [--seed S]\n"
    "  [--bn-momentum M (0..1; 0.997)]\n"
    "  [--threads T] [--model-dir DIR] [--backup-dir DIR] [--save-freq epoch|N] [--validation-steps N]\n"
    "  [--validation-freq N (every n-th epoch)] [--connect-timeout S] [--op-timeout S] [--no-test]\n"
    "  [--step-times PREFIX (benchmarks: each worker's steps and their wall-clock times)] [--help]\n"
    "A bad flag or value is refused before anything connects (status 2). Exit status: 0 trained, 1 an error,\n"
    "69 another worker was lost (mwstrat::peer_lost_exit_code), 75 preempted (mwstrat::preempted_exit_code).\n";

// Timeouts in seconds: above 0, at most this (about 11 days).
constexpr double max_timeout_s = 1e6;
// The schedules count steps in std::int64_t.
constexpr auto max_steps = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());

// The glob of `--data tfrecord:GLOB` (the only source kind besides --data-dir).
std::string records_glob(example_flags::reader& args, const std::string& flag) {
  const std::string v = args.value();
  const std::string prefix = "tfrecord:";
  if (v.rfind(prefix, 0) != 0 || v.size() == prefix.size()) {
    args.fail(flag + ": '" + v + "' is not tfrecord:GLOB (a path or glob of TFRecord shards)");
  }
  return v.substr(prefix.size());
}

flags parse(int argc, char** argv) {
  flags f;
  example_flags::reader args(argc, argv, "cifar10_resnet", usage);
  while (args.next()) {
    if (args.is("--data-dir")) f.data_dir = args.value();
    else if (args.is("--data")) f.train_records = records_glob(args, "--data");
    else if (args.is("--test-data")) f.test_records = records_glob(args, "--test-data");
    else if (args.is("--shard-policy")) f.shard_policy = args.value();
    else if (args.is("--decode-threads")) f.decode_threads = args.whole<std::size_t>(0, 1024);
    else if (args.is("--depth")) f.depth = args.whole<std::size_t>(0);
    else if (args.is("--epochs")) f.epochs = args.whole(1);
    else if (args.is("--steps-per-epoch")) f.steps_per_epoch = args.whole<std::size_t>(0, max_steps);
    else if (args.is("--batch-size")) f.batch_size = args.whole<std::size_t>(1);
    else if (args.is("--learning-rate")) f.learning_rate = args.positive();
    else if (args.is("--schedule")) f.schedule = args.value();
    else if (args.is("--warmup-epochs")) f.warmup_epochs = args.real(0, std::numeric_limits<int>::max());
    else if (args.is("--nesterov")) f.nesterov = true;
    else if (args.is("--label-smoothing")) f.label_smoothing = args.real(0, 1);
    else if (args.is("--variant")) f.variant = args.value();
    else if (args.is("--sync-batch-norm")) f.sync_batch_norm = true;
    else if (args.is("--bn-momentum")) f.bn_momentum = args.real(0, 1);
    else if (args.is("--seed")) f.seed = args.whole<std::uint64_t>(0);
    else if (args.is("--threads")) f.threads = args.whole(1);
    else if (args.is("--model-dir")) f.model_dir = args.value();
    else if (args.is("--backup-dir")) f.backup_dir = args.value();
    else if (args.is("--step-times")) f.step_times = args.value();
    else if (args.is("--save-freq")) f.save_freq = args.epoch_or_steps();
    else if (args.is("--validation-steps")) f.validation_steps = args.whole<std::size_t>(0);
    else if (args.is("--validation-freq")) f.validation_freq = args.whole(1, 1000000);
    else if (args.is("--connect-timeout")) f.connect_timeout_s = args.positive(max_timeout_s);
    else if (args.is("--op-timeout")) f.op_timeout_s = args.positive(max_timeout_s);
    else if (args.is("--no-test")) f.evaluate_test = false;
    else args.unknown();
  }
  if (f.shard_policy != "data" && f.shard_policy != "file" && f.shard_policy != "auto" && f.shard_policy != "off")
    args.fail("--shard-policy: '" + f.shard_policy + "' is not data, file, auto or off");
  if (f.variant != "tf" && f.variant != "he") args.fail("--variant: '" + f.variant + "' is not tf or he");
  if (f.schedule != "piecewise" && f.schedule != "cosine")
    args.fail("--schedule: '" + f.schedule + "' is not piecewise or cosine");
  if (f.warmup_epochs >= f.epochs) {
    args.fail("--warmup-epochs must be fewer than --epochs (" + example_flags::bound_text(f.warmup_epochs) +
              " is not fewer than " + std::to_string(f.epochs) + ")");
  }
  if (f.depth < 8 || (f.depth - 2) % 6 != 0)
    args.fail("--depth: " + std::to_string(f.depth) + " is not 6n + 2 (20, 32, 44, 56, 110)");
  return f;
}

// A checked time in seconds (parse bounds it) as whole milliseconds, rounded up so that it stays above 0.
std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(s * 1000)));
}

mwstrat::data::any_shard_policy shard_policy(const std::string& name) {
  namespace data = mwstrat::data;
  if (name == "file") return data::file_shard{};
  if (name == "auto") return data::auto_shard{};
  if (name == "off") return data::off_shard{};
  return data::data_shard{};
}

// CIFAR-10 as TFRecord shards hold it: a 32 x 32 RGB image (PNG or JPEG where this build has mwstrat::images, else
// the raw bytes) and an int64 label.
mwstrat::data::record_image_format cifar_records() {
  mwstrat::data::record_image_format format;
  format.shape = {32, 32, 3};
#ifdef CIFAR10_RESNET_IMAGES
  format.decode = mwstrat::data::png_jpeg_decoder();
#endif
  return format;
}

mwstrat::data::record_batch_options reading(const flags& f) {
  mwstrat::data::record_batch_options r;
  r.decode_threads = f.decode_threads;
  return r;
}

int train(const flags& f, mwstrat::multi_worker_mirrored_strategy& strategy) {
  namespace data = mwstrat::data;
  namespace nn = mwstrat::nn;
  const bool chief = strategy.is_chief();
  const int workers = strategy.num_replicas_in_sync();
  const std::size_t global_batch = f.batch_size * static_cast<std::size_t>(workers);

  data::augmentation_options aug;  // pad 4 + random crop + flip, per-image standardization
  aug.seed = f.seed;
  data::distribution_options o;
  o.global_batch = global_batch;
  o.num_workers = workers;
  o.worker_index = strategy.replica_id();
  o.seed = f.seed;
  o.transform = data::image_augmentation(aug).transform();
  // Data sharding (the default): each worker takes its contiguous part of every global batch of one shared order, so
  // N workers × B see exactly the examples one worker × N·B sees. (Auto sharding would pick file sharding here —
  // the five training files are enough for it — and each worker would read other files.)
  o.policy = shard_policy(f.shard_policy);
  const auto eval_transform = data::image_augmentation(aug.for_evaluation()).transform();
  mwstrat::distributed_input train_data =
      f.train_records.empty()
          ? mwstrat::distributed_input(
                data::distributed_batches(data::load_cifar10(f.data_dir, data::cifar10_split::train), o))
          : mwstrat::distributed_input::from_records(data::list_files(f.train_records), cifar_records(),
                                                     o, strategy, reading(f));
  mwstrat::distributed_input test_data =
      f.test_records.empty()
          ? mwstrat::distributed_input(data::distributed_batches::for_evaluation(
                data::load_cifar10(f.data_dir, data::cifar10_split::test), global_batch, workers,
                strategy.replica_id(), data::data_shard{}, eval_transform))
          : mwstrat::distributed_input(data::record_batches::for_evaluation(
                data::list_files(f.test_records), cifar_records(), global_batch, workers, strategy.replica_id(),
                data::data_shard{}, eval_transform, reading(f)));
  if (!f.train_records.empty()) {
    // Every worker says which shards it opened (under file sharding, only its own).
    const auto& records = train_data.records();
    std::string names;
    for (const std::size_t i : records.opened_files()) {
      if (!names.empty()) names += ' ';
      names += records.files()[i].filename().string();
    }
    std::cerr << "[mwstrat.data] rank " << strategy.replica_id() << " opened " << records.opened_files().size()
              << " of " << records.files().size() << " training shards: " << names << "\n";
  }

  nn::resnet_options ro;
  ro.variant = f.variant == "he" ? nn::resnet_variant::he : nn::resnet_variant::tf;
  ro.sync_batch_norm = f.sync_batch_norm;
  ro.batch_norm_momentum = f.bn_momentum;
  ro.model.threads = f.threads;
  ro.model.seed = f.seed;
  ro.model.max_batch = f.batch_size;
  ro.model.label_smoothing = f.label_smoothing;
  auto model = nn::resnet_cifar(f.depth, ro);
  if (chief) model.summary(std::cout);

  // The tutorial's schedule changes the rate by epoch (Keras's LearningRateScheduler). A warm-up or the cosine
  // needs it by step: then the optimizer carries the schedule of its step count (saved in checkpoints, so a resumed
  // run goes on where it stopped) and there is no epoch callback (a scheduled rate cannot be set).
  const double lr = f.learning_rate;
  const auto steps_per_epoch = static_cast<std::int64_t>(f.steps_per_epoch != 0 ? f.steps_per_epoch
                                                                                : train_data.steps_per_epoch());
  const auto warmup_steps = static_cast<std::int64_t>(f.warmup_epochs * static_cast<double>(steps_per_epoch));
  const bool by_step = f.schedule == "cosine" || warmup_steps > 0;
  nn::learning_rate rate = lr;
  if (f.schedule == "cosine") rate = cifar10_resnet::cosine_rate(lr, f.epochs, steps_per_epoch, warmup_steps);
  else if (by_step) rate = cifar10_resnet::tutorial_rate_by_step(lr, steps_per_epoch, warmup_steps);
  nn::sgd optimizer(nn::sgd_options{.learning_rate = rate, .momentum = 0.9, .nesterov = f.nesterov});
  mwstrat::learning_rate_scheduler by_epoch(cifar10_resnet::tutorial_rate_by_epoch(lr));

  mwstrat::fit_options options;
  options.epochs = f.epochs;
  options.steps_per_epoch = f.steps_per_epoch;
  options.validation_steps = f.validation_steps;
  options.validation_freq = f.validation_freq;
  mwstrat::progress_logger progress;
  mwstrat::terminate_on_nan nan_guard;
  examples::step_file times_file(nullptr, &std::fclose);
  if (!f.step_times.empty()) {
    times_file = examples::open_step_file(f.step_times, strategy.task_id(), "cifar10_resnet", "--step-times");
  }
  examples::step_times times{times_file.get()};
  auto run = [&](auto&... schedule) {
    if (!f.backup_dir.empty()) {
      mwstrat::backup_and_restore backup(
          mwstrat::backup_options{f.backup_dir, mwstrat::save_frequency::parse(f.save_freq, "--save-freq")});
      mwstrat::fit(strategy, model, optimizer, train_data, test_data, options, schedule..., progress, nan_guard,
                   times, backup);
    } else {
      mwstrat::fit(strategy, model, optimizer, train_data, test_data, options, schedule..., progress, nan_guard,
                   times);
    }
  };
  try {
    if (by_step) run();
    else run(by_epoch);
  } catch (const mwstrat::preempted& p) {
    // SIGTERM/SIGINT: every worker stopped after the same step (the chief's backup is on disk); ask to be resumed.
    std::cerr << p.what() << "\n";
    return mwstrat::preempted_exit_code;
  }

  if (!f.model_dir.empty()) {
    const auto path = std::filesystem::path(f.model_dir) / "model.safetensors";
    if (mwstrat::save_model(strategy, path, model, optimizer)) std::cout << "saved " << path.string() << "\n";
  }
  if (f.evaluate_test) {
    const mwstrat::evaluation e = mwstrat::evaluate(strategy, model, test_data);
    if (chief) std::printf("test: loss=%.4f accuracy=%.4f\n", e.loss, e.accuracy);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const flags f = parse(argc, argv);
  try {
    mwstrat::communication_options comm;
    comm.connect_timeout = seconds(f.connect_timeout_s);
    comm.op_timeout = seconds(f.op_timeout_s);
    auto strategy = mwstrat::make_multi_worker_mirrored_strategy(comm);  // waits for every worker
    return train(f, strategy);
  } catch (const mwstrat::peer_lost_error& e) {
    // Another worker died, stopped or was cut off (every survivor names the same one): not this worker's fault.
    std::cerr << e.what() << "\n";
    return mwstrat::peer_lost_exit_code;
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // not mwstrat's (out of memory, a thread that could not start): still a message
    std::cerr << "cifar10_resnet: " << e.what() << "\n";
    return 1;
  }
}
