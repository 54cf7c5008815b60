// The survivors' regroup (elastic training, ring/detail/regroup.hpp): after two workers are lost at once, the others
// agree on one membership and build the smaller ring; a group that is not a majority of the ranks not known dead
// stops (a cut link can leave two sides that each see the other lost: never both go on); a rank the others found
// lost is told it was removed. Losses are of real processes on 127.0.0.1 (main.cpp's ring workers), killed; the
// round alone runs in threads, each rank given the view a loss would have left it.

#include "process.hpp"  // ring_run, free_ports

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace regroup_test {

using namespace mwstrat;
using namespace std::chrono_literals;

std::vector<ring_options> ring_of(int n, const std::string& token = "secret") {
  const auto ports = test::free_ports(n);
  std::vector<ring_options> all;
  for (int r = 0; r < n; ++r) {
    ring_options o;
    for (const auto port : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(port));
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

// A ring of `n` worker processes (main.cpp's "regroup" scenario) in which ranks `dying` are lost at once: stopped
// first, then killed together, so that none of them can pass a verdict on before it dies (as when a host goes). The
// others find the loss, agree on who is left, build that ring and all-reduce a one on it. Each survivor's agreed
// members, its new size and its sum come back; a dying rank's are left empty, and so are those of a survivor that
// failed (its error line then).
struct outcome {
  std::vector<std::vector<int>> members;
  std::vector<int> sizes, sums;
  std::vector<std::string> errors;
  std::string report;
};

outcome lose_at_once(int n, const std::vector<int>& dying) {
  test::ring_run ring(n, "regroup", {"liveness_ms=2000", "timeout_ms=20000", "token=secret", "fingerprint=regroup"});
  outcome out;
  out.members.resize(static_cast<std::size_t>(n));
  out.sizes.assign(static_cast<std::size_t>(n), -1);
  out.sums.assign(static_cast<std::size_t>(n), -1);
  out.errors.resize(static_cast<std::size_t>(n));
  for (auto& w : ring.workers) {
    if (!test::wait_for_output(w, "ready", 30s)) {
      out.report = "never ready\n" + ring.report();
      return out;
    }
  }
  for (const int r : dying) ::kill(ring.workers[static_cast<std::size_t>(r)].pid, SIGSTOP);
  for (const int r : dying) ::kill(ring.workers[static_cast<std::size_t>(r)].pid, SIGKILL);
  if (!ring.wait_all(60s)) out.report = "still running after 60 s\n";
  out.report += ring.report();
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (std::find(dying.begin(), dying.end(), r) != dying.end()) continue;
    const std::string text = ring.workers[i].stdout_text();
    const auto at = text.find("members=");
    if (at == std::string::npos) {
      const auto error = text.find("ERROR");
      out.errors[i] = error == std::string::npos ? "no outcome" : text.substr(error, text.find('\n', error) - error);
      continue;
    }
    std::istringstream line(text.substr(at + 8));
    std::string list;
    line >> list;
    for (std::size_t from = 0; from < list.size();) {
      const auto comma = std::min(list.find(',', from), list.size());
      out.members[i].push_back(std::stoi(list.substr(from, comma - from)));
      from = comma + 1;
    }
    std::string size, sum;
    line >> size >> sum;
    out.sizes[i] = std::stoi(size.substr(5));
    out.sums[i] = std::stoi(sum.substr(4));
  }
  return out;
}

TEST(ring_regroup, two_of_four_lost_at_once_leave_the_other_two_one_ring) {
  // Ranks 1 and 3 are both neighbours of 0 and of 2: no verdict can travel between the survivors, and each may name
  // another culprit. They still agree: ranks 0 and 2, a majority of the two not known dead.
  const auto out = lose_at_once(4, {1, 3});
  for (const int r : {0, 2}) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(out.errors[i], "") << "rank " << r << "\n" << out.report;
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
    EXPECT_EQ(out.errors[i], "") << "rank " << r << "\n" << out.report;
    EXPECT_EQ(out.members[i], (std::vector<int>{0, 3})) << "rank " << r;
    EXPECT_EQ(out.sums[i], 2) << "rank " << r;
  }
}

TEST(ring_regroup, the_last_of_three_goes_on_alone_when_both_others_died) {
  const auto out = lose_at_once(3, {0, 1});
  EXPECT_EQ(out.errors[2], "") << out.report;
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

std::vector<round_result> rounds(const std::vector<ring_options>& options,
                                 const std::vector<detail::regroup_view>& views, const std::vector<int>& taking_part,
                                 const std::vector<int>& late = {}) {
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
