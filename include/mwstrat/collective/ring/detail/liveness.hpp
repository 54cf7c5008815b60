#pragma once
// The ring's liveness, apart from step time. Beside each data link, start-up opens a second, authenticated TCP
// connection to the same neighbour that carries nothing but liveness frames; a thread of the ring's own (never the
// training thread) sends a heartbeat on both every `liveness_timeout / 5` (at most 1 s) and reads theirs. A
// neighbour from which nothing has arrived for `liveness_timeout` (stopped, frozen, cut off), or whose liveness
// connection closed without a goodbye (killed), is lost. A neighbour that is alive but slow (a long step, an
// evaluation, a checkpoint write) keeps beating from its own thread, so it is never declared lost; the operation
// timeout stays the outer bound.
//
// One verdict: the rank that finds a neighbour lost writes the verdict (culprit, cause, who detected it) as an abort
// frame on both its liveness connections before anything of it closes; a rank that reads a verdict first adopts it
// and passes it on the same way (back to its sender too). So a liveness connection that ends with no verdict and no
// goodbye before it is a neighbour's death (`dead_neighbours`: the survivors' evidence in regroup.hpp). A liveness
// stream is read in order, so a rank whose neighbour fails or exits because of a verdict reads that verdict before
// the close, and never blames the messenger. Each rank keeps the first verdict it forms or receives; the data path
// reports it (ring_collective wakes on `wake_fd`).
//
// Between hosts with a job token every liveness frame is sealed like a data frame (frame_seal.hpp): a forged beat,
// goodbye or verdict fails its tag and is itself a verdict naming the neighbour's link. A sealed beat that did not
// fit in the socket is kept and sent first next time (its counter is taken), where a plain one is dropped.

#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>

#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// How often a rank beats for a given liveness timeout: five beats per timeout, so that a late beat or two (a loaded
// machine, a short stop) is never taken for silence; at most one a second, at least one every 10 ms.
inline std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds liveness_timeout) {
  if (liveness_timeout.count() <= 0) return std::chrono::seconds(1);
  return std::clamp(liveness_timeout / 5, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

// Beats unread in the socket beyond which a rank stops beating to that neighbour (bytes): far below any socket
// buffer, so a verdict always fits after them.
inline constexpr int beat_backlog_limit = 4096;

// "5.0 s"
inline std::string liveness_seconds(steady::duration d) {
  return fixed_text(std::chrono::duration<double>(d).count(), 1) + " s";
}

class liveness_monitor {
 public:
  // `to_next` and `from_prev` are the liveness connections to ranks `next` and `prev` (the same rank in a ring of
  // two); `timeout` 0 never judges silence (heartbeats, closes and verdicts still count). `log` writes one line.
  liveness_monitor(unique_socket to_next, int next, unique_socket from_prev, int prev, int rank,
                   std::chrono::milliseconds timeout, rank_map ranks,
                   std::function<void(const std::string&)> log, link_seal to_next_seal = {},
                   link_seal from_prev_seal = {})
      : rank_(rank), timeout_(timeout), interval_(heartbeat_interval(timeout)), ranks_(std::move(ranks)),
        log_(std::move(log)) {
    links_[0].socket = std::move(to_next);
    links_[0].peer = next;
    links_[0].seal = std::move(to_next_seal);
    links_[1].socket = std::move(from_prev);
    links_[1].peer = prev;
    links_[1].seal = std::move(from_prev_seal);
    const auto now = steady::now();
    for (auto& l : links_) l.heard = now;
    stop_fd_ = unique_socket(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    wake_fd_ = unique_socket(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    thread_ = std::thread([this] { loop(); });
  }

  liveness_monitor(const liveness_monitor&) = delete;
  liveness_monitor& operator=(const liveness_monitor&) = delete;
  ~liveness_monitor() { stop(false); }

  // Ends the thread. `goodbye`: the rank leaves normally, its neighbours are told not to count its silence. Without
  // it (destroyed by an exception) the connections just close, and the neighbours find this rank lost.
  void stop(bool goodbye) {
    if (!thread_.joinable()) return;
    goodbye_.store(goodbye, std::memory_order_release);
    const std::uint64_t one = 1;
    (void)::write(stop_fd_.get(), &one, sizeof one);
    thread_.join();
    for (auto& l : links_) l.socket.reset();
  }

  // True once a verdict exists (cheap: one atomic load).
  [[nodiscard]] bool fired() const noexcept { return fired_.load(std::memory_order_acquire); }
  // Readable once a verdict exists (stays so): the data path polls it with its sockets.
  [[nodiscard]] int wake_fd() const noexcept { return wake_fd_.get(); }
  [[nodiscard]] std::optional<ring_failure> verdict() const {
    if (!fired()) return std::nullopt;
    const std::lock_guard lock(mutex_);
    return verdict_;
  }

  // Once a verdict exists: the neighbours whose liveness connection ended with no verdict and no goodbye before the
  // end — their processes are gone, since a live rank sends its verdict on every liveness connection before it
  // closes one (evidence for the survivors' regroup.hpp; a neighbour merely silent is not in it). Ends the monitor's
  // thread (it ends by itself once the verdict exists) and reads what is left on the connections, without waiting.
  [[nodiscard]] std::vector<int> dead_neighbours() {
    if (!fired()) return {};
    if (thread_.joinable()) thread_.join();
    std::vector<int> out;
    for (int k = 0; k < 2; ++k) {
      if (links_[k].open && links_[k].socket) read_link(k);
      if (links_[k].died && std::find(out.begin(), out.end(), links_[k].peer) == out.end())
        out.push_back(links_[k].peer);
    }
    return out;
  }

  // The data path of this rank failed for a reason of its own (a protocol error, a missed deadline): that is this
  // rank's verdict, passed on like one found here, unless a verdict came first (then that one is returned).
  ring_failure publish(ring_failure f) {
    decide(std::move(f), -1);
    return *verdict();
  }

  // The data path failed with something that may be the echo of a verdict (a neighbour closed or aborted): waits up
  // to `grace` for the verdict, returning early once neither neighbour's liveness connection can still bring one.
  [[nodiscard]] std::optional<ring_failure> await_verdict(steady::duration grace) const {
    const auto until = steady::now() + grace;
    while (steady::now() < until) {
      if (auto v = verdict()) return v;
      if (quiet_.load(std::memory_order_acquire)) return std::nullopt;
      pollfd p{wake_fd_.get(), POLLIN, 0};
      (void)::poll(&p, 1, 5);
    }
    return verdict();
  }

 private:
  struct link {
    unique_socket socket;
    int peer = -1;
    steady::time_point heard;  // when a byte last arrived
    // Silence is judged only once the neighbour has beaten: a neighbour still waiting for its other neighbour at
    // start-up (a late rank elsewhere in the ring) has no beating thread yet and is not lost; closes still count,
    // and the connect and operation timeouts bound that wait.
    bool beating = false;
    std::atomic<bool> open{true};  // still read and written (read by a publishing data path too)
    bool departed = false;     // said goodbye
    bool told = false;         // a verdict came on it: a close after that is the neighbour leaving, not dying
    bool died = false;         // it ended with no verdict and no goodbye before: the neighbour's process is gone
    link_seal seal;            // another host, a token: every frame carries a tag
    std::array<std::uint8_t, frame_header_size + abort_fixed_size + max_abort_text + seal_tag_size> buffer{};
    std::size_t have = 0;
    std::array<std::uint8_t, frame_header_size + seal_tag_size> partial{};  // a beat that went in part (or, sealed,
    std::size_t partial_size = 0;                                            // not at all); 0: none
    std::size_t partial_sent = 0;
  };

  std::string peer(int r) const { return ranks_.peer(r); }

  void loop() {
    auto next_beat = steady::now();
    while (!fired()) {
      auto now = steady::now();
      if (now >= next_beat) {
        beat(frame_type::heartbeat);
        next_beat = now + interval_;
      }
      pollfd fds[4];
      nfds_t count = 0;
      fds[count++] = {stop_fd_.get(), POLLIN, 0};
      fds[count++] = {wake_fd_.get(), POLLIN, 0};  // the data path published a verdict
      int index[2] = {-1, -1};
      auto wake = next_beat;
      for (int k = 0; k < 2; ++k) {
        if (!links_[k].open) continue;
        index[k] = static_cast<int>(count);
        fds[count++] = {links_[k].socket.get(), POLLIN, 0};
        if (timeout_.count() > 0 && links_[k].beating) wake = std::min(wake, links_[k].heard + timeout_);
      }
      const int rc = ::poll(fds, count, poll_ms(wake));
      if (rc < 0 && errno == EINTR) continue;  // (also after this process was stopped and continued)
      if (rc < 0) {
        decide(ring_failure{error_kind::io, rank_, "liveness: poll: " + std::string(std::strerror(errno))}, -1);
        break;
      }
      if (fds[0].revents != 0) break;  // stop
      // Read before judging: after this process itself was stopped, what its neighbours sent meanwhile is waiting.
      for (int k = 0; k < 2 && !fired(); ++k)
        if (index[k] >= 0 && fds[index[k]].revents != 0) read_link(k);
      if (fired()) break;
      now = steady::now();
      if (timeout_.count() > 0)
        for (int k = 0; k < 2 && !fired(); ++k) {
          link& l = links_[k];
          if (!l.beating) continue;
          if (l.open && now - l.heard >= timeout_) read_link(k);  // one last look: anything waiting is a sign of life
          now = steady::now();
          if (!fired() && l.open && now - l.heard >= timeout_) {
            decide(lost(l.peer, "silent for " + liveness_seconds(timeout_) + " (no heartbeat within the liveness timeout; " +
                                    "the operation timeout was not needed)"), -1);
            break;
          }
        }
      bool watching = false;
      for (const auto& l : links_) watching = watching || l.open;
      if (!watching) quiet_.store(true, std::memory_order_release);
    }
    quiet_.store(true, std::memory_order_release);
    if (!fired() && goodbye_.load(std::memory_order_acquire)) beat(frame_type::goodbye);
    for (auto& l : links_)
      if (l.socket) ::shutdown(l.socket.get(), SHUT_WR);
  }

  // The words of a verdict depend only on the culprit and the cause (not on which neighbour found it, nor on when
  // its thread looked), so two ranks that find the same loss at once still report the same words.
  ring_failure lost(int culprit, const std::string& cause) const {
    return ring_failure{error_kind::peer_lost, culprit, peer(culprit) + " was lost: " + cause};
  }

  // Non-blocking: a neighbour that does not read (stopped) cannot hold this thread up; a beat that does not fit in
  // its full socket buffer is not needed (the buffer already holds beats). A frame that went only in part is
  // finished first, so the stream stays at a frame boundary.
  void beat(frame_type type) {
    frame_header h;
    h.type = type;
    std::array<std::uint8_t, frame_header_size + seal_tag_size> raw{};
    encode(h, std::span<std::uint8_t, frame_header_size>(raw.data(), frame_header_size));
    const std::lock_guard lock(write_mutex_);
    for (auto& l : links_) {
      if (!l.open || !finish_partial(l)) continue;
      // A neighbour that has not read for a while (stopped) needs no more beats; the room they would take is kept
      // for the verdict, which must reach it before this rank's close (a close without one reads as a death).
      int queued = 0;
      if (::ioctl(l.socket.get(), SIOCOUTQ, &queued) == 0 && queued > beat_backlog_limit) continue;
      std::size_t size = frame_header_size;
      if (l.seal.on()) {
        seal_tag tag{};
        if (!l.seal.send.seal(std::span(raw.data(), frame_header_size), nullptr, nullptr, 0, tag)) continue;
        std::memcpy(raw.data() + frame_header_size, tag.data(), tag.size());
        size += tag.size();
      }
      const auto n = ::send(l.socket.get(), raw.data(), size, MSG_DONTWAIT | MSG_NOSIGNAL);
      const std::size_t went = n > 0 ? static_cast<std::size_t>(n) : 0;
      if (went < size && (went > 0 || l.seal.on())) {  // a sealed beat's counter is taken: it must still go
        l.partial = raw;
        l.partial_size = size;
        l.partial_sent = went;
      }
    }
  }

  // Sends what is left of a frame that went in part (or not at all); true when nothing is left.
  static bool finish_partial(link& l) {
    if (l.partial_size == 0) return true;
    const auto n = ::send(l.socket.get(), l.partial.data() + l.partial_sent, l.partial_size - l.partial_sent,
                          MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) l.partial_sent += static_cast<std::size_t>(n);
    if (l.partial_sent == l.partial_size) l.partial_size = l.partial_sent = 0;
    return l.partial_size == 0;
  }

  // Everything waiting on link k: heartbeats, a goodbye, a verdict, or the end of the connection.
  void read_link(int k) {
    link& l = links_[k];
    for (;;) {
      const std::size_t tag = l.seal.tag_bytes();
      const std::size_t want = l.have < frame_header_size ? frame_header_size : frame_header_size + payload_of(l) + tag;
      const auto n = ::recv(l.socket.get(), l.buffer.data() + l.have, want - l.have, MSG_DONTWAIT);
      if (n > 0) {
        l.heard = steady::now();
        l.beating = true;
        l.have += static_cast<std::size_t>(n);
        if (l.have < frame_header_size) continue;
        std::string why;
        const auto h = decode_frame_header(std::span<const std::uint8_t>(l.buffer.data(), frame_header_size), &why);
        if (!h || (h->type != frame_type::heartbeat && h->type != frame_type::goodbye && h->type != frame_type::abort)) {
          decide(ring_failure{error_kind::protocol, l.peer,
                              peer(l.peer) + " sent " + (h ? "a data frame" : why) + " on its liveness connection"},
                 k);
          return;
        }
        const std::size_t payload = payload_of(l);
        if (l.have < frame_header_size + payload + tag) continue;
        l.have = 0;
        if (l.seal.on()) {
          seal_tag t{};
          std::memcpy(t.data(), l.buffer.data() + frame_header_size + payload, t.size());
          if (!l.seal.recv.open(std::span(l.buffer.data(), frame_header_size), l.buffer.data() + frame_header_size,
                                payload, t)) {
            decide(ring_failure{error_kind::protocol, l.peer,
                                "a liveness frame from " + peer(l.peer) + " fails authentication (AES-256-GCM tag) on "
                                "the link " + peer(l.peer) + " -> " + peer(rank_) +
                                    " (liveness): altered, forged, replayed or reordered on the wire"},
                   -1);  // on both links: the neighbour reads it on this one before the close
            return;
          }
        }
        if (h->type == frame_type::goodbye) {
          l.departed = true;
          l.open = false;
          return;
        }
        if (h->type == frame_type::abort) {
          l.told = true;
          const auto a = decode_abort(std::span<const std::uint8_t>(l.buffer.data() + frame_header_size,
                                                                    static_cast<std::size_t>(h->payload)),
                                      ranks_.size());
          if (!a) {
            decide(ring_failure{error_kind::protocol, l.peer, peer(l.peer) + " sent a malformed verdict"}, k);
            return;
          }
          decide(ring_failure{static_cast<error_kind>(a->kind), a->culprit >= 0 ? a->culprit : l.peer, a->text}, k);
          return;
        }
        continue;  // a heartbeat
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      l.open = false;
      if (l.departed) return;
      const int err = n < 0 ? errno : 0;
      if (!l.told && (n == 0 || err == ECONNRESET || err == EPIPE)) l.died = true;
      if (n == 0 || err == ECONNRESET || err == EPIPE)
        decide(lost(l.peer, "its connection closed (the process ended)"), k);
      else if (err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH)
        decide(lost(l.peer, "refused (" + std::string(std::strerror(err)) + ")"), k);
      else
        decide(lost(l.peer, std::string(std::strerror(err))), k);
      return;
    }
  }

  std::size_t payload_of(const link& l) const {
    if (l.have < frame_header_size) return 0;
    std::string why;
    const auto h = decode_frame_header(std::span<const std::uint8_t>(l.buffer.data(), frame_header_size), &why);
    return h && h->type == frame_type::abort ? static_cast<std::size_t>(h->payload) : 0;
  }

  // The first verdict of this rank: logged, passed on along both liveness connections (except the one it came from),
  // then published to the data path.
  void decide(ring_failure f, int from) {
    const std::lock_guard lock(write_mutex_);  // the monitor's thread, or the data path's (publish)
    if (fired()) return;
    const auto limit = steady::now() + abort_send_grace;
    // On every open link, the one it came from too: a rank's every close comes after its verdict, so a close with no
    // verdict before it is a death (dead_neighbours). The culprit too: if it was only stopped, it learns it was given
    // up.
    for (int k = 0; k < 2; ++k)
      if (links_[k].open) {
        link& l = links_[k];
        if (l.partial_size > 0 &&
            write_all(l.socket.get(), l.partial.data() + l.partial_sent, l.partial_size - l.partial_sent, limit)
                    .status != io_status::ok)
          continue;
        l.partial_size = l.partial_sent = 0;
        const abort_frame frame = make_abort_frame(f, {}, &l.seal.send);  // after the beats: the next counter
        (void)write_all(l.socket.get(), frame.bytes.data(), frame.size, limit);
      }
    if (log_) log_(f.text + (from < 0 ? " [verdict of this rank]" : " [verdict heard from rank " + std::to_string(links_[from].peer) + "]"));
    {
      const std::lock_guard publish_lock(mutex_);
      verdict_ = std::move(f);
    }
    fired_.store(true, std::memory_order_release);
    const std::uint64_t one = 1;
    (void)::write(wake_fd_.get(), &one, sizeof one);
  }

  int rank_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds interval_;
  rank_map ranks_;
  std::function<void(const std::string&)> log_;
  link links_[2];
  unique_socket stop_fd_, wake_fd_;  // eventfds (closed like sockets)
  std::atomic<bool> fired_{false};
  std::atomic<bool> quiet_{false};  // nothing more can arrive: the thread ended or every link closed
  std::atomic<bool> goodbye_{false};
  std::mutex write_mutex_;  // one writer of the liveness connections at a time; decides once
  mutable std::mutex mutex_;
  std::optional<ring_failure> verdict_;
  std::thread thread_;
};

}  // namespace mwstrat::detail
