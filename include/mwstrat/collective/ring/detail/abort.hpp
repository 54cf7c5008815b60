#pragma once
// The ring's fail-fast protocol. The rank that detects a failure (a lost peer, a missed deadline, a frame that is
// not the one expected) finishes the frame it was sending, so the stream stays at a frame boundary, then sends an
// abort frame naming the culprit to both neighbours and shuts its sending halves; a rank that receives an abort
// reports the culprit it names and passes it on the same way. So every rank fails fast naming the same culprit.
// On a sealed connection (frame_seal.hpp) an abort is sealed like any frame: a forged one is refused, not believed.

#include <mwstrat/collective/ring/detail/failure.hpp>
#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/error.hpp>

#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

// How long a rank reads the rest of a message whose first bytes have arrived (an abort's body, a back-channel
// frame): a peer writes each of these in one go, so they are whole within microseconds unless the peer is dying;
// half a second bounds a failing rank's wait without mistaking a busy peer for a broken one.
inline constexpr std::chrono::milliseconds abort_read_grace{500};
// How long a failing rank spends finishing its in-flight frame and writing the abort to each neighbour: it is
// failing anyway, and a neighbour that misses the abort still fails by its own deadline, so this stays short.
inline constexpr std::chrono::milliseconds abort_send_grace{250};

// The frame being sent, so that an abort can complete it first.
struct inflight_frame {
  const std::uint8_t* payload = nullptr;
  std::size_t total = 0;  // header, payload and tag
  std::size_t sent = 0;
  std::array<std::uint8_t, frame_header_size> header{};
  seal_tag tag{};
  std::size_t tag_bytes = 0;  // 0 on a connection that is not sealed
  const std::uint8_t* plain = nullptr;  // a sealed frame's payload before sealing, and how much of it is sealed: the
  std::size_t sealed = 0;               // rest is sealed (data_path: finish_inflight_seal) before the frame completes
};

// The rest of an abort frame whose header `h` (as received: `raw_header`) came from rank `from` on `fd`: the failure
// it reports. `open`: the connection's cipher when it is sealed, which the abort's tag must satisfy.
inline ring_failure read_abort(int fd, const frame_header& h, int from, const std::string& where,
                               const rank_map& ranks, std::span<const std::uint8_t> raw_header = {},
                               frame_cipher* open = nullptr) {
  std::array<std::uint8_t, abort_fixed_size + max_abort_text + seal_tag_size> raw{};
  const auto len = static_cast<std::size_t>(h.payload);  // bounded by decode_frame_header
  const std::size_t tag = open != nullptr ? seal_tag_size : 0;
  const auto r = read_exact(fd, raw.data(), len + tag, steady::now() + abort_read_grace);
  if (r.status == io_status::ok && open != nullptr) {
    seal_tag t{};
    std::memcpy(t.data(), raw.data() + len, seal_tag_size);
    if (!open->open(raw_header, raw.data(), len, t))
      return ring_failure{error_kind::protocol, from,
                          "an abort frame from " + ranks.peer(from) + " fails authentication (AES-256-GCM tag): "
                          "altered or forged on the link from " + ranks.peer(from) + " during " + where};
  }
  std::optional<abort_notice> a;
  if (r.status == io_status::ok) a = decode_abort(std::span(raw.data(), len), ranks.size());
  if (!a)
    return ring_failure{error_kind::protocol, from, ranks.peer(from) + " sent a malformed abort during " + where};
  const int culprit = a->culprit >= 0 ? a->culprit : from;
  auto kind = static_cast<error_kind>(a->kind);
  return ring_failure{kind, culprit,
                      ranks.peer(culprit) + " " + (kind == error_kind::peer_lost ? "was lost" : "failed") +
                          " during " + where + " (reported by rank " + std::to_string(from) + ": " + a->text + ")"};
}

// One abort frame, ready to write: its header, then the notice of `f`.
struct abort_frame {
  std::array<std::uint8_t, frame_header_size + abort_fixed_size + max_abort_text + seal_tag_size> bytes{};
  std::size_t size = 0;
};

// The abort frame for `f`, sealed with `seal` when the connection it goes on is. `op` names the operation it ends
// (kind, element type, sequence number); the liveness connections, which carry no operation, pass the default.
inline abort_frame make_abort_frame(const ring_failure& f, const frame_header& op = {}, frame_cipher* seal = nullptr) {
  abort_notice notice;
  notice.kind = static_cast<std::uint8_t>(f.kind);
  notice.culprit = f.culprit;
  notice.seq = op.seq;
  notice.text = f.text;
  std::array<std::uint8_t, abort_fixed_size + max_abort_text> body{};
  const auto len = encode(notice, body);
  frame_header h;
  h.type = frame_type::abort;
  h.op = op.op;
  h.type_of_elements = op.type_of_elements;
  h.seq = op.seq;
  h.payload = len;
  abort_frame frame;
  encode(h, std::span<std::uint8_t, frame_header_size>(frame.bytes.data(), frame_header_size));
  std::uint8_t* text = frame.bytes.data() + frame_header_size;
  std::memcpy(text, body.data(), len);
  frame.size = frame_header_size + len;
  if (seal != nullptr && *seal) {
    seal_tag tag{};
    (void)seal->seal(std::span(frame.bytes.data(), frame_header_size), text, text, len, tag);  // a failing rank's last word
    std::memcpy(frame.bytes.data() + frame.size, tag.data(), tag.size());
    frame.size += tag.size();
  }
  return frame;
}

// Tells both neighbours about `f` (those not already known dead), first completing `inflight` towards the next
// rank, then shuts both sending halves. `op` names the operation (kind, element type, sequence number);
// `next_seal`/`prev_seal` seal the abort on connections that are sealed.
inline void send_abort(int next, int prev, bool next_dead, bool prev_dead, const inflight_frame& inflight,
                       const frame_header& op, const ring_failure& f, frame_cipher* next_seal = nullptr,
                       frame_cipher* prev_seal = nullptr) {
  const bool sealed = (next_seal != nullptr && *next_seal) || (prev_seal != nullptr && *prev_seal);
  const abort_frame frame = make_abort_frame(f, op, next_seal);
  const abort_frame back = sealed ? make_abort_frame(f, op, prev_seal) : abort_frame{};
  const auto limit = steady::now() + abort_send_grace;
  if (!next_dead) {
    bool ok = true;
    if (inflight.total > 0) {  // finish the frame on the wire so the abort starts at a frame boundary
      const std::size_t hs = frame_header_size;
      if (inflight.sent < hs)
        ok = write_all(next, inflight.header.data() + inflight.sent, hs - inflight.sent, limit).status == io_status::ok;
      const std::size_t body_sent = inflight.sent > hs ? inflight.sent - hs : 0;
      const std::size_t payload = inflight.total - hs - inflight.tag_bytes;
      if (ok && body_sent < payload)
        ok = write_all(next, inflight.payload + body_sent, payload - body_sent, limit).status == io_status::ok;
      const std::size_t tag_sent = body_sent > payload ? body_sent - payload : 0;
      if (ok && tag_sent < inflight.tag_bytes)
        ok = write_all(next, inflight.tag.data() + tag_sent, inflight.tag_bytes - tag_sent, limit).status ==
             io_status::ok;
    }
    if (ok) (void)write_all(next, frame.bytes.data(), frame.size, limit);
  }
  const abort_frame& to_prev = sealed ? back : frame;
  if (!prev_dead) (void)write_all(prev, to_prev.bytes.data(), to_prev.size, limit);
  ::shutdown(next, SHUT_WR);
  ::shutdown(prev, SHUT_WR);
}

// The exception this ring's rank `rank` throws for `f`, a failure in the job's terms (rank_map::in_job_terms): it
// names the job's ranks and addresses.
inline std::exception_ptr ring_error(const rank_map& ranks, int rank, const ring_failure& f) {
  const error_origin origin{"ring", ranks.job_rank(rank)};
  const int c = f.culprit;
  switch (f.kind) {
    case error_kind::peer_lost: return std::make_exception_ptr(peer_lost_error(origin, c, ranks.job_address(c), f.text));
    case error_kind::timeout: return std::make_exception_ptr(timeout_error(origin, f.text, c));
    case error_kind::protocol: return std::make_exception_ptr(protocol_error(origin, f.text));
    default: return std::make_exception_ptr(io_error(origin, f.text));
  }
}

}  // namespace mwstrat::detail
