#pragma once
// The data path of one rank of a ring_collective: the connections to the next and the previous rank (start-up's
// links: link.hpp) and the pump that moves one operation's chunks (a plan: plan.hpp) over them with non-blocking
// sends and receives, combining what arrives into the operation's buffer. It finds failures and returns them; the
// ring decides what to do with them (abort.hpp's protocol: it tells both neighbours through abort_neighbours).
// On a sealed connection (another host, a job token: frame_seal.hpp) a frame's tag follows its payload; a received
// chunk counts as received (finished, forwarded, part of the result) only once its tag verifies, so an altered frame
// ends the operation before anything of it reaches another rank or the caller.

#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/compress.hpp>
#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/liveness.hpp>
#include <mwstrat/collective/ring/detail/op_streams.hpp>
#include <mwstrat/collective/ring/detail/plan.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::detail {

class ring_data_path {
 public:
  ring_data_path() = default;  // a world of one: no links

  // Takes the data connections start-up made (the liveness connections stay with `links`). `ranks` names the ranks
  // in the failures this returns.
  ring_data_path(ring_links& links, int rank, int world, std::size_t chunk_bytes, std::chrono::microseconds spin,
                 rank_map ranks)
      : n_(world), rank_(rank), chunk_bytes_(chunk_bytes), spin_(spin), ranks_(std::move(ranks)),
        out_(std::move(links.out)), in_(std::move(links.in)), more_out_(std::move(links.more_out)),
        more_in_(std::move(links.more_in)) {
    in_.make_scratch(chunk_bytes_);
    for (auto& lane : more_in_) lane.make_scratch(chunk_bytes_);
    // Encrypted payloads cannot be written into the buffer they come from (it is still being reduced, or it is
    // the result): one chunk per connection, made once.
    if (out_.seal.send.encrypts()) seal_stage_.assign(chunk_bytes_ * out_lanes(), 0);
  }

  ring_data_path(ring_data_path&&) noexcept = default;
  ring_data_path& operator=(ring_data_path&&) noexcept = default;

  /// The liveness monitor whose verdict ends a wait at once (the flat ring's, shared by the rings inside it).
  void watch(liveness_monitor* monitor) noexcept { monitor_ = monitor; }
  [[nodiscard]] liveness_monitor* monitor() const noexcept { return monitor_; }

  /// Whether the link to the next (previous) rank carries payloads through shared memory.
  [[nodiscard]] bool out_through_shm() const noexcept { return out_.through_shm(); }
  [[nodiscard]] bool in_through_shm() const noexcept { return in_.through_shm(); }

  /// Room for a chunk narrowed to 16 bits per connection to the next rank (compression on the wire).
  void make_wire_stage() { wire_stage_.assign(chunk_bytes_ * out_lanes(), 0); }

  /// Drives every stream of one operation with non-blocking calls until all are done, sleeping in poll() only when
  /// none can move; the failure to report, if any. `timeout` is the operation's, for the message.
  template <class T>
  std::optional<ring_failure> pump(const ring_plan& p, steady::time_point deadline, std::chrono::milliseconds timeout) {
    op_streams st;
    st.sends = out_lanes();
    st.recvs = in_lanes();
    for (std::size_t k = 0; k < st.sends; ++k) st.send[k].t = p.sched.begin;
    for (std::size_t k = 0; k < st.recvs; ++k) st.recv[k].t = p.sched.begin;
    out_.inflight = {};
    steady::time_point idle_since{};  // when the current wait began (zero: not waiting)
    for (;;) {
      bool busy = false;
      for (std::size_t k = 0; k < st.sends; ++k) {
        if (auto f = start_send(p, st, k)) return f;
        busy = busy || st.send[k].active || st.send[k].credit_wait;
      }
      for (std::size_t k = 0; k < st.recvs; ++k) {
        start_receive(p, st.recv[k], k, st.recvs);
        busy = busy || st.recv[k].active;
      }
      if (!busy) {
        if (!st.sends_left(p)) break;
        // A send waits for a receive that is not coming: only possible if the plan is inconsistent.
        return ring_failure{error_kind::protocol, rank_, "internal: ring schedule stalled during " + where_of(p)};
      }
      bool progress = false;
      const std::size_t frames_before = frames_done(st);
      for (std::size_t k = 0; k < st.sends; ++k) {
        st.send[k].want_out = false;
        if (st.send[k].active)
          if (auto f = send_some(p, st.send[k], k, progress)) return f;
      }
      for (std::size_t k = 0; k < st.recvs; ++k)
        if (st.recv[k].active)
          if (auto f = receive_some<T>(p, st.recv[k], k, deadline, progress)) return f;
      if (progress) {
        // Only a finished frame restarts the spin: on a slow link bytes trickle in all the time, and restarting it
        // on every one kept the rank polling for the whole transfer (a core per rank at 1 Gbit/s, taken from
        // compute when the reduction overlaps backward). Within a frame it sleeps in poll() once spin_ is spent.
        if (frames_done(st) != frames_before) idle_since = steady::time_point{};
        continue;
      }
      if (auto f = wait_ready(p, st, idle_since, deadline, timeout)) return f;
    }
    return std::nullopt;
  }

  /// Shuts every data connection down, so that the neighbours (and queued operations) fail fast.
  void shutdown_links() {
    for (std::size_t k = 0; k < out_lanes(); ++k)
      if (out_lane(k).socket) ::shutdown(out_lane(k).socket.get(), SHUT_RDWR);
    for (std::size_t k = 0; k < in_lanes(); ++k)
      if (in_lane(k).socket) ::shutdown(in_lane(k).socket.get(), SHUT_RDWR);
  }

  /// Tells both neighbours that this rank gives up (after the frame in flight to the next rank, to whichever of
  /// them is not known to be gone), then shuts the other data connections.
  void abort_neighbours(const ring_plan& p, const ring_failure& told) {
    finish_inflight_seal();
    send_abort(out_.socket.get(), in_.socket.get(), out_.dead, in_.dead, out_.inflight, op_header(p), told,
               &out_.seal.send, &in_.seal.send);
    shutdown_extra_lanes();
  }

 private:
  int next() const { return (rank_ + 1) % n_; }
  int prev() const { return (rank_ + n_ - 1) % n_; }
  std::string peer(int r) const { return ranks_.peer(r); }

  // The data connections of the two links: the first (out_, in_) and, to or from a rank on another host, the others
  // (streams_per_peer). Chunk j of a segment travels on connection j mod (the link's connections).
  std::size_t out_lanes() const { return 1 + more_out_.size(); }
  std::size_t in_lanes() const { return 1 + more_in_.size(); }
  send_link& out_lane(std::size_t k) { return k == 0 ? out_ : more_out_[k - 1]; }
  recv_link& in_lane(std::size_t k) { return k == 0 ? in_ : more_in_[k - 1]; }

  // How far a frame is sealed ahead of what has gone on the socket: a whole default chunk, so a frame is usually
  // sealed in one go and sent in as few calls as a plain one (the socket buffer keeps the wire busy meanwhile); only
  // larger chunks are sealed and sent by turns. Sealing by 128 KiB cost more pump rounds and system calls per frame
  // and measured no faster on the 2-core machine of docs/security.md.
  static constexpr std::size_t seal_ahead = std::size_t{512} << 10;

  // An abort completes the frame in flight on the first connection: what of it is not sealed yet is sealed now.
  void finish_inflight_seal() {
    inflight_frame& f = out_.inflight;
    if (f.tag_bytes == 0 || f.total == 0) return;
    const std::size_t payload = f.total - frame_header_size - f.tag_bytes;
    if (f.sealed == payload) return;
    auto* to = const_cast<std::uint8_t*>(f.payload);  // the connection's own stage (encrypt), or unused
    if (!out_.seal.send.update(f.plain + f.sealed, to + f.sealed, payload - f.sealed) || !out_.seal.send.finish(f.tag))
      f = {};  // OpenSSL failed: send the abort alone (the next rank then reports a broken frame)
    else
      f.sealed = payload;
  }

  // After an abort on the first connection: the others are shut too, so a neighbour waiting only on one of them
  // sees it end at once (and reads the abort on the first) instead of waiting for the liveness verdict.
  void shutdown_extra_lanes() {
    for (std::size_t k = 1; k < out_lanes(); ++k)
      if (out_lane(k).socket) ::shutdown(out_lane(k).socket.get(), SHUT_RDWR);
    for (std::size_t k = 1; k < in_lanes(); ++k)
      if (in_lane(k).socket) ::shutdown(in_lane(k).socket.get(), SHUT_RDWR);
  }

  // Starts the next send item of connection k once what it forwards has been received and, through shared memory,
  // a slot is free.
  std::optional<ring_failure> start_send(const ring_plan& p, op_streams& st, std::size_t k) {
    send_stream& s = st.send[k];
    s.credit_wait = false;
    if (s.active) return std::nullopt;
    const std::size_t total = p.sched.items;
    while (s.t < total && (lane_of(p, s.t, st.sends) != k || !send_item(p, s.t, s.it))) ++s.t;
    if (s.t >= total) return std::nullopt;
    if (const std::size_t need = send_dependency(p.sched, s.t); need > 0 && !st.received(p, need - 1))
      return std::nullopt;
    send_link& out = out_lane(k);
    // Through shared memory a send needs a free slot: collect the credits that have come back.
    if (out.waits_for_credit() && !out.eof)
      if (auto f = read_back_channel(true, p)) return f;
    if (out.waits_for_credit()) {
      if (out.eof)
        return ring_failure{error_kind::peer_lost, next(),
                       "send to " + peer(next()) + ": connection closed during " + where_of(p)};
      s.credit_wait = true;
      return std::nullopt;
    }
    s.src = s.it.ptr;
    if (s.it.narrowed) {
      std::uint8_t* stage = wire_stage_.data() + k * chunk_bytes_;
      narrow_into(reinterpret_cast<std::uint16_t*>(stage), reinterpret_cast<const float*>(s.it.ptr),
                          s.it.bytes / sizeof(float), p.wire);
      s.src = stage;
    }
    s.payload = out.stage(s.src, s.it.wire_bytes);
    encode(header_for(p, s.it, out.data_frame()), std::span<std::uint8_t, frame_header_size>(s.header));
    s.tag_bytes = out.seal.tag_bytes();
    s.sealed = s.payload;
    s.active = true;
    s.sent = 0;
    if (s.tag_bytes > 0) {  // sealed piece by piece just ahead of the socket (send_some)
      s.plain = s.src;
      if (out.seal.send.encrypts()) s.src = seal_stage_.data() + k * chunk_bytes_;
      s.sealed = 0;
      if (!out.seal.send.begin(s.header) || (s.payload == 0 && !out.seal.send.finish(s.tag)))
        return ring_failure{error_kind::io, rank_, "AES-256-GCM sealing failed (OpenSSL) during " + where_of(p)};
      // The frame's counter is taken: an abort must complete this frame before its own, even if no byte has gone.
      if (k == 0) out_.inflight = s.inflight();
    }
    return std::nullopt;
  }

  void start_receive(const ring_plan& p, recv_stream& r, std::size_t k, std::size_t lanes) const {
    if (r.active) return;
    while (r.t < p.sched.items && (lane_of(p, r.t, lanes) != k || !recv_item(p, r.t, r.it))) ++r.t;
    if (r.t < p.sched.items) {
      r.active = true;
      r.reading_header = true;
      r.got = 0;
      r.combined = 0;
    }
  }

  // One non-blocking send of what is left of connection k's current frame (header and payload in one call).
  std::optional<ring_failure> send_some(const ring_plan& p, send_stream& s, std::size_t k, bool& progress) {
    send_link& out = out_lane(k);
    if (s.sealed < s.payload) {
      const std::size_t body = s.sent > s.header.size() ? s.sent - s.header.size() : 0;
      const std::size_t upto = std::min(s.payload, body + seal_ahead);
      if (s.sealed < upto) {
        auto* to = const_cast<std::uint8_t*>(s.src);  // this path's own stage (encrypt), or unused (authenticate)
        if (!out.seal.send.update(s.plain + s.sealed, to + s.sealed, upto - s.sealed) ||
            (upto == s.payload && !out.seal.send.finish(s.tag)))
          return ring_failure{error_kind::io, rank_, "AES-256-GCM sealing failed (OpenSSL) during " + where_of(p)};
        s.sealed = upto;
        if (k == 0) out_.inflight = s.inflight();
      }
    }
    const auto n = out.send_some(s.header, s.sent, s.src, s.sealed, s.tag, s.sealed == s.payload ? s.tag_bytes : 0);
    if (n > 0) {
      s.sent += static_cast<std::size_t>(n);
      progress = true;
      // An abort goes on the first connection, after the frame in flight there (the others are shut).
      if (k == 0) out_.inflight = s.inflight();
      if (s.sent == s.total()) {
        s.active = false;
        if (k == 0) out_.inflight = {};
        ++s.t;
        if (final_after_send(p, s.it)) tell_final(p, s.it);  // its bytes are the kernel's (or the slot's) now
      }
      return std::nullopt;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      s.want_out = true;
      return std::nullopt;
    }
    const int err = errno;
    // The next rank may have said why before it closed: an abort waiting on the back channel names the real
    // culprit (it is readable even after a reset).
    if (auto told = read_back_channel(true, p)) return told;
    out.dead = true;
    const io_result res{err == ECONNRESET || err == EPIPE ? io_status::closed : io_status::failed,
                                err};
    return ring_failure{error_kind::peer_lost, next(),
                   "send to " + peer(next()) + ": " + res.describe() + " during " + where_of(p)};
  }

  // Non-blocking receives of connection k's current frame: its header (checked against the schedule before any
  // payload byte is read), then its payload — from the link's next slot, or from the socket, combined as it arrives.
  template <class T>
  std::optional<ring_failure> receive_some(const ring_plan& p, recv_stream& r, std::size_t k, steady::time_point deadline,
                                      bool& progress) {
    recv_link& link = in_lane(k);
    const int in = link.socket.get();
    if (r.reading_header) {
      const auto n = ::recv(in, r.header.data() + r.got, r.header.size() - r.got, MSG_DONTWAIT);
      if (n > 0) {
        r.got += static_cast<std::size_t>(n);
        progress = true;
        if (r.got == r.header.size()) {
          std::string why;
          const auto h = decode_frame_header(r.header, &why);
          if (!h)
            return ring_failure{error_kind::protocol, prev(),
                           "recv from " + peer(prev()) + ": " + why + " during " + where_of(p)};
          if (h->type == frame_type::abort) {
            in_.dead = true;  // it gave up; do not wait on it again
            return read_abort(in, *h, prev(), where_of(p), ranks_, r.header, link.seal.on() ? &link.seal.recv : nullptr);
          }
          if (auto bad = frame_mismatch(*h, header_for(p, r.it, link.data_frame())))
            return ring_failure{error_kind::protocol, prev(),
                           "recv from " + peer(prev()) + ": " + *bad + (link.seal.on() ? " (on a sealed link: altered on the wire?)" : "") +
                               " during " + where_of(p)};
          r.reading_header = false;
          r.got = 0;
          if (link.seal.on() && !link.seal.recv.begin(r.header))
            return ring_failure{error_kind::io, rank_, "AES-256-GCM opening failed (OpenSSL) during " + where_of(p)};
          if (link.through_shm()) {
            if (auto f = take_slot<T>(p, r.it, deadline)) return f;
            r.active = false;
            ++r.t;
          }
        }
      } else if (auto f = recv_failed(n, prev(), p)) {
        return f;
      }
    }
    if (r.active && !r.reading_header && link.seal.on()) return receive_sealed<T>(p, r, link, progress);
    if (r.active && !r.reading_header) {
      const ring_item& it = r.it;
      const bool narrowed = it.narrowed;
      std::uint8_t* dest = it.reduce || narrowed ? link.scratch() : it.ptr;
      ssize_t n = 0;
      if (r.got < it.wire_bytes) n = ::recv(in, dest + r.got, it.wire_bytes - r.got, MSG_DONTWAIT);
      if (n > 0) {
        r.got += static_cast<std::size_t>(n);
        progress = true;
        if (it.reduce || narrowed) {
          const std::size_t ready = r.got / (narrowed ? p.wire_esize : p.esize);
          combine<T>(p, it, link.scratch(), r.combined, ready - r.combined);
          r.combined = ready;
        }
      } else if (r.got < it.wire_bytes) {
        if (auto f = recv_failed(n, prev(), p)) return f;
      }
      if (r.got == it.wire_bytes) {
        if (it.finish) finish_part<T>(p, it);
        if (final_after_receive(p, it)) tell_final(p, it);
        r.active = false;
        ++r.t;
        progress = true;
      }
    }
    return std::nullopt;
  }

  // The payload and tag of a frame on a sealed connection: the payload lands (in the scratch, or where it is copied
  // to) and is opened piece by piece as it arrives (decrypted in place, or authenticated) and combined as on a plain
  // link; but the chunk counts as received — finished (the mean, the update), forwarded to the next rank, part of
  // the result — only once its tag verifies. A frame that fails ends the operation, whose buffer a failed operation
  // never promises anything about.
  template <class T>
  std::optional<ring_failure> receive_sealed(const ring_plan& p, recv_stream& r, recv_link& link, bool& progress) {
    const ring_item& it = r.it;
    const bool staged = it.reduce || it.narrowed;
    std::uint8_t* dest = staged ? link.scratch() : it.ptr;
    const std::size_t need = it.wire_bytes + seal_tag_size;
    iovec iov[2];
    int count = 0;
    if (r.got < it.wire_bytes) iov[count++] = {dest + r.got, it.wire_bytes - r.got};
    const std::size_t tag_got = r.got > it.wire_bytes ? r.got - it.wire_bytes : 0;
    iov[count++] = {r.tag.data() + tag_got, seal_tag_size - tag_got};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(count);
    const auto n = ::recvmsg(link.socket.get(), &msg, MSG_DONTWAIT);
    if (n <= 0) return recv_failed(n, prev(), p);
    const std::size_t before = r.got;
    r.got += static_cast<std::size_t>(n);
    progress = true;
    if (before < it.wire_bytes) {
      const std::size_t arrived = std::min(r.got, it.wire_bytes) - before;
      if (!link.seal.recv.update(dest + before, dest + before, arrived))
        return ring_failure{error_kind::io, rank_, "AES-256-GCM opening failed (OpenSSL) during " + where_of(p)};
      if (staged) {  // while the piece is in cache
        const std::size_t ready = std::min(r.got, it.wire_bytes) / (it.narrowed ? p.wire_esize : p.esize);
        combine<T>(p, it, dest, r.combined, ready - r.combined);
        r.combined = ready;
      }
    }
    if (r.got < need) return std::nullopt;
    if (!link.seal.recv.finish_open(r.tag))
      return ring_failure{error_kind::protocol, prev(),
                          "recv from " + peer(prev()) + ": a data frame fails authentication (AES-256-GCM tag) on the "
                          "link " + peer(prev()) + " -> " + peer(rank_) + ": altered, forged, replayed or reordered "
                          "on the wire during " + where_of(p)};
    if (it.finish) finish_part<T>(p, it);
    if (final_after_receive(p, it)) tell_final(p, it);
    r.active = false;
    ++r.t;
    return std::nullopt;
  }

  // Frames sent and received so far by the connections of one operation.
  static std::size_t frames_done(const op_streams& st) {
    std::size_t n = 0;
    for (std::size_t k = 0; k < st.sends; ++k) n += st.send[k].t;
    for (std::size_t k = 0; k < st.recvs; ++k) n += st.recv[k].t;
    return n;
  }

  // Nothing moved: waits until a socket is ready, the next rank speaks on its back channel, or the deadline —
  // polling without sleeping (but yielding) for the first `spin_` of the wait (a sleeping rank's wake-up is the
  // slow part of a small operation), then sleeping in poll().
  std::optional<ring_failure> wait_ready(const ring_plan& p, const op_streams& st, steady::time_point& idle_since,
                                    steady::time_point deadline, std::chrono::milliseconds timeout) {
    const auto now = steady::now();
    if (idle_since == steady::time_point{}) idle_since = now;
    const bool spinning = now - idle_since < spin_ && now < deadline;
    if (monitor_ && monitor_->fired()) return monitor_->verdict();
    std::array<pollfd, 2 * max_streams_per_peer + 1> fds{};
    nfds_t count = 0;
    const bool watch_next = !out_.eof;
    if (watch_next) fds[count++] = {out_.socket.get(), static_cast<short>(POLLIN | (st.send[0].want_out ? POLLOUT : 0)), 0};
    for (std::size_t k = 1; k < st.sends; ++k)
      if (st.send[k].want_out) fds[count++] = {more_out_[k - 1].socket.get(), POLLOUT, 0};
    bool receiving = false;
    for (std::size_t k = 0; k < st.recvs; ++k)
      if (st.recv[k].active) {
        receiving = true;
        fds[count++] = {(k == 0 ? in_ : more_in_[k - 1]).socket.get(), POLLIN, 0};
      }
    const bool sending_or_receiving = count > 0;
    if (monitor_) fds[count++] = {monitor_->wake_fd(), POLLIN, 0};  // a verdict ends the wait at once
    if (!sending_or_receiving) {
      // The only thing left is a send to a rank that already closed: it has everything it needs.
      return ring_failure{error_kind::peer_lost, next(),
                     "send to " + peer(next()) + ": connection closed during " + where_of(p)};
    }
    const int rc = ::poll(fds.data(), count, spinning ? 0 : poll_ms(deadline));
    // A spinning rank still lets other runnable threads have its CPU (more ranks or threads than cores).
    if (spinning && rc == 0) std::this_thread::yield();
    if (rc < 0 && errno != EINTR)
      return ring_failure{error_kind::io, rank_, std::string("poll: ") + std::strerror(errno) + " during " + where_of(p)};
    if (monitor_ && monitor_->fired()) return monitor_->verdict();
    if (rc == 0 && steady::now() >= deadline) {
      const int waited = receiving ? prev() : next();
      std::size_t sent = p.sched.items, got = p.sched.items;  // the slowest connection's place
      for (std::size_t k = 0; k < st.sends; ++k) sent = std::min(sent, st.send[k].t);
      for (std::size_t k = 0; k < st.recvs; ++k) got = std::min(got, st.recv[k].t);
      return ring_failure{error_kind::timeout, waited,
                     (receiving ? "no data from " : "could not send to ") + peer(waited) + " within " +
                         std::to_string(timeout.count()) + " ms: " + where_of(p) + " timed out (sent " +
                         std::to_string(sent) + " of " + std::to_string(p.sched.items) + " chunks, received " +
                         std::to_string(got) + ")"};
    }
    if (watch_next && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0)
      if (auto f = read_back_channel(st.sends_left(p), p)) return f;
    return std::nullopt;
  }

  // The payload of a slot frame: combined (or copied) straight from the link's next slot, then the slot is
  // handed back with a credit on the reverse direction of the same connection.
  template <class T>
  std::optional<ring_failure> take_slot(const ring_plan& p, const ring_item& ri, steady::time_point deadline) {
    if (ri.wire_bytes > in_.shm.slot_bytes())
      return ring_failure{error_kind::protocol, rank_, "internal: a chunk larger than a shared-memory slot during " + where_of(p)};
    const std::uint8_t* src = in_.take_slot();
    combine<T>(p, ri, src, 0, ri.bytes / sizeof(T));
    if (ri.finish) finish_part<T>(p, ri);
    if (in_.return_credit(op_header(p), deadline).status == io_status::timed_out)
      return ring_failure{error_kind::timeout, prev(), "could not return a shared-memory slot to " + peer(prev()) + " during " + where_of(p)};
    if (final_after_receive(p, ri)) tell_final(p, ri);  // after the credit: the sender goes on meanwhile
    // Otherwise the credit went, or the previous rank closed its end after sending its last frame (it needs no more
    // slots) or died (the data stream reports that, naming it, on the next receive).
    return std::nullopt;
  }

  // Elements [from, from + count) of item `it` arrived in `wire` (the payload as sent): combined into the buffer
  // (reduce-scatter) or copied there, widened from 16 bits when the plan narrows them.
  template <class T>
  static void combine(const ring_plan& p, const ring_item& it, const std::uint8_t* wire, std::size_t from, std::size_t count) {
    T* to = reinterpret_cast<T*>(it.ptr) + from;
    if constexpr (std::is_same_v<T, float>) {
      if (it.narrowed) {
        const auto* in = reinterpret_cast<const std::uint16_t*>(wire) + from;
        if (it.reduce) widen_add(to, in, count, p.wire);  // narrowing is for sum and mean only
        else widen_into(to, in, count, p.wire);
        return;
      }
    }
    const T* in = reinterpret_cast<const T*>(wire) + from;
    if (it.reduce) reduce_into(to, in, count, p.op);
    else std::memcpy(to, in, count * sizeof(T));
  }

  // A chunk of this rank's part is fully reduced: the mean's division, then all_reduce_update's update of it.
  template <class T>
  void finish_part(const ring_plan& p, const ring_item& ri) const {
    finish_reduce(reinterpret_cast<T*>(ri.ptr), ri.bytes / sizeof(T), p.op, n_);
    if constexpr (std::is_same_v<T, float>)  // keep what the other ranks will receive: the same bits everywhere
      if (p.wire != wire_compression::none && !p.sched.separate_gather)  // (all_reduce_update gathers parameters)
        round_to_wire(reinterpret_cast<float*>(ri.ptr), ri.bytes / sizeof(T), p.wire);
    if (p.on_reduced != nullptr) p.on_reduced(p.on_reduced_context, ri.first, ri.bytes / sizeof(T));
  }

  std::optional<ring_failure> recv_failed(ssize_t n, int from, const ring_plan& p) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
    in_.dead = true;
    const std::string why = n == 0 ? "connection closed" : std::strerror(errno);
    return ring_failure{error_kind::peer_lost, from,
                   "recv from " + peer(from) + ": " + why + " during " + where_of(p)};
  }


  // The next rank writes to us only to return shared-memory slots (credits) and to abort. EOF there matters only
  // while we still have something to send.
  std::optional<ring_failure> read_back_channel(bool sends_left, const ring_plan& p) {
    for (;;) {
      bool credit = false;
      auto f = read_back_frame(sends_left, p, credit);
      if (!credit) return f;
    }
  }

  // One frame from the back channel, if any is waiting; `credit` is set when it was a credit (taken).
  std::optional<ring_failure> read_back_frame(bool sends_left, const ring_plan& p, bool& credit) {
    std::array<std::uint8_t, frame_header_size> raw{};
    const auto first = ::recv(out_.socket.get(), raw.data(), raw.size(), MSG_DONTWAIT);
    if (first < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
    if (first <= 0) {
      out_.eof = true;
      if (!sends_left) return std::nullopt;
      out_.dead = true;
      return ring_failure{error_kind::peer_lost, next(),
                     "send to " + peer(next()) + ": " +
                         (first == 0 ? std::string("connection closed") : std::string(std::strerror(errno))) +
                         " during " + where_of(p)};
    }
    const auto r = read_exact(out_.socket.get(), raw.data() + first, raw.size() - static_cast<std::size_t>(first),
                                      steady::now() + abort_read_grace);
    std::string why;  // set only on failure: a credit must not allocate
    std::optional<frame_header> h;
    if (r.status == io_status::ok) h = decode_frame_header(raw, &why);
    if (h && h->type == frame_type::credit && out_.credit()) {
      credit = true;
      return std::nullopt;
    }
    out_.dead = true;
    if (!h || h->type != frame_type::abort)
      return ring_failure{error_kind::protocol, next(),
                     peer(next()) + " wrote " +
                         (h ? std::string(h->type == frame_type::credit ? "a credit it did not owe"
                                                                                : "a data frame")
                            : why.empty() ? std::string("truncated message") : why) +
                         " on the back channel during " + where_of(p)};
    return read_abort(out_.socket.get(), *h, next(), where_of(p), ranks_, raw, out_.seal.on() ? &out_.seal.recv : nullptr);
  }

  int n_ = 1;
  int rank_ = 0;
  std::size_t chunk_bytes_ = 0;
  std::chrono::microseconds spin_{0};  // ring_options::spin
  rank_map ranks_;
  send_link out_;  // to the next rank
  recv_link in_;   // from the previous rank
  std::vector<send_link> more_out_;  // more data connections to the next rank (another host: streams_per_peer)
  std::vector<recv_link> more_in_;   // more data connections from the previous rank
  liveness_monitor* monitor_ = nullptr;  // the flat ring's liveness, if any
  std::vector<std::uint8_t> wire_stage_;  // a chunk per connection narrowed for the wire (make_wire_stage)
  std::vector<std::uint8_t> seal_stage_;  // a chunk per connection encrypted for the wire (frame_seal.hpp)
};

}  // namespace mwstrat::detail
