// mpi_resolver: the launcher's variables (Open MPI's, PMI's), where the rendezvous happens, and the rendezvous
// itself between real sockets (ranks as threads here; as processes on simulated hosts in mnist_hosts_test.cpp).
#include "hosts_support.hpp"

#include <mwstrat/cluster/mpi_resolver.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace mpi_resolver_test {

using namespace mwstrat;
using namespace std::chrono_literals;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

environment open_mpi(int rank, int size, int local_size, const std::string& rendezvous = "") {
  environment_map v{{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                    {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)},
                    {"OMPI_MCA_ess_base_jobid", "1234567"}};
  if (!rendezvous.empty()) v["MWSTRAT_RENDEZVOUS"] = rendezvous;
  return environment(v);
}

TEST(mpi_resolver, reads_open_mpi_and_pmi_variables) {
  EXPECT_TRUE(mpi_resolver::detected(open_mpi(0, 2, 2)));
  EXPECT_FALSE(mpi_resolver::detected(environment(environment_map{})));
  const auto ompi = mpi_resolver(open_mpi(1, 4, 2)).launch_info();
  EXPECT_EQ(ompi.rank, 1);
  EXPECT_EQ(ompi.size, 4);
  EXPECT_EQ(ompi.local_size, 2);
  EXPECT_EQ(ompi.rank_variable, "OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(ompi.job_id, "OMPI_MCA_ess_base_jobid=1234567");
  const auto pmi = mpi_resolver(environment{{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"PMI_KVSNAME", "kvs_9"}}).launch_info();
  EXPECT_EQ(pmi.rank, 2);
  EXPECT_EQ(pmi.size, 3);
  EXPECT_FALSE(pmi.local_size);
  EXPECT_EQ(pmi.rank_variable, "PMI_RANK");
  EXPECT_EQ(mpi_resolver(environment{{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}}).resolve().world_size(), 1);
}

TEST(mpi_resolver, bad_variables_are_named_with_their_values) {
  EXPECT_NE(error_of([] { (void)mpi_resolver(environment(environment_map{})).resolve(); })
                .find("MPI: OMPI_COMM_WORLD_RANK: not set (nor PMI_RANK); is this process running under mpirun?"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)mpi_resolver(environment{{"OMPI_COMM_WORLD_SIZE", "two"}}).launch_info(); })
                .find("OMPI_COMM_WORLD_SIZE: \"two\" is not an integer >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)mpi_resolver(open_mpi(4, 4, 4)).launch_info(); })
                .find("OMPI_COMM_WORLD_RANK: 4 is out of range (OMPI_COMM_WORLD_SIZE is 4)"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)mpi_resolver(environment{{"PMI_SIZE", "2"}}).launch_info(); })
                .find("PMI_RANK: not set"),
            std::string::npos);
}

TEST(mpi_resolver, the_rendezvous_is_given_or_derived_from_the_job_on_one_host) {
  const mpi_resolver given(open_mpi(0, 4, 2, "10.1.2.3:29400"));
  EXPECT_EQ(given.rendezvous_endpoint(given.launch_info()), "10.1.2.3:29400");
  const mpi_resolver one_host(open_mpi(3, 4, 4));
  const std::string derived = one_host.rendezvous_endpoint(one_host.launch_info());
  EXPECT_EQ(derived.rfind("127.0.0.1:", 0), 0u) << derived;
  const mpi_resolver same_job(open_mpi(0, 4, 4));
  EXPECT_EQ(same_job.rendezvous_endpoint(same_job.launch_info()), derived) << "every rank derives the same port";
  const mpi_resolver hosts(open_mpi(0, 4, 2));
  EXPECT_NE(error_of([&] { (void)hosts.rendezvous_endpoint(hosts.launch_info()); })
                .find("MWSTRAT_RENDEZVOUS: not set, and the ranks are not all on one host"),
            std::string::npos);
  const mpi_resolver bad(open_mpi(0, 2, 2, "somehost:29400"));
  EXPECT_NE(error_of([&] { (void)bad.rendezvous_endpoint(bad.launch_info()); })
                .find("MWSTRAT_RENDEZVOUS: \"somehost:29400\" is not \"ipv4:port\""),
            std::string::npos);
}

// Each rank resolves in a thread of its own; results[r] is rank r's cluster, errors[r] its error.
struct world {
  std::vector<std::optional<cluster_config>> results;
  std::vector<std::string> errors;
  std::vector<std::string> kinds;  // "timeout", "config", "io" or "other" where a rank failed
};

// The kind of mwstrat error `e` is, for the rendezvous's promise that every rank throws the same kind.
std::string kind_of(const std::exception& e) {
  if (dynamic_cast<const timeout_error*>(&e)) return "timeout";
  if (dynamic_cast<const config_error*>(&e)) return "config";
  if (dynamic_cast<const io_error*>(&e)) return "io";
  return "other";
}
world resolve_all(const std::vector<environment>& envs, std::chrono::milliseconds timeout) {
  world w;
  w.results.resize(envs.size());
  w.errors.resize(envs.size());
  w.kinds.resize(envs.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < envs.size(); ++r) {
    threads.emplace_back([&, r] {
      mpi_resolver_options o;
      o.timeout = timeout;
      try {
        w.results[r] = mpi_resolver(envs[r], o).resolve();
      } catch (const std::exception& e) {
        w.errors[r] = e.what();
        w.kinds[r] = kind_of(e);
      }
    });
  }
  for (auto& t : threads) t.join();
  return w;
}

TEST(mpi_resolver, every_rank_gets_every_address_in_rank_order) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(test::free_ports(1)[0]);
  const auto w = resolve_all({open_mpi(2, 3, 3, rendezvous), open_mpi(0, 3, 3, rendezvous), open_mpi(1, 3, 3, rendezvous)},
                             20s);
  // The environments were given out of order: thread 0 is rank 2.
  const int rank_of_thread[3] = {2, 0, 1};
  std::optional<std::vector<std::string>> agreed;
  for (std::size_t t = 0; t < 3; ++t) {
    ASSERT_TRUE(w.results[t]) << w.errors[t];
    const cluster_config& c = *w.results[t];
    EXPECT_EQ(c.rank(), rank_of_thread[t]);
    EXPECT_EQ(c.world_size(), 3);
    EXPECT_EQ(c.source(), "MPI");
    const auto addresses = c.spec().training_addresses();
    ASSERT_EQ(addresses.size(), 3u);
    for (const auto& a : addresses) EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;
    if (!agreed) agreed = addresses;
    EXPECT_EQ(addresses, *agreed) << "ranks disagree on the cluster";
  }
  EXPECT_TRUE(w.results[1]->is_chief());
}

TEST(mpi_resolver, a_rank_that_never_comes_is_named_and_nobody_waits_past_the_deadline) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(test::free_ports(1)[0]);
  const auto start = std::chrono::steady_clock::now();
  const auto w = resolve_all({open_mpi(0, 3, 3, rendezvous), open_mpi(1, 3, 3, rendezvous)}, 1500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_NE(w.errors[0].find("MPI rendezvous at " + rendezvous + ": rank(s) 2 did not register within the deadline"),
            std::string::npos)
      << w.errors[0];
  EXPECT_NE(w.errors[1].find("MPI rendezvous at " + rendezvous + ": rank 0 refused: rank(s) 2 did not register"),
            std::string::npos)
      << "the rank that came hears the cause from rank 0: " << w.errors[1];
  EXPECT_EQ(w.kinds[0], "timeout");
  EXPECT_EQ(w.kinds[1], "timeout") << "the rank that came throws the kind of error rank 0 threw";
}

TEST(mpi_resolver, ranks_that_disagree_on_the_world_are_refused_on_both_sides) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(test::free_ports(1)[0]);
  const auto w = resolve_all({open_mpi(0, 2, 2, rendezvous), open_mpi(1, 3, 3, rendezvous)}, 10s);
  EXPECT_NE(w.errors[0].find("rank 1 says the world has 3 ranks, rank 0 says 2"), std::string::npos) << w.errors[0];
  EXPECT_NE(w.errors[1].find("rank 0 refused: rank 1 says the world has 3 ranks, rank 0 says 2"), std::string::npos)
      << w.errors[1];
  EXPECT_EQ(w.kinds[0], "config");
  EXPECT_EQ(w.kinds[1], "config");
}

// A plain TCP connection to 127.0.0.1:`port`, retried for up to 10 s while nobody listens yet; -1 if never.
int connect_to_rendezvous(int port) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

// Rank r's resolution in a thread of its own, into w.results[r] / w.errors[r].
std::thread resolve_in_thread(world& w, int r, int size, const std::string& rendezvous,
                              std::chrono::milliseconds timeout = 20s) {
  return std::thread([&w, r, size, rendezvous, timeout] {
    mpi_resolver_options o;
    o.timeout = timeout;
    try {
      w.results[static_cast<std::size_t>(r)] = mpi_resolver(open_mpi(r, size, size, rendezvous), o).resolve();
    } catch (const std::exception& e) {
      w.errors[static_cast<std::size_t>(r)] = e.what();
      w.kinds[static_cast<std::size_t>(r)] = kind_of(e);
    }
  });
}

TEST(mpi_resolver, a_connection_that_says_nothing_delays_nobody) {
  const int port = test::free_ports(1)[0];
  const std::string rendezvous = "127.0.0.1:" + std::to_string(port);
  world w;
  w.results.resize(3);
  w.errors.resize(3);
  w.kinds.resize(3);
  std::thread rank0 = resolve_in_thread(w, 0, 3, rendezvous);
  const int silent = connect_to_rendezvous(port);  // in before the real ranks, and never says a word
  std::thread rank1 = resolve_in_thread(w, 1, 3, rendezvous);
  std::thread rank2 = resolve_in_thread(w, 2, 3, rendezvous);
  rank0.join();
  rank1.join();
  rank2.join();
  ASSERT_GE(silent, 0) << "the silent connection never got in";
  ::close(silent);
  for (std::size_t r = 0; r < 3; ++r) EXPECT_TRUE(w.results[r]) << "rank " << r << ": " << w.errors[r];
}

TEST(mpi_resolver, a_rank_gone_after_registering_is_named_by_rank_0) {
  const int port = test::free_ports(1)[0];
  const std::string rendezvous = "127.0.0.1:" + std::to_string(port);
  world w;
  w.results.resize(2);
  w.errors.resize(2);
  w.kinds.resize(2);
  std::thread rank0 = resolve_in_thread(w, 0, 3, rendezvous);
  // "Rank 2" registers by hand and hangs up; the real rank 1 comes half a second later.
  // (No ASSERT while rank 0's thread runs: its 20 s deadline ends it either way.)
  const int fd = connect_to_rendezvous(port);
  EXPECT_GE(fd, 0) << "rank 0 never listened";
  const std::string registration = "mwstrat-rendezvous/1 2 3 127.0.0.1:1\n";
  if (fd >= 0) {
    EXPECT_EQ(::send(fd, registration.data(), registration.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(registration.size()));
    ::close(fd);
  }
  std::this_thread::sleep_for(500ms);
  // Rank 0 has given up by now, so rank 1 finds nobody listening: a short deadline of its own.
  std::thread rank1 = resolve_in_thread(w, 1, 3, rendezvous, 2s);
  rank0.join();
  rank1.join();
  EXPECT_FALSE(w.results[0]);
  EXPECT_FALSE(w.results[1]);
  // Seen either while waiting for rank 1 (the usual case) or when the answer could not reach it.
  const bool named = w.errors[0].find("rank 2 closed its connection after registering") != std::string::npos ||
                     w.errors[0].find("rank(s) 2 could not be sent the addresses") != std::string::npos;
  EXPECT_TRUE(named) << w.errors[0];
  EXPECT_EQ(w.kinds[0], "io") << w.errors[0];
}

TEST(mpi_resolver, a_reserved_port_is_held_until_released) {
  const detail::rendezvous_context ctx{"test", 0, 1, std::chrono::steady_clock::now() + 5s};
  std::optional<detail::reserved_port> held = detail::reserve_port(ctx, "127.0.0.1");
  const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(held->port);
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_NE(::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "another socket got the held port";
  EXPECT_EQ(errno, EADDRINUSE);
  ::close(probe);
  held.reset();  // released: the ring can bind it now
  const int ring = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::bind(ring, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ::close(ring);
}

TEST(mpi_resolver, ranks_on_one_host_are_given_different_ports) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(test::free_ports(1)[0]);
  std::vector<environment> envs;
  for (int r = 0; r < 8; ++r) envs.push_back(open_mpi(r, 8, 8, rendezvous));
  const auto w = resolve_all(envs, 20s);
  ASSERT_TRUE(w.results[0]) << w.errors[0];
  const auto addresses = w.results[0]->spec().training_addresses();
  const std::set<std::string> distinct(addresses.begin(), addresses.end());
  EXPECT_EQ(distinct.size(), 8u) << "two ranks were given the same port";
}

}  // namespace mpi_resolver_test
