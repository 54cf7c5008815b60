// examples/mnist_multiworker with 2 workers on each of 2 simulated hosts and the ring's topology left at its default:
// the hierarchical all-reduce (shared memory within a host, TCP between), which the chief logs, training a model
// within float32 rounding of the same job on one host (the flat ring).
#include "mnist_hosts.hpp"

#include <mwstrat/checkpoint/named_tensors.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace hierarchical_default_hosts_test {

using namespace mwstrat::test;

const std::string short_run = " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 2 --batch-size 8 --no-test";

struct model_tensors {
  std::vector<float> conv_kernel = std::vector<float>(3 * 3 * 1 * 32), conv_bias = std::vector<float>(32),
                     dense_kernel = std::vector<float>(21632 * 128), dense_bias = std::vector<float>(128),
                     out_kernel = std::vector<float>(128 * 10), out_bias = std::vector<float>(10);
  explicit model_tensors(const std::filesystem::path& path) {
    mwstrat::load_tensors(path, std::vector{mwstrat::named("conv2d/kernel", conv_kernel), mwstrat::named("conv2d/bias", conv_bias),
                                            mwstrat::named("dense/kernel", dense_kernel), mwstrat::named("dense/bias", dense_bias),
                                            mwstrat::named("dense_1/kernel", out_kernel), mwstrat::named("dense_1/bias", out_bias)});
  }
  [[nodiscard]] std::vector<const std::vector<float>*> all() const {
    return {&conv_kernel, &conv_bias, &dense_kernel, &dense_bias, &out_kernel, &out_bias};
  }
};

TEST(mnist_hosts, two_workers_on_each_of_two_hosts_default_to_the_hierarchical_all_reduce) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const auto r = run("env -u MWSTRAT_RING_TOPOLOGY " + launcher + " --hosts h1:2,h2:2 --simhosts " + hosts.name() +
                         " --simhosts-script " + simhosts_script + " -- " + example + short_run + " --model-dir " +
                         (dir / "hosts"),
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[mwstrat] 4 workers on 2 hosts (10.77.0.1: ranks 0,1 shared memory; 10.77.0.2: ranks 2,3 "
                          "shared memory); tcp ring between hosts (each host's ranks carry a part)"),
            std::string::npos)
      << r.output;
  const auto loopback = run("env -u MWSTRAT_RING_TOPOLOGY " + launcher + " -n 4 -- " + example + short_run +
                                " --model-dir " + (dir / "loopback"),
                            300);
  ASSERT_EQ(loopback.exit_code, 0) << loopback.output;
  const model_tensors hier(dir.path() / "hosts" / "model.safetensors"), flat(dir.path() / "loopback" / "model.safetensors");
  // Two steps from the same start: the weights differ from the flat ring's only through float32 rounding of the
  // gradients' sums (10^-7 relative), passed through two optimizer steps.
  double worst = 0;
  std::size_t differ = 0, count = 0;
  const auto h = hier.all(), f = flat.all();
  for (std::size_t t = 0; t < h.size(); ++t)
    for (std::size_t i = 0; i < h[t]->size(); ++i, ++count) {
      const double d = std::fabs(static_cast<double>((*h[t])[i]) - (*f[t])[i]);
      worst = std::max(worst, d / (std::fabs((*f[t])[i]) + 1e-3));
      differ += d != 0 ? 1 : 0;
    }
  std::printf("hierarchical vs flat: %zu of %zu weights differ, worst |difference| / (|w| + 1e-3) = %.3g\n", differ,
              count, worst);
  EXPECT_LE(worst, 1e-5);  // measured: 8.9e-8 (313 of 2770634 weights differ)
}

}  // namespace hierarchical_default_hosts_test
