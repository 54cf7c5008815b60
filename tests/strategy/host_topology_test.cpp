// The gradient synchroniser's decision to overlap the all-reduce with backward: the rule on gathered facts, and the
// decision taken by replicas (threads over the local collective) for models that do and do not report their threads.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/detail/host_topology.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace host_topology_test {

using namespace mwstrat;
using detail::replica_load;

TEST(reduction_overlap, a_host_is_full_when_its_replicas_threads_take_all_its_cpus) {
  // Two replicas of one thread on a 2-CPU machine: full. On a 4-CPU machine: room left.
  EXPECT_TRUE(detail::some_host_is_full(std::vector<replica_load>{{1, 1, 2}, {1, 1, 2}}));
  EXPECT_FALSE(detail::some_host_is_full(std::vector<replica_load>{{1, 1, 4}, {1, 1, 4}}));
  // The fewest CPUs any replica there may use is the machine's (affinity masks narrow it).
  EXPECT_TRUE(detail::some_host_is_full(std::vector<replica_load>{{1, 1, 8}, {1, 1, 2}}));
  // One replica per machine always overlaps, whatever its threads: the reduction waits on the network.
  EXPECT_FALSE(detail::some_host_is_full(std::vector<replica_load>{{1, 16, 16}, {2, 16, 16}}));
  EXPECT_FALSE(detail::some_host_is_full(std::vector<replica_load>{{1, 64, 2}}));
  // A replica that does not say how many threads it uses leaves its machine counted as not full.
  EXPECT_FALSE(detail::some_host_is_full(std::vector<replica_load>{{1, 0, 2}, {1, 1, 2}}));
  // One full machine among several is enough.
  EXPECT_TRUE(detail::some_host_is_full(
      std::vector<replica_load>{{1, 1, 8}, {2, 2, 4}, {2, 2, 4}, {1, 1, 8}}));
  EXPECT_FALSE(detail::some_host_is_full(std::vector<replica_load>{}));
}

TEST(reduction_overlap, the_host_key_and_cpu_count_are_stable) {
  EXPECT_EQ(detail::host_key(), detail::host_key());
  EXPECT_GE(detail::usable_cpus(), 1);
}

struct model_of_threads {
  int n = 1;
  [[nodiscard]] int threads() const { return n; }
};
struct model_without_threads {};

// Runs the decision on `ranks` replicas; returns how many decided to overlap (all or none must).
template <class Model>
int replicas_overlapping(int ranks, const Model& model, reduction_overlap policy) {
  std::atomic<int> yes{0};
  spawn_ranks(ranks, [&](local_collective& c) {
    if (detail::overlap_reduction(c, model, policy)) ++yes;
  });
  return yes.load();
}

TEST(reduction_overlap, replicas_on_one_machine_agree_and_follow_their_threads) {
  const auto cpus = static_cast<int>(detail::usable_cpus());
  // Replicas whose threads fill the machine: no overlap; with room to spare (only possible with > 2 CPUs): overlap.
  EXPECT_EQ(0, replicas_overlapping(2, model_of_threads{cpus}, reduction_overlap::automatic));
  if (cpus > 2) {
    EXPECT_EQ(2, replicas_overlapping(2, model_of_threads{1}, reduction_overlap::automatic));
  }
  // Unknown threads: overlap, as fit always did.
  EXPECT_EQ(3, replicas_overlapping(3, model_without_threads{}, reduction_overlap::automatic));
  // The explicit policies need no exchange and are obeyed.
  EXPECT_EQ(2, replicas_overlapping(2, model_of_threads{cpus}, reduction_overlap::always));
  EXPECT_EQ(0, replicas_overlapping(2, model_without_threads{}, reduction_overlap::never));
}

}  // namespace host_topology_test
