// Every valid form of TF_CONFIG, the chief rules, the rank order and the local fallback.
#include <mwstrat/cluster/tf_config.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tf_config_valid_test {

using mwstrat::cluster_config;
using mwstrat::parse_tf_config;

TEST(tf_config, workers_only_worker0_is_chief) {
  const std::string cluster = R"("cluster": {"worker": ["localhost:12345", "localhost:23456", "10.0.0.3:2222"]})";
  for (int i = 0; i < 3; ++i) {
    const cluster_config c =
        parse_tf_config("{" + cluster + R"(, "task": {"type": "worker", "index": )" + std::to_string(i) + "}}");
    EXPECT_FALSE(c.is_local());
    EXPECT_FALSE(c.is_evaluator());
    EXPECT_TRUE(c.is_training_task());
    EXPECT_EQ(c.task_type(), "worker");
    EXPECT_EQ(c.task_id(), i);
    EXPECT_EQ(c.rank(), i);
    EXPECT_EQ(c.num_workers(), 3);
    EXPECT_EQ(c.world_size(), 3);
    EXPECT_EQ(c.is_chief(), i == 0);
    EXPECT_EQ(c.rpc_layer(), "");
    EXPECT_EQ(c.source(), "TF_CONFIG");
    EXPECT_EQ(c.spec().training_addresses(),
              (std::vector<std::string>{"localhost:12345", "localhost:23456", "10.0.0.3:2222"}));
    EXPECT_EQ(c.self_address()->to_string(), c.spec().training_addresses()[static_cast<std::size_t>(i)]);
  }
}

TEST(tf_config, chief_job_is_the_chief_and_rank_zero) {
  const std::string cluster = R"("cluster": {"worker": ["w0:1", "w1:1"], "chief": ["c:1"]})";
  const auto chief = parse_tf_config("{" + cluster + R"(, "task": {"type": "chief", "index": 0}})");
  const auto w0 = parse_tf_config("{" + cluster + R"(, "task": {"type": "worker", "index": 0}})");
  const auto w1 = parse_tf_config("{" + cluster + R"(, "task": {"type": "worker", "index": 1}})");
  EXPECT_TRUE(chief.is_chief());
  EXPECT_FALSE(w0.is_chief());  // with a chief job, worker 0 is an ordinary worker
  EXPECT_FALSE(w1.is_chief());
  EXPECT_EQ(chief.rank(), 0);
  EXPECT_EQ(w0.rank(), 1);
  EXPECT_EQ(w1.rank(), 2);
  EXPECT_EQ(chief.num_workers(), 3);
  EXPECT_EQ(w1.world_size(), 3);
  EXPECT_EQ(chief.spec().training_addresses(), (std::vector<std::string>{"c:1", "w0:1", "w1:1"}));
  const auto tasks = chief.spec().training_tasks();
  ASSERT_EQ(tasks.size(), 3U);
  EXPECT_EQ(tasks[0], (mwstrat::task_info{"chief", 0}));
  EXPECT_EQ(tasks[2], (mwstrat::task_info{"worker", 1}));
  EXPECT_EQ(chief.spec().task_at_rank(1), (mwstrat::task_info{"worker", 0}));
  EXPECT_FALSE(chief.spec().task_at_rank(3).has_value());
}

TEST(tf_config, chief_only_cluster_is_one_worker) {
  const auto c = parse_tf_config(R"({"cluster": {"chief": ["c:1"]}, "task": {"type": "chief", "index": 0}})");
  EXPECT_EQ(c.num_workers(), 1);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_TRUE(c.is_chief());
}

TEST(tf_config, evaluator_is_outside_training) {
  const std::string cluster = R"("cluster": {"worker": ["w0:1", "w1:1"], "evaluator": ["e:1"]})";
  const auto e = parse_tf_config("{" + cluster + R"(, "task": {"type": "evaluator", "index": 0}})");
  EXPECT_TRUE(e.is_evaluator());
  EXPECT_FALSE(e.is_training_task());
  EXPECT_TRUE(e.is_chief());  // TensorFlow: the evaluator is the chief of its own world
  EXPECT_EQ(e.world_size(), 1);
  EXPECT_EQ(e.rank(), 0);
  EXPECT_EQ(e.num_workers(), 2);
  EXPECT_EQ(e.spec().training_addresses(), (std::vector<std::string>{"w0:1", "w1:1"}));
  EXPECT_EQ(e.self_address()->to_string(), "e:1");
  EXPECT_FALSE(e.spec().rank_of(e.task()).has_value());
  // The training workers do not count it.
  const auto w0 = parse_tf_config("{" + cluster + R"(, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(w0.world_size(), 2);
  EXPECT_TRUE(w0.is_chief());
}

TEST(tf_config, evaluator_may_be_left_out_of_the_cluster) {
  const auto e = parse_tf_config(R"({"cluster": {"worker": ["w0:1"]}, "task": {"type": "evaluator", "index": 0}})");
  EXPECT_TRUE(e.is_evaluator());
  EXPECT_FALSE(e.self_address().has_value());
  EXPECT_EQ(e.world_size(), 1);
}

TEST(tf_config, address_forms) {
  const auto c = parse_tf_config(R"({"cluster": {"worker": [
      "localhost:1", "Worker-0.Example.COM:65535", "192.168.1.20:2222", "[::1]:80", "[FE80::0:1%eth0]:81",
      "my_service_1:9000", "1e100.net:5"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(c.spec().training_addresses(),
            (std::vector<std::string>{"localhost:1", "worker-0.example.com:65535", "192.168.1.20:2222", "[::1]:80",
                                      "[fe80::1%eth0]:81", "my_service_1:9000", "1e100.net:5"}));
  const auto endpoints = c.spec().training_endpoints();
  EXPECT_TRUE(endpoints[3].ipv6);
  EXPECT_EQ(endpoints[3].host, "::1");
  EXPECT_EQ(endpoints[3].port, 80);
  EXPECT_FALSE(endpoints[2].ipv6);
}

TEST(tf_config, rpc_layer_and_string_index_and_ignored_keys) {
  const auto c = parse_tf_config(R"({"cluster": {"worker": ["a:1", "b:1"]},
      "task": {"type": "worker", "index": "1", "trial": "3", "cloud": "x"},
      "rpc_layer": "grpc+loas", "environment": "cloud", "job": {"job_name": "x"}})");
  EXPECT_EQ(c.task_id(), 1);
  EXPECT_EQ(c.rpc_layer(), "grpc+loas");
}

TEST(tf_config, duplicate_keys_last_one_counts_as_in_python) {
  const auto c = parse_tf_config(R"({"cluster": {"worker": ["a:1", "b:1"]},
      "task": {"type": "worker", "index": 0, "index": 1}})");
  EXPECT_EQ(c.task_id(), 1);
}

TEST(tf_config, blank_or_empty_object_is_a_local_worker) {
  for (const char* text : {"", "   ", "\n\t \r\n", "{}", " { } ", R"({"environment": "cloud"})"}) {
    const cluster_config c = parse_tf_config(text);
    EXPECT_TRUE(c.is_local()) << text;
    EXPECT_TRUE(c.is_chief());
    EXPECT_EQ(c.rank(), 0);
    EXPECT_EQ(c.num_workers(), 1);
    EXPECT_EQ(c.world_size(), 1);
    EXPECT_EQ(c.task_type(), "worker");
    EXPECT_EQ(c.task_id(), 0);
    EXPECT_TRUE(c.spec().training_addresses().empty());
    EXPECT_FALSE(c.self_address().has_value());
  }
  EXPECT_EQ(parse_tf_config(R"({"rpc_layer": "grpc"})").rpc_layer(), "grpc");
}

TEST(tf_config_resolver, reads_the_variable_at_resolve_time) {
  const mwstrat::tf_config_resolver unset{mwstrat::environment(mwstrat::environment_map{})};
  EXPECT_TRUE(unset.resolve().is_local());
  EXPECT_EQ(unset.resolve().source(), "TF_CONFIG (not set)");
  EXPECT_EQ(unset.name(), "TF_CONFIG");

  const mwstrat::tf_config_resolver empty{mwstrat::environment(mwstrat::environment_map{{"TF_CONFIG", ""}})};
  EXPECT_TRUE(empty.resolve().is_local());

  const mwstrat::tf_config_resolver set{mwstrat::environment(mwstrat::environment_map
      {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})"}})};
  EXPECT_EQ(set.resolve().rank(), 1);

  const mwstrat::tf_config_resolver inline_form(
      {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})"}, {"X", "y"}});
  EXPECT_EQ(inline_form.resolve().num_workers(), 1);
  EXPECT_TRUE(mwstrat::environment{}.is_process_environment());
  EXPECT_FALSE(mwstrat::environment(mwstrat::environment_map{}).is_process_environment());
}

TEST(tf_config_resolver, reads_the_process_environment) {
  ASSERT_EQ(::setenv("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})",
                     1),
            0);
  const mwstrat::tf_config_resolver resolver;
  EXPECT_EQ(resolver.resolve().rank(), 1);
  ASSERT_EQ(::unsetenv("TF_CONFIG"), 0);
  EXPECT_TRUE(resolver.resolve().is_local());
}

TEST(tf_config_resolver, from_string_names_its_source) {
  const auto resolver = mwstrat::tf_config_resolver::from_string(R"({"cluster": {"worker": ["a:1"]}, "task": 1})", "job.json");
  EXPECT_EQ(resolver.name(), "job.json");
  try {
    (void)resolver.resolve();
    FAIL();
  } catch (const mwstrat::config_error& e) {
    EXPECT_EQ(e.detail().rfind("job.json: task: 1 is an integer", 0), 0U) << e.detail();
  }
}

TEST(tf_config, make_tf_config_round_trips) {
  const char* texts[] = {
      R"({"cluster": {"chief": ["c:1"], "worker": ["[::1]:2", "Host:3"], "evaluator": ["e:4"]},
          "task": {"type": "evaluator", "index": 0}, "rpc_layer": "grpc"})",
      R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})",
      "{}",
      R"({"rpc_layer": "grpc"})",
  };
  for (const char* text : texts) {
    const cluster_config first = parse_tf_config(text);
    const std::string written = mwstrat::make_tf_config(first);
    const cluster_config second = parse_tf_config(written);
    EXPECT_EQ(first, second) << written;
    EXPECT_EQ(mwstrat::make_tf_config(second), written);
  }
}

TEST(cluster_spec, fingerprint_is_stable_and_tells_clusters_apart) {
  const auto a = parse_tf_config(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})");
  const auto a1 = parse_tf_config(R"({"cluster": {"worker": ["A:01", "b:1"]}, "task": {"type": "worker", "index": 1}})");
  const auto swapped =
      parse_tf_config(R"({"cluster": {"worker": ["b:1", "a:1"]}, "task": {"type": "worker", "index": 0}})");
  const auto more =
      parse_tf_config(R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(a.spec().fingerprint(), a1.spec().fingerprint());  // same cluster, other task, other spelling
  EXPECT_NE(a.spec().fingerprint(), swapped.spec().fingerprint());
  EXPECT_NE(a.spec().fingerprint(), more.spec().fingerprint());
  EXPECT_EQ(a.spec().fingerprint().size(), 16U);
  // An evaluator does not join the ring, so it does not change the training fingerprint.
  const auto with_evaluator = parse_tf_config(
      R"({"cluster": {"worker": ["a:1", "b:1"], "evaluator": ["e:1"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(a.spec().fingerprint(), with_evaluator.spec().fingerprint());
  // Pinned: the handshake of two different builds must agree.
  EXPECT_EQ(mwstrat::cluster_spec().fingerprint(), mwstrat::cluster_spec().fingerprint());
  EXPECT_EQ(a.spec().fingerprint_value(), mwstrat::cluster_spec::from_jobs({{"worker", {"a:1", "b:1"}}}).fingerprint_value());
}

TEST(cluster_config, constructed_by_hand_checks_the_task) {
  const auto spec = mwstrat::cluster_spec::from_jobs({{"worker", {"a:1", "b:1"}}, {"chief", {"c:1"}}});
  EXPECT_EQ(mwstrat::cluster_config(spec, {"worker", 1}).rank(), 2);
  EXPECT_THROW(mwstrat::cluster_config(spec, {"worker", 2}), mwstrat::config_error);
  EXPECT_THROW(mwstrat::cluster_config(spec, {"ps", 0}), mwstrat::config_error);
  EXPECT_THROW(mwstrat::cluster_config(mwstrat::cluster_spec{}, {"worker", 0}), mwstrat::config_error);
  const mwstrat::cluster_config local;
  EXPECT_TRUE(local.is_local());
  EXPECT_TRUE(local.is_chief());
}

}  // namespace tf_config_valid_test
