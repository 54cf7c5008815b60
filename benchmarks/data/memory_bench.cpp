// Peak resident memory of MNIST (train + test) in the input pipeline, as the trainer holds it:
//   mwstrat_bench_data_memory bytes   the library's design: images kept as bytes, normalised per batch
//   mwstrat_bench_data_memory float   for comparison: images normalised to float once at load
// Prints VmHWM (peak RSS) of the process at each phase; one epoch of batches of 64 is drawn at the end.

#include <mwstrat/data.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

long peak_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return -1;
}

void report(const char* phase) { std::printf("%-44s peak RSS %8.1f MiB\n", phase, static_cast<double>(peak_kib()) / 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  namespace data = mwstrat::data;
  const bool as_float = argc > 1 && std::strcmp(argv[1], "float") == 0;
  report("start");
  const auto train = data::load_mnist(MWSTRAT_BENCH_MNIST_DIR, data::mnist_split::train);
  const auto test = data::load_mnist(MWSTRAT_BENCH_MNIST_DIR, data::mnist_split::test);
  report("MNIST train + test loaded (bytes)");
  std::vector<float> floats;
  if (as_float) {
    floats.resize((train.count() + test.count()) * 784);
    for (std::size_t i = 0; i < train.count(); ++i) {
      train.normalized(i, std::span<float>(floats).subspan(i * 784, 784));
    }
    for (std::size_t i = 0; i < test.count(); ++i) {
      test.normalized(i, std::span<float>(floats).subspan((train.count() + i) * 784, 784));
    }
    report("plus all images as float");
  }
  data::distribution_options o;
  o.global_batch = 64;
  o.seed = 1;
  data::distributed_batches batches(train, o);
  auto eval = data::distributed_batches::for_evaluation(test, 64, 1, 0);
  std::vector<float> images(64 * 784);
  std::vector<std::int64_t> labels(64);
  double checksum = 0;
  for (std::size_t s = 0; s < batches.steps_per_epoch(); ++s) {
    (void)batches.next(images, labels);
    checksum += static_cast<double>(images[0]);
  }
  for (std::size_t s = 0; s < eval.steps_per_epoch(); ++s) {
    checksum += static_cast<double>(eval.next().count);
  }
  report("after one training epoch + one evaluation");
  std::printf("(checksum %.3f, %zu float images held)\n", checksum, floats.size() / 784);
  return 0;
}
