// ring/detail/op_streams.hpp alone: which connection an item's chunk travels on, when a receive item counts as
// complete (each connection receives its own items in order), and whether any connection still has items to send.
// Plain state: no sockets, a schedule written by hand.
#include <mwstrat/collective/ring/detail/op_streams.hpp>

#include <gtest/gtest.h>

#include <cstddef>

namespace op_streams_test {

using namespace mwstrat::detail;

// An operation of 12 items from item 2 on (the all-gather half alone starts past the first), 3 chunks a segment.
ring_plan plan_of_three_chunks() {
  ring_plan p;
  p.sched.chunks = 3;
  p.sched.begin = 2;
  p.sched.items = 12;
  return p;
}

TEST(op_streams, a_segments_chunks_go_round_the_connections_and_start_again_with_each_segment) {
  const ring_plan p = plan_of_three_chunks();
  // Two connections: chunks 0, 1, 2 of each segment on 0, 1, 0; the next segment starts again on connection 0.
  const std::size_t lanes_of_two[] = {0, 1, 0, 0, 1, 0};
  for (std::size_t t = 0; t < 6; ++t) EXPECT_EQ(lane_of(p, t, 2), lanes_of_two[t]) << "item " << t;
  // One connection carries everything; as many connections as chunks give each chunk its own.
  for (std::size_t t = 0; t < 12; ++t) {
    EXPECT_EQ(lane_of(p, t, 1), 0u);
    EXPECT_EQ(lane_of(p, t, 3), t % 3);
  }
}

TEST(op_streams, an_item_is_received_once_its_connection_has_moved_past_it) {
  const ring_plan p = plan_of_three_chunks();
  op_streams s;
  s.recvs = 2;
  EXPECT_TRUE(s.received(p, 0)) << "items before the schedule's first are not this operation's to wait for";
  EXPECT_TRUE(s.received(p, 1));
  EXPECT_FALSE(s.received(p, 2));
  // Connection 0 has received items up to 5 (its next is 6); connection 1 nothing yet.
  s.recv[0].t = 6;
  EXPECT_TRUE(s.received(p, 3)) << "item 3 is chunk 0: connection 0's";
  EXPECT_TRUE(s.received(p, 5)) << "item 5 is chunk 2: connection 0's";
  EXPECT_FALSE(s.received(p, 4)) << "item 4 is chunk 1: connection 1's, which has received nothing";
  EXPECT_FALSE(s.received(p, 6)) << "connection 0's next item is not in yet";
  s.recv[1].t = 5;
  EXPECT_TRUE(s.received(p, 4));
}

TEST(op_streams, sends_are_left_while_any_connection_has_an_item_of_the_schedule_to_go) {
  const ring_plan p = plan_of_three_chunks();
  op_streams s;
  s.sends = 2;
  EXPECT_TRUE(s.sends_left(p));
  s.send[0].t = 12;
  EXPECT_TRUE(s.sends_left(p)) << "connection 1 has not sent its items";
  s.send[1].t = 12;
  EXPECT_FALSE(s.sends_left(p));
  s.send[2].t = 0;  // a stream past the link's connections does not count
  EXPECT_FALSE(s.sends_left(p));
}

TEST(op_streams, a_send_streams_frame_is_its_header_payload_and_tag) {
  send_stream s;
  s.payload = 1000;
  s.tag_bytes = 16;
  EXPECT_EQ(s.total(), frame_header_size + 1000 + 16);
  s.sent = 40;
  const inflight_frame f = s.inflight();
  EXPECT_EQ(f.total, s.total());
  EXPECT_EQ(f.sent, 40u);
}

}  // namespace op_streams_test
