#include <mwstrat/cluster/hostfile.hpp>

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace hostfile_test {

using mwstrat::host_slots;
using hosts = std::vector<host_slots>;

std::string message(const std::string& text, const std::string& file = "hosts.txt") {
  try {
    (void)mwstrat::parse_hostfile(text, file);
  } catch (const mwstrat::config_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(hostfile, lines_comments_and_blank_lines) {
  EXPECT_EQ(mwstrat::parse_hostfile("node1 slots=2\nnode2 slots=2\n", "f"), (hosts{{"node1", 2}, {"node2", 2}}));
  EXPECT_EQ(mwstrat::parse_hostfile("# the cluster\n\n  node1\tslots=4   # four\n\r\n10.0.0.7\n", "f"),
            (hosts{{"node1", 4}, {"10.0.0.7", 1}}));
  EXPECT_EQ(mwstrat::parse_hostfile("a slots=1\r\nb slots=1024", "f"), (hosts{{"a", 1}, {"b", 1024}}));
  EXPECT_EQ(mwstrat::parse_hostfile("gpu-node_3.cluster.local slots=8\n", "f"),
            (hosts{{"gpu-node_3.cluster.local", 8}}));
}

TEST(hostfile, bad_lines_are_refused_with_file_line_and_reason) {
  const std::pair<const char*, const char*> cases[] = {
      {"node1 slots=2\nnode2 slots=x\n", "[mwstrat.cluster] hosts.txt:2: \"slots=x\" is not slots=N with N a whole "
                                         "number in [1, 1024]"},
      {"node1 slots=0", "hosts.txt:1: \"slots=0\" is not slots=N"},
      {"node1 slots=1025", "hosts.txt:1: \"slots=1025\" is not slots=N"},
      {"node1 slots=", "hosts.txt:1: \"slots=\" is not slots=N"},
      {"node1 slots=2 slots=3", "hosts.txt:1: \"slots=3\" gives the slots a second time"},
      {"\n\nnode1 max_slots=2", "hosts.txt:3: \"max_slots=2\" is not understood; a line is \"HOST [slots=N]\""},
      {"node1 2", "hosts.txt:1: \"2\" is not understood"},
      {"no$de slots=1", "hosts.txt:1: \"no$de\" is not a host name or IPv4 address"},
      {"-oProxyCommand=x", "hosts.txt:1: \"-oProxyCommand=x\" is not a host name"},
      {"slots=2", "hosts.txt:1: \"slots=2\" is not a host name"},
      {"a..b", "hosts.txt:1: \"a..b\" is not a host name"},
      {"a\nb\na slots=2\n", "hosts.txt:3: host \"a\" is named twice (first at hosts.txt:1)"},
      {"", "hosts.txt: lists no host"},
      {"# nothing\n\n", "hosts.txt: lists no host"},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_NE(message(text).find(expected), std::string::npos) << text << "\n -> " << message(text);
  }
  EXPECT_NE(message("n\xff", "cluster.hosts").find("cluster.hosts:1: \"n\\xff\""), std::string::npos)
      << message("n\xff", "cluster.hosts");
}

TEST(hostfile, a_file_that_cannot_be_read_is_named) {
  try {
    (void)mwstrat::read_hostfile("/nonexistent/hosts.txt");
    FAIL() << "accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("--hostfile \"/nonexistent/hosts.txt\": cannot be read"), std::string::npos)
        << e.what();
  }
}

TEST(host_list, entries_and_refusals) {
  EXPECT_EQ(mwstrat::parse_host_list("node1:2,node2:2"), (hosts{{"node1", 2}, {"node2", 2}}));
  EXPECT_EQ(mwstrat::parse_host_list("127.0.0.1:1"), (hosts{{"127.0.0.1", 1}}));
  const std::pair<const char*, const char*> cases[] = {
      {"node1", "--hosts: 'node1' is not NAME:WORKERS"},
      {"node1:2,", "--hosts: '' is not NAME:WORKERS"},
      {":2", "--hosts: ':2' is not NAME:WORKERS"},
      {"node1:0", "--hosts node1: '0' is not a number in [1, 1024]"},
      {"node1:2x", "--hosts node1: '2x' is not a number in [1, 1024]"},
      {"a b:2", "--hosts: 'a b' is not a host name or IPv4 address"},
      {"n1:1,n1:2", "host \"n1\" is named twice"},
  };
  for (const auto& [text, expected] : cases) {
    std::string what = "(accepted)";
    try {
      (void)mwstrat::parse_host_list(text);
    } catch (const mwstrat::config_error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find(expected), std::string::npos) << text << "\n -> " << what;
  }
}

}  // namespace hostfile_test
