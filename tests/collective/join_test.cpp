// Growing a ring (elastic training): a worker started later asks the chief's join desk to be taken in, the members
// build the next ring with it, and it joins that ring; a joiner that cannot prove the job token is refused with the
// reason, and one that nobody admits times out naming what it tried. Ranks are threads on 127.0.0.1.

#include <support/process.hpp>  // free_ports

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace join_test {

using namespace mwstrat;
using namespace std::chrono_literals;

struct job {
  std::vector<ring_options> members;  // a ring of two, rank 0 hearing joiners
  ring_options joiner;                // a third worker, started later
};

job two_and_a_joiner(const std::string& token, const std::string& joiner_token) {
  const auto ports = test::free_ports(4);
  const auto at = [&](std::size_t i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  job j;
  for (int r = 0; r < 2; ++r) {
    ring_options o;
    o.addresses = {at(0), at(1)};
    o.rank = r;
    o.connect_timeout = 20s;
    o.op_timeout = 20s;
    o.job_token = token;
    o.cluster_fingerprint = "c";
    o.join_listen = at(3);  // every member has it; only the chief listens there
    j.members.push_back(o);
  }
  j.joiner.addresses = {at(0), at(1), at(2)};  // its own slot of the job, as a launcher would describe it
  j.joiner.rank = 2;
  j.joiner.connect_timeout = 20s;
  j.joiner.op_timeout = 20s;
  j.joiner.job_token = joiner_token;
  j.joiner.cluster_fingerprint = "another spec";  // the admission gives it the job's
  j.joiner.join_via = {at(3)};
  return j;
}

// Waits (bounded) until the chief's desk has heard `n` joiners; false if it has not within 15 s.
bool await_pending(ring_collective& chief, int n) {
  for (int i = 0; i < 300 && chief.pending_joiners() < n; ++i) std::this_thread::sleep_for(50ms);
  return chief.pending_joiners() >= n;
}

TEST(ring_join, a_joiner_is_admitted_into_the_next_ring_behind_the_members) {
  const job j = two_and_a_joiner("secret", "secret");
  std::vector<std::string> errors(3);
  std::vector<int> sums(3, -1), ranks(3, -1), sizes(3, -1);
  std::vector<std::uint64_t> generations(3, 0);
  std::vector<int> joined(3, -1);  // not vector<bool>: its bits share bytes, and each thread writes its own
  std::vector<detail::join_request> heard;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto ring = std::make_unique<ring_collective>(j.members[static_cast<std::size_t>(r)]);
        joined[static_cast<std::size_t>(r)] = ring->joined() ? 1 : 0;
        if (r == 0) {
          EXPECT_TRUE(await_pending(*ring, 1)) << "the desk never heard the joiner";
          heard = ring->take_joiners(2);  // only one is there: only one is taken
        }
        const std::vector<std::string> added{j.joiner.addresses[2]};
        const ring_options grown = ring->with_ranks(added, 20s);
        if (r == 0) ring->admit_joiners(grown);
        ring.reset();
        ring = std::make_unique<ring_collective>(grown);
        std::array<std::int32_t, 1> v{ring->rank() + 1};
        ring->all_reduce(std::span<std::int32_t>(v), reduce_op::sum);
        sums[static_cast<std::size_t>(r)] = v[0];
        ranks[static_cast<std::size_t>(r)] = ring->rank();
        sizes[static_cast<std::size_t>(r)] = ring->size();
        generations[static_cast<std::size_t>(r)] = ring->generation();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  threads.emplace_back([&] {
    try {
      std::this_thread::sleep_for(200ms);  // after the job started: it asks the chief, not the job's start-up
      ring_collective ring(j.joiner);
      joined[2] = ring.joined() ? 1 : 0;
      std::array<std::int32_t, 1> v{ring.rank() + 1};
      ring.all_reduce(std::span<std::int32_t>(v), reduce_op::sum);
      sums[2] = v[0];
      ranks[2] = ring.rank();
      sizes[2] = ring.size();
      generations[2] = ring.generation();
    } catch (const std::exception& e) {
      errors[2] = e.what();
    }
  });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].address, j.joiner.addresses[2]);
  EXPECT_EQ(heard[0].worker, 2);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks[static_cast<std::size_t>(r)], r) << "the members keep their ranks; the joiner comes after them";
    EXPECT_EQ(sizes[static_cast<std::size_t>(r)], 3);
    EXPECT_EQ(sums[static_cast<std::size_t>(r)], 6);
    EXPECT_EQ(generations[static_cast<std::size_t>(r)], 1u);
    EXPECT_EQ(joined[static_cast<std::size_t>(r)], r == 2 ? 1 : 0);
  }
}

// Waits for a refusal: the chief's desk must say why, and nothing is pending afterwards.
void expect_refused(const std::string& token, const std::string& joiner_token, const std::string& reason) {
  const job j = two_and_a_joiner(token, joiner_token);
  std::string refusal;
  std::vector<std::string> errors(2);
  int pending_after = -1;
  std::vector<std::thread> threads;
  std::atomic<bool> joiner_done{false};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        ring_collective ring(j.members[static_cast<std::size_t>(r)]);
        for (int i = 0; i < 300 && !joiner_done; ++i) std::this_thread::sleep_for(50ms);
        if (r == 0) pending_after = ring.pending_joiners();
        ring.barrier();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  threads.emplace_back([&] {
    try {
      std::this_thread::sleep_for(200ms);
      ring_collective ring(j.joiner);
      refusal = "admitted";
    } catch (const config_error& e) {
      refusal = e.what();
    } catch (const std::exception& e) {
      refusal = std::string("another error: ") + e.what();
    }
    joiner_done = true;
  });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "") << "the members go on";
  EXPECT_NE(refusal.find("refused this worker"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find(reason), std::string::npos) << refusal;
  EXPECT_EQ(pending_after, 0);
}

TEST(ring_join, a_joiner_with_another_job_token_is_refused_with_the_reason) {
  expect_refused("secret", "guess", "does not verify");
}

TEST(ring_join, a_joiner_without_the_jobs_token_is_refused_and_one_with_a_token_a_tokenless_job_refuses) {
  expect_refused("secret", "", "holds no job token");
  expect_refused("", "secret", "this job has none");
}

TEST(ring_join, a_joiner_nobody_admits_times_out_naming_the_join_addresses_it_tried) {
  job j = two_and_a_joiner("", "");
  j.joiner.connect_timeout = 600ms;  // no job runs: nothing listens at the join address
  const auto began = std::chrono::steady_clock::now();
  try {
    ring_collective ring(j.joiner);
    FAIL() << "joined a job that does not run";
  } catch (const timeout_error& e) {
    EXPECT_NE(std::string(e.what()).find("no chief admitted this worker"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(j.joiner.join_via[0]), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s);
}

TEST(ring_join, with_ranks_refuses_an_address_that_is_already_a_ranks_and_an_empty_list) {
  auto opts = two_and_a_joiner("", "").members;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        ring_collective ring(opts[static_cast<std::size_t>(r)]);
        const std::vector<std::string> taken{opts[0].addresses[1]};
        EXPECT_THROW((void)ring.with_ranks(taken, 1s), config_error);
        EXPECT_THROW((void)ring.with_ranks(std::span<const std::string>(), 1s), config_error);
        const std::vector<std::string> fresh{"127.0.0.1:1"};
        const ring_options grown = ring.with_ranks(fresh, 1s);
        EXPECT_EQ(grown.cluster_fingerprint, "c|members " + opts[0].addresses[0] + " " + opts[0].addresses[1] +
                                                 " 127.0.0.1:1");
        EXPECT_EQ(grown.rank, r);
        ring.barrier();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace join_test
