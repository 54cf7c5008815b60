// The cluster family's message helpers (quoting, JSON paths, "did you mean") and its address set, which every
// TF_CONFIG and Slurm error goes through.
#include <mwstrat/cluster/detail/address_set.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <string>

namespace diagnostics_test {

namespace d = mwstrat::detail;

// The message of the config_error `add` throws, or "" when it accepts the address.
std::string refusal(d::address_set& set, const std::string& text, const std::string& path) {
  try {
    set.add(text, path);
  } catch (const mwstrat::config_error& e) {
    return e.what();
  }
  return "";
}

TEST(cluster_diagnostics, quote_escapes_and_cuts_long_text) {
  EXPECT_EQ(d::quote("plain"), "\"plain\"");
  EXPECT_EQ(d::quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(d::quote("tab\there\nnew"), "\"tab\\there\\nnew\"");
  EXPECT_EQ(d::quote(std::string("\x01\x7f\xff", 3)), "\"\\u0001\\x7f\\xff\"");
  EXPECT_EQ(d::quote(std::string(100, 'x'), 5), "\"xxxxx\"...");
  EXPECT_EQ(d::quote("exact", 5), "\"exact\"");
  EXPECT_EQ(d::escape("q\"", 80, false), "q\"");
  EXPECT_EQ(d::escape("abcdef", 3), "abc...");
}

TEST(cluster_diagnostics, json_paths_read_like_the_document) {
  EXPECT_EQ(d::path_member("", "cluster"), "cluster");
  EXPECT_EQ(d::path_member("cluster", "worker"), "cluster.worker");
  EXPECT_EQ(d::path_index("cluster.worker", 2), "cluster.worker[2]");
  EXPECT_EQ(d::path_member("cluster", "odd key"), "cluster[\"odd key\"]");
  EXPECT_EQ(d::path_member("cluster", ""), "cluster[\"\"]");
  EXPECT_EQ(d::cluster_message("TF_CONFIG", "task.index", "must be a number"), "TF_CONFIG: task.index: must be a number");
  EXPECT_EQ(d::cluster_message("TF_CONFIG", "", "is empty"), "TF_CONFIG: is empty");
}

TEST(cluster_diagnostics, near_misses_get_a_hint) {
  EXPECT_EQ(d::edit_distance("", "abc"), 3u);
  EXPECT_EQ(d::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(d::edit_distance("same", "same"), 0u);
  EXPECT_EQ(d::edit_distance(std::string(65, 'a'), "a"), 65u) << "long inputs are not compared";
  EXPECT_EQ(d::did_you_mean("clutser", {"cluster", "task"}), "; did you mean 'cluster'?");
  EXPECT_EQ(d::did_you_mean("TASK", {"cluster", "task"}), "; did you mean 'task'?");
  EXPECT_EQ(d::did_you_mean("environment", {"cluster", "task"}), "");
  EXPECT_EQ(d::join_names({"chief", "worker", "ps"}), "chief, worker, ps");
  EXPECT_EQ(d::join_names({}), "");
}

TEST(cluster_address_set, duplicates_and_malformed_addresses_name_where_they_are) {
  d::address_set set("TF_CONFIG");
  EXPECT_NO_THROW(set.add("10.0.0.1:2222", "cluster.worker[0]"));
  EXPECT_NO_THROW(set.add("10.0.0.1:2223", "cluster.worker[1]"));
  std::string what = refusal(set, "10.0.0.1:2222", "cluster.chief[0]");
  ASSERT_FALSE(what.empty()) << "a shared address was accepted";
  EXPECT_NE(what.find("TF_CONFIG: cluster.chief[0]"), std::string::npos) << what;
  EXPECT_NE(what.find("already the address of cluster.worker[0]"), std::string::npos) << what;
  what = refusal(set, "no-port-here", "cluster.worker[2]");
  ASSERT_FALSE(what.empty()) << "an address without a port was accepted";
  EXPECT_NE(what.find("cluster.worker[2]"), std::string::npos) << what;
  EXPECT_NE(what.find("\"no-port-here\""), std::string::npos) << what;
}

}  // namespace diagnostics_test
