// Every malformed TF_CONFIG gets a config_error from component "cluster" whose message names the source, the
// JSON path and the offending value.
#include <mwstrat/cluster/tf_config.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tf_config_malformed_test {

struct malformed_case {
  const char* name;
  std::string text;
  std::string path;   // must appear as "<path>: " (empty: no path, e.g. not JSON)
  std::string value;  // must appear in the message
};

std::string workers2(const std::string& task) {
  return R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": )" + task + "}";
}
std::string cluster_with(const std::string& cluster) {
  return R"({"cluster": )" + cluster + R"(, "task": {"type": "worker", "index": 0}})";
}

std::vector<malformed_case> cases() {
  return {
      // Not JSON.
      {"truncated", R"({"cluster": {"worker": ["a:1"])", "", "end of input"},
       {"syntax_error", R"({"cluster": tru})", "", "line 1, column 13"},
       {"syntax_error_names_text", "{\n  \"task\": {\"type\": worker}}", "", "\"worker}}\""},
       {"trailing_garbage", R"({} {})", "", "extra data"},
       {"single_quotes_python_style", R"({'cluster': {}})", "", "\"'cluster'"},
       {"too_deep", std::string(100, '[') + std::string(100, ']'), "", "too deep"},
       {"invalid_utf8", "{\"task\": \"\xff\"}", "", "\"\\xff"},
       // Top level.
       {"top_level_array", R"(["a:1"])", "", R"(["a:1"] is an array)"},
       {"top_level_string", R"("worker")", "", "\"worker\" is a string"},
       {"top_level_number", "42", "", "42 is an integer"},
       {"top_level_null", "null", "", "null is JSON null"},
       {"unknown_top_level_key", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "foo": 1})",
        "foo", "unknown key \"foo\""},
       {"misspelled_cluster", R"({"clsuter": {"worker": ["a:1"]}})", "clsuter", "did you mean 'cluster'"},
       {"odd_key_is_quoted_in_path", R"({"a b": 1})", "[\"a b\"]", "unknown key \"a b\""},
       // cluster.
       {"cluster_missing", R"({"task": {"type": "worker", "index": 0}})", "cluster", "{\"type\":\"worker\",\"index\":0}"},
       {"cluster_is_array", R"({"cluster": ["a:1"], "task": {"type": "worker", "index": 0}})", "cluster",
        "[\"a:1\"] is an array"},
       {"cluster_is_null", R"({"cluster": null, "task": {"type": "worker", "index": 0}})", "cluster", "null"},
       {"cluster_empty", cluster_with("{}"), "cluster", "{} has no job"},
       {"ps_job", cluster_with(R"({"worker": ["a:1"], "ps": ["b:1"]})"), "cluster.ps", "\"ps\" is a parameter-server job"},
       {"master_job", cluster_with(R"({"master": ["a:1"]})"), "cluster.master", "\"master\" is TensorFlow 1's name for the chief"},
       {"unknown_job", cluster_with(R"({"worker": ["a:1"], "trainer": ["b:1"]})"), "cluster.trainer",
        "\"trainer\" is not a job"},
       {"misspelled_job", cluster_with(R"({"workers": ["a:1"]})"), "cluster.workers", "did you mean 'worker'"},
       {"job_is_string", cluster_with(R"({"worker": "a:1"})"), "cluster.worker", "\"a:1\" is a string"},
       {"job_is_object", cluster_with(R"({"worker": {"0": "a:1"}})"), "cluster.worker", "{\"0\":\"a:1\"}"},
       {"empty_worker_list", cluster_with(R"({"chief": ["c:1"], "worker": []})"), "cluster.worker", "[] is empty"},
       {"two_chiefs", cluster_with(R"({"chief": ["a:1", "b:1"], "worker": ["c:1"]})"), "cluster.chief", "has 2 tasks"},
       {"two_evaluators", cluster_with(R"({"evaluator": ["a:1", "b:1"], "worker": ["c:1"]})"), "cluster.evaluator",
        "has 2 tasks"},
       {"only_evaluator", R"({"cluster": {"evaluator": ["a:1"]}, "task": {"type": "evaluator", "index": 0}})",
        "cluster", "no training task"},
       {"address_is_number", cluster_with(R"({"worker": ["a:1", 12345]})"), "cluster.worker[1]", "12345 is an integer"},
       {"address_is_null", cluster_with(R"({"worker": [null]})"), "cluster.worker[0]", "null is JSON null"},
       {"address_without_port", cluster_with(R"({"worker": ["localhost"]})"), "cluster.worker[0]",
        "\"localhost\": the address has no port"},
       {"address_empty", cluster_with(R"({"worker": [""]})"), "cluster.worker[0]", "\"\": the address is empty"},
       {"address_empty_port", cluster_with(R"({"worker": ["localhost:"]})"), "cluster.worker[0]",
        "\"localhost:\": the port is empty"},
       {"address_empty_host", cluster_with(R"({"worker": [":1234"]})"), "cluster.worker[0]", "\":1234\": the host is empty"},
       {"port_too_large", cluster_with(R"({"worker": ["a:1", "localhost:99999"]})"), "cluster.worker[1]",
        "port 99999 is out of range"},
       {"port_zero", cluster_with(R"({"worker": ["localhost:0"]})"), "cluster.worker[0]", "port 0 is out of range"},
       {"port_not_number", cluster_with(R"({"worker": ["localhost:http"]})"), "cluster.worker[0]",
        "port \"http\" is not a decimal number"},
       {"port_negative", cluster_with(R"({"worker": ["localhost:-1"]})"), "cluster.worker[0]", "port \"-1\""},
       {"scheme_prefix", cluster_with(R"({"worker": ["grpc://a:1"]})"), "cluster.worker[0]", "\"grpc://\""},
       {"whitespace_in_address", cluster_with(R"({"worker": ["a :1"]})"), "cluster.worker[0]", "\"a :1\""},
       {"bad_hostname_char", cluster_with(R"({"worker": ["ho$t:1"]})"), "cluster.worker[0]", "\"$\""},
       {"hostname_leading_dash", cluster_with(R"({"worker": ["-host:1"]})"), "cluster.worker[0]", "\"-host:1\""},
       {"hostname_double_dot", cluster_with(R"({"worker": ["a..b:1"]})"), "cluster.worker[0]", "empty label"},
       {"bad_ipv4", cluster_with(R"({"worker": ["256.1.1.1:80"]})"), "cluster.worker[0]", "\"256.1.1.1\""},
       {"short_ipv4", cluster_with(R"({"worker": ["10.1:80"]})"), "cluster.worker[0]", "not a valid IPv4"},
       {"ipv6_without_brackets", cluster_with(R"({"worker": ["::1:80"]})"), "cluster.worker[0]", "without brackets"},
       {"ipv6_unclosed", cluster_with(R"({"worker": ["[::1:80"]})"), "cluster.worker[0]", "no closing ']'"},
       {"ipv6_no_port", cluster_with(R"({"worker": ["[::1]"]})"), "cluster.worker[0]", "\"[::1]\": the IPv6 address has no port"},
       {"ipv6_invalid", cluster_with(R"({"worker": ["[::g]:80"]})"), "cluster.worker[0]", "\"::g\""},
       {"duplicate_worker", cluster_with(R"({"worker": ["a:1", "b:2", "a:1"]})"), "cluster.worker[2]",
        "\"a:1\" is already the address of cluster.worker[0]"},
       {"duplicate_case_insensitive", cluster_with(R"({"worker": ["Host:1", "host:01"]})"), "cluster.worker[1]",
        "\"host:01\" is already the address of cluster.worker[0]"},
       {"duplicate_across_jobs", cluster_with(R"({"chief": ["a:1"], "worker": ["a:1"]})"), "cluster.worker[0]",
        "cluster.chief[0]"},
       {"duplicate_ipv6_spelling", cluster_with(R"({"worker": ["[::1]:5", "[0:0::1]:5"]})"), "cluster.worker[1]",
        "\"[0:0::1]:5\""},
       // task.
       {"task_missing", R"({"cluster": {"worker": ["a:1"]}})", "task", "missing"},
       {"task_is_string", R"({"cluster": {"worker": ["a:1"]}, "task": "worker"})", "task", "\"worker\" is a string"},
       {"task_unknown_key", workers2(R"({"type": "worker", "index": 0, "id": 1})"), "task.id", "unknown key \"id\""},
       {"task_type_missing", workers2(R"({"index": 0})"), "task.type", "missing"},
       {"task_type_number", workers2(R"({"type": 1, "index": 0})"), "task.type", "1 is an integer"},
       {"task_type_ps", workers2(R"({"type": "ps", "index": 0})"), "task.type", "\"ps\" is a parameter-server job"},
       {"task_type_unknown", workers2(R"({"type": "trainer", "index": 0})"), "task.type", "\"trainer\" is not a job mwstrat can run"},
       {"task_type_not_in_cluster", workers2(R"({"type": "chief", "index": 0})"), "task.type",
        "\"chief\" is not a job of the cluster (its jobs: worker)"},
       {"task_index_missing", workers2(R"({"type": "worker"})"), "task.index", "missing"},
       {"task_index_out_of_range", workers2(R"({"type": "worker", "index": 3})"), "task.index",
        "3 is out of range for 'worker' (2 tasks)"},
       {"task_index_equal_to_count", workers2(R"({"type": "worker", "index": 2})"), "task.index", "2 is out of range"},
       {"task_index_negative", workers2(R"({"type": "worker", "index": -1})"), "task.index", "-1 is negative"},
       {"task_index_fraction", workers2(R"({"type": "worker", "index": 1.5})"), "task.index", "1.5E0 is a number"},
       {"task_index_bool", workers2(R"({"type": "worker", "index": true})"), "task.index", "true is a boolean"},
       {"task_index_word", workers2(R"({"type": "worker", "index": "one"})"), "task.index", "\"one\" is not an integer"},
       {"task_index_huge", workers2(R"({"type": "worker", "index": 18446744073709551615})"), "task.index",
        "18446744073709551615 is out of range"},
       {"task_index_huge_string", workers2(R"({"type": "worker", "index": "99999999999"})"), "task.index",
        "\"99999999999\" is out of range"},
       {"evaluator_index_outside_cluster", workers2(R"({"type": "evaluator", "index": 1})"), "task.index",
        "1 is out of range for 'evaluator'"},
       // rpc_layer.
       {"rpc_layer_number", R"({"rpc_layer": 5})", "rpc_layer", "5 is not a protocol name"},
       {"rpc_layer_empty", R"({"rpc_layer": ""})", "rpc_layer", "\"\" is not a protocol name"},
       {"rpc_layer_spaces", R"({"rpc_layer": "gr pc"})", "rpc_layer", "\"gr pc\""},
  };
}

class tf_config_malformed : public testing::TestWithParam<malformed_case> {};

TEST_P(tf_config_malformed, throws_config_error_naming_source_path_and_value) {
  const malformed_case& c = GetParam();
  try {
    (void)mwstrat::parse_tf_config(c.text);
    FAIL() << "no error for " << c.text;
  } catch (const mwstrat::config_error& e) {
    EXPECT_EQ(e.kind(), mwstrat::error_kind::config);
    EXPECT_EQ(e.component(), "cluster");
    EXPECT_FALSE(e.rank().has_value());
    const std::string message = e.detail();
    EXPECT_EQ(message.rfind("TF_CONFIG: ", 0), 0U) << message;
    if (!c.path.empty()) {
      EXPECT_EQ(message.rfind("TF_CONFIG: " + c.path + ": ", 0), 0U) << message;
    }
    EXPECT_NE(message.find(c.value), std::string::npos) << "value " << c.value << " not in: " << message;
    EXPECT_EQ(std::string(e.what()), "[mwstrat.cluster] " + message);
    EXPECT_LT(message.size(), 400U) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(table, tf_config_malformed, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<malformed_case>& param_info) { return std::string(param_info.param.name); });

TEST(tf_config_malformed_table, has_at_least_forty_cases) { EXPECT_GE(cases().size(), 40U); }

TEST(tf_config_malformed_table, source_name_is_used) {
  try {
    (void)mwstrat::parse_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 4}})",
                                   "/etc/job/tf_config.json");
    FAIL();
  } catch (const mwstrat::config_error& e) {
    EXPECT_EQ(e.detail(), "/etc/job/tf_config.json: task.index: 4 is out of range for 'worker' (1 task)");
  }
}

TEST(tf_config_malformed_table, message_matches_the_documented_example) {
  try {
    (void)mwstrat::parse_tf_config(workers2(R"({"type": "worker", "index": 3})"));
    FAIL();
  } catch (const mwstrat::config_error& e) {
    EXPECT_STREQ(e.what(), "[mwstrat.cluster] TF_CONFIG: task.index: 3 is out of range for 'worker' (2 tasks)");
  }
}

TEST(tf_config_malformed_table, huge_values_are_cut_short_in_messages) {
  std::string list = "[";
  for (int i = 0; i < 5000; ++i) list += (i ? ",1" : "1");
  list += "]";
  try {
    (void)mwstrat::parse_tf_config(R"({"cluster": )" + list + "}");
    FAIL();
  } catch (const mwstrat::config_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300U);
    EXPECT_NE(std::string(e.what()).find(",1... is an array"), std::string::npos) << e.what();
  }
}

TEST(tf_config_malformed_table, control_characters_are_escaped) {
  try {
    (void)mwstrat::parse_tf_config(R"({"cluster": {"worker": ["a\u0007b:1"]}, "task": {"type": "worker", "index": 0}})");
    FAIL();
  } catch (const mwstrat::config_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\a'), std::string::npos);
    EXPECT_NE(message.find("\\u0007"), std::string::npos) << message;
  }
}

}  // namespace tf_config_malformed_test
