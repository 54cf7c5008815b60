// The survivors' regroup (elastic training, ring/detail/regroup.hpp): after two workers are lost at once, the others
// agree on one membership and build the smaller ring; a group that is not a majority of the ranks not known dead
// stops (a cut link can leave two sides that each see the other lost: never both go on); a rank the others found
// lost is told it was removed. Ranks are threads on 127.0.0.1; a "dead" rank destroys its ring under an exception, so
// its connections close with no verdict, as a killed process's do.

#include <support/process.hpp>  // free_ports

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace regroup_test {

using namespace mwstrat;
using namespace std::chrono_literals;

std::vector<ring_options> ring_of(int n, const std::string& token = "secret") {
  const auto ports = test::free_ports(static_cast<std::size_t>(n));
  std::vector<ring_options> all;
  for (int r = 0; r < n; ++r) {
    ring_options o;
    for (int p = 0; p < n; ++p) o.addresses.push_back("127.0.0.1:" + std::to_string(ports[static_cast<std::size_t>(p)]));
    o.rank = r;
    o.connect_timeout = 20s;
    o.op_timeout = 20s;
    o.liveness_timeout = 2s;
    o.job_token = token;
    o.cluster_fingerprint = "regroup";
    all.push_back(o);
  }
  return all;
}

// A ring of `n` in which ranks `dying` die right after a first all-reduce; the others find the loss in their next
// all-reduce, agree on who is left, build that ring and all-reduce on it. Each survivor's agreed members, its new
// size and its sum (of ones) come back; a dying rank's are left empty.
struct outcome {
  std::vector<std::vector<int>> members;
  std::vector<int> sizes, sums;
  std::vector<std::string> errors;
};

outcome lose_at_once(int n, const std::vector<int>& dying) {
  const auto options = ring_of(n);
  outcome out;
  out.members.resize(static_cast<std::size_t>(n));
  out.sizes.assign(static_cast<std::size_t>(n), -1);
  out.sums.assign(static_cast<std::size_t>(n), -1);
  out.errors.resize(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      const bool dies = std::find(dying.begin(), dying.end(), r) != dying.end();
      try {
        auto ring = std::make_unique<ring_collective>(options[i]);
        std::vector<float> one{1.0f};
        ring->all_reduce(std::span<float>(one), reduce_op::sum);
        if (dies) {
          try {
            const auto doomed = std::move(ring);
            throw std::runtime_error("dies");  // the ring goes under an exception: it closes with no verdict
          } catch (const std::runtime_error&) {
          }
          return;
        }
        int culprit = -1;
        try {
          for (int k = 0; k < 100; ++k) ring->all_reduce(std::span<float>(one), reduce_op::sum);
          out.errors[i] = "no loss was found";
          return;
        } catch (const peer_lost_error& e) {
          culprit = e.peer_rank();
        }
        out.members[i] = ring->agree_survivors(culprit, 20s);
        std::vector<int> gone;
        for (int k = 0; k < n; ++k)
          if (std::find(out.members[i].begin(), out.members[i].end(), k) == out.members[i].end()) gone.push_back(k);
        auto next = ring->without_ranks(std::span<const int>(gone), 20s);
        ring.reset();  // the smaller ring listens on the same address
        ring_collective smaller(next);
        std::vector<float> ones{1.0f};
        smaller.all_reduce(std::span<float>(ones), reduce_op::sum);
        out.sizes[i] = smaller.size();
        out.sums[i] = static_cast<int>(ones[0]);
      } catch (const std::exception& e) {
        out.errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ring_regroup, two_of_four_lost_at_once_leave_the_other_two_one_ring) {
  // Ranks 1 and 3 are both neighbours of 0 and of 2: no verdict can travel between the survivors, and each may name
  // another culprit. They still agree: ranks 0 and 2, a majority of the two not known dead.
  const auto out = lose_at_once(4, {1, 3});
  for (const int r : {0, 2}) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(out.errors[i], "") << "rank " << r;
    EXPECT_EQ(out.members[i], (std::vector<int>{0, 2})) << "rank " << r;
    EXPECT_EQ(out.sizes[i], 2) << "rank " << r;
    EXPECT_EQ(out.sums[i], 2) << "rank " << r;
  }
}

TEST(ring_regroup, two_neighbours_lost_at_once_leave_the_other_two_one_ring) {
  // Ranks 1 and 2: rank 0 sees 1 die, rank 3 sees 2 die; each learns the other death from the other's hello.
  const auto out = lose_at_once(4, {1, 2});
  for (const int r : {0, 3}) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(out.errors[i], "") << "rank " << r;
    EXPECT_EQ(out.members[i], (std::vector<int>{0, 3})) << "rank " << r;
    EXPECT_EQ(out.sums[i], 2) << "rank " << r;
  }
}

TEST(ring_regroup, the_last_of_three_goes_on_alone_when_both_others_died) {
  const auto out = lose_at_once(3, {0, 1});
  EXPECT_EQ(out.errors[2], "");
  EXPECT_EQ(out.members[2], (std::vector<int>{2}));
  EXPECT_EQ(out.sizes[2], 1);
  EXPECT_EQ(out.sums[2], 1);
}

// The round alone, over a ring's options, with each rank's view given: what a cut link leaves, where nobody is known
// dead and each side names the other.
struct round_result {
  std::vector<int> members;
  std::string error;
  bool removed = false;
};

std::vector<round_result> rounds(const std::vector<ring_options>& options, const std::vector<detail::regroup_view>& views,
                                 const std::vector<int>& taking_part, const std::vector<int>& late = {}) {
  std::vector<round_result> out(options.size());
  std::vector<std::thread> threads;
  for (const int r : taking_part) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      if (std::find(late.begin(), late.end(), r) != late.end()) std::this_thread::sleep_for(300ms);
      try {
        out[i].members = detail::agree_survivors(options[i], views[i], 1s, 10s);
      } catch (const removed_error& e) {
        out[i].removed = true;
        out[i].error = e.what();
      } catch (const std::exception& e) {
        out[i].error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ring_regroup, a_ring_cut_in_half_stops_on_both_sides_rather_than_train_as_two) {
  const auto options = ring_of(4);
  std::vector<detail::regroup_view> views(4);
  views[0].named = views[1].named = {2, 3};
  views[2].named = views[3].named = {0, 1};
  const auto out = rounds(options, views, {0, 1, 2, 3});
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(out[r].members.empty()) << "rank " << r << " went on as part of a half";
    EXPECT_NE(out[r].error.find("not a majority"), std::string::npos) << "rank " << r << ": " << out[r].error;
  }
}

TEST(ring_regroup, of_a_ring_cut_three_to_one_the_three_go_on_and_the_one_stops) {
  const auto options = ring_of(4);
  std::vector<detail::regroup_view> views(4);
  views[0].named = views[1].named = views[2].named = {3};
  views[3].named = {0, 1, 2};
  const auto out = rounds(options, views, {0, 1, 2, 3});
  for (std::size_t r = 0; r < 3; ++r) EXPECT_EQ(out[r].members, (std::vector<int>{0, 1, 2})) << out[r].error;
  EXPECT_TRUE(out[3].members.empty());
  EXPECT_NE(out[3].error.find("ranks 3 of 4 answered"), std::string::npos) << out[3].error;
}

TEST(ring_regroup, a_rank_the_others_found_lost_is_told_it_was_removed) {
  // Rank 1 was stopped: ranks 0 and 2 name it. Woken, it asks rank 0, which says it was removed (rank 2 comes late,
  // so that rank 0 is still gathering when rank 1 asks).
  const auto options = ring_of(3);
  std::vector<detail::regroup_view> views(3);
  views[0].named = views[2].named = {1};
  const auto out = rounds(options, views, {0, 1, 2}, {2});
  EXPECT_EQ(out[0].members, (std::vector<int>{0, 2})) << out[0].error;
  EXPECT_EQ(out[2].members, (std::vector<int>{0, 2})) << out[2].error;
  EXPECT_TRUE(out[1].removed) << out[1].error;
}

TEST(ring_regroup, a_hello_without_the_job_token_is_not_counted) {
  // Rank 1 holds another token: rank 0 does not count it, so rank 0 alone is not a majority of two and stops; rank 1
  // finds no coordinator that answers it within the round.
  auto options = ring_of(2);
  options[1].job_token = "another";
  std::vector<detail::regroup_view> views(2);
  const auto out = rounds(options, views, {0, 1});
  EXPECT_TRUE(out[0].members.empty());
  EXPECT_NE(out[0].error.find("not a majority"), std::string::npos) << out[0].error;
  EXPECT_TRUE(out[1].members.empty());
}

}  // namespace regroup_test
