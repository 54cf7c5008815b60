#pragma once
// Shared by the example tests: temporary folders and reading a saved model's weights.
#include <mwstrat/checkpoint/training_state.hpp>

#include <support/process.hpp>
#include <support/temp_dir.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mwstrat::test {

// A temporary folder whose `dir / name` is a string, for building command lines.
struct scratch_dir : temp_dir {
  scratch_dir() : temp_dir("mwstrat-example") {}
  [[nodiscard]] std::string operator/(const std::string& name) const { return (path() / name).string(); }
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

/// The number printed right after the first occurrence of `marker` that is followed by `after` on the same line
/// (e.g. marker "[worker 0] test: loss=", after " accuracy="); -1 when there is none. (No std::regex: GCC 12
/// warns inside it under -O1, which -Werror turns into an error.)
inline double number_after(const std::string& output, const std::string& marker, const std::string& after = "") {
  for (std::size_t at = output.find(marker); at != std::string::npos; at = output.find(marker, at + 1)) {
    std::size_t from = at + marker.size();
    const std::size_t line_end = output.find('\n', from);
    if (!after.empty()) {
      const std::size_t a = output.find(after, from);
      if (a == std::string::npos || a > line_end) continue;
      from = a + after.size();
    }
    const std::string tail = output.substr(from, line_end == std::string::npos ? std::string::npos : line_end - from);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    if (end != tail.c_str()) return v;
  }
  return -1;
}

inline const std::string example = MWSTRAT_EXAMPLE_MNIST;
inline const std::string launcher = MWSTRAT_LAUNCH;
inline const std::string mnist_dir = MWSTRAT_TEST_MNIST_DIR;

}  // namespace mwstrat::test
