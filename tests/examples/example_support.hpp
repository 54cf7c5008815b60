#pragma once
// Shared by the example tests: temporary folders and reading a saved model's weights.
#include <mwstrat/checkpoint/training_state.hpp>

#include <support/process.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mwstrat::test {

struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("mwstrat_example_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
  [[nodiscard]] std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

inline std::vector<float> saved_weights(const std::filesystem::path& p) {
  const training_state s = load_training_state(p);
  std::vector<float> all;
  for (const auto& t : s.weights) all.insert(all.end(), t.values.begin(), t.values.end());
  return all;
}

inline const std::string example = MWSTRAT_EXAMPLE_MNIST;
inline const std::string launcher = MWSTRAT_LAUNCH;
inline const std::string mnist_dir = MWSTRAT_TEST_MNIST_DIR;

}  // namespace mwstrat::test
