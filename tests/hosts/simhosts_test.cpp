// scripts/simhosts, the simulated hosts every cross-host test stands on: each host's own address, /dev/shm and
// identity, shaped links (measured with a real TCP transfer), cuts, and that everything made is removed again.
#include "hosts_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace simhosts_test {

using namespace mwstrat::test;
namespace fs = std::filesystem;

// `prefix` and this process's id (appended: GCC 12 -O3 warns falsely on "literal" + std::to_string(...)).
std::string with_pid(const char* prefix) {
  std::string s = prefix;
  s += std::to_string(::getpid());
  return s;
}

// `ip` prints "Peer netns reference is invalid" on stderr when it names a veth peer's namespace while another
// test is making or removing one; only stdout is the answer (ctest runs the hosts tests in parallel).
std::string ip_links() { return run("ip -o link show 2>/dev/null | sed 's/ qlen [0-9]*//'", 30).output; }
// The namespace files themselves (`ip netns list` asks the kernel about each and may print the same noise).
std::string namespaces_of(const std::string& set) {
  return run("ls /run/netns 2>/dev/null | grep -- '-" + set + "-' || true", 30).output;
}

TEST(simhosts, each_host_has_its_own_address_shared_memory_and_identity) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  simulated_hosts hosts(2);
  EXPECT_EQ(hosts.address(1), "10.77.0.1");
  EXPECT_EQ(hosts.address(2), "10.77.0.2");
  const auto h1 = run(hosts.on(1, "echo id=$MWSTRAT_HOST_ID; ip -o -4 addr show dev eth0 2>/dev/null; "
                                  "echo mark > /dev/shm/" + hosts.name() + "; ls /dev/shm"),
                      60);
  ASSERT_EQ(h1.exit_code, 0) << h1.output;
  EXPECT_NE(h1.output.find("id=h1"), std::string::npos) << h1.output;
  EXPECT_NE(h1.output.find("inet 10.77.0.1/24"), std::string::npos) << h1.output;
  // A second command on h1 sees h1's /dev/shm; h2 and the machine itself do not.
  EXPECT_EQ(run(hosts.on(1, "cat /dev/shm/" + hosts.name()), 60).output, "mark\n");
  const auto h2 = run(hosts.on(2, "echo id=$MWSTRAT_HOST_ID; ls -A /dev/shm | wc -l"), 60);
  EXPECT_EQ(h2.output, "id=h2\n0\n");
  EXPECT_FALSE(fs::exists("/dev/shm/" + hosts.name()));
  // h2 reaches h1 over the bridge; nothing of the machine's own network is visible in a host.
  const auto links = run(hosts.on(2, "ip -o link show 2>/dev/null | wc -l"), 60);
  EXPECT_EQ(links.output, "2\n") << "a host has lo and eth0 only";
}

// One TCP transfer of `bytes` from h1 to h2; the receiver's measured rate in bit/s.
double measured_rate(const simulated_hosts& hosts, std::size_t bytes) {
  process sink(hosts.on(2, self + " tcp-sink 5201"), 120);
  const auto source = run(hosts.on(1, self + " tcp-source " + hosts.address(2) + " 5201 " + std::to_string(bytes) + " 10"), 120);
  const auto received = sink.finish();
  EXPECT_EQ(source.exit_code, 0) << source.output;
  EXPECT_EQ(received.exit_code, 0) << received.output;
  EXPECT_EQ(number_after(received.output, "received "), static_cast<double>(bytes)) << received.output;
  const double seconds = number_after(received.output, "bytes in ");
  const double bits_per_s = number_after(received.output, " s: ");
  std::printf("[ measured ] %zu bytes in %.3f s: %.3f Gbit/s\n", bytes, seconds, bits_per_s / 1e9);
  return bits_per_s;
}

TEST(simhosts, links_are_shaped_to_their_rate) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  {
    simulated_hosts slow(2, "100mbit");
    const double r = measured_rate(slow, 5'000'000);
    EXPECT_LT(r, 1.05e8) << "a 100 Mbit/s link carried more";
    EXPECT_GT(r, 0.5e8);
  }
  {
    simulated_hosts fast(2, "1gbit");
    const double r = measured_rate(fast, 40'000'000);
    EXPECT_LT(r, 1.05e9) << "a 1 Gbit/s link carried more";
    EXPECT_GT(r, 0.3e9);
  }
}

TEST(simhosts, a_cut_link_carries_nothing_until_restored) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  simulated_hosts hosts(2, "1gbit");
  process sink(hosts.on(2, self + " tcp-sink 5202"), 120);
  hosts.cut(2);
  const auto cut = run(hosts.on(1, self + " tcp-source " + hosts.address(2) + " 5202 1000 2"), 60);
  EXPECT_EQ(cut.exit_code, 1) << cut.output;
  EXPECT_NE(cut.output.find("cannot connect to 10.77.0.2:5202"), std::string::npos) << cut.output;
  hosts.restore(2);
  const auto restored = run(hosts.on(1, self + " tcp-source " + hosts.address(2) + " 5202 1000000 10"), 60);
  EXPECT_EQ(restored.exit_code, 0) << restored.output;
  const auto received = sink.finish();
  EXPECT_NE(received.output.find("received 1000000 bytes"), std::string::npos) << received.output;
}

TEST(simhosts, down_removes_everything_and_never_touches_the_machines_interfaces) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  const std::string before = ip_links();
  std::string name;
  {
    simulated_hosts hosts(3, "1gbit,10gbit,100mbit");
    name = hosts.name();
    EXPECT_EQ(ip_links(), before) << "the machine's own interfaces changed";
    const auto list = run(hosts.script() + " hosts", 30);
    EXPECT_EQ(list.output, "h1 10.77.0.1 1gbit\nh2 10.77.0.2 10gbit\nh3 10.77.0.3 100mbit\n");
    EXPECT_EQ(namespaces_of(name).empty(), false);
    // A process left running on a host is ended by down.
    ASSERT_EQ(run(hosts.on(3, "sleep 100 >/dev/null 2>&1 &"), 30).exit_code, 0);
    EXPECT_NE(run("ip netns pids mwsim-" + name + "-h3", 30).output, "");
  }
  EXPECT_EQ(namespaces_of(name), "");
  EXPECT_FALSE(fs::exists("/run/mwstrat-simhosts/" + name));
  EXPECT_EQ(run("mount | grep -c mwsim-" + name + "- || true", 30).output, "0\n");
  EXPECT_EQ(ip_links(), before);
}

TEST(simhosts, run_removes_what_it_made_when_the_command_fails_or_is_killed) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  const std::string failing = with_pid("hr");
  const auto f = run("'" + simhosts_script + "' --name " + failing +
                         " run 2 -- sh -c 'ls /run/netns 2>/dev/null | grep -c " + failing + "; exit 3'",
                     60);
  EXPECT_EQ(f.exit_code, 3) << f.output;
  EXPECT_EQ(f.output, "3\n") << "two hosts and a bridge while the command ran";
  EXPECT_EQ(namespaces_of(failing), "");
  const std::string killed = with_pid("hk");
  const auto k = run("timeout -s TERM 3 '" + simhosts_script + "' --name " + killed + " run 2 -- sleep 60", 60);
  EXPECT_EQ(k.exit_code, 124) << k.output;
  EXPECT_EQ(namespaces_of(killed), "");
  EXPECT_FALSE(fs::exists("/run/mwstrat-simhosts/" + killed));
}

TEST(simhosts, bad_arguments_are_named) {
  MWSTRAT_REQUIRE_SIMULATED_HOSTS();
  const auto rate = run("'" + simhosts_script + "' --name " + with_pid("bad") + " up 2 --rate fast", 30);
  EXPECT_EQ(rate.exit_code, 1);
  EXPECT_NE(rate.output.find("rate 'fast' is not <number>bit|kbit|mbit|gbit"), std::string::npos) << rate.output;
  const auto count = run("'" + simhosts_script + "' up 2 --rate 1gbit,1gbit,1gbit", 30);
  EXPECT_NE(count.output.find("--rate takes one rate or 2 (one per host), not 3"), std::string::npos) << count.output;
  simulated_hosts hosts(1);
  const auto host = run(hosts.script() + " exec h2 -- true", 30);
  EXPECT_EQ(host.exit_code, 1);
  EXPECT_NE(host.output.find("no host 'h2' in set '" + hosts.name() + "' (h1..h1)"), std::string::npos) << host.output;
  const auto none = run("'" + simhosts_script + "' --name " + with_pid("nosuch") + " exec h1 -- true", 30);
  EXPECT_NE(none.output.find("not up?"), std::string::npos) << none.output;
}

}  // namespace simhosts_test
