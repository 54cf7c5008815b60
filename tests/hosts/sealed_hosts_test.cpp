// Sealed frames between real (simulated) hosts: examples/mnist_multiworker, one worker on each of two hosts started by
// hand with a job token, authenticated and then encrypted (MWSTRAT_RING_ENCRYPT=1): the chief says how the frames
// between hosts travel, and the model is the plain job's bit for bit (sealing changes no byte of what is summed).
#include "mnist_hosts.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace sealed_hosts_test {

using namespace mwstrat::test;

const std::string short_run = " --data-dir " + mnist_dir + " --epochs 1 --steps-per-epoch 2 --batch-size 8 --no-test";

// Both workers with `env` in front of the example; rank 0's output (the model in `model_dir`).
std::string two_hosts(const simulated_hosts& hosts, const std::string& env, const std::filesystem::path& model_dir) {
  const std::vector<std::string> cluster = {hosts.address(1) + ":20000", hosts.address(2) + ":20000"};
  process w1(hosts.on(2, env + " TF_CONFIG='" + tf_config(cluster, 1) + "' " + example + short_run), 240);
  process w0(hosts.on(1, env + " TF_CONFIG='" + tf_config(cluster, 0) + "' " + example + short_run + " --model-dir " +
                             model_dir.string()),
             240);
  const auto r0 = w0.finish();
  const auto r1 = w1.finish();
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_EQ(r1.exit_code, 0) << r1.output;
  return r0.output;
}

TEST(mnist_hosts, authenticated_and_encrypted_frames_between_hosts_train_the_plain_model_bit_for_bit) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const auto plain = two_hosts(hosts, "env -u MWSTRAT_JOB_TOKEN -u MWSTRAT_RING_ENCRYPT", dir / "plain");
  EXPECT_EQ(plain.find("frames between hosts"), std::string::npos) << plain;
  const auto mac = two_hosts(hosts, "env -u MWSTRAT_RING_ENCRYPT MWSTRAT_JOB_TOKEN=hosts-token", dir / "mac");
  EXPECT_NE(mac.find("; frames between hosts authenticated (AES-256-GCM tag)"), std::string::npos) << mac;
  const auto enc = two_hosts(hosts, "env MWSTRAT_JOB_TOKEN=hosts-token MWSTRAT_RING_ENCRYPT=1", dir / "enc");
  EXPECT_NE(enc.find("; frames between hosts encrypted (AES-256-GCM)"), std::string::npos) << enc;
  const auto model = read_file(dir.path() / "plain" / "model.safetensors");
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(read_file(dir.path() / "mac" / "model.safetensors"), model);
  EXPECT_EQ(read_file(dir.path() / "enc" / "model.safetensors"), model);
}

// Encryption asked for without a token: each worker refuses before it listens, naming the setting.
TEST(mnist_hosts, encryption_without_a_token_is_refused_naming_it) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  scratch_dir dir;
  simulated_hosts hosts(2, "1gbit");
  const std::vector<std::string> cluster = {hosts.address(1) + ":20000", hosts.address(2) + ":20000"};
  process w0(hosts.on(1, "env -u MWSTRAT_JOB_TOKEN MWSTRAT_RING_ENCRYPT=1 TF_CONFIG='" + tf_config(cluster, 0) + "' " +
                             example + short_run),
             120);
  const auto r0 = w0.finish();
  EXPECT_NE(r0.exit_code, 0) << r0.output;
  EXPECT_NE(r0.output.find("MWSTRAT_RING_ENCRYPT=1"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("needs a job token"), std::string::npos) << r0.output;
}

}  // namespace sealed_hosts_test
