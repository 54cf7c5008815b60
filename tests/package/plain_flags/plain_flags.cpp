// Built with the compiler's default flags (no -march): trains the MNIST CNN with fit on one worker and checks
// that the kernels that ran are the best this CPU has (by /proc/cpuinfo, not by the library's own detection), and
// that the loss fell. Exit code 0 means it worked.
#if defined(__AVX2__) || defined(__AVX512F__)
#error "this consumer must be built without -march: the point is what the default flags get"
#endif
#include <mwstrat/mwstrat.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

// What the kernels should be on this CPU: "avx512", "avx2+fma" or the baseline.
std::string expected_kernels() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    bool avx2 = false, fma = false, f = false, bw = false, dq = false, vl = false;
    for (std::string w; words >> w;) {
      avx2 |= w == "avx2";
      fma |= w == "fma";
      f |= w == "avx512f";
      bw |= w == "avx512bw";
      dq |= w == "avx512dq";
      vl |= w == "avx512vl";
    }
    if (avx2 && fma && f && bw && dq && vl) return "avx512";
    if (avx2 && fma) return "avx2+fma";
    return "baseline (sse2)";
  }
  return "baseline (sse2)";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mwstrat_plain_flags_consumer MNIST_DIR\n");
    return 2;
  }
  ::unsetenv("TF_CONFIG");
  ::unsetenv("MWSTRAT_KERNEL_ISA");
  auto strategy = mwstrat::make_multi_worker_mirrored_strategy();  // no TF_CONFIG: one worker
  mwstrat::distributed_input train(mwstrat::data::load_mnist(argv[1], mwstrat::data::mnist_split::train), 64,
                                   strategy, 7);
  mwstrat::nn::model_options mo;
  mo.max_batch = 64;
  mo.seed = 7;
  auto model = mwstrat::nn::reference_cnn(mo);
  mwstrat::nn::sgd optimizer(0.05);
  const mwstrat::history h = mwstrat::fit(strategy, model, optimizer, train, {.epochs = 2, .steps_per_epoch = 30});

  const mwstrat::nn::kernel_isa_report& used = mwstrat::nn::kernel_isa_in_use();
  const std::string expected = expected_kernels();
  std::printf("%s; expected %s\n", used.line().c_str(), expected.c_str());
  int failures = 0;
  if (used.name != expected) {
    std::fprintf(stderr, "plain_flags: FAILED: ran %s, this CPU has %s\n", used.name.c_str(), expected.c_str());
    ++failures;
  }
  const double first = h.epochs.front().loss, last = h.epochs.back().loss;
  std::printf("loss: epoch 1 %.4f, epoch 2 %.4f\n", first, last);
  if (!(last < first)) {
    std::fprintf(stderr, "plain_flags: FAILED: the loss did not fall\n");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
