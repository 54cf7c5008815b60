// The ring's topology finder (detail/topology.hpp) and the line rank 0 writes about it (detail/log.hpp): pure
// functions of the gathered host digests, without sockets.
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/topology.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace topology_test {

using namespace mwstrat;
using namespace mwstrat::detail;

// Four words per rank; ranks with the same `host` share a digest.
std::vector<std::int64_t> digests_of(const std::vector<int>& host_of_rank) {
  std::vector<std::int64_t> d;
  for (int h : host_of_rank)
    for (std::int64_t w = 0; w < 4; ++w) d.push_back(1000 * (h + 1) + w);
  return d;
}

std::vector<address> addresses(const std::vector<std::string>& hosts) {
  std::vector<address> v;
  for (std::size_t r = 0; r < hosts.size(); ++r) v.push_back(address{hosts[r], static_cast<std::uint16_t>(7000 + r)});
  return v;
}

TEST(ring_topology_finder, hosts_are_numbered_in_the_order_of_their_first_rank) {
  const auto l = find_hosts(digests_of({5, 2, 5, 2, 9}));
  EXPECT_EQ(l.hosts(), 3);
  EXPECT_EQ(l.host_of, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(l.members, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4}}));
  EXPECT_EQ(l.mates(3), (std::vector<int>{1, 3}));
  EXPECT_FALSE(l.even(0));
  EXPECT_FALSE(l.hierarchical(0, ring_topology::hierarchical));  // unequal hosts keep the flat ring
}

TEST(ring_topology_finder, only_equal_hosts_of_two_or_more_ranks_go_hierarchical_and_only_when_asked) {
  const auto two_by_two = find_hosts(digests_of({0, 0, 1, 1}));
  EXPECT_TRUE(two_by_two.even(2));
  EXPECT_TRUE(two_by_two.hierarchical(2, ring_topology::hierarchical));
  EXPECT_FALSE(two_by_two.hierarchical(2, ring_topology::flat));
  const auto one_each = find_hosts(digests_of({0, 1, 2}));
  EXPECT_TRUE(one_each.even(1));
  EXPECT_FALSE(one_each.hierarchical(1, ring_topology::hierarchical));
  const auto one_host = find_hosts(digests_of({3, 3, 3}));
  EXPECT_EQ(one_host.hosts(), 1);
  EXPECT_FALSE(one_host.hierarchical(0, ring_topology::hierarchical));
  EXPECT_EQ(find_hosts({}).hosts(), 0);
}

TEST(ring_log_writer, the_hosts_line_says_where_the_ranks_are_and_how_the_hosts_are_joined) {
  const auto l = find_hosts(digests_of({0, 0, 1, 1}));
  const std::vector<std::int64_t> shm{1, 1, 1, 0};
  ring_options o;
  EXPECT_EQ(hosts_line(l, addresses({"10.9.0.1", "10.9.0.1", "10.9.0.2", "10.9.0.2"}), shm,
                       "tcp ring between hosts (each host's ranks carry a part)", o, false),
            "4 workers on 2 hosts (10.9.0.1: ranks 0,1 shared memory; 10.9.0.2: ranks 2,3 tcp); tcp ring between "
            "hosts (each host's ranks carry a part)");
  o.compression = wire_compression::bf16;
  o.streams_per_peer = 2;
  EXPECT_EQ(hosts_line(l, addresses({"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"}), shm, "x", o, true),
            "4 workers on 2 hosts (127.0.0.1 #0: ranks 0,1 shared memory; 127.0.0.1 #1: ranks 2,3 tcp); x, bf16 on "
            "the wire, 2 tcp streams per link between hosts");
  EXPECT_EQ(hosts_line(l, addresses({"a", "a", "b", "b"}), shm, "", o, false),
            "4 workers on 2 hosts (a: ranks 0,1 shared memory; b: ranks 2,3 tcp), compression off (a flat ring "
            "through ranks of one host), 2 tcp streams per link between hosts");
  // With a job token the frames between hosts are sealed, and the line says how; on one host nothing is.
  ring_options sealed;
  sealed.job_token = "t";
  EXPECT_EQ(hosts_line(l, addresses({"a", "a", "b", "b"}), shm, "x", sealed, true),
            "4 workers on 2 hosts (a: ranks 0,1 shared memory; b: ranks 2,3 tcp); x; frames between hosts "
            "authenticated (AES-256-GCM tag)");
  sealed.encrypt = true;
  EXPECT_EQ(hosts_line(l, addresses({"a", "a", "b", "b"}), shm, "x", sealed, true),
            "4 workers on 2 hosts (a: ranks 0,1 shared memory; b: ranks 2,3 tcp); x; frames between hosts encrypted "
            "(AES-256-GCM)");
  const auto one = find_hosts(digests_of({0, 0}));
  EXPECT_EQ(hosts_line(one, addresses({"a", "a"}), std::vector<std::int64_t>{1, 1}, "", sealed, true),
            "2 workers on 1 host (a: ranks 0,1 shared memory)");
}

}  // namespace topology_test
