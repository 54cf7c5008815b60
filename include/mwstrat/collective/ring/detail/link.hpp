#pragma once
// The two ends of a ring link, one type per direction, each carrying payloads one of two ways, chosen at start-up
// and fixed for the link's life: on the TCP connection after each frame header, or (both ends on one host) through
// the link's shared-memory region, a slot per chunk used in turn, with the TCP connection carrying the headers and,
// backwards, one credit per slot the receiver is done with. The data path asks a link what to do and never which
// kind it is: the difference is one branch on a flag per chunk, no virtual call. A TCP connection to another host
// with a job token also carries each frame's tag (frame_seal.hpp) after its payload.

#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace mwstrat::detail {

// To the next rank.
struct send_link {
  unique_socket socket;
  shm_region shm;             // payload slots, when the link carries payloads through shared memory
  std::size_t next_slot = 0;  // slots used so far (mod slots: the next one)
  std::size_t credits = 0;    // free slots
  bool eof = false;           // the next rank closed its end (of the back channel)
  bool dead = false;          // the next rank is known to be gone: do not write to it again
  inflight_frame inflight;    // the frame being sent, so that an abort can complete it first
  link_seal seal;             // sends data frames sealed, opens the aborts coming back (another host, a token)

  [[nodiscard]] bool through_shm() const { return static_cast<bool>(shm); }
  // A link that carries payloads through shared memory starts with every slot free.
  void adopt(shm_region region) {
    shm = std::move(region);
    next_slot = 0;
    credits = shm.slots();
  }
  [[nodiscard]] frame_type data_frame() const { return through_shm() ? frame_type::slot : frame_type::data; }
  // The next chunk needs a free slot that has not come back yet.
  [[nodiscard]] bool waits_for_credit() const { return through_shm() && credits == 0; }
  // Puts a chunk's payload where the receiver takes it from; returns how many of its bytes follow the header on
  // the socket (all of them over TCP, none through a slot).
  std::size_t stage(const std::uint8_t* data, std::size_t bytes) {
    if (!through_shm()) return bytes;
    std::memcpy(shm.slot(next_slot++), data, bytes);
    --credits;
    std::atomic_thread_fence(std::memory_order_release);  // the slot's bytes before the header names it
    return 0;
  }
  // A credit came back; false when none was owed (a protocol error).
  bool credit() {
    if (!through_shm() || credits >= shm.slots()) return false;
    ++credits;
    return true;
  }
  // Sends what is left of `header`, `payload`, then the first `tag_bytes` of `tag` (whose first `sent` bytes,
  // header included, have gone).
  ssize_t send_some(const std::array<std::uint8_t, frame_header_size>& header, std::size_t sent,
                    const std::uint8_t* payload, std::size_t payload_bytes, const seal_tag& tag,
                    std::size_t tag_bytes) const {
    iovec iov[3];
    int count = 0;
    if (sent < header.size()) iov[count++] = {const_cast<std::uint8_t*>(header.data()) + sent, header.size() - sent};
    const std::size_t body = sent > header.size() ? sent - header.size() : 0;
    if (payload_bytes > body) iov[count++] = {const_cast<std::uint8_t*>(payload) + body, payload_bytes - body};
    const std::size_t trailer = body > payload_bytes ? body - payload_bytes : 0;
    if (tag_bytes > trailer) iov[count++] = {const_cast<std::uint8_t*>(tag.data()) + trailer, tag_bytes - trailer};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(count);
    return ::sendmsg(socket.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
};

// From the previous rank.
struct recv_link {
  unique_socket socket;
  shm_region shm;               // payload slots, when the link carries payloads through shared memory
  std::size_t next_slot = 0;    // slots used so far (mod slots: the next one)
  bool credits_refused = false;  // the previous rank closed the back channel: stop returning slots
  bool dead = false;             // the previous rank is known to be gone: do not write to it again
  link_seal seal;                // opens data frames, seals the aborts this rank sends back (another host, a token)

  [[nodiscard]] bool through_shm() const { return static_cast<bool>(shm); }
  void adopt(shm_region region) {
    shm = std::move(region);
    next_slot = 0;
  }
  [[nodiscard]] frame_type data_frame() const { return through_shm() ? frame_type::slot : frame_type::data; }
  // TCP payloads land here before they are combined (shared-memory ones are combined from their slot).
  void make_scratch(std::size_t chunk_bytes) {
    if (!through_shm()) scratch_.reset(static_cast<std::uint8_t*>(::operator new(chunk_bytes, std::align_val_t{64})));
  }
  [[nodiscard]] std::uint8_t* scratch() const { return scratch_.get(); }
  // The next slot, whose header has arrived (so, by the sender's release fence, its bytes have too).
  const std::uint8_t* take_slot() {
    std::atomic_thread_fence(std::memory_order_acquire);
    return shm.slot(next_slot++);
  }
  // Hands the oldest slot back to the sender with a credit frame for operation `op`. At most one credit per slot
  // is ever unread, far below the socket buffer, so this does not wait in practice. io_status::closed when the
  // sender has closed its end (it needs no more slots, or it died: the data stream tells which).
  io_result return_credit(const frame_header& op, steady::time_point deadline) {
    if (credits_refused) return {};
    frame_header h;
    h.type = frame_type::credit;
    h.op = op.op;
    h.type_of_elements = op.type_of_elements;
    h.seq = op.seq;
    std::array<std::uint8_t, frame_header_size> raw{};
    encode(h, raw);
    const auto r = write_all(socket.get(), raw.data(), raw.size(), deadline);
    if (r.status != io_status::ok && r.status != io_status::timed_out) credits_refused = true;
    return r;
  }

 private:
  struct aligned_delete {
    void operator()(std::uint8_t* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::uint8_t, aligned_delete> scratch_;
};

// The two links of one rank, as start-up leaves them, and beside each its liveness connection (liveness.hpp; none
// in a ring inside a hierarchical ring, whose parent watches the same ranks). A link to a rank on another host may
// have more data connections (ring_options::streams_per_peer): `out`/`in` are the first of them, which alone carries
// the back channel, aborts and shared memory; the others (TCP only) carry payload frames of their own chunks.
struct ring_links {
  send_link out;
  recv_link in;
  std::vector<send_link> more_out;  // data connections 1.. to the next rank
  std::vector<recv_link> more_in;   // data connections 1.. from the previous rank
  unique_socket liveness_out;  // to the next rank
  unique_socket liveness_in;   // from the previous rank
  link_seal liveness_out_seal;  // their frame seals (another host, a token; else empty)
  link_seal liveness_in_seal;
};

}  // namespace mwstrat::detail
