// The asynchronous all-reduce allocates nothing per operation once warm, on local ranks and on a ring: global
// operator new is replaced in this test executable and counts only while `counting` is set (outside that window
// it is plain malloc, so the rest of the suite is unaffected). OpenSSL's allocations (the sealed frames between hosts)
// go through counting functions of the same kind, installed before main, before OpenSSL allocates anything.

#include "process.hpp"

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <openssl/crypto.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace alloc_test {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace alloc_test

// The replacements are malloc/free pairs by design; GCC, inlining them into new-expressions, takes the free for a
// mismatch (-Wmismatched-new-delete in optimised and sanitizer builds).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
  if (alloc_test::counting.load(std::memory_order_relaxed)) {
    alloc_test::allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace alloc_test {
void* crypto_malloc(std::size_t size, const char*, int) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size);
}
void* crypto_realloc(void* p, std::size_t size, const char*, int) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  return std::realloc(p, size);
}
void crypto_free(void* p, const char*, int) { std::free(p); }
const bool crypto_counted = CRYPTO_set_mem_functions(crypto_malloc, crypto_realloc, crypto_free) == 1;
}  // namespace alloc_test

namespace alloc_test {

using namespace mwstrat;

// Warm-up operations, then a window in which `rounds` rounds of two overlapping asynchronous all-reduces run on
// every rank; ranks meet at barriers on both sides of the window so no rank's warm-up falls into it.
template <class C>
void run_window(C& c, int rounds) {
  std::vector<float> a(10007, static_cast<float>(c.rank() + 1)), b(513, 1.0f);
  const auto round = [&] {
    auto h1 = c.all_reduce_async(std::span<float>(a), reduce_op::mean);
    auto h2 = c.all_reduce_async(std::span<float>(b), reduce_op::sum);
    h1.wait();
    h2.wait();
  };
  for (int i = 0; i < 3; ++i) round();
  c.barrier();
  if (c.rank() == 0) counting = true;
  c.barrier();
  for (int i = 0; i < rounds; ++i) round();
  c.barrier();
  if (c.rank() == 0) counting = false;
  c.barrier();
}

// A ring of two ranks on two threads, each with its options, through run_window's counted rounds; each rank's
// error ("" for none).
std::vector<std::string> run_two_ring_ranks(const std::vector<ring_options>& opts) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        ring_collective ring(opts[static_cast<std::size_t>(r)]);
        run_window(ring, 50);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  counting = false;  // a rank that failed inside the window left it on
  return errors;
}

TEST(async_all_reduce, allocates_nothing_per_operation_on_local_ranks) {
  for (const int n : {2, 3}) {
    allocations = 0;
    spawn_ranks(n, [](local_collective& c) { run_window(c, 50); });
    EXPECT_EQ(allocations.load(), 0) << n << " local ranks";
  }
}

TEST(async_all_reduce, allocates_nothing_per_operation_on_a_two_rank_ring) {
  for (const auto transport : {ring_transport::tcp, ring_transport::automatic}) {
    const auto ports = test::free_ports(2);
    std::vector<ring_options> opts(2);
    for (int r = 0; r < 2; ++r) {
      auto& o = opts[static_cast<std::size_t>(r)];
      for (const int p : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(p));
      o.rank = r;
      o.chunk_bytes = 8192;  // several chunks per operation
      o.transport = transport;
      o.log = [](std::string_view) {};
    }
    allocations = 0;
    EXPECT_EQ(run_two_ring_ranks(opts), (std::vector<std::string>{"", ""}));
    EXPECT_EQ(allocations.load(), 0) << (transport == ring_transport::tcp ? "tcp" : "automatic") << " ring";
  }
}

// Sealed frames between hosts (a token; authenticated, then encrypted; one and two connections per link): the cipher
// contexts are keyed at start-up, a frame only sets its nonce; nothing per operation, OpenSSL's allocations included.
TEST(async_all_reduce, allocates_nothing_per_operation_on_a_sealed_ring_between_hosts) {
  ASSERT_TRUE(crypto_counted) << "OpenSSL allocated before main: its allocations would not be counted";
  for (const bool encrypt : {false, true})
    for (const int streams : {1, 2}) {
      const auto ports = test::free_ports(2);
      std::vector<ring_options> opts(2);
      for (int r = 0; r < 2; ++r) {
        auto& o = opts[static_cast<std::size_t>(r)];
        for (const int p : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(p));
        o.rank = r;
        o.chunk_bytes = 8192;
        o.host_identity = r == 0 ? "host-a" : "host-b";
        o.job_token = "alloc-token";
        o.encrypt = encrypt;
        o.streams_per_peer = streams;
        o.log = [](std::string_view) {};
      }
      allocations = 0;
      EXPECT_EQ(run_two_ring_ranks(opts), (std::vector<std::string>{"", ""}));
      EXPECT_EQ(allocations.load(), 0) << (encrypt ? "encrypted" : "authenticated") << ", " << streams << " streams";
    }
}

// The hierarchical all-reduce (two "hosts" of two ranks, by host identity), plain and with bf16 on the wire
// between hosts: its three rings and the narrowed chunks are all set up at start, nothing per operation.
TEST(async_all_reduce, allocates_nothing_per_operation_on_a_hierarchical_ring) {
  for (const auto compression : {wire_compression::none, wire_compression::bf16}) {
    const auto ports = test::free_ports(4);
    std::vector<ring_options> opts(4);
    for (int r = 0; r < 4; ++r) {
      auto& o = opts[static_cast<std::size_t>(r)];
      for (const int p : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(p));
      o.rank = r;
      o.chunk_bytes = 8192;
      o.host_identity = r < 2 ? "host-a" : "host-b";
      o.topology = ring_topology::hierarchical;
      o.compression = compression;
      o.log = [](std::string_view) {};
    }
    allocations = 0;
    std::vector<std::thread> threads;
    std::vector<std::string> errors(4);
    std::vector<int> hierarchical(4, 0);
    for (int r = 0; r < 4; ++r)
      threads.emplace_back([&, r] {
        try {
          ring_collective ring(opts[static_cast<std::size_t>(r)]);
          hierarchical[static_cast<std::size_t>(r)] = ring.hierarchical() ? 1 : 0;
          run_window(ring, 30);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    counting = false;
    EXPECT_EQ(errors, (std::vector<std::string>(4)));
    EXPECT_EQ(hierarchical, (std::vector<int>(4, 1)));
    EXPECT_EQ(allocations.load(), 0) << (compression == wire_compression::none ? "fp32" : "bf16") << " hierarchical ring";
  }
}

}  // namespace alloc_test
