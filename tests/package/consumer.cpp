// A consumer program shared by the package tests and the Conan test_package: it uses real parts of mwstrat — and
// so every dependency the package must bring along (Boost.JSON, Threads, oneTBB, zlib, OpenSSL) — and checks what
// they do, so a package that compiles but links or behaves wrongly fails. Exit code 0 means it worked.
#include <mwstrat/mwstrat.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "consumer: FAILED: %s\n", what);
      ++failures;
    }
  };

  // Errors and version.
  const mwstrat::config_error e({"cluster", 3}, "task.index: 9 is out of range");
  check(std::string(e.what()) == "[mwstrat.cluster] rank 3: task.index: 9 is out of range", "error message format");
  check(std::string(mwstrat::version_string) == "0.1.0", "version");

  // TF_CONFIG through Boost.JSON, with TensorFlow's chief rule.
  const auto config = mwstrat::parse_tf_config(
      R"({"cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]},
          "task": {"type": "worker", "index": 1}})");
  check(config.num_workers() == 3 && config.rank() == 2 && !config.is_chief(), "TF_CONFIG ranks");
  try {
    (void)mwstrat::parse_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 4}})");
    check(false, "a bad TF_CONFIG is refused");
  } catch (const mwstrat::config_error&) {
  }

  // The local collective: three ranks as threads.
  std::vector<float> sums(3);
  mwstrat::spawn_ranks(3, [&](mwstrat::local_collective& c) {
    std::vector<float> v{static_cast<float>(c.rank() + 1)};
    c.all_reduce(std::span<float>(v), mwstrat::reduce_op::sum);
    sums[static_cast<std::size_t>(c.rank())] = v[0];
  });
  check(sums == std::vector<float>(3, 6.0f), "local all_reduce");

  // oneTBB kernels: a small model's forward pass.
  using namespace mwstrat::nn;
  sequential model({input{{4}}, dense{3, activation::relu}, dense{2}});
  model.initialize(1);
  const std::vector<float> x(8, 0.5f);
  const std::vector<std::int64_t> y{0, 1};
  const auto stats = model.evaluate_batch(x, y, 2);
  check(stats.count == 2 && stats.loss_sum > 0, "model forward");

  // A checkpoint round trip through a real file (Boost.JSON header, CRC32C).
  const auto path = std::filesystem::temp_directory_path() / ("mwstrat_consumer_" + std::to_string(::getpid()));
  mwstrat::training_state state;
  state.step = 7;
  state.model_fingerprint = model.fingerprint();
  state.weights.push_back({"w", {2}, {1.5f, -2.0f}});
  mwstrat::save_training_state(path, state);
  check(mwstrat::load_training_state(path) == state, "checkpoint round trip");
  std::filesystem::remove(path);

  std::printf("mwstrat %s consumer: %s\n", mwstrat::version_string, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
