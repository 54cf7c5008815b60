// The ring's start-up (collective/ring/detail/startup.hpp) alone, without the data path: two ranks as threads in
// this process, on 127.0.0.1. What it decides for each link: payloads through shared memory only when both ends
// want it and share a host, one extra data connection per stream only between hosts, a liveness connection beside
// every link; and a handshake whose fingerprints differ fails on both ends with the reason.
#include <mwstrat/collective/ring/detail/startup.hpp>

#include "process.hpp"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace startup_test {

using namespace mwstrat::detail;
using namespace std::chrono_literals;

struct rank_end {
  digest host{};
  std::string model = "model";
  bool want_shm = true;
  unsigned streams = 1;
};

struct started {
  std::optional<ring_links> links;
  std::string error;
};

// Runs start-up for ranks 0 and 1 at once, each in its own thread, and returns what each got.
std::array<started, 2> start_two(const std::array<rank_end, 2>& ends) {
  const auto ports = mwstrat::test::free_ports(2);
  const std::vector<std::string> addresses = {"127.0.0.1:" + std::to_string(ports[0]),
                                              "127.0.0.1:" + std::to_string(ports[1])};
  std::array<started, 2> out;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      const rank_end& end = ends[static_cast<std::size_t>(r)];
      mwstrat::ring_options options;
      options.addresses = addresses;
      options.rank = r;
      options.connect_timeout = 5s;  // bounds every wait below
      options.log = [](std::string_view) {};
      ring_identity id;
      id.rank = r;
      id.world = 2;
      for (const auto& a : addresses) id.hosts.push_back(parse_address_nothrow(a).value);
      id.chunk_bytes = 64 << 10;
      id.want_shm = end.want_shm;
      id.host = end.host;
      id.cluster = sha256("cluster");
      id.model = sha256(end.model);
      id.streams = end.streams;
      try {
        out[static_cast<std::size_t>(r)].links = ring_startup(options, id).run();
      } catch (const std::exception& e) {
        out[static_cast<std::size_t>(r)].error = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return out;
}

TEST(ring_startup, ranks_on_one_host_that_want_shared_memory_carry_payloads_through_it_both_ways) {
  const digest host = sha256("host a");
  const auto got = start_two({rank_end{host}, rank_end{host}});
  for (const started& s : got) {
    ASSERT_TRUE(s.links.has_value()) << s.error;
    EXPECT_TRUE(s.links->out.through_shm());
    EXPECT_TRUE(s.links->in.through_shm());
    EXPECT_TRUE(s.links->out.socket && s.links->in.socket);  // headers and credits still go over TCP
    EXPECT_TRUE(s.links->liveness_out && s.links->liveness_in);
  }
}

TEST(ring_startup, one_end_that_does_not_want_shared_memory_keeps_the_link_on_tcp) {
  const digest host = sha256("host a");
  rank_end no_shm{host};
  no_shm.want_shm = false;
  const auto got = start_two({rank_end{host}, no_shm});
  for (const started& s : got) {
    ASSERT_TRUE(s.links.has_value()) << s.error;
    EXPECT_FALSE(s.links->out.through_shm());
    EXPECT_FALSE(s.links->in.through_shm());
  }
}

TEST(ring_startup, extra_data_connections_per_stream_only_between_hosts) {
  for (const bool same_host : {true, false}) {
    SCOPED_TRACE(same_host ? "one host" : "two hosts");
    rank_end a{sha256("host a")}, b{sha256(same_host ? "host a" : "host b")};
    a.streams = b.streams = 3;
    const auto got = start_two({a, b});
    for (const started& s : got) {
      ASSERT_TRUE(s.links.has_value()) << s.error;
      const std::size_t extra = same_host ? 0 : 2;
      EXPECT_EQ(s.links->more_out.size(), extra);
      EXPECT_EQ(s.links->more_in.size(), extra);
      for (const auto& link : s.links->more_out) EXPECT_TRUE(link.socket);
      for (const auto& link : s.links->more_in) EXPECT_TRUE(link.socket);
      EXPECT_EQ(s.links->out.through_shm(), same_host);
    }
  }
}

TEST(ring_startup, different_model_fingerprints_fail_on_both_ends_naming_the_reason) {
  rank_end other{sha256("host a")};
  other.model = "another model";
  const auto started_at = std::chrono::steady_clock::now();
  const auto got = start_two({rank_end{sha256("host a")}, other});
  for (const started& s : got) {
    EXPECT_FALSE(s.links.has_value());
    EXPECT_NE(s.error.find("model fingerprint differs"), std::string::npos) << s.error;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started_at, 5s);  // a refusal, not the start-up deadline
}

}  // namespace startup_test
