// The launcher's protocol in the library: `launcher_environment` reads what mwstrat-launch sets (and refuses a
// malformed value naming its variable), and fit's recovery options take it wherever the program left the defaults
// (detail::with_launcher, train/in_memory_recovery.hpp). tests/tools/launch_recovery_test.cpp runs it for real.
#include <mwstrat/cluster/launcher_environment.hpp>
#include <mwstrat/train/in_memory_recovery.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <string>
#include <vector>

namespace launcher_recovery_test {

using namespace mwstrat;
using namespace std::chrono_literals;

TEST(launcher_environment, reads_what_the_launcher_sets) {
  const launcher_environment l = launcher_environment::read(environment{
      {"MWSTRAT_LAUNCH_ATTEMPT", "2"}, {"MWSTRAT_REPLACE_LOST", "1"}, {"MWSTRAT_RECOVERY_GENERATION", "3"},
      {"MWSTRAT_LAUNCH_REPORT_FD", "7"}, {"MWSTRAT_RECOVERY_TIMEOUT_MS", "1500"}});
  EXPECT_EQ(l.attempt, 2u);
  EXPECT_TRUE(l.replace_lost);
  EXPECT_EQ(l.generation, 3u);
  EXPECT_EQ(l.report_fd, 7);
  EXPECT_EQ(l.recovery_timeout, 1500ms);
  EXPECT_TRUE(l.restarted());
  const launcher_environment none = launcher_environment::read(environment(environment_map{}));
  EXPECT_FALSE(none.replace_lost);
  EXPECT_FALSE(none.report_fd);
  EXPECT_FALSE(none.recovery_timeout);
  EXPECT_FALSE(none.restarted());
}

TEST(launcher_environment, reads_what_the_launcher_sets_for_an_elastic_job_and_a_joiner) {
  const launcher_environment l = launcher_environment::read(environment{
      {"MWSTRAT_MIN_WORKERS", "2"}, {"MWSTRAT_MAX_WORKERS", "4"}, {"MWSTRAT_SPARE_WAIT_MS", "2500"},
      {"MWSTRAT_JOIN_LISTEN", "127.0.0.1:7001"}, {"MWSTRAT_JOIN", "127.0.0.1:7001,10.9.0.2:7002"}});
  EXPECT_EQ(l.min_workers, 2);
  EXPECT_EQ(l.max_workers, 4);
  EXPECT_EQ(l.spare_wait, 2500ms);
  EXPECT_EQ(l.join_listen, "127.0.0.1:7001");
  EXPECT_EQ(l.join_via, (std::vector<std::string>{"127.0.0.1:7001", "10.9.0.2:7002"}));
  EXPECT_TRUE(l.restarted()) << "a joiner is started after the job: its one-off fault injection must not fire";
  in_memory_recovery_options program;
  program.launcher = l;
  const in_memory_recovery_options r = detail::with_launcher<true>(program);
  EXPECT_EQ(r.min_workers, 2);
  EXPECT_EQ(r.max_workers, 4);
  EXPECT_EQ(r.spare_wait, 2500ms);
  program.max_workers = 3;
  program.spare_wait = 0ms;
  const in_memory_recovery_options own = detail::with_launcher<true>(program);
  EXPECT_EQ(own.max_workers, 3) << "what the program set stays";
  EXPECT_EQ(own.spare_wait, 0ms);
}

TEST(launcher_environment, a_malformed_value_is_refused_naming_its_variable) {
  const std::array<std::array<std::string, 2>, 11> bad{{{"MWSTRAT_RECOVERY_TIMEOUT_MS", "nan"},
                                                       {"MWSTRAT_MAX_WORKERS", "0"},
                                                       {"MWSTRAT_SPARE_WAIT_MS", "-5"},
                                                       {"MWSTRAT_JOIN_LISTEN", "nowhere"},
                                                       {"MWSTRAT_JOIN", "127.0.0.1:7001,"},
                                                       {"MWSTRAT_JOIN", "127.0.0.1:7001,host"},
                                                       {"MWSTRAT_RECOVERY_TIMEOUT_MS", "0"},
                                                       {"MWSTRAT_REPLACE_LOST", "yes"},
                                                       {"MWSTRAT_LAUNCH_REPORT_FD", "-1"},
                                                       {"MWSTRAT_LAUNCH_ATTEMPT", "1x"},
                                                       {"MWSTRAT_RECOVERY_GENERATION", "one"}}};
  for (const auto& [name, value] : bad) {
    try {
      (void)launcher_environment::read(environment{{name, value}});
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const environment_error& e) {  // a config_error a program can answer as a bad argument
      const std::string what = e.what();
      EXPECT_TRUE(what.find(name + ": '" + value + "'") != std::string::npos ||
                  what.find(name + " is '" + value + "'") != std::string::npos)
          << what;
    }
  }
}

TEST(launcher_recovery, the_launchers_protocol_fills_what_the_program_left_unset) {
  std::array<int, 2> fds{};
  ASSERT_EQ(::pipe(fds.data()), 0);
  launcher_environment l;
  l.replace_lost = true;
  l.report_fd = fds[1];
  l.recovery_timeout = 1234ms;
  in_memory_recovery_options program;
  program.launcher = l;
  const in_memory_recovery_options r = detail::with_launcher<true>(program);
  EXPECT_TRUE(r.enabled);
  EXPECT_EQ(r.timeout, 1234ms);
  ASSERT_TRUE(r.on_peer_lost);
  r.on_peer_lost(2, 7);
  std::array<char, 64> line{};
  const ssize_t n = ::read(fds[0], line.data(), line.size());
  EXPECT_EQ(std::string(line.data(), n > 0 ? static_cast<std::size_t>(n) : 0), "lost 2 7\n");
  ::close(fds[0]);
  ::close(fds[1]);

  // A strategy that cannot recover is not switched on by the launcher.
  EXPECT_FALSE(detail::with_launcher<false>(program).enabled);

  // What the program set stays; with from_launcher off, nothing comes from the launcher.
  program.timeout = 5s;
  bool called = false;
  program.on_peer_lost = [&](int, std::uint64_t) { called = true; };
  const in_memory_recovery_options own = detail::with_launcher<true>(program);
  EXPECT_EQ(own.timeout, 5s);
  own.on_peer_lost(1, 0);
  EXPECT_TRUE(called);
  in_memory_recovery_options off;
  off.launcher = l;
  off.from_launcher = false;
  const in_memory_recovery_options alone = detail::with_launcher<true>(off);
  EXPECT_FALSE(alone.enabled);
  EXPECT_EQ(alone.timeout, 60s);
  EXPECT_FALSE(alone.on_peer_lost);
}

}  // namespace launcher_recovery_test
