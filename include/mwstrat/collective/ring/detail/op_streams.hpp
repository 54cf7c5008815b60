#pragma once
// The progress of one ring operation over a rank's data connections (ring/detail/data_path.hpp pumps them): per
// connection to the next rank a send stream, per connection from the previous one a receive stream, each walking
// the items of the operation's schedule whose chunk travels on it. Plain state, no I/O.

#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/plan.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace mwstrat::detail {

// The connection that item t's chunk travels on: chunk j of a segment on connection j mod the link's connections.
inline std::size_t lane_of(const ring_plan& p, std::size_t t, std::size_t lanes) { return t % p.sched.chunks % lanes; }

// The progress of one data connection's send stream (to the next rank) or receive stream (from the previous one):
// the items whose chunk is its own, in the schedule's order.
struct send_stream {
  std::size_t t = 0;         // next item to send
  ring_item it;              // the item being sent
  bool active = false;       // its frame is on its way
  bool credit_wait = false;  // the next frame waits for a shared-memory slot to come back
  bool want_out = false;     // the socket was full: wait until it can take more
  std::size_t payload = 0;   // bytes of the item that go on the socket (0 through a slot)
  const std::uint8_t* src = nullptr;  // where they are: the buffer, or the narrowed copy when compressed
  std::size_t sent = 0;      // bytes of the frame (header, payload, tag) sent so far
  std::array<std::uint8_t, frame_header_size> header{};
  seal_tag tag{};            // the frame's tag on a sealed connection
  std::size_t tag_bytes = 0;
  const std::uint8_t* plain = nullptr;  // what is sealed into `src` (encrypt) or authenticated (src itself)
  std::size_t sealed = 0;    // payload bytes sealed so far (all of them on a connection that is not sealed)
  [[nodiscard]] std::size_t total() const { return header.size() + payload + tag_bytes; }
  [[nodiscard]] inflight_frame inflight() const { return {src, total(), sent, header, tag, tag_bytes, plain, sealed}; }
};
struct recv_stream {
  std::size_t t = 0;            // next item to receive
  ring_item it;                 // the item being received
  bool active = false;          // its frame is arriving
  bool reading_header = true;
  std::size_t got = 0;          // bytes of the header, then of the payload, received so far
  std::size_t combined = 0;     // elements of a reduced payload already combined
  std::array<std::uint8_t, frame_header_size> header{};
  seal_tag tag{};               // the frame's tag on a sealed connection
};
// Every stream of one operation.
struct op_streams {
  std::array<send_stream, max_streams_per_peer> send;
  std::array<recv_stream, max_streams_per_peer> recv;
  std::size_t sends = 1, recvs = 1;  // connections of the two links

  // Receive item x is complete (each stream receives its items in order).
  [[nodiscard]] bool received(const ring_plan& p, std::size_t x) const {
    return x < p.sched.begin || recv[lane_of(p, x, recvs)].t > x;
  }
  [[nodiscard]] bool sends_left(const ring_plan& p) const {
    for (std::size_t k = 0; k < sends; ++k)
      if (send[k].t < p.sched.items) return true;
    return false;
  }
};

}  // namespace mwstrat::detail
