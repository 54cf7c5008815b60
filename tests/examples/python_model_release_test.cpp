// Issue 18, "weights that Python can load": the example trains and saves the reference CNN; the numpy forward pass
// of examples/python/evaluate_saved_model.py (safetensors + numpy, no mwstrat) reproduces the test accuracy the
// example printed; and weights written from Python (safetensors.numpy.save_file) load with load_model and give the
// predictions Python computes. Uses the virtual environment scripts/test makes (python_test_venv in
// scripts/lib/common.sh). Optimised builds only (label "release").
#include "example_support.hpp"

#include <mwstrat/nn/sequential.hpp>
#include <mwstrat/train/saved_model.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace python_model_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string python = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/.cache/py-venv/bin/python";
const std::string script = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/examples/python/evaluate_saved_model.py";

TEST(python_model_release, numpy_reproduces_the_printed_accuracy_and_python_weights_load_back) {
  if (!fs::exists(python)) GTEST_SKIP() << "SKIPPED: no " << python << " (scripts/test makes it: python_test_venv)";
  scratch_dir dir;
  const auto trained = run(launcher + " -n 2 -- " + example + " --data-dir " + mnist_dir +
                               " --epochs 1 --steps-per-epoch 40 --optimizer adam --batch-size 32 --seed 3"
                               " --model-dir " + (dir / "model"),
                           600);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const double printed = number_after(trained.output, "[worker 0] test: loss=", " accuracy=");
  ASSERT_GT(printed, 0.5) << trained.output;

  const fs::path model = dir.path() / "model" / "model.safetensors";
  const auto py = run(python + " " + script + " " + model.string() + " " + mnist_dir + " --write-perturbed " +
                          (dir / "halved.safetensors"),
                      300);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const double numpy_accuracy = number_after(py.output, "numpy: loss=", " accuracy=");
  EXPECT_NEAR(numpy_accuracy, printed, 1e-4) << py.output << trained.output;

  // The other way: Python's file (tensors only, every weight halved) into a fresh model.
  auto cnn = mwstrat::nn::reference_cnn({.seed = 99});
  mwstrat::load_weights(dir.path() / "halved.safetensors", cnn);
  std::ifstream images(mnist_dir + "/t10k-images-idx3-ubyte", std::ios::binary);
  std::vector<unsigned char> bytes(16 + 8 * 784);
  images.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  std::vector<float> x(8 * 784);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(bytes[16 + i]) * (1.0F / 255.0F);
  const auto logits = cnn.predict(x, 8);
  const std::size_t at = py.output.find("perturbed logits: ");
  ASSERT_NE(at, std::string::npos) << py.output;
  std::istringstream in(py.output.substr(at + 18));
  for (std::size_t i = 0; i < logits.size(); ++i) {
    double expected = 0;
    ASSERT_TRUE(in >> expected) << "logit " << i << " missing: " << py.output;
    EXPECT_NEAR(logits[i], expected, 1e-4 * std::max(1.0, std::abs(expected))) << "logit " << i;
  }
}

}  // namespace python_model_release_test
