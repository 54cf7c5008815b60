// make_multi_worker_mirrored_strategy from a cluster resolver, in the cases that need no live peer (rings of real
// processes are exercised by tests/examples and tests/collective).
#include <mwstrat/cluster/tf_config.hpp>
#include <mwstrat/strategy/multi_worker_mirrored_strategy.hpp>

#include <support/process.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace multi_worker_test {

using namespace mwstrat;

TEST(multi_worker_mirrored_strategy, no_tf_config_is_a_single_local_worker) {
  auto s = make_multi_worker_mirrored_strategy(tf_config_resolver::from_string(""));
  EXPECT_EQ(s.num_replicas_in_sync(), 1);
  EXPECT_TRUE(s.is_chief());
  EXPECT_EQ(s.task_type(), "worker");
  std::vector<float> g{2.0f, 4.0f};
  s.mean_gradients(g);
  EXPECT_EQ(g, (std::vector<float>{2.0f, 4.0f}));
  s.verify_same("model fingerprint", "x");
}

TEST(multi_worker_mirrored_strategy, the_evaluator_is_refused_with_a_reason) {
  const auto evaluator = tf_config_resolver::from_string(
      R"({"cluster": {"worker": ["127.0.0.1:1"], "evaluator": ["127.0.0.1:2"]}, "task": {"type": "evaluator", "index": 0}})");
  try {
    (void)make_multi_worker_mirrored_strategy(evaluator);
    FAIL() << "an evaluator must not join training";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("this task is the 'evaluator', which does not train"), std::string::npos)
        << e.what();
  }
}

TEST(multi_worker_mirrored_strategy, a_missing_peer_is_a_timeout_naming_it) {
  communication_options o;
  o.connect_timeout = std::chrono::milliseconds(600);
  o.log = [](std::string_view) {};
  const auto ports = test::free_ports(2);  // worker 1 never starts
  const auto two = tf_config_resolver::from_string(test::tf_config(ports, 0));
  EXPECT_THROW((void)make_multi_worker_mirrored_strategy(two, o), timeout_error);
}

}  // namespace multi_worker_test
