#include <mwstrat/cluster/hostlist.hpp>
#include <mwstrat/cluster/slurm_resolver.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace slurm_test {

using mwstrat::expand_hostlist;
using strings = std::vector<std::string>;

TEST(hostlist, expansion_cases) {
  const std::pair<const char*, strings> items[] = {
      {"node1", {"node1"}},
      {"a,b,c", {"a", "b", "c"}},
      {"node[1-3]", {"node1", "node2", "node3"}},
      {"node[01-03,07],gpu5", {"node01", "node02", "node03", "node07", "gpu5"}},
      {"node[08-10]", {"node08", "node09", "node10"}},
      {"node[8-10]", {"node8", "node9", "node10"}},
      {"node[098-101]", {"node098", "node099", "node100", "node101"}},
      {"n[7]", {"n7"}},
      {"n[3,1,2]", {"n3", "n1", "n2"}},
      {"rack[1-2]-node[1-2]", {"rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"}},
      {"r[1-2]n[01-02].ib,login", {"r1n01.ib", "r1n02.ib", "r2n01.ib", "r2n02.ib", "login"}},
      {"[1-2]x", {"1x", "2x"}},
      {"gpu[1-2],cpu[10-11]", {"gpu1", "gpu2", "cpu10", "cpu11"}},
      {"a[0-0]", {"a0"}},
  };
  for (const auto& [text, expected] : items) EXPECT_EQ(expand_hostlist(text), expected) << text;
  EXPECT_EQ(expand_hostlist("n[0-65535]").size(), 65536U);
}

TEST(hostlist, malformed_lists_name_variable_and_value) {
  const std::pair<const char*, const char*> items[] = {
      {"", "is empty"},
      {"a,,b", "empty entry"},
      {"a,", "empty entry"},
      {"node[1-3", "no matching ']'"},
      {"node1-3]", "no matching '['"},
      {"node[[1]]", "no matching ']'"},
      {"node[3-1]", "runs backwards"},
      {"node[]", "empty number"},
      {"node[1-]", "empty number"},
      {"node[a-b]", "not a number or range"},
      {"node[1-3:2]", "not a number or range"},
      {"node[1234567890]", "longer than 9 digits"},
      {"no de", "cannot appear in a host name"},
      {"n[0-99999],m[0-99999]", "more than 65536 hosts"},
      {"n[0-999]m[0-999]", "more than 65536 hosts"},
  };
  for (const auto& [text, why] : items) {
    try {
      (void)expand_hostlist(text, "Slurm", "SLURM_JOB_NODELIST");
      ADD_FAILURE() << "no error for " << text;
    } catch (const mwstrat::config_error& e) {
      const std::string message = e.detail();
      EXPECT_EQ(message.rfind("Slurm: SLURM_JOB_NODELIST: \"" + std::string(text).substr(0, 10), 0), 0U) << message;
      EXPECT_NE(message.find(why), std::string::npos) << text << " -> " << message;
    }
  }
}

TEST(hostlist, tasks_per_node) {
  EXPECT_EQ(mwstrat::expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(mwstrat::expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(mwstrat::expand_tasks_per_node("1,2,3"), (std::vector<int>{1, 2, 3}));
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "x", "2,,1", "2(3)", "-1", "1(x)"}) {
    EXPECT_THROW((void)mwstrat::expand_tasks_per_node(bad), mwstrat::config_error) << bad;
  }
}

mwstrat::environment slurm_env(mwstrat::environment_map extra) {
  mwstrat::environment_map env = {{"SLURM_NTASKS", "5"},
                                  {"SLURM_PROCID", "3"},
                                  {"SLURM_STEP_NODELIST", "node[01-02],gpu5"},
                                  {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}};
  for (auto& [k, v] : extra) env[k] = v;
  return mwstrat::environment(std::move(env));
}

TEST(slurm_resolver, block_distribution_with_local_ports) {
  const mwstrat::slurm_resolver resolver(slurm_env({}), {.base_port = 9000, .rpc_layer = "grpc"});
  const auto c = resolver.resolve();
  EXPECT_EQ(resolver.name(), "Slurm");
  EXPECT_EQ(c.spec().training_addresses(),
            (strings{"node01:9000", "node01:9001", "node02:9000", "node02:9001", "gpu5:9000"}));
  EXPECT_EQ(c.rank(), 3);
  EXPECT_EQ(c.task_type(), "worker");
  EXPECT_EQ(c.task_id(), 3);
  EXPECT_EQ(c.num_workers(), 5);
  EXPECT_FALSE(c.is_chief());
  EXPECT_EQ(c.rpc_layer(), "grpc");
  EXPECT_EQ(c.source(), "Slurm");
  EXPECT_EQ(c.self_address()->to_string(), "node02:9001");

  const auto chief = mwstrat::slurm_resolver(slurm_env({{"SLURM_PROCID", "0"}})).resolve();
  EXPECT_TRUE(chief.is_chief());
  EXPECT_EQ(chief.spec().training_addresses().front(), "node01:8888");  // TensorFlow's default base port
}

TEST(slurm_resolver, even_split_and_fallback_variables) {
  const mwstrat::environment env(mwstrat::environment_map{
      {"SLURM_NPROCS", "4"}, {"SLURM_PROCID", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_LOCALID", "0"}});
  const auto c = mwstrat::slurm_resolver(env, {.base_port = 100}).resolve();
  EXPECT_EQ(c.spec().training_addresses(), (strings{"n1:100", "n1:101", "n2:100", "n2:101"}));
  EXPECT_EQ(c.rank(), 2);
}

TEST(slurm_resolver, errors_name_the_variable_and_value) {
  const std::pair<mwstrat::environment_map, const char*> items[] = {
      {{{"SLURM_NTASKS", ""}}, "SLURM_NTASKS: \"\" is not a non-negative integer"},
      {{{"SLURM_NTASKS", "0"}}, "SLURM_NTASKS: 0 is not a task count"},
      {{{"SLURM_PROCID", "5"}}, "SLURM_PROCID: 5 is out of range (SLURM_NTASKS is 5)"},
      {{{"SLURM_PROCID", "-1"}}, "SLURM_PROCID: \"-1\" is not a non-negative integer"},
      {{{"SLURM_STEP_NODELIST", "node[01-02],node01"}}, "lists node \"node01\" twice"},
      {{{"SLURM_STEP_NODELIST", "node[01-02"}}, "SLURM_STEP_NODELIST: \"node[01-02\": a '[' has no matching ']'"},
      {{{"SLURM_STEP_TASKS_PER_NODE", "2(x4)"}}, "gives counts for 4 nodes, but SLURM_STEP_NODELIST lists 3"},
      {{{"SLURM_STEP_TASKS_PER_NODE", "2,2,2"}}, "SLURM_STEP_TASKS_PER_NODE: \"2,2,2\" adds up to 6 tasks"},
      {{{"SLURM_STEP_TASKS_PER_NODE", "2(x2"}}, "SLURM_STEP_TASKS_PER_NODE: \"2(x2\""},
      {{{"SLURM_LOCALID", "0"}}, "SLURM_LOCALID: 0 does not match"},
      {{{"SLURM_STEP_NODELIST", "bad!node"}}, "cannot appear in a host name"},
  };
  for (const auto& [overrides, expected] : items) {
    try {
      (void)mwstrat::slurm_resolver(slurm_env(overrides)).resolve();
      ADD_FAILURE() << "no error for " << expected;
    } catch (const mwstrat::config_error& e) {
      EXPECT_EQ(e.detail().rfind("Slurm: ", 0), 0U) << e.detail();
      EXPECT_NE(e.detail().find(expected), std::string::npos) << e.detail();
    }
  }
}

TEST(slurm_resolver, missing_variables_and_ports) {
  const auto message = [](mwstrat::environment_map env, mwstrat::slurm_options options = {}) {
    try {
      (void)mwstrat::slurm_resolver(mwstrat::environment(std::move(env)), std::move(options)).resolve();
    } catch (const mwstrat::config_error& e) {
      return e.detail();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({}), "Slurm: SLURM_NTASKS: not set (nor SLURM_NPROCS); is this process running under srun?");
  EXPECT_EQ(message({{"SLURM_NTASKS", "2"}}), "Slurm: SLURM_PROCID: not set; is this process running under srun?");
  EXPECT_NE(message({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "0"}}).find("SLURM_STEP_NODELIST: not set"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_NTASKS", "3"}, {"SLURM_PROCID", "0"}, {"SLURM_NODELIST", "a,b"}})
                .find("SLURM_NTASKS: 3 tasks do not divide evenly among the 2 nodes"),
            std::string::npos);
  const mwstrat::environment_map two = {{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NODELIST", "a"}};
  EXPECT_NE(message(two, {.base_port = 65535}).find("base_port: 65535 leaves no room for 2 tasks"), std::string::npos);
  EXPECT_NE(message(two, {.base_port = 0}).find("base_port: 0 is not a port"), std::string::npos);
  EXPECT_EQ(message(two, {.base_port = 65534}), "no error");
}

}  // namespace slurm_test
