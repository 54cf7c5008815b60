// The environment read at the edge: make_multi_worker_mirrored_strategy fills the communication options the code
// left unset from MWSTRAT_RING_TRANSPORT, MWSTRAT_RING_SPIN_US and MWSTRAT_JOB_TOKEN, refuses bad values naming the
// variable, and never lets the environment override an option set in code.
#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/tf_config.hpp>
#include <mwstrat/strategy/communication_options.hpp>
#include <mwstrat/strategy/multi_worker_mirrored_strategy.hpp>

#include <support/process.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace communication_options_test {

using namespace mwstrat;
using namespace std::chrono_literals;

environment none() { return environment(environment_map{}); }

TEST(communication_options, unset_fields_take_the_environment_or_the_defaults) {
  const auto defaults = with_environment_defaults({}, none());
  EXPECT_EQ(defaults.transport, ring_transport::automatic);
  EXPECT_EQ(defaults.spin, ring_options{}.spin);
  EXPECT_EQ(defaults.job_token, std::string());  // no token
  const auto from_env = with_environment_defaults(
      {}, environment{{"MWSTRAT_RING_TRANSPORT", "tcp"}, {"MWSTRAT_RING_SPIN_US", "0"}, {"MWSTRAT_JOB_TOKEN", "s3"}});
  EXPECT_EQ(from_env.transport, ring_transport::tcp);
  EXPECT_EQ(from_env.spin, 0us);
  EXPECT_EQ(from_env.job_token, std::string("s3"));
  EXPECT_EQ(with_environment_defaults({}, environment{{"MWSTRAT_RING_TRANSPORT", "auto"}}).transport,
            ring_transport::automatic);
  EXPECT_EQ(with_environment_defaults({}, environment{{"MWSTRAT_RING_SPIN_US", "1000000"}}).spin, 1'000'000us);
}

TEST(communication_options, an_option_set_in_code_is_never_overridden_by_the_environment) {
  const environment env{{"MWSTRAT_RING_TRANSPORT", "tcp"}, {"MWSTRAT_RING_SPIN_US", "7"}, {"MWSTRAT_JOB_TOKEN", "env"}};
  communication_options o;
  o.transport = ring_transport::automatic;
  o.spin = 5us;
  o.job_token = "";  // explicitly none
  const auto filled = with_environment_defaults(o, env);
  EXPECT_EQ(filled.transport, ring_transport::automatic);
  EXPECT_EQ(filled.spin, 5us);
  EXPECT_EQ(filled.job_token, std::string());
  // A set option is not even read from the environment: a bad value there does not matter.
  EXPECT_NO_THROW((void)with_environment_defaults(
      o, environment{{"MWSTRAT_RING_TRANSPORT", "shared"}, {"MWSTRAT_RING_SPIN_US", "fast"}}));
}

// Anything but microseconds in 0..1000000 is refused, naming the variable; so is a transport but tcp or auto.
TEST(communication_options, bad_values_are_refused_naming_the_variable) {
  for (const char* bad : {"-1", "fast", "2000000", "10us", ""}) {
    try {
      (void)with_environment_defaults({}, environment{{"MWSTRAT_RING_SPIN_US", bad}}, 2);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const environment_error& e) {  // a config_error a program can tell apart
      EXPECT_EQ(std::string(e.what()), "[mwstrat.strategy] rank 2: MWSTRAT_RING_SPIN_US is '" + std::string(bad) +
                                           "', expected microseconds in 0..1000000");
    }
  }
  try {
    (void)with_environment_defaults({}, environment{{"MWSTRAT_RING_TRANSPORT", "shared"}});
    ADD_FAILURE() << "accepted MWSTRAT_RING_TRANSPORT=shared";
  } catch (const environment_error& e) {
    EXPECT_EQ(std::string(e.what()), "[mwstrat.strategy] MWSTRAT_RING_TRANSPORT is 'shared', expected tcp or auto");
  }
}

// At the edge itself: the process environment, read by make_multi_worker_mirrored_strategy.
TEST(communication_options, the_strategy_reads_the_process_environment_and_obeys_explicit_options) {
  ::setenv("MWSTRAT_RING_SPIN_US", "fast", 1);
  const auto local = tf_config_resolver::from_string("");
  try {
    (void)make_multi_worker_mirrored_strategy(local);
    ADD_FAILURE() << "MWSTRAT_RING_SPIN_US=fast was accepted";
  } catch (const environment_error& e) {
    EXPECT_NE(std::string(e.what()).find("MWSTRAT_RING_SPIN_US is 'fast'"), std::string::npos) << e.what();
  }
  communication_options o;
  o.spin = 0us;
  ::unsetenv("MWSTRAT_RING_SPIN_US");
  EXPECT_NO_THROW((void)make_multi_worker_mirrored_strategy(local, o));
  EXPECT_THROW((void)make_multi_worker_mirrored_strategy(cluster_config::local(), {},
                                                          environment{{"MWSTRAT_RING_TRANSPORT", "shared"}}),
               environment_error);
}

// Two workers (threads) built from TF_CONFIG: MWSTRAT_RING_TRANSPORT=tcp keeps payloads off shared memory unless the
// code asked for a transport itself.
std::vector<int> ring_uses_shm(const environment& env, std::optional<ring_transport> explicit_transport) {
  const auto ports = test::free_ports(2);
  std::vector<int> shm(2, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      communication_options o;
      o.connect_timeout = 10s;
      o.op_timeout = 10s;
      o.job_token = "";
      o.transport = explicit_transport;
      o.log = [](std::string_view) {};
      auto s = make_multi_worker_mirrored_strategy(tf_config_resolver::from_string(test::tf_config(ports, r)).resolve(),
                                                   o, env);
      shm[static_cast<std::size_t>(r)] = s.collective().uses_shared_memory() ? 1 : 0;
      s.barrier();
    });
  for (auto& t : threads) t.join();
  return shm;
}

TEST(communication_options, the_transport_from_the_environment_reaches_the_ring) {
  if (::access("/dev/shm", W_OK | X_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  const environment tcp{{"MWSTRAT_RING_TRANSPORT", "tcp"}};
  EXPECT_EQ(ring_uses_shm(tcp, std::nullopt), (std::vector<int>{0, 0}));
  EXPECT_EQ(ring_uses_shm(tcp, ring_transport::automatic), (std::vector<int>{1, 1}));
  EXPECT_EQ(ring_uses_shm(environment{{"MWSTRAT_RING_TRANSPORT", "auto"}}, ring_transport::tcp),
            (std::vector<int>{0, 0}));
  EXPECT_EQ(ring_uses_shm(none(), std::nullopt), (std::vector<int>{1, 1}));
}

}  // namespace communication_options_test

namespace communication_options_test {

// MWSTRAT_RING_LIVENESS_MS fills an unset liveness timeout (5 s without it), never one set in code; anything but
// milliseconds in 0..3600000 is refused, naming the variable.
TEST(communication_options, the_liveness_timeout_comes_from_the_code_the_environment_or_the_default) {
  using namespace std::chrono_literals;
  const mwstrat::environment none(mwstrat::environment_map{});
  EXPECT_EQ(mwstrat::with_environment_defaults({}, none).liveness_timeout, 5000ms);
  EXPECT_EQ(mwstrat::with_environment_defaults({}, mwstrat::environment{{"MWSTRAT_RING_LIVENESS_MS", "1500"}})
                .liveness_timeout,
            1500ms);
  EXPECT_EQ(mwstrat::with_environment_defaults({}, mwstrat::environment{{"MWSTRAT_RING_LIVENESS_MS", "0"}})
                .liveness_timeout,
            0ms);
  mwstrat::communication_options o;
  o.liveness_timeout = 700ms;
  EXPECT_EQ(mwstrat::with_environment_defaults(o, mwstrat::environment{{"MWSTRAT_RING_LIVENESS_MS", "soon"}})
                .liveness_timeout,
            700ms);
  for (const char* bad : {"-1", "soon", "3600001", "5s", "", "99"}) {
    try {
      (void)mwstrat::with_environment_defaults({}, mwstrat::environment{{"MWSTRAT_RING_LIVENESS_MS", bad}}, 1);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const mwstrat::config_error& e) {
      EXPECT_EQ(std::string(e.what()), "[mwstrat.strategy] rank 1: MWSTRAT_RING_LIVENESS_MS is '" + std::string(bad) +
                                           "', expected 0 (never judged) or milliseconds in 100..3600000");
    }
  }
}

}  // namespace communication_options_test
