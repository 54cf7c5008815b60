// detail::ring_builder alone: what it returns for each layout — the job's flat ring only, or the job's flat ring and
// a hierarchical ring of two flat rings whose rank maps name the job's ranks. Ranks are threads on loopback; hosts
// are told apart by ring_options::host_identity.
#include <mwstrat/collective/ring/detail/builder.hpp>

#include <support/process.hpp>
#include <support/ring_threads.hpp>

#include <gtest/gtest.h>

#include <barrier>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace builder_test {

using namespace mwstrat;

// Builds `n` ranks at once; `check(rank, built)` runs on each once every rank is built; then each says goodbye (as
// ring_collective's destructor does) before its rings go. Rethrows the first rank's exception.
void build_ranks(int n, const std::function<void(ring_options&)>& configure,
                 const std::function<void(int, detail::built_ring&)>& check) {
  const auto ports = test::free_ports(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::barrier built(n), checked(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::optional<detail::built_ring> b;
      try {
        ring_options o = test::loopback_ring_options(ports, r);
        configure(o);
        b.emplace(detail::ring_builder::build(o));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      built.arrive_and_wait();  // nobody leaves while another still builds
      try {
        if (b) check(r, *b);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      checked.arrive_and_wait();
      if (b && b->liveness) b->liveness->stop(true);
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

TEST(ring_builder, a_world_of_one_is_a_flat_ring_with_no_liveness_and_says_so) {
  std::vector<std::string> lines;
  ring_options o;
  o.addresses = {"127.0.0.1:0"};
  o.log = [&](std::string_view line) { lines.emplace_back(line); };
  auto b = detail::ring_builder::build(o);
  EXPECT_EQ(b.job.size(), 1);
  EXPECT_EQ(b.liveness, nullptr);
  EXPECT_EQ(b.hierarchy, nullptr);
  EXPECT_EQ(b.hosts, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "[mwstrat.ring] rank 0: started: tcp://127.0.0.1:0, waiting for 1 worker (itself)");
}

TEST(ring_builder, two_hosts_of_two_ranks_get_a_hierarchical_ring_of_two_flat_rings_naming_the_jobs_ranks) {
  build_ranks(
      4, [](ring_options& o) { o.host_identity = o.rank < 2 ? "host a" : "host b"; },
      [](int r, detail::built_ring& b) {
        EXPECT_EQ(b.job.size(), 4);
        EXPECT_EQ(b.hosts, 2);
        EXPECT_NE(b.liveness, nullptr);
        ASSERT_NE(b.hierarchy, nullptr);
        const auto& host = b.hierarchy->host();
        const auto& between = b.hierarchy->between();
        EXPECT_EQ(host.size(), 2);
        EXPECT_EQ(host.rank(), r % 2);
        EXPECT_TRUE(host.ranks().inner());
        EXPECT_EQ(host.ranks().job_rank(1), r < 2 ? 1 : 3);
        EXPECT_EQ(between.size(), 2);
        EXPECT_EQ(between.rank(), r / 2);
        EXPECT_EQ(between.ranks().job_rank(1), 2 + r % 2);
        EXPECT_EQ(between.ranks().job_address(2 + r % 2), b.job.ranks().address(2 + r % 2));
        EXPECT_EQ(host.monitor(), b.liveness.get());  // the job's liveness watches the rings inside
        EXPECT_EQ(between.monitor(), b.liveness.get());
      });
}

TEST(ring_builder, a_flat_topology_or_unequal_hosts_keep_the_one_flat_ring) {
  const auto flat_only = [](int, detail::built_ring& b) {
    EXPECT_EQ(b.hosts, 2);
    EXPECT_EQ(b.hierarchy, nullptr);
  };
  build_ranks(
      4,
      [](ring_options& o) {
        o.host_identity = o.rank < 2 ? "host a" : "host b";
        o.topology = ring_topology::flat;
      },
      flat_only);
  build_ranks(3, [](ring_options& o) { o.host_identity = o.rank < 2 ? "host a" : "host b"; }, flat_only);
}

}  // namespace builder_test
