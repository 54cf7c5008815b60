// mwstrat-launch --hostfile, run for real with this machine's addresses (workers started locally): the file's hosts
// and slots place the workers as --hosts would; a bad line stops the launcher before anything starts, naming the
// file, the line and why. (Hosts reached over ssh: tests/hosts/ssh_launch_test.cpp.)
#include <support/process.hpp>
#include <support/temp_dir.hpp>
#include <tools/launcher_path.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <string>

namespace launch_hostfile_test {

using mwstrat::test::launcher;
using mwstrat::test::run;

TEST(launch_hostfile, places_workers_by_the_files_hosts_and_slots) {
  mwstrat::test::temp_dir dir("mwstrat-hostfile");
  const std::string file = (dir / "hosts.txt").string();
  std::ofstream(file) << "# two 'nodes' of this machine\n127.0.0.1 slots=2\n\n127.0.0.2   # one slot\n";
  const auto ports = mwstrat::test::free_ports(1);
  const auto r = run(launcher + " --hostfile " + file + " --base-port " + std::to_string(ports[0]) +
                         " -- sh -c 'echo \"id=$MWSTRAT_HOST_ID $TF_CONFIG\"'",
                     60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string p = std::to_string(ports[0]);
  const std::string workers = "{\"cluster\": {\"worker\": [\"127.0.0.1:" + p + "\", \"127.0.0.1:" +
                              std::to_string(ports[0] + 1) + "\", \"127.0.0.2:" + std::to_string(ports[0] + 2) +
                              "\"]}";
  EXPECT_NE(r.output.find("[worker 1] id=127.0.0.1 " + workers), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 2] id=127.0.0.2 " + workers), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ssh"), std::string::npos) << "local addresses went over ssh:\n" << r.output;
  EXPECT_EQ(r.output.find("job token"), std::string::npos) << "a local job got a token it did not ask for";
}

// This machine's own host name is this machine: started here, with no ssh (there is no sshd to answer here).
TEST(launch_hostfile, this_machines_own_host_name_is_started_locally) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  mwstrat::test::temp_dir dir("mwstrat-hostfile");
  const std::string file = (dir / "hosts.txt").string();
  std::ofstream(file) << name << " slots=2\n";
  const auto r = run(launcher + " --hostfile " + file + " --base-port " +
                         std::to_string(mwstrat::test::free_ports(1)[0]) + " -- sh -c 'echo \"on $MWSTRAT_HOST_ID\"'",
                     60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::string("[worker 1] on ") + name), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ssh"), std::string::npos) << r.output;
}

TEST(launch_hostfile, a_bad_line_stops_the_launch_naming_file_and_line) {
  mwstrat::test::temp_dir dir("mwstrat-hostfile");
  const std::string file = (dir / "hosts.txt").string();
  std::ofstream(file) << "127.0.0.1 slots=2\n127.0.0.2 slots=two\n";
  const auto r = run(launcher + " --hostfile " + file + " -- sh -c 'echo started'", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("mwstrat-launch: " + file + ":2: \"slots=two\" is not slots=N with N a whole number in "
                          "[1, 1024]"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("started"), std::string::npos) << r.output;
  const auto missing = run(launcher + " --hostfile " + (dir / "none.txt").string() + " -- true", 30);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("cannot be read"), std::string::npos) << missing.output;
  const auto both = run(launcher + " --hostfile " + file + " --hosts 127.0.0.1:1 -- true", 30);
  EXPECT_NE(both.output.find("--hosts and --hostfile exclude each other"), std::string::npos) << both.output;
}

}  // namespace launch_hostfile_test
