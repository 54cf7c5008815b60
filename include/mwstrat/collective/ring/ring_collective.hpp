#pragma once
/// \file
/// `ring_collective`: ranks as processes connected in a TCP ring (Boost.Asio for name resolution and the
/// listening socket, non-blocking POSIX sockets and poll() on the data path).
///
/// Rank r listens on `addresses[r]`, connects to rank r+1 (retrying with backoff until the start-up
/// deadline) and accepts rank r-1; both connections are authenticated by a handshake (magic, protocol version,
/// world size, ranks, cluster and model fingerprints, and an HMAC-SHA256 proof of the job token when one is
/// set). All-reduce is the bandwidth-optimal ring: a reduce-scatter then an all-gather, 2(n-1) steps over
/// n segments, each segment cut into chunks that are pipelined, the send to the next rank and the receive from
/// the previous one progressing at the same time. Each element is combined in a fixed order, so the same
/// inputs give the same bits on every rank and every run. See docs/collectives.md.
///
/// Failure: a closed connection raises `peer_lost_error`, a missed deadline `timeout_error`, a frame that is
/// not the one expected `protocol_error`; the rank that detects a failure tells both neighbours (an abort
/// frame naming the culprit), which pass it on, so every rank fails fast naming the same culprit. A failed
/// ring stays failed: later operations rethrow the first error.
///
/// Transport: when both ends of a link are on the same host (and `ring_options::transport` allows it), the
/// payloads travel through a shared-memory region owned by that link, and the TCP connection carries only the
/// frame headers (one per chunk, naming the slot implicitly: slots are used in turn) and, backwards, one credit
/// per slot the receiver is done with. Everything above — validation, aborts, deadlines — is unchanged.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/op_queue.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <arpa/inet.h>
#include <boost/asio/ip/tcp.hpp>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace mwstrat {

/// One rank of a TCP ring. Construction blocks until the ring is connected (or throws); use from one thread
/// at a time (plus its own asynchronous worker).
class ring_collective {
 public:
  /// Listens, connects and handshakes per `options`; throws `config_error` for bad options, `timeout_error`
  /// when the neighbours do not appear before `connect_timeout`, `protocol_error` when a neighbour refuses
  /// this rank or is not an mwstrat peer, `io_error` when the address cannot be listened on.
  explicit ring_collective(ring_options options)
      : options_(std::move(options)), uncaught_(std::uncaught_exceptions()) {
    n_ = static_cast<int>(options_.addresses.size());
    rank_ = options_.rank;
    if (n_ < 1) throw config_error({"ring"}, "ring_options.addresses is empty");
    if (rank_ < 0 || rank_ >= n_)
      throw config_error({"ring"}, "rank " + std::to_string(rank_) + " is out of range for " + std::to_string(n_) +
                                       " addresses");
    for (int k = 0; k < n_; ++k) {
      auto parsed = detail::parse_address(options_.addresses[static_cast<std::size_t>(k)]);
      if (!parsed)
        throw config_error({"ring", rank_}, "address of rank " + std::to_string(k) + " '" +
                                                options_.addresses[static_cast<std::size_t>(k)] +
                                                "' is not host:port or [v6]:port");
      parsed_.push_back(std::move(*parsed));
    }
    if (options_.job_token) {
      token_ = *options_.job_token;
    } else if (const char* env = std::getenv("MWSTRAT_JOB_TOKEN")) {
      token_ = env;
    }
    chunk_bytes_ = std::max<std::size_t>(4096, (options_.chunk_bytes + 63) / 64 * 64);
    want_shm_ = options_.transport == ring_transport::automatic;
    if (const char* env = std::getenv("MWSTRAT_RING_TRANSPORT")) {
      const std::string_view v = env;
      if (v == "tcp") want_shm_ = false;
      else if (v == "auto") want_shm_ = true;
      else throw config_error({"ring", rank_}, "MWSTRAT_RING_TRANSPORT is '" + std::string(v) + "', expected tcp or auto");
    }
    spin_ = options_.spin;
    if (const char* env = std::getenv("MWSTRAT_RING_SPIN_US")) {
      const std::string_view v = env;
      long long us = -1;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), us);
      if (ec != std::errc{} || end != v.data() + v.size() || us < 0 || us > 1'000'000)
        throw config_error({"ring", rank_}, "MWSTRAT_RING_SPIN_US is '" + std::string(v) +
                                                "', expected microseconds in 0..1000000");
      spin_ = std::chrono::microseconds(us);
    }
    if (spin_ < std::chrono::microseconds::zero())
      throw config_error({"ring", rank_}, "ring_options.spin is negative");
    if (want_shm_ && n_ > 1) host_ = detail::host_identity();
    cluster_digest_ = detail::sha256(options_.cluster_fingerprint);
    model_digest_ = detail::sha256(options_.model_fingerprint);
    if (n_ > 1) {
      connect_ring();
      // TCP payloads land in scratch before they are combined; shared-memory ones are combined from their slot.
      if (!shm_in_) scratch_.reset(static_cast<std::uint8_t*>(::operator new(chunk_bytes_, std::align_val_t{64})));
    } else if (rank_ == 0) {
      log("started: tcp://" + options_.addresses[0] + ", waiting for 1 worker (itself)");
    }
  }

  ring_collective(const ring_collective&) = delete;
  ring_collective& operator=(const ring_collective&) = delete;

  /// Waits for queued asynchronous operations (each bounded by its deadline), then closes the connections.
  /// When destroyed by an exception, shuts the connections down first, so queued operations and the other
  /// ranks fail fast (`peer_lost_error` naming this rank) instead of waiting for their deadline.
  ~ring_collective() {
    if (std::uncaught_exceptions() > uncaught_) {
      if (next_) ::shutdown(next_.get(), SHUT_RDWR);
      if (prev_) ::shutdown(prev_.get(), SHUT_RDWR);
    }
    queue_.stop();
  }

  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks in the ring.
  [[nodiscard]] int size() const noexcept { return n_; }
  /// True when both links of this rank carry payloads through shared memory (see `ring_transport`).
  [[nodiscard]] bool uses_shared_memory() const noexcept { return shm_out_ && shm_in_; }
  /// The configured address of rank `r`.
  [[nodiscard]] const std::string& address(int r) const { return options_.addresses.at(static_cast<std::size_t>(r)); }

  /// In-place all-reduce: every rank ends with the reduction of all ranks' `data`.
  template <collective_element T>
  void all_reduce(std::span<T> data, reduce_op op, op_options options = {}) {
    queue_.drain();
    all_reduce_now(data, op, options);
  }

  /// Starts an all-reduce on this rank's worker thread; operations complete in issue order. `data` must stay
  /// alive and untouched until the handle's `wait()` returns.
  template <collective_element T>
  [[nodiscard]] op_handle all_reduce_async(std::span<T> data, reduce_op op, op_options options = {}) {
    return queue_.push([this, data, op, options] { all_reduce_now(data, op, options); });
  }

  /// All-reduce fused with an elementwise update, so that each rank updates only its own part of the parameters:
  /// the reduce-scatter half of the ring leaves each rank one part of `gradients` fully reduced, and as each chunk
  /// of it is final this rank calls `update(first, count)` (gradients[first, first + count) hold the result; the
  /// call must update params[first, first + count) from them, touch nothing else, and not throw); the all-gather
  /// half then carries those parts of `params`, not of the gradients. Every rank ends with the same `params`, each
  /// part exactly as its owner updated it; the other parts of `gradients` are left partially reduced. For an
  /// optimizer whose update of an element depends only on that element (plain SGD) this is the same result as
  /// `all_reduce` then updating everything, with a fraction 1/size() of the update work and of its memory traffic.
  template <collective_element T, class Update>
  void all_reduce_update(std::span<T> gradients, reduce_op op, std::span<T> params, Update&& update,
                         op_options options = {}) {
    queue_.drain();
    if (params.size() != gradients.size())
      throw config_error({"ring", rank_}, "all_reduce_update: " + std::to_string(params.size()) +
                                              " parameters but " + std::to_string(gradients.size()) + " gradients");
    if (n_ == 1) {  // the reduction of one rank is its input
      if (!gradients.empty()) update(std::size_t{0}, gradients.size());
      return;
    }
    plan p = make_plan(detail::op_kind::all_reduce_update, detail::dtype_of<T>(), static_cast<std::uint8_t>(op),
                       gradients.size(), reinterpret_cast<std::uint8_t*>(gradients.data()));
    p.op = op;
    p.gather_base = reinterpret_cast<std::uint8_t*>(params.data());
    p.on_reduced_context = static_cast<void*>(std::addressof(update));
    p.on_reduced = [](void* context, std::size_t first, std::size_t count) {
      (*static_cast<std::remove_reference_t<Update>*>(context))(first, count);
    };
    const std::size_t largest = (gradients.size() + static_cast<std::size_t>(n_) - 1) / static_cast<std::size_t>(n_);
    p.chunks = chunks_for(largest * sizeof(T));
    p.items = static_cast<std::size_t>(2 * (n_ - 1)) * p.chunks;
    run<T>(p, options);
  }

  /// Copies `root`'s `data` into every rank's `data`, pipelined along the ring.
  template <collective_element T>
  void broadcast(std::span<T> data, int root, op_options options = {}) {
    queue_.drain();
    if (root < 0 || root >= n_)
      throw config_error({"ring", rank_}, "broadcast: root " + std::to_string(root) + " is out of range for " +
                                              std::to_string(n_) + " ranks");
    plan p = make_plan(detail::op_kind::broadcast, detail::dtype_of<T>(), 0, data.size(),
                       reinterpret_cast<std::uint8_t*>(data.data()));
    p.root = root;
    p.chunks = chunks_for(data.size_bytes());
    p.items = p.chunks;
    run<T>(p, options);
  }

  /// Gathers every rank's `mine` into `all` (size() * mine.size() elements), in rank order.
  template <collective_element T>
  void all_gather(std::span<const T> mine, std::span<T> all, op_options options = {}) {
    queue_.drain();
    const auto n = static_cast<std::size_t>(n_);
    if (all.size() != n * mine.size())
      throw config_error({"ring", rank_}, "all_gather: output holds " + std::to_string(all.size()) +
                                              " elements, expected size() * mine.size() = " +
                                              std::to_string(n * mine.size()));
    T* own = all.data() + static_cast<std::size_t>(rank_) * mine.size();
    if (!mine.empty() && own != mine.data()) std::memmove(own, mine.data(), mine.size_bytes());
    plan p = make_plan(detail::op_kind::all_gather, detail::dtype_of<T>(), 0, all.size(),
                       reinterpret_cast<std::uint8_t*>(all.data()));
    p.segment = mine.size();
    p.chunks = chunks_for(mine.size_bytes());
    p.items = static_cast<std::size_t>(n_ - 1) * p.chunks;
    run<T>(p, options);
  }

  /// Returns once every rank has entered the barrier (a one-element all-reduce around the ring).
  void barrier(op_options options = {}) {
    queue_.drain();
    std::int32_t token = 0;
    plan p = make_plan(detail::op_kind::barrier, detail::wire_dtype::i32, static_cast<std::uint8_t>(reduce_op::sum), 1,
                       reinterpret_cast<std::uint8_t*>(&token));
    p.op = reduce_op::sum;
    p.chunks = 1;
    p.items = static_cast<std::size_t>(2 * (n_ - 1));
    run<std::int32_t>(p, options);
  }

 private:
  using steady = detail::steady;

  // One operation, described so that both streams (send to next, receive from previous) are computed from the
  // item index alone: item t is step t / chunks, chunk t % chunks.
  struct plan {
    detail::op_kind kind{};
    detail::wire_dtype type{};
    reduce_op op = reduce_op::sum;
    std::uint8_t reduction = 0;
    std::uint64_t seq = 0;
    std::size_t count = 0;    // elements of the whole operation
    std::size_t esize = 0;
    std::uint8_t* base = nullptr;
    std::size_t segment = 0;  // all_gather: elements per rank
    std::size_t chunks = 1;   // chunks per segment (per buffer for broadcast)
    std::size_t items = 0;
    int root = 0;
    std::uint8_t* gather_base = nullptr;  // all_reduce_update: the buffer the all-gather steps carry
    void (*on_reduced)(void*, std::size_t, std::size_t) = nullptr;  // all_reduce_update: a part is final
    void* on_reduced_context = nullptr;
  };

  struct item {
    std::uint8_t* ptr = nullptr;
    std::size_t bytes = 0;
    std::uint32_t step = 0;
    std::uint32_t chunk = 0;
    std::size_t first = 0;  // element offset of the chunk in the operation's buffer
    bool reduce = false;    // received bytes are combined with the buffer (reduce-scatter)
    bool finish = false;    // the last reduce-scatter step: apply mean
  };

  plan make_plan(detail::op_kind kind, detail::wire_dtype type, std::uint8_t reduction, std::size_t count,
                 std::uint8_t* base) {
    plan p;
    p.kind = kind;
    p.type = type;
    p.reduction = reduction;
    p.seq = next_seq_++;
    p.count = count;
    p.esize = detail::dtype_size(type);
    p.base = base;
    return p;
  }

  std::size_t chunks_for(std::size_t bytes) const { return std::max<std::size_t>(1, (bytes + chunk_bytes_ - 1) / chunk_bytes_); }

  int mod(long long v) const { return static_cast<int>(((v % n_) + n_) % n_); }
  int next() const { return (rank_ + 1) % n_; }
  int prev() const { return (rank_ + n_ - 1) % n_; }

  std::size_t seg_begin(const plan& p, int s) const {
    if (p.kind == detail::op_kind::all_gather) return static_cast<std::size_t>(s) * p.segment;
    return p.count * static_cast<std::size_t>(s) / static_cast<std::size_t>(n_);
  }

  // The chunk of segment `seg` (or of the whole buffer for broadcast) that item t moves; false if empty.
  bool chunk_of(const plan& p, std::size_t t, int seg, item& it) const {
    const std::size_t step = t / p.chunks, j = t % p.chunks;
    std::size_t begin = 0, len = p.count;
    if (p.kind != detail::op_kind::broadcast) {
      begin = seg_begin(p, seg);
      len = seg_begin(p, seg + 1) - begin;
    }
    const std::size_t lo = begin + len * j / p.chunks, hi = begin + len * (j + 1) / p.chunks;
    const bool gathering = p.gather_base != nullptr && step >= static_cast<std::size_t>(n_ - 1);
    it.ptr = (gathering ? p.gather_base : p.base) + lo * p.esize;
    it.bytes = (hi - lo) * p.esize;
    it.first = lo;
    it.step = static_cast<std::uint32_t>(step);
    it.chunk = static_cast<std::uint32_t>(j);
    return hi > lo;
  }

  bool send_item(const plan& p, std::size_t t, item& it) const {
    if (p.kind == detail::op_kind::broadcast) {
      if (next() == p.root) return false;
      return chunk_of(p, t, 0, it);
    }
    const auto step = static_cast<long long>(t / p.chunks);
    return chunk_of(p, t, mod(rank_ - step), it);
  }

  bool recv_item(const plan& p, std::size_t t, item& it) const {
    if (p.kind == detail::op_kind::broadcast) {
      if (rank_ == p.root) return false;
      return chunk_of(p, t, 0, it);
    }
    const auto step = static_cast<long long>(t / p.chunks);
    if (!chunk_of(p, t, mod(rank_ - step - 1), it)) return false;
    const bool reducing = p.kind == detail::op_kind::all_reduce || p.kind == detail::op_kind::all_reduce_update ||
                          p.kind == detail::op_kind::barrier;
    it.reduce = reducing && step < n_ - 1;
    it.finish = reducing && step == n_ - 2;
    return true;
  }

  // How many receive items must be complete before send item t may go: a rank forwards what it received.
  std::size_t send_dependency(const plan& p, std::size_t t) const {
    if (p.kind == detail::op_kind::broadcast) return rank_ == p.root ? 0 : t + 1;
    return t < p.chunks ? 0 : t - p.chunks + 1;
  }

  detail::frame_header header_for(const plan& p, const item& it, bool through_shm) const {
    detail::frame_header h;
    h.type = through_shm ? detail::frame_type::slot : detail::frame_type::data;
    h.op = p.kind;
    h.type_of_elements = p.type;
    h.reduction = p.reduction;
    h.seq = p.seq;
    h.count = p.count;
    h.step = it.step;
    h.chunk = it.chunk;
    h.payload = it.bytes;
    return h;
  }

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    plan p = make_plan(detail::op_kind::all_reduce, detail::dtype_of<T>(), static_cast<std::uint8_t>(op), data.size(),
                       reinterpret_cast<std::uint8_t*>(data.data()));
    p.op = op;
    const std::size_t largest = (data.size() + static_cast<std::size_t>(n_) - 1) / static_cast<std::size_t>(n_);
    p.chunks = chunks_for(largest * sizeof(T));
    p.items = static_cast<std::size_t>(2 * (n_ - 1)) * p.chunks;
    run<T>(p, options);
  }

  // ---------------------------------------------------------------------------------------------------------
  // The data path.

  struct failure {
    error_kind kind;
    int culprit;
    std::string text;
  };

  template <class T>
  void run(plan& p, op_options options) {
    if (broken_) std::rethrow_exception(broken_);
    if (n_ == 1 || p.items == 0) return;  // one rank: the result is the input (mean over one rank is a no-op)
    const auto timeout = options.timeout.count() > 0 ? options.timeout : options_.op_timeout;
    const auto deadline = steady::now() + timeout;
    std::optional<failure> f = pump<T>(p, deadline, timeout);
    if (f) fail(p, *f);
  }

  template <class T>
  std::optional<failure> pump(const plan& p, steady::time_point deadline, std::chrono::milliseconds timeout) {
    const int out = next_.get(), in = prev_.get();
    const bool shm_send = static_cast<bool>(shm_out_), shm_recv = static_cast<bool>(shm_in_);
    const std::size_t total = p.items;
    std::size_t ts = 0, tr = 0;  // next item to send / receive
    item si, ri;
    bool sending = false, receiving = false, reading_header = true, credit_wait = false;
    std::size_t send_payload = 0;  // bytes of the current send item that go on the socket (0 through shm)
    std::array<std::uint8_t, detail::frame_header_size> send_header{}, recv_header{};
    std::size_t sent = 0, got = 0, combined = 0;  // bytes of the current send item / receive item
    inflight_ = {};
    steady::time_point idle_since{};  // when the current wait began (zero: not waiting)

    const auto where = [&] { return std::string(detail::op_name(p.kind)) + " #" + std::to_string(p.seq); };
    const auto peer = [&](int r) { return "rank " + std::to_string(r) + " (" + address(r) + ")"; };

    for (;;) {
      credit_wait = false;
      if (!sending) {
        while (ts < total && !send_item(p, ts, si)) ++ts;
        if (ts < total && tr >= send_dependency(p, ts)) {
          // Through shared memory a send needs a free slot: collect the credits that have come back.
          if (shm_send && credits_ == 0 && !next_eof_)
            if (auto f = read_back_channel(true, where())) return f;
          if (shm_send && credits_ == 0) {
            if (next_eof_)
              return failure{error_kind::peer_lost, next(), "send to " + peer(next()) + ": connection closed during " +
                                                                where()};
            credit_wait = true;
          } else {
            if (shm_send) {
              std::memcpy(shm_out_.slot(send_slot_++), si.ptr, si.bytes);
              --credits_;
              std::atomic_thread_fence(std::memory_order_release);  // the slot's bytes before the header names it
            }
            send_payload = shm_send ? 0 : si.bytes;
            detail::encode(header_for(p, si, shm_send),
                           std::span<std::uint8_t, detail::frame_header_size>(send_header));
            sending = true;
            sent = 0;
          }
        }
      }
      if (!receiving) {
        while (tr < total && !recv_item(p, tr, ri)) ++tr;
        if (tr < total) {
          receiving = true;
          reading_header = true;
          got = 0;
          combined = 0;
        }
      }
      if (!sending && !receiving && !credit_wait) {
        if (ts >= total) break;
        // A send waits for a receive that is not coming: only possible if the plan is inconsistent.
        return failure{error_kind::protocol, rank_, "internal: ring schedule stalled during " + where()};
      }
      bool progress = false, want_out = false;
      if (sending) {
        iovec iov[2];
        int count = 0;
        if (sent < send_header.size()) iov[count++] = {send_header.data() + sent, send_header.size() - sent};
        const std::size_t body = sent > send_header.size() ? sent - send_header.size() : 0;
        if (send_payload > body) iov[count++] = {si.ptr + body, send_payload - body};
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(count);
        const auto n = ::sendmsg(out, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          sent += static_cast<std::size_t>(n);
          progress = true;
          inflight_ = {si.ptr, send_header.size() + send_payload, sent, send_header};
          if (sent == send_header.size() + send_payload) {
            sending = false;
            inflight_ = {};
            ++ts;
          }
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          want_out = true;
        } else {
          const int err = errno;
          // The next rank may have said why before it closed: an abort waiting on the back channel names the
          // real culprit (it is readable even after a reset).
          if (auto told = read_back_channel(true, where())) return told;
          next_dead_ = true;
          const detail::io_result r{err == ECONNRESET || err == EPIPE ? detail::io_status::closed
                                                                      : detail::io_status::failed,
                                    err};
          return failure{error_kind::peer_lost, next(),
                         "send to " + peer(next()) + ": " + r.describe() + " during " + where()};
        }
      }
      if (receiving) {
        if (reading_header) {
          const auto n = ::recv(in, recv_header.data() + got, recv_header.size() - got, MSG_DONTWAIT);
          if (n > 0) {
            got += static_cast<std::size_t>(n);
            progress = true;
            if (got == recv_header.size()) {
              std::string why;
              const auto h = detail::decode_frame_header(recv_header, &why);
              if (!h) return failure{error_kind::protocol, prev(), "recv from " + peer(prev()) + ": " + why +
                                                                      " during " + where()};
              if (h->type == detail::frame_type::abort) {
                prev_dead_ = true;  // it gave up; do not wait on it again
                return read_abort(in, *h, prev(), where());
              }
              if (auto bad = detail::frame_mismatch(*h, header_for(p, ri, shm_recv)))
                return failure{error_kind::protocol, prev(),
                               "recv from " + peer(prev()) + ": " + *bad + " during " + where()};
              reading_header = false;
              got = 0;
              if (shm_recv) {
                if (auto f = take_slot<T>(p, ri, deadline, where())) return f;
                receiving = false;
                ++tr;
              }
            }
          } else if (auto f = recv_failed(n, prev(), where())) {
            return f;
          }
        }
        if (receiving && !reading_header) {
          std::uint8_t* dest = ri.reduce ? scratch_.get() : ri.ptr;
          ssize_t n = 0;
          if (got < ri.bytes) n = ::recv(in, dest + got, ri.bytes - got, MSG_DONTWAIT);
          if (n > 0) {
            got += static_cast<std::size_t>(n);
            progress = true;
            if (ri.reduce) {
              const std::size_t ready = got / sizeof(T);
              detail::reduce_into(reinterpret_cast<T*>(ri.ptr) + combined,
                                  reinterpret_cast<const T*>(scratch_.get()) + combined, ready - combined, p.op);
              combined = ready;
            }
          } else if (got < ri.bytes) {
            if (auto f = recv_failed(n, prev(), where())) return f;
          }
          if (got == ri.bytes) {
            if (ri.finish) finish_part<T>(p, ri);
            receiving = false;
            ++tr;
            progress = true;
          }
        }
      }
      if (progress) {
        idle_since = steady::time_point{};
        continue;
      }
      // Nothing moved: wait until a socket is ready, the next rank speaks on its back channel, or the deadline —
      // polling without sleeping (but yielding) for the first `spin_` of the wait (a sleeping rank's wake-up is the
      // slow part of a small operation), then sleeping in poll().
      const auto now = steady::now();
      if (idle_since == steady::time_point{}) idle_since = now;
      const bool spinning = now - idle_since < spin_ && now < deadline;
      pollfd fds[2];
      nfds_t count = 0;
      const bool watch_next = !next_eof_;
      if (watch_next) fds[count++] = {out, static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0};
      const nfds_t in_at = count;
      if (receiving) fds[count++] = {in, POLLIN, 0};
      if (count == 0) {
        // The only thing left is a send to a rank that already closed: it has everything it needs.
        return failure{error_kind::peer_lost, next(), "send to " + peer(next()) + ": connection closed during " +
                                                          where()};
      }
      const int rc = ::poll(fds, count, spinning ? 0 : detail::poll_ms(deadline));
      // A spinning rank still lets other runnable threads have its CPU (more ranks or threads than cores).
      if (spinning && rc == 0) std::this_thread::yield();
      if (rc < 0 && errno != EINTR)
        return failure{error_kind::io, rank_, std::string("poll: ") + std::strerror(errno) + " during " + where()};
      if (rc == 0 && steady::now() >= deadline) {
        const int waited = receiving ? prev() : next();
        return failure{error_kind::timeout, waited,
                       (receiving ? "no data from " : "could not send to ") + peer(waited) + " within " +
                           std::to_string(timeout.count()) + " ms: " + where() + " timed out (sent " +
                           std::to_string(ts) + " of " + std::to_string(total) + " chunks, received " +
                           std::to_string(tr) + ")"};
      }
      if (watch_next && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        if (auto f = read_back_channel(ts < total, where())) return f;
      }
      (void)in_at;
    }
    return std::nullopt;
  }

  // The payload of a slot frame: combined (or copied) straight from the link's next slot, then the slot is
  // handed back with a credit on the reverse direction of the same connection.
  template <class T>
  std::optional<failure> take_slot(const plan& p, const item& ri, steady::time_point deadline,
                                   const std::string& where) {
    if (ri.bytes > shm_in_.slot_bytes())
      return failure{error_kind::protocol, rank_, "internal: a chunk larger than a shared-memory slot during " + where};
    std::atomic_thread_fence(std::memory_order_acquire);  // the header arrived, so the slot's bytes have too
    const std::uint8_t* src = shm_in_.slot(recv_slot_++);
    if (ri.reduce)
      detail::reduce_into(reinterpret_cast<T*>(ri.ptr), reinterpret_cast<const T*>(src), ri.bytes / sizeof(T), p.op);
    else
      std::memcpy(ri.ptr, src, ri.bytes);
    if (ri.finish) finish_part<T>(p, ri);
    detail::frame_header h;
    h.type = detail::frame_type::credit;
    h.op = p.kind;
    h.type_of_elements = p.type;
    h.seq = p.seq;
    std::array<std::uint8_t, detail::frame_header_size> raw{};
    detail::encode(h, raw);
    if (credits_refused_) return std::nullopt;
    // At most one credit per slot is ever unread, far below the socket buffer: this does not wait in practice.
    const auto r = detail::write_all(prev_.get(), raw.data(), raw.size(), deadline);
    if (r.status == detail::io_status::ok) return std::nullopt;
    if (r.status == detail::io_status::timed_out)
      return failure{error_kind::timeout, prev(), "could not return a shared-memory slot to rank " +
                                                      std::to_string(prev()) + " (" + address(prev()) + ") during " + where};
    // The previous rank closed its end after sending its last frame (it needs no more slots) or died (the data
    // stream reports that, naming it, on the next receive).
    credits_refused_ = true;
    return std::nullopt;
  }

  // A chunk of this rank's part is fully reduced: the mean's division, then all_reduce_update's update of it.
  template <class T>
  void finish_part(const plan& p, const item& ri) const {
    detail::finish_reduce(reinterpret_cast<T*>(ri.ptr), ri.bytes / sizeof(T), p.op, n_);
    if (p.on_reduced != nullptr) p.on_reduced(p.on_reduced_context, ri.first, ri.bytes / sizeof(T));
  }

  std::optional<failure> recv_failed(ssize_t n, int from, const std::string& where) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
    prev_dead_ = true;
    const std::string why = n == 0 ? "connection closed" : std::strerror(errno);
    return failure{error_kind::peer_lost, from,
                   "recv from rank " + std::to_string(from) + " (" + address(from) + "): " + why + " during " + where};
  }

  // The next rank writes to us only to return shared-memory slots (credits) and to abort. EOF there matters only
  // while we still have something to send.
  std::optional<failure> read_back_channel(bool sends_left, const std::string& where) {
    for (;;) {
      bool credit = false;
      auto f = read_back_frame(sends_left, where, credit);
      if (!credit) return f;
    }
  }

  // One frame from the back channel, if any is waiting; `credit` is set when it was a credit (taken).
  std::optional<failure> read_back_frame(bool sends_left, const std::string& where, bool& credit) {
    std::array<std::uint8_t, detail::frame_header_size> raw{};
    const auto first = ::recv(next_.get(), raw.data(), raw.size(), MSG_DONTWAIT);
    if (first < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
    if (first <= 0) {
      next_eof_ = true;
      if (!sends_left) return std::nullopt;
      next_dead_ = true;
      return failure{error_kind::peer_lost, next(),
                     "send to rank " + std::to_string(next()) + " (" + address(next()) + "): " +
                         (first == 0 ? std::string("connection closed") : std::string(std::strerror(errno))) +
                         " during " + where};
    }
    const auto r = detail::read_exact(next_.get(), raw.data() + first, raw.size() - static_cast<std::size_t>(first),
                                      steady::now() + std::chrono::milliseconds(500));
    std::string why = "truncated message";
    std::optional<detail::frame_header> h;
    if (r.status == detail::io_status::ok) h = detail::decode_frame_header(raw, &why);
    if (h && h->type == detail::frame_type::credit && shm_out_ && credits_ < shm_out_.slots()) {
      ++credits_;
      credit = true;
      return std::nullopt;
    }
    next_dead_ = true;
    if (!h || h->type != detail::frame_type::abort)
      return failure{error_kind::protocol, next(),
                     "rank " + std::to_string(next()) + " (" + address(next()) + ") wrote " +
                         (h ? std::string(h->type == detail::frame_type::credit ? "a credit it did not owe"
                                                                                : "a data frame")
                            : why) +
                         " on the back channel during " + where};
    return read_abort(next_.get(), *h, next(), where);
  }

  failure read_abort(int fd, const detail::frame_header& h, int from, const std::string& where) {
    std::array<std::uint8_t, detail::abort_fixed_size + detail::max_abort_text> raw{};
    const auto len = static_cast<std::size_t>(h.payload);  // bounded by decode_frame_header
    const auto r = detail::read_exact(fd, raw.data(), len, steady::now() + std::chrono::milliseconds(500));
    std::optional<detail::abort_notice> a;
    if (r.status == detail::io_status::ok) a = detail::decode_abort(std::span(raw.data(), len), n_);
    if (!a)
      return failure{error_kind::protocol, from,
                     "rank " + std::to_string(from) + " (" + address(from) + ") sent a malformed abort during " + where};
    const int culprit = a->culprit >= 0 ? a->culprit : from;
    auto kind = static_cast<error_kind>(a->kind);
    return failure{kind, culprit,
                   "rank " + std::to_string(culprit) + " (" + address(culprit) + ") " +
                       (kind == error_kind::peer_lost ? "was lost" : "failed") + " during " + where +
                       " (reported by rank " + std::to_string(from) + ": " + a->text + ")",
                   };
  }

  // Tells both neighbours, breaks the ring for good, and throws the error this rank reports.
  [[noreturn]] void fail(const plan& p, failure f) {
    detail::abort_notice notice;
    notice.kind = static_cast<std::uint8_t>(f.kind);
    notice.culprit = f.culprit;
    notice.seq = p.seq;
    notice.text = f.text;
    std::array<std::uint8_t, detail::abort_fixed_size + detail::max_abort_text> body{};
    const auto len = detail::encode(notice, body);
    detail::frame_header h;
    h.type = detail::frame_type::abort;
    h.op = p.kind;
    h.type_of_elements = p.type;
    h.seq = p.seq;
    h.payload = len;
    std::array<std::uint8_t, detail::frame_header_size + detail::abort_fixed_size + detail::max_abort_text> frame{};
    detail::encode(h, std::span<std::uint8_t, detail::frame_header_size>(frame.data(), detail::frame_header_size));
    std::memcpy(frame.data() + detail::frame_header_size, body.data(), len);
    const auto limit = steady::now() + std::chrono::milliseconds(250);
    if (!next_dead_) {
      bool ok = true;
      if (inflight_.total > 0) {  // finish the frame on the wire so the abort starts at a frame boundary
        const std::size_t hs = detail::frame_header_size;
        if (inflight_.sent < hs)
          ok = detail::write_all(next_.get(), inflight_.header.data() + inflight_.sent, hs - inflight_.sent, limit)
                   .status == detail::io_status::ok;
        const std::size_t body_sent = inflight_.sent > hs ? inflight_.sent - hs : 0;
        if (ok)
          ok = detail::write_all(next_.get(), inflight_.payload + body_sent, inflight_.total - hs - body_sent, limit)
                   .status == detail::io_status::ok;
      }
      if (ok) (void)detail::write_all(next_.get(), frame.data(), detail::frame_header_size + len, limit);
    }
    if (!prev_dead_) (void)detail::write_all(prev_.get(), frame.data(), detail::frame_header_size + len, limit);
    ::shutdown(next_.get(), SHUT_WR);
    ::shutdown(prev_.get(), SHUT_WR);
    std::exception_ptr e;
    const error_origin origin{"ring", rank_};
    const int c = f.culprit;
    switch (f.kind) {
      case error_kind::peer_lost: e = std::make_exception_ptr(peer_lost_error(origin, c, address(c), f.text)); break;
      case error_kind::timeout: e = std::make_exception_ptr(timeout_error(origin, f.text, c)); break;
      case error_kind::protocol: e = std::make_exception_ptr(protocol_error(origin, f.text)); break;
      default: e = std::make_exception_ptr(io_error(origin, f.text)); break;
    }
    broken_ = e;
    log(f.text);
    std::rethrow_exception(e);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Start-up.

  void log(const std::string& text) const {
    const std::string line = "[mwstrat.ring] rank " + std::to_string(rank_) + ": " + text;
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  }

  static std::string peer_name(const sockaddr_storage& a) {
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
      port = ntohs(v4->sin_port);
      return std::string(host) + ":" + std::to_string(port);
    }
    if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
      port = ntohs(v6->sin6_port);
      return "[" + std::string(host) + "]:" + std::to_string(port);
    }
    return "?";
  }

  boost::asio::ip::tcp::endpoint resolve(int r, bool passive) const {
    namespace ip = boost::asio::ip;
    boost::asio::io_context io;
    ip::tcp::resolver resolver(io);
    boost::system::error_code ec;
    const auto& hp = parsed_[static_cast<std::size_t>(r)];
    const auto flags = passive ? ip::resolver_base::passive : ip::resolver_base::flags{};
    const auto results = resolver.resolve(hp.host, std::to_string(hp.port), flags, ec);
    if (ec || results.empty())
      throw config_error({"ring", rank_}, "cannot resolve the address of rank " + std::to_string(r) + " '" +
                                              address(r) + "': " + (ec ? ec.message() : "no results"));
    return results.begin()->endpoint();
  }

  void connect_ring() {
    namespace ip = boost::asio::ip;
    const auto deadline = steady::now() + options_.connect_timeout;
    boost::asio::io_context io;
    ip::tcp::acceptor acceptor(io);
    boost::system::error_code ec;
    const auto here = resolve(rank_, true);
    acceptor.open(here.protocol(), ec);
    if (!ec) acceptor.set_option(ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec) detail::tune_socket(acceptor.native_handle(), options_.socket_buffer_bytes);
    if (!ec) acceptor.bind(here, ec);
    if (!ec) acceptor.listen(64, ec);
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) throw io_error({"ring", rank_}, "cannot listen on " + address(rank_) + ": " + ec.message());
    if (rank_ == 0)
      log("started: tcp://" + address(0) + ", waiting for " + std::to_string(n_) + " workers");

    std::atomic<bool> stop{false};
    std::exception_ptr accept_error;
    std::thread accepting([&] {
      try {
        accept_prev(acceptor.native_handle(), deadline, stop);
      } catch (...) {
        accept_error = std::current_exception();
      }
    });
    std::exception_ptr connect_error;
    try {
      connect_next(deadline);
    } catch (...) {
      connect_error = std::current_exception();
      stop = true;
    }
    accepting.join();
    if (connect_error) std::rethrow_exception(connect_error);
    if (accept_error) std::rethrow_exception(accept_error);
    if (rank_ == 0) log("ring of " + std::to_string(n_) + " ranks connected");
  }

  void accept_prev(int listener, steady::time_point deadline, const std::atomic<bool>& stop) {
    std::string last_refusal;
    while (!stop) {
      if (steady::now() >= deadline)
        throw timeout_error({"ring", rank_},
                            "rank " + std::to_string(prev()) + " (" + address(prev()) + ") did not connect within " +
                                std::to_string(options_.connect_timeout.count()) + " ms" +
                                (last_refusal.empty() ? "" : "; last refused connection: " + last_refusal),
                            prev());
      const auto slice = std::min(deadline, steady::now() + std::chrono::milliseconds(100));
      if (detail::wait_fd(listener, POLLIN, slice).status != detail::io_status::ok) continue;
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;
      detail::unique_socket conn(fd);
      const auto who = peer_name(from);
      const auto limit = std::min(deadline, steady::now() + options_.handshake_timeout);
      if (auto refused = serve_handshake(conn.get(), limit)) {
        last_refusal = who + ": " + *refused;
        log("refused connection from " + last_refusal);
        {
          const std::lock_guard lock(refusal_mutex_);
          last_refusal_ = last_refusal;
        }
        continue;
      }
      detail::tune_socket(conn.get(), options_.socket_buffer_bytes);
      prev_ = std::move(conn);
      return;
    }
  }

  // The server side of the handshake; a reason when the connection is refused.
  std::optional<std::string> serve_handshake(int fd, steady::time_point limit) {
    std::array<std::uint8_t, detail::hello_size> raw{};
    if (auto r = detail::read_exact(fd, raw.data(), raw.size(), limit); r.status != detail::io_status::ok)
      return "no hello (" + r.describe() + ")";
    const auto h = detail::decode_hello(raw);
    if (!h) return std::string("not an mwstrat ring peer (bad magic)");
    const bool have_token = !token_.empty();
    detail::hello_reply reply;
    reply.status = detail::judge_hello(*h, static_cast<std::uint32_t>(n_), static_cast<std::uint32_t>(prev()),
                                       cluster_digest_, model_digest_, have_token);
    reply.flags = static_cast<std::uint8_t>((have_token ? detail::flag_token : 0) | (want_shm_ ? detail::flag_shm : 0));
    reply.world = static_cast<std::uint32_t>(n_);
    reply.rank = static_cast<std::uint32_t>(rank_);
    reply.nonce = detail::random_nonce();
    reply.host = host_;
    if (reply.status == detail::refusal::none && have_token)
      reply.proof = detail::handshake_proof(token_, true, h->nonce, reply.nonce, cluster_digest_, reply.world,
                                            h->rank, reply.rank);
    std::array<std::uint8_t, detail::hello_reply_size> out{};
    detail::encode(reply, out);
    const auto sent = detail::write_all(fd, out.data(), out.size(), limit);
    if (reply.status != detail::refusal::none) {
      std::string why = detail::refusal_text(reply.status);
      if (reply.status == detail::refusal::wrong_world)
        why += " (peer says " + std::to_string(h->world) + ", ours is " + std::to_string(n_) + ")";
      if (reply.status == detail::refusal::wrong_rank)
        why += " (peer says rank " + std::to_string(h->rank) + ", expected " + std::to_string(prev()) + ")";
      return why;
    }
    if (sent.status != detail::io_status::ok) return "reply failed (" + sent.describe() + ")";
    std::array<std::uint8_t, detail::hello_finish_size> fin{};
    if (auto r = detail::read_exact(fd, fin.data(), fin.size(), limit); r.status != detail::io_status::ok)
      return "no proof (" + r.describe() + ")";
    const auto proof = detail::decode_hello_finish(fin);
    if (!proof) return std::string("malformed proof message");
    if (proof->status != detail::refusal::none)
      return std::string("the peer refused us: ") + detail::refusal_text(proof->status);
    detail::hello_finish verdict;
    if (have_token) {
      const auto want = detail::handshake_proof(token_, false, h->nonce, reply.nonce, cluster_digest_, reply.world,
                                                h->rank, reply.rank);
      if (!detail::digest_equal(want, proof->proof)) verdict.status = detail::refusal::bad_proof;
    }
    detail::encode(verdict, fin);
    const auto told = detail::write_all(fd, fin.data(), fin.size(), limit);
    if (verdict.status != detail::refusal::none) return std::string(detail::refusal_text(verdict.status));
    if (told.status != detail::io_status::ok) return "verdict failed (" + told.describe() + ")";
    if (same_host(h->flags, h->host)) return accept_shm(fd, limit);
    return std::nullopt;
  }

  // Both ends want shared memory and share a kernel, user and namespaces.
  bool same_host(std::uint16_t peer_flags, const detail::digest& peer_host) const {
    return want_shm_ && (peer_flags & detail::flag_shm) != 0 && detail::digest_equal(peer_host, host_);
  }

  // The receiving end of a same-host link: maps the region the previous rank offers, or says why not (then the
  // link carries payloads over TCP). A reason when the connection itself failed.
  std::optional<std::string> accept_shm(int fd, steady::time_point limit) {
    std::array<std::uint8_t, detail::shm_offer_size> raw{};
    if (auto r = detail::read_exact(fd, raw.data(), raw.size(), limit); r.status != detail::io_status::ok)
      return "no shared-memory offer (" + r.describe() + ")";
    const auto offer = detail::decode_shm_offer(raw);
    if (!offer) return std::string("malformed shared-memory offer");
    const auto from = "rank " + std::to_string(prev()) + " (" + address(prev()) + ")";
    if (offer->status == 0) {
      log("payloads from " + from + " over TCP: it could not set up shared memory");
      return std::nullopt;
    }
    detail::shm_region region;
    std::string why;
    if (offer->slot_bytes != chunk_bytes_ || offer->slots > shm_slots) {  // judged before mapping anything
      why = "its region (" + std::to_string(offer->slots) + " x " + std::to_string(offer->slot_bytes) +
            " bytes) does not match our chunk_bytes (" + std::to_string(chunk_bytes_) + ")";
      detail::shm_region::discard(detail::shm_directory, offer->name);
    } else {
      why = region.open(detail::shm_directory, offer->name, offer->slots, offer->slot_bytes);
    }
    std::array<std::uint8_t, detail::shm_answer_size> answer{};
    detail::encode_shm_answer(why.empty(), answer);
    if (auto r = detail::write_all(fd, answer.data(), answer.size(), limit); r.status != detail::io_status::ok)
      return "shared-memory answer failed (" + r.describe() + ")";
    if (!why.empty()) {
      log("payloads from " + from + " over TCP: shared memory declined: " + why);
      return std::nullopt;
    }
    shm_in_ = std::move(region);
    recv_slot_ = 0;
    return std::nullopt;
  }

  // The sending end: creates the region (bounded: shm_slots × chunk_bytes), offers it, and uses it once the next
  // rank has mapped it. The name is gone from /dev/shm when this returns, whatever happened. A reason when the
  // connection itself failed (the caller retries).
  std::optional<std::string> offer_shm(int fd, steady::time_point limit) {
    const auto to = "rank " + std::to_string(next()) + " (" + address(next()) + ")";
    detail::shm_region region;
    const std::string why = region.create(detail::shm_directory, shm_slots, chunk_bytes_);
    detail::shm_offer offer;
    if (why.empty()) {
      offer.status = 1;
      offer.slots = static_cast<std::uint32_t>(shm_slots);
      offer.slot_bytes = chunk_bytes_;
      offer.name = region.name();
    }
    std::array<std::uint8_t, detail::shm_offer_size> raw{};
    detail::encode(offer, raw);
    if (auto r = detail::write_all(fd, raw.data(), raw.size(), limit); r.status != detail::io_status::ok)
      return "shared-memory offer: " + r.describe();
    if (!why.empty()) {
      log("payloads to " + to + " over TCP: " + why);
      return std::nullopt;
    }
    std::array<std::uint8_t, detail::shm_answer_size> answer{};
    const auto r = detail::read_exact(fd, answer.data(), answer.size(), limit);
    region.unlink();  // the receiver unlinks it once it has it open; this covers every other path
    if (r.status != detail::io_status::ok) return "shared-memory answer: " + r.describe();
    const auto mapped = detail::decode_shm_answer(answer);
    if (!mapped) throw protocol_error({"ring", rank_}, to + " sent a malformed shared-memory answer");
    if (!*mapped) {
      log("payloads to " + to + " over TCP: it declined the shared memory (see its log)");
      return std::nullopt;
    }
    shm_out_ = std::move(region);
    send_slot_ = 0;
    credits_ = shm_slots;
    return std::nullopt;
  }

  void connect_next(steady::time_point deadline) {
    const int to = next();
    std::string last = "not tried";
    auto backoff = std::chrono::milliseconds(10);
    while (steady::now() < deadline) {
      const auto ep = resolve(to, false);
      detail::unique_socket fd(::socket(ep.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd) throw io_error({"ring", rank_}, std::string("socket: ") + std::strerror(errno));
      detail::tune_socket(fd.get(), options_.socket_buffer_bytes);
      int rc = ::connect(fd.get(), ep.data(), static_cast<socklen_t>(ep.size()));
      if (rc < 0 && errno == EINPROGRESS) {
        const auto limit = std::min(deadline, steady::now() + std::chrono::seconds(2));
        if (detail::wait_fd(fd.get(), POLLOUT, limit).status == detail::io_status::ok) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err == 0 ? 0 : err;
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        const auto limit = std::min(deadline, steady::now() + options_.handshake_timeout);
        auto outcome = client_handshake(fd.get(), limit);
        if (!outcome) {
          next_ = std::move(fd);
          return;
        }
        last = *outcome;
      } else {
        last = std::strerror(errno);
      }
      const auto pause = std::min(backoff, std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::max(deadline - steady::now(), steady::duration::zero())));
      std::this_thread::sleep_for(pause);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    std::string refused;
    {
      const std::lock_guard lock(refusal_mutex_);
      if (!last_refusal_.empty()) refused = "; meanwhile refused a connection from " + last_refusal_;
    }
    throw timeout_error({"ring", rank_},
                        "could not connect to rank " + std::to_string(to) + " (" + address(to) + ") within " +
                            std::to_string(options_.connect_timeout.count()) + " ms: " + last + refused,
                        to);
  }

  // The client side; nullopt on success, a reason for transient failures (retried); throws when the peer
  // answers but refuses us or is not an mwstrat peer (retrying cannot help).
  std::optional<std::string> client_handshake(int fd, steady::time_point limit) {
    const int to = next();
    const auto who = "rank " + std::to_string(to) + " (" + address(to) + ")";
    const bool have_token = !token_.empty();
    detail::hello h;
    h.flags = static_cast<std::uint16_t>((have_token ? detail::flag_token : 0) | (want_shm_ ? detail::flag_shm : 0));
    h.world = static_cast<std::uint32_t>(n_);
    h.rank = static_cast<std::uint32_t>(rank_);
    h.cluster = cluster_digest_;
    h.model = model_digest_;
    h.nonce = detail::random_nonce();
    h.host = host_;
    std::array<std::uint8_t, detail::hello_size> out{};
    detail::encode(h, out);
    if (auto r = detail::write_all(fd, out.data(), out.size(), limit); r.status != detail::io_status::ok)
      return "hello: " + r.describe();
    std::array<std::uint8_t, detail::hello_reply_size> raw{};
    if (auto r = detail::read_exact(fd, raw.data(), raw.size(), limit); r.status != detail::io_status::ok)
      return "reply: " + r.describe();
    const auto reply = detail::decode_hello_reply(raw);
    if (!reply) throw protocol_error({"ring", rank_}, who + " is not an mwstrat ring peer (bad reply)");
    if (reply->status != detail::refusal::none)
      throw protocol_error({"ring", rank_}, who + " refused this rank: " + detail::refusal_text(reply->status));
    detail::hello_finish fin;
    if (reply->version != detail::protocol_version) fin.status = detail::refusal::bad_version;
    else if (reply->world != h.world) fin.status = detail::refusal::wrong_world;
    else if (reply->rank != static_cast<std::uint32_t>(to)) fin.status = detail::refusal::wrong_rank;
    else if (have_token && (reply->flags & detail::flag_token) == 0) fin.status = detail::refusal::token_required;
    else if (!have_token && (reply->flags & detail::flag_token) != 0) fin.status = detail::refusal::token_unexpected;
    else if (have_token &&
             !detail::digest_equal(reply->proof, detail::handshake_proof(token_, true, h.nonce, reply->nonce,
                                                                         cluster_digest_, h.world, h.rank,
                                                                         reply->rank)))
      fin.status = detail::refusal::bad_proof;
    if (fin.status == detail::refusal::none && have_token)
      fin.proof = detail::handshake_proof(token_, false, h.nonce, reply->nonce, cluster_digest_, h.world, h.rank,
                                          reply->rank);
    std::array<std::uint8_t, detail::hello_finish_size> fraw{};
    detail::encode(fin, fraw);
    const auto sent = detail::write_all(fd, fraw.data(), fraw.size(), limit);
    if (fin.status != detail::refusal::none)
      throw protocol_error({"ring", rank_}, "refusing " + who + ": " + detail::refusal_text(fin.status));
    if (sent.status != detail::io_status::ok) return "proof: " + sent.describe();
    if (auto r = detail::read_exact(fd, fraw.data(), fraw.size(), limit); r.status != detail::io_status::ok)
      return "verdict: " + r.describe();
    const auto verdict = detail::decode_hello_finish(fraw);
    if (!verdict) throw protocol_error({"ring", rank_}, who + " is not an mwstrat ring peer (bad verdict)");
    if (verdict->status != detail::refusal::none)
      throw protocol_error({"ring", rank_}, who + " refused this rank: " + detail::refusal_text(verdict->status));
    if (same_host(reply->flags, reply->host)) return offer_shm(fd, limit);
    return std::nullopt;
  }

  struct aligned_delete {
    void operator()(std::uint8_t* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  struct inflight_frame {  // the frame being sent, so an abort can complete it first
    const std::uint8_t* payload = nullptr;
    std::size_t total = 0;
    std::size_t sent = 0;
    std::array<std::uint8_t, detail::frame_header_size> header{};
  };

  // Slots of a link's shared-memory region: enough to keep a few chunks in flight (as the socket buffers do for
  // TCP) while bounding its memory to shm_slots × chunk_bytes.
  static constexpr std::size_t shm_slots = 8;

  ring_options options_;
  int uncaught_ = 0;
  int n_ = 0;
  int rank_ = 0;
  std::vector<detail::host_port> parsed_;
  std::string token_;
  std::size_t chunk_bytes_ = 0;
  detail::digest cluster_digest_{}, model_digest_{};
  detail::unique_socket next_, prev_;
  bool want_shm_ = false;
  detail::digest host_{};
  detail::shm_region shm_out_, shm_in_;  // payloads to the next rank / from the previous one, when same-host
  std::chrono::microseconds spin_{0};  // ring_options::spin or MWSTRAT_RING_SPIN_US
  std::size_t send_slot_ = 0, recv_slot_ = 0;  // slots used so far (mod slots: the next one)
  std::size_t credits_ = 0;                    // free slots of shm_out_
  bool credits_refused_ = false;               // the previous rank closed the back channel: stop returning slots
  std::unique_ptr<std::uint8_t, aligned_delete> scratch_;
  inflight_frame inflight_;
  bool next_dead_ = false, prev_dead_ = false, next_eof_ = false;
  std::uint64_t next_seq_ = 0;
  std::exception_ptr broken_;
  std::mutex refusal_mutex_;
  std::string last_refusal_;  // start-up only: the acceptor's latest refusal, for the connector's error
  detail::op_queue queue_;  // last: its worker is joined before the sockets close
};

static_assert(collective<ring_collective>);

}  // namespace mwstrat
