// The ring's schedule without sockets: the ranks' send and receive streams are played against each other in one
// thread, each element carried as the order in which ranks' values were combined into it, so the tests see that
// every element is reduced exactly once per rank, in the ring's fixed order, and finished by its owner.

#include <mwstrat/collective/ring/detail/schedule.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace schedule_test {

using namespace mwstrat::detail;

// An element's history: the ranks whose values it holds, in the order they were combined, one octal digit each
// (rank + 1). A rank's own input is one digit.
using history = std::uint64_t;

history leaf(int rank) { return static_cast<history>(rank + 1); }

// The history of ((x_k + x_{k+1}) + x_{k+2}) + ... over all n ranks, starting at k.
history in_ring_order(int k, int n) {
  history h = 0;
  for (int i = 0; i < n; ++i) h = h * 8 + leaf((k + i) % n);
  return h;
}

struct message {
  std::size_t item;
  chunk_move move;
  std::vector<history> values;
};

struct rank_state {
  ring_schedule sched;
  std::vector<history> data, other;  // other: all_reduce_update's parameters
  std::vector<int> finished;         // per element: how often this rank finished it
  std::size_t ts = 0, tr = 0;
};

// Plays every rank's two streams until nothing moves; fails the test on a stall or a mismatched message.
void play(std::vector<rank_state>& ranks) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::deque<message>> wire(ranks.size());  // wire[r]: from rank r to rank r + 1
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; ++r) {
      auto& me = ranks[static_cast<std::size_t>(r)];
      const auto& s = me.sched;
      chunk_move m;
      while (me.ts < s.items && !send_chunk(s, me.ts, m)) ++me.ts;
      if (me.ts < s.items && me.tr >= send_dependency(s, me.ts)) {
        const auto& from = m.gather ? me.other : me.data;
        wire[static_cast<std::size_t>(r)].push_back(
            {me.ts, m, std::vector<history>(from.begin() + static_cast<std::ptrdiff_t>(m.first),
                                            from.begin() + static_cast<std::ptrdiff_t>(m.first + m.count))});
        ++me.ts;
        moved = true;
      }
      while (me.tr < s.items && !recv_chunk(s, me.tr, m)) ++me.tr;
      auto& in = wire[static_cast<std::size_t>((r + n - 1) % n)];
      if (me.tr < s.items && !in.empty()) {
        const message msg = in.front();
        in.pop_front();
        ASSERT_EQ(msg.item, me.tr) << "rank " << r;
        ASSERT_EQ(msg.move.first, m.first) << "rank " << r << " item " << me.tr;
        ASSERT_EQ(msg.move.count, m.count) << "rank " << r << " item " << me.tr;
        ASSERT_EQ(msg.move.step, m.step);
        ASSERT_EQ(msg.move.chunk, m.chunk);
        auto& to = m.gather ? me.other : me.data;
        for (std::size_t e = 0; e < m.count; ++e) {
          auto& v = to[m.first + e];
          if (m.reduce) {
            ASSERT_LT(v, 8u) << "rank " << r << " combines into an element that is not its own input";
            v = msg.values[e] * 8 + v;  // the kernel's acc += in: own value plus the partial from the previous rank
          } else {
            v = msg.values[e];
          }
          if (m.finish) {
            ++me.finished[m.first + e];
            if (s.separate_gather) me.other[m.first + e] = v;  // the update: parameters from the final gradients
          }
        }
        ++me.tr;
        moved = true;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    const auto& me = ranks[static_cast<std::size_t>(r)];
    EXPECT_EQ(me.ts, me.sched.items) << "rank " << r << "'s sends stalled";
    EXPECT_EQ(me.tr, me.sched.items) << "rank " << r << "'s receives stalled";
  }
  for (const auto& w : wire) EXPECT_TRUE(w.empty()) << "a message nobody received";
}

const int worlds[] = {1, 2, 3, 4, 7};
const std::size_t counts[] = {0, 1, 3, 1001, 20011};
constexpr std::size_t chunk_bytes = 256;  // 32 doubles: many chunks per segment, uneven ones too

void check_all_reduce(op_kind kind, int n, std::size_t count) {
  std::vector<rank_state> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& me = ranks[static_cast<std::size_t>(r)];
    me.sched = all_reduce_schedule(kind, r, n, count, sizeof(double), chunk_bytes);
    me.data.assign(count, leaf(r));
    me.other.assign(count, 0);
    me.finished.assign(count, 0);
  }
  play(ranks);
  for (std::size_t e = 0; e < count; ++e) {
    // Element e lies in segment k (the segments split the buffer evenly); rank k - 1 owns it and finishes it once.
    int k = 0;
    while (segment_begin(ranks[0].sched, k + 1) <= e) ++k;
    const int owner = (k + n - 1) % n;
    const history want = n == 1 ? leaf(0) : in_ring_order(k, n);
    for (int r = 0; r < n; ++r) {
      const auto& me = ranks[static_cast<std::size_t>(r)];
      if (kind == op_kind::all_reduce_update) {
        ASSERT_EQ(me.other[e], n == 1 ? 0 : want) << "parameters, rank " << r << ", element " << e;
      } else {
        ASSERT_EQ(me.data[e], want) << "rank " << r << ", element " << e << " of segment " << k;
      }
      ASSERT_EQ(me.finished[e], n > 1 && r == owner ? 1 : 0) << "rank " << r << ", element " << e;
    }
  }
}

TEST(ring_schedule, all_reduce_combines_each_element_once_per_rank_in_ring_order_and_its_owner_finishes_it) {
  for (const int n : worlds)
    for (const std::size_t count : counts) {
      SCOPED_TRACE("world " + std::to_string(n) + ", count " + std::to_string(count));
      check_all_reduce(op_kind::all_reduce, n, count);
    }
}

TEST(ring_schedule, all_reduce_update_gathers_the_owners_parameters) {
  for (const int n : worlds)
    for (const std::size_t count : counts) {
      SCOPED_TRACE("world " + std::to_string(n) + ", count " + std::to_string(count));
      check_all_reduce(op_kind::all_reduce_update, n, count);
    }
}

TEST(ring_schedule, barrier_is_a_one_element_all_reduce) {
  for (const int n : worlds) {
    SCOPED_TRACE("world " + std::to_string(n));
    const auto s = all_reduce_schedule(op_kind::barrier, 0, n, 1, 4, 4096);
    EXPECT_EQ(s.chunks, 1u);
    EXPECT_EQ(s.items, static_cast<std::size_t>(2 * (n - 1)));
    check_all_reduce(op_kind::barrier, n, 1);
  }
}

TEST(ring_schedule, broadcast_copies_the_roots_buffer_everywhere) {
  for (const int n : worlds)
    for (const std::size_t count : counts)
      for (int root = 0; root < n; ++root) {
        SCOPED_TRACE("world " + std::to_string(n) + ", count " + std::to_string(count) + ", root " +
                     std::to_string(root));
        std::vector<rank_state> ranks(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
          auto& me = ranks[static_cast<std::size_t>(r)];
          me.sched = broadcast_schedule(r, n, root, count, sizeof(double), chunk_bytes);
          me.data.assign(count, leaf(r));
          me.finished.assign(count, 0);
        }
        play(ranks);
        for (int r = 0; r < n; ++r) EXPECT_EQ(ranks[static_cast<std::size_t>(r)].data, std::vector<history>(count, leaf(root)));
      }
}

TEST(ring_schedule, all_gather_puts_each_ranks_part_in_rank_order) {
  for (const int n : worlds)
    for (const std::size_t per_rank : counts) {
      SCOPED_TRACE("world " + std::to_string(n) + ", per rank " + std::to_string(per_rank));
      const std::size_t count = per_rank * static_cast<std::size_t>(n);
      std::vector<history> want(count);
      for (std::size_t e = 0; e < count; ++e) want[e] = leaf(static_cast<int>(e / per_rank));
      std::vector<rank_state> ranks(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) {
        auto& me = ranks[static_cast<std::size_t>(r)];
        me.sched = all_gather_schedule(r, n, per_rank, sizeof(double), chunk_bytes);
        me.data.assign(count, 0);
        for (std::size_t e = 0; e < per_rank; ++e) me.data[static_cast<std::size_t>(r) * per_rank + e] = leaf(r);
        me.finished.assign(count, 0);
      }
      play(ranks);
      for (int r = 0; r < n; ++r) EXPECT_EQ(ranks[static_cast<std::size_t>(r)].data, want) << "rank " << r;
    }
}

TEST(ring_schedule, chunks_are_at_most_chunk_bytes_and_at_least_one) {
  EXPECT_EQ(chunks_for(0, 4096), 1u);
  EXPECT_EQ(chunks_for(1, 4096), 1u);
  EXPECT_EQ(chunks_for(4096, 4096), 1u);
  EXPECT_EQ(chunks_for(4097, 4096), 2u);
  const auto s = all_reduce_schedule(op_kind::all_reduce, 1, 3, 1000, 4, 512);  // segments of <= 334 floats
  EXPECT_EQ(s.chunks, 3u);
  EXPECT_EQ(s.items, 2u * 2u * 3u);
}

}  // namespace schedule_test
