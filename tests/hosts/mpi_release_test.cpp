// The MNIST example started by Debian's Open MPI (mpirun): with the ring (mpi_resolver finds the workers) and
// with the gradients through MPI itself (mpi_collective, mnist_multiworker_mpi --collective mpi). Release only.
#include "hosts_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

namespace mpi_release_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

const std::string flags = " --data-dir " + mnist_dir + " --seed 7 --no-test --epochs 1 --steps-per-epoch 20" +
                          " --optimizer sgd --learning-rate 0.05 --batch-size 32";

std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + std::string(MWSTRAT_MPIEXEC) + " -np " +
         std::to_string(ranks) + " --oversubscribe --mca btl tcp,self ";
}

// The largest difference between two models, relative to each weight (or to 1% of the largest weight).
double worst_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 0;
  for (const float w : a) scale = std::max(scale, std::abs(w));
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    worst = std::max(worst, d / std::max(std::abs(double(a[i])), 1e-2 * double(scale)));
  }
  return worst;
}

TEST(mpi_release, mpirun_starts_the_mnist_example_which_trains_with_the_ring) {
  scratch_dir dir;
  const auto m = run(mpirun(2) + example + flags + " --model-dir " + (dir / "mpirun"), 600);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("[mwstrat.ring] rank 0: started: tcp://127.0.0.1:"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("ring of 2 ranks connected"), std::string::npos) << m.output;
  const auto l = run(launcher + " -n 2 -- " + example + flags + " --model-dir " + (dir / "launch"), 600);
  ASSERT_EQ(l.exit_code, 0) << l.output;
  EXPECT_EQ(read_file(dir.path() / "mpirun" / "model.safetensors"), read_file(dir.path() / "launch" / "model.safetensors"))
      << "mpirun and mwstrat-launch started the same job; the models differ";
}

TEST(mpi_release, the_mpi_collective_trains_the_mnist_example_through_fit) {
  scratch_dir dir;
  for (const int n : {2, 4}) {
    const std::string tag = std::to_string(n);
    const auto m = run(mpirun(n) + example_mpi + " --collective mpi" + flags + " --model-dir " + (dir / ("mpi" + tag)), 600);
    ASSERT_EQ(m.exit_code, 0) << m.output;
    EXPECT_EQ(m.output.find("[mwstrat.ring]"), std::string::npos) << "the ring was used:\n" << m.output;
    EXPECT_NE(m.output.find("20/20 [==============================]"), std::string::npos) << m.output;
    const auto r = run(launcher + " -n " + tag + " -- " + example + flags + " --model-dir " + (dir / ("ring" + tag)), 600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto over_mpi = saved_weights(dir.path() / ("mpi" + tag) / "model.safetensors");
    const auto over_ring = saved_weights(dir.path() / ("ring" + tag) / "model.safetensors");
    ASSERT_EQ(over_mpi.size(), 2770634u);
    ASSERT_EQ(over_mpi.size(), over_ring.size());
    // MPI sums in its own order (bitwise equal for two ranks; for more, Open MPI's algorithm decides).
    EXPECT_LT(worst_relative_difference(over_ring, over_mpi), 1e-5) << n << " ranks";
  }
}

// mpirun itself across two simulated hosts: started on h1, it reaches h2 through simhosts as its rsh agent; the
// ranks meet through the rendezvous on h1 and train the model the loopback job trains.
TEST(mpi_release, mpirun_across_two_simulated_hosts_trains_the_loopback_model) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::string across = mpirun(2) + "--host " + hosts.address(1) + ":1," + hosts.address(2) + ":1" +
                             " --mca plm_rsh_agent \"" + simhosts_script + " --name " + hosts.name() + " rsh\"" +
                             " -x MWSTRAT_RENDEZVOUS=" +
                             hosts.address(1) + ":29400 ";
  const auto where = run(hosts.on(1, across + "sh -c 'echo rank $OMPI_COMM_WORLD_RANK on $SIMHOSTS_HOST'"), 120);
  ASSERT_EQ(where.exit_code, 0) << where.output;
  EXPECT_NE(where.output.find("rank 0 on h1"), std::string::npos) << where.output;
  EXPECT_NE(where.output.find("rank 1 on h2"), std::string::npos) << where.output;
  const auto m = run(hosts.on(1, across + example + flags + " --model-dir " + (dir / "mpirun")), 600);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("[mwstrat.ring] rank 0: started: tcp://10.77.0.1:"), std::string::npos) << m.output;
  const auto l = run(launcher + " -n 2 -- " + example + flags + " --model-dir " + (dir / "launch"), 600);
  ASSERT_EQ(l.exit_code, 0) << l.output;
  EXPECT_EQ(read_file(dir.path() / "mpirun" / "model.safetensors"), read_file(dir.path() / "launch" / "model.safetensors"));
}

TEST(mpi_release, a_bad_collective_is_named) {
  const auto r = run(example_mpi + " --collective nccl", 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--collective: 'nccl' is not ring or mpi"), std::string::npos) << r.output;
}

}  // namespace mpi_release_test
