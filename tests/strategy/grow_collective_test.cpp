// mirrored_strategy::grow_collective (elastic training): two members, threads on 127.0.0.1, take a joiner in — and
// when the joiner is admitted but never builds the ring (it died after its admission), the members give the larger
// ring up and go on among themselves in the next generation instead of failing.

#include <support/process.hpp>  // free_ports

#include <mwstrat/collective.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace grow_collective_test {

using namespace mwstrat;
using namespace std::chrono_literals;
using ring_strategy = mirrored_strategy<std::unique_ptr<ring_collective>>;

struct outcome {
  std::string error;
  std::vector<int> joined;  // what grow_collective returned
  int size = 0;
  std::uint64_t generation = 0;
  std::int32_t sum = 0;  // of rank + 1 over the ring after the grow
};

// Two members; `joiner` runs in a thread of its own, given its ring options (a third worker's slot asking the
// chief's join desk). Each member waits (bounded) for the joiner, grows and all-reduces once.
std::vector<outcome> grow_two(const std::function<void(ring_options)>& joiner) {
  const auto ports = test::free_ports(4);
  const auto at = [&](std::size_t i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  std::vector<outcome> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto& me = out[static_cast<std::size_t>(r)];
      try {
        ring_options o;
        o.addresses = {at(0), at(1)};
        o.rank = r;
        o.connect_timeout = 20s;
        o.op_timeout = 20s;
        o.cluster_fingerprint = "c";
        o.join_listen = at(3);
        ring_strategy s(std::make_unique<ring_collective>(o));
        const int due = s.await_joiners(15s);  // the chief waits for the joiner; both learn the count
        if (due != 1) throw std::runtime_error("expected one joiner, the chief's desk has " + std::to_string(due));
        me.joined = s.grow_collective(due, 3s);
        me.size = s.num_replicas_in_sync();
        me.generation = s.collective_generation();
        std::array<std::int32_t, 1> v{s.replica_id() + 1};
        s.collective().all_reduce(std::span<std::int32_t>(v), reduce_op::sum);
        me.sum = v[0];
      } catch (const std::exception& e) {
        me.error = e.what();
      }
    });
  }
  ring_options j;
  j.addresses = {at(0), at(1), at(2)};
  j.rank = 2;
  j.connect_timeout = 20s;
  j.op_timeout = 20s;
  j.join_via = {at(3)};
  threads.emplace_back([&] { joiner(j); });
  for (auto& t : threads) t.join();
  return out;
}

TEST(grow_collective, the_members_take_a_joiner_in_behind_them) {
  std::string joiner_error;
  const auto out = grow_two([&](ring_options j) {
    try {
      ring_collective ring(std::move(j));
      std::array<std::int32_t, 1> v{ring.rank() + 1};
      ring.all_reduce(std::span<std::int32_t>(v), reduce_op::sum);
    } catch (const std::exception& e) {
      joiner_error = e.what();
    }
  });
  EXPECT_EQ(joiner_error, "");
  for (const auto& o : out) {
    ASSERT_EQ(o.error, "");
    EXPECT_EQ(o.joined, std::vector<int>{2}) << "the joiner's worker index";
    EXPECT_EQ(o.size, 3);
    EXPECT_EQ(o.generation, 1u);
    EXPECT_EQ(o.sum, 6);
  }
}

TEST(grow_collective, a_joiner_that_never_builds_the_ring_is_given_up_and_the_members_go_on) {
  const auto began = std::chrono::steady_clock::now();
  const auto out = grow_two([](ring_options j) {
    // Admitted, then gone before the ring starts (as a process killed right after its admission).
    (void)detail::join_job(std::move(j));
  });
  for (const auto& o : out) {
    ASSERT_EQ(o.error, "");
    EXPECT_TRUE(o.joined.empty()) << "nobody joined";
    EXPECT_EQ(o.size, 2);
    EXPECT_EQ(o.generation, 2u) << "the larger ring was generation 1; the members' own is the next";
    EXPECT_EQ(o.sum, 3);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - began, 15s) << "bounded by the 3 s start-up of the larger ring";
}

}  // namespace grow_collective_test
