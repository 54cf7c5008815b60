// host_arena: one parameter copy and every rank's gradients in one shared region, for ring ranks on one host.
// Ranks are threads here (each its own ring_collective, its own sockets and its own mapping of the region) and
// real processes where a rank is killed.

#include "process.hpp"

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace host_arena_test {

using namespace mwstrat;
using namespace std::chrono_literals;

std::vector<ring_options> ring_of(int n, ring_transport transport) {
  const auto ports = test::free_ports(n);
  std::vector<ring_options> v(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& o = v[static_cast<std::size_t>(r)];
    for (int p : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(p));
    o.rank = r;
    o.connect_timeout = 10s;
    o.op_timeout = 10s;
    o.job_token = "";
    o.cluster_fingerprint = "arena";
    o.chunk_bytes = 4096;
    o.transport = transport;
  }
  return v;
}

// Gradients whose sums depend on the order of addition, different on every rank.
float gradient(std::size_t i, std::size_t r) {
  return 1.0f / static_cast<float>(i + 1 + 1000 * r) + 1e-3f * static_cast<float>(r) - 0.37f * static_cast<float>(i % 3);
}
float initial_parameter(std::size_t i) { return static_cast<float>(i % 11) * 0.25f - 1.0f; }

// Every rank ends with the parameters that the ring's all-reduce (mean) and a full update give, bit for bit; each
// element is updated once, by the rank that owns its segment; the arena's name is gone.
void expect_arena_matches_ring_all_reduce(int n, std::size_t count) {
  auto opts = ring_of(n, ring_transport::automatic);
  std::vector<std::vector<float>> via_arena(static_cast<std::size_t>(n)), via_ring(via_arena.size());
  std::vector<std::vector<int>> updated(via_arena.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const auto me = static_cast<std::size_t>(r);
      ring_collective ring(opts[me]);
      std::string why;
      auto arena = host_arena::open(ring, count, &why);
      ASSERT_TRUE(arena) << "rank " << r << ": " << why;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena->parameters().data()) % 64, 0u);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena->gradients().data()) % 64, 0u);
      if (r == 0)
        for (std::size_t i = 0; i < count; ++i) arena->parameters()[i] = initial_parameter(i);
      for (std::size_t i = 0; i < count; ++i) arena->gradients()[i] = gradient(i, me);
      // The reference: the same gradients through the ring's all-reduce, then everything updated.
      std::vector<float> g(count), p(count);
      for (std::size_t i = 0; i < count; ++i) g[i] = gradient(i, me), p[i] = initial_parameter(i);
      ring.all_reduce(std::span<float>(g), reduce_op::mean);
      for (std::size_t i = 0; i < count; ++i) p[i] -= 0.1f * g[i];
      via_ring[me] = p;

      ring.barrier();  // rank 0's initial parameters are in
      std::vector<int> touched(count, 0);
      const auto params = arena->parameters();
      const auto grads = arena->gradients();
      arena->mean_and_update([&](std::size_t first, std::size_t len) {
        for (std::size_t i = first; i < first + len; ++i) {
          params[i] -= 0.1f * grads[i];
          ++touched[i];
        }
      });
      via_arena[me].assign(params.begin(), params.end());
      updated[me] = touched;
    });
  for (auto& t : threads) t.join();
  for (std::size_t r = 0; r < via_arena.size(); ++r) {
    EXPECT_EQ(via_arena[r], via_ring[r]) << n << " ranks, rank " << r;
    const std::size_t first = r * count / static_cast<std::size_t>(n), last = (r + 1) * count / static_cast<std::size_t>(n);
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(updated[r][i], i >= first && i < last ? 1 : 0) << "element " << i << " on rank " << r;
  }
  EXPECT_EQ(test::shm_leftovers({::getpid()}), std::vector<std::string>{});
}

TEST(host_arena, two_ranks_give_the_ring_all_reduce_bits_and_update_each_element_once) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  expect_arena_matches_ring_all_reduce(2, 100003);
}

TEST(host_arena, three_and_four_ranks_give_the_ring_all_reduce_bits) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  expect_arena_matches_ring_all_reduce(3, 50001);
  expect_arena_matches_ring_all_reduce(4, 7);
  expect_arena_matches_ring_all_reduce(3, 0);
}

TEST(host_arena, several_steps_keep_every_rank_on_the_one_copy) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  auto opts = ring_of(2, ring_transport::automatic);
  std::vector<std::vector<float>> seen(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ring_collective ring(opts[static_cast<std::size_t>(r)]);
      auto arena = host_arena::open(ring, 1000);
      ASSERT_TRUE(arena);
      const auto params = arena->parameters();
      const auto grads = arena->gradients();
      for (int step = 0; step < 20; ++step) {
        for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(r + 1);  // mean 1.5
        arena->mean_and_update([&](std::size_t first, std::size_t len) {
          for (std::size_t i = first; i < first + len; ++i) params[i] -= grads[i];
        });
      }
      seen[static_cast<std::size_t>(r)].assign(params.begin(), params.end());
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen[0], std::vector<float>(1000, -30.0f));
  EXPECT_EQ(seen[1], seen[0]);
}

TEST(host_arena, is_refused_on_every_rank_when_payloads_go_over_tcp_or_there_is_one_rank) {
  auto opts = ring_of(2, ring_transport::tcp);
  std::vector<std::string> why(2);
  std::vector<int> opened(2, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ring_collective ring(opts[static_cast<std::size_t>(r)]);
      opened[static_cast<std::size_t>(r)] = host_arena::open(ring, 10, &why[static_cast<std::size_t>(r)]) ? 1 : 0;
      ring.barrier();  // the ring is still usable afterwards
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(opened, (std::vector<int>{0, 0}));
  EXPECT_NE(why[0].find("not every rank's links use shared memory"), std::string::npos) << why[0];

  auto solo = ring_of(1, ring_transport::automatic);
  ring_collective one(solo[0]);
  std::string reason;
  EXPECT_FALSE(host_arena::open(one, 10, &reason));
  EXPECT_NE(reason.find("one rank"), std::string::npos) << reason;
}

TEST(host_arena, a_rank_that_leaves_instead_of_stepping_is_a_peer_lost_error_naming_it) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  auto opts = ring_of(2, ring_transport::automatic);
  std::vector<std::thread> threads;
  int lost = -2;
  threads.emplace_back([&] {
    ring_collective ring(opts[0]);
    auto arena = host_arena::open(ring, 100);
    ASSERT_TRUE(arena);
    try {
      arena->mean_and_update([](std::size_t, std::size_t) {});
    } catch (const peer_lost_error& e) {
      lost = e.peer_rank();
    }
  });
  threads.emplace_back([&] {
    ring_collective ring(opts[1]);
    auto arena = host_arena::open(ring, 100);
    ASSERT_TRUE(arena);
    // Leaves: its sockets close with the ring.
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(lost, 1);
}

// A process killed between steps: every other rank's barrier reports it (not a hang, not a timeout), and no
// /dev/shm object of the job is left behind.
TEST(host_arena, sigkill_of_one_process_mid_training_gives_every_other_rank_peer_lost_and_leaves_no_shm) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  test::ring_run ring(3, "arena_loop", {"timeout_ms=60000"});
  ASSERT_TRUE(test::wait_for_output(ring.workers[1], "ready", 30s)) << ring.report();
  for (auto& w : ring.workers) EXPECT_NE(w.stdout_text().find("arena=yes"), std::string::npos) << ring.report();
  std::this_thread::sleep_for(20ms);
  ::kill(ring.workers[1].pid, SIGKILL);
  // The deadline is 60 s: finishing well inside 30 s means the failure was detected, not timed out.
  ASSERT_TRUE(ring.wait_all(30s)) << ring.report();
  for (int r : {0, 2}) {
    const auto& w = ring.workers[static_cast<std::size_t>(r)];
    EXPECT_EQ(w.exit_code, 3) << ring.report();
    EXPECT_NE(w.stdout_text().find("ERROR peer_lost 1"), std::string::npos) << ring.report();
  }
  EXPECT_EQ(test::shm_leftovers(ring.pids()), std::vector<std::string>{});
}

}  // namespace host_arena_test
