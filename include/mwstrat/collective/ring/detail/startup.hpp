#pragma once
// The ring's start-up: resolve the addresses, listen, connect to the next rank (retrying with backoff until the
// start-up deadline) while accepting the previous one, handshake both connections (magic, protocol version, world
// size, ranks, cluster and model fingerprints, an HMAC-SHA256 proof of the job token when one is set), and, when
// both ends of a link share a host and want it, set up the link's shared-memory region. The result is the two
// connected links (link.hpp); nothing here runs once the ring is up. A rank whose start-up fails after one of its
// liveness connections is up tells that neighbour why (an abort frame, abort.hpp), so that a rank whose own links
// all came up names the rank that never came, not the neighbour that gave up on it.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/ring/detail/abort.hpp>
#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/collective/ring/detail/link.hpp>
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/rank_map.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/startup_shm.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/error.hpp>

#include <arpa/inet.h>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat::detail {


// How often the acceptor looks up from poll() to see whether the connecting side has given up: the delay before a
// failed start-up reports, so short; each look is one cheap syscall.
inline constexpr std::chrono::milliseconds accept_poll_slice{100};
// The bound of one connection attempt (a SYN to a host that is up but not yet listening is usually refused at
// once; one lost on the way must not use up the whole start-up deadline).
inline constexpr std::chrono::seconds connect_attempt_limit{2};
// Backoff between connection attempts: the first retry soon (the peer is usually a few milliseconds from
// listening), then doubling, but at most half a second, so a rank that starts late is found soon after.
inline constexpr std::chrono::milliseconds connect_backoff_first{10};
inline constexpr std::chrono::milliseconds connect_backoff_max{500};
// How long a rank whose handshake was refused (a fingerprint, world or token that retrying cannot change) keeps
// answering its previous rank before it leaves, unless it has already refused a connection itself: without it, the
// previous rank's pending connection is reset and that rank finds out only at its own deadline. Four times the
// longest backoff, so a rank between two attempts comes back within it even on a loaded machine.
inline constexpr std::chrono::milliseconds refusal_grace{4 * connect_backoff_max};

// What start-up needs beyond the options: the parsed addresses and the values derived from the options.
struct ring_identity {
  int rank = 0;
  int world = 1;
  std::vector<mwstrat::address> hosts;  // parsed addresses[]
  std::string token;             // empty: no job token
  bool want_shm = false;
  std::size_t chunk_bytes = 0;
  digest host{}, cluster{}, model{};
  int listener = -1;   // a socket already listening on this rank's address (a ring inside a ring), else -1
  bool quiet = false;  // no start-up lines (a ring inside a ring: its parent logs the topology)
  bool liveness = true;  // a liveness connection beside each link (not in a ring inside a ring)
  unsigned streams = 1;  // data connections per link between hosts (ring_options::streams_per_peer)
  seal_mode seal = seal_mode::none;  // what frames between hosts carry (frame_seal.hpp): none without a token
};

// A socket listening on `here`'s host at a port the kernel picks (the rings inside a hierarchical ring); its port in
// `port`. Throws io_error naming `rank`.
inline unique_socket listen_ephemeral(const mwstrat::address& here, int buffer_bytes, int rank, int& port) {
  namespace ip = boost::asio::ip;
  boost::asio::io_context io;
  boost::system::error_code ec;
  ip::tcp::resolver resolver(io);
  const auto found = resolver.resolve(here.host, "0", ip::resolver_base::passive, ec);
  if (ec || found.empty())
    throw io_error({"ring", rank}, "cannot resolve '" + here.host + "': " + (ec ? ec.message() : "no results"));
  ip::tcp::acceptor acceptor(io);
  const auto ep = found.begin()->endpoint();
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) tune_socket(acceptor.native_handle(), buffer_bytes);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(64, ec);
  if (!ec) acceptor.non_blocking(true, ec);
  if (ec) throw io_error({"ring", rank}, "cannot listen on " + here.host + ": " + ec.message());
  port = acceptor.local_endpoint(ec).port();
  return unique_socket(acceptor.release(ec));
}

class ring_startup {
 public:
  ring_startup(const ring_options& options, const ring_identity& id)
      : options_(options), ranks_(options.addresses), n_(id.world), rank_(id.rank), parsed_(id.hosts), token_(id.token),
        chunk_bytes_(id.chunk_bytes), cluster_digest_(id.cluster), model_digest_(id.model), want_shm_(id.want_shm),
        host_(id.host), listener_(id.listener), quiet_(id.quiet), liveness_(id.liveness), streams_(id.streams),
        seal_(id.seal) {}

  // Listens, connects and accepts; throws what ring_collective's constructor documents.
  ring_links run() {
    connect_ring();
    return std::move(links_);
  }

 private:
  const std::string& address(int r) const { return ranks_.address(r); }
  int next() const { return (rank_ + 1) % n_; }
  int prev() const { return (rank_ + n_ - 1) % n_; }
  void log(const std::string& text) const { ring_log(options_, rank_, text); }

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
    const auto deadline = deadline_after(options_.connect_timeout);
    boost::asio::io_context io;
    ip::tcp::acceptor acceptor(io);
    boost::system::error_code ec;
    const auto here = resolve(rank_, true);
    if (listener_ >= 0) {
      acceptor.assign(here.protocol(), listener_, ec);  // the acceptor closes it
    } else {
      acceptor.open(here.protocol(), ec);
      if (!ec) acceptor.set_option(ip::tcp::acceptor::reuse_address(true), ec);
      if (!ec) detail::tune_socket(acceptor.native_handle(), options_.socket_buffer_bytes);
      if (!ec) acceptor.bind(here, ec);
      if (!ec) acceptor.listen(64, ec);
    }
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) throw io_error({"ring", rank_}, "cannot listen on " + address(rank_) + ": " + ec.message());
    if (rank_ == 0 && !quiet_)
      log("started: tcp://" + address(0) + ", waiting for " + std::to_string(n_) + " workers");

    // When the acceptor stops; the far future while this rank still connects.
    std::atomic<steady::rep> stop_at{steady::time_point::max().time_since_epoch().count()};
    std::exception_ptr accept_error;
    std::thread accepting([&] {
      try {
        accept_prev(acceptor.native_handle(), deadline, stop_at);
      } catch (...) {
        accept_error = std::current_exception();
      }
    });
    std::exception_ptr connect_error;
    try {
      connect_next(deadline);
    } catch (const protocol_error&) {
      // A refusal: the previous rank (the next one, in a ring of two) is likely configured alike and knocking now.
      // Answer it for a moment, so it fails with the same reason instead of a reset and a wait to its deadline.
      connect_error = std::current_exception();
      stop_at = (steady::now() + refusal_grace).time_since_epoch().count();
    } catch (...) {
      connect_error = std::current_exception();
      stop_at = steady::now().time_since_epoch().count();
    }
    accepting.join();
    if (connect_error || accept_error) {
      const std::exception_ptr first = connect_error ? connect_error : accept_error;
      tell_neighbours(first);
      std::rethrow_exception(first);
    }
  }

  // Sends the reason this start-up failed to the neighbours whose liveness connection is up: they passed their own
  // start-up and would otherwise find only this rank's connections closing, and blame it. The culprit is the rank
  // the error names (the one that did not connect or answer), else this rank.
  void tell_neighbours(const std::exception_ptr& failed) noexcept {
    if (!links_.liveness_out && !links_.liveness_in) return;
    ring_failure f{error_kind::io, rank_, ""};
    try {
      std::rethrow_exception(failed);
    } catch (const timeout_error& e) {
      f = {e.kind(), e.peer_rank().value_or(rank_), e.detail()};
    } catch (const peer_lost_error& e) {
      f = {e.kind(), e.peer_rank(), e.detail()};
    } catch (const error& e) {
      f = {e.kind(), rank_, e.detail()};
    } catch (const std::exception& e) {
      f.text = e.what();
    } catch (...) {
      f.text = "an unknown exception";
    }
    if (f.culprit < 0 || f.culprit >= n_) f.culprit = rank_;
    f.text = "rank " + std::to_string(rank_) + " could not join the ring: " + f.text;
    const auto limit = steady::now() + abort_send_grace;
    for (auto [s, seal] : {std::pair{&links_.liveness_out, &links_.liveness_out_seal},
                           std::pair{&links_.liveness_in, &links_.liveness_in_seal}})
      if (*s) {  // sealed for that connection when it is: the neighbour's liveness monitor opens it
        const abort_frame frame = make_abort_frame(f, {}, &seal->send);
        (void)write_all(s->get(), frame.bytes.data(), frame.size, limit);
      }
  }

  // Takes the previous rank's connections until the link is complete, the deadline passes or `stop_at` (set by the
  // connecting side when it fails); after a refusal of our own there is nothing left to tell that rank.
  void accept_prev(int listener, steady::time_point deadline, const std::atomic<steady::rep>& stop_at) {
    std::string last_refusal;
    const auto stopping = [&] {
      const steady::time_point at{steady::duration(stop_at.load())};
      return steady::now() >= at || (at != steady::time_point::max() && !last_refusal.empty());
    };
    while (!stopping()) {
      if (steady::now() >= deadline)
        throw timeout_error({"ring", rank_},
                            peer(prev()) + " did not connect within " +
                                std::to_string(options_.connect_timeout.count()) + " ms" +
                                (last_refusal.empty() ? "" : "; last refused connection: " + last_refusal),
                            prev());
      const auto slice = std::min(deadline, steady::now() + accept_poll_slice);
      if (detail::wait_fd(listener, POLLIN, slice).status != detail::io_status::ok) continue;
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;
      detail::unique_socket conn(fd);
      const auto who = peer_name(from);
      const auto limit = std::min(deadline, deadline_after(options_.handshake_timeout));
      bool liveness = false;
      unsigned lane = 0;
      if (auto refused = serve_handshake(conn.get(), limit, liveness, lane)) {
        last_refusal = who + ": " + *refused;
        log("refused connection from " + last_refusal);
        {
          const std::lock_guard lock(refusal_mutex_);
          last_refusal_ = last_refusal;
        }
        continue;
      }
      if (liveness) {  // small frames, never behind a payload: the kernel's default buffers
        const int one = 1;
        ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        links_.liveness_in = std::move(conn);  // a retried connection replaces one the peer gave up on
      } else if (lane == 0) {
        detail::tune_socket(conn.get(), options_.socket_buffer_bytes);
        links_.in.socket = std::move(conn);
      } else {  // serve_handshake checked that the first connection is in and that the link has this one
        detail::tune_socket(conn.get(), options_.socket_buffer_bytes);
        links_.more_in[lane - 1].socket = std::move(conn);
      }
      const bool lanes_in = std::all_of(links_.more_in.begin(), links_.more_in.end(),
                                        [](const detail::recv_link& l) { return static_cast<bool>(l.socket); });
      if (links_.in.socket && lanes_in && (links_.liveness_in || !liveness_)) return;
    }
  }

  // The server side of the handshake; a reason when the connection is refused. `liveness`: the client says this
  // is the link's liveness connection (no shared memory there); `lane`: which data connection of the link it is.
  std::optional<std::string> serve_handshake(int fd, steady::time_point limit, bool& liveness, unsigned& lane) {
    std::array<std::uint8_t, detail::hello_size> raw{};
    if (auto r = detail::read_exact(fd, raw.data(), raw.size(), limit); r.status != detail::io_status::ok)
      return "no hello (" + r.describe() + ")";
    const auto h = detail::decode_hello(raw);
    if (!h) return std::string("not an mwstrat ring peer (bad magic)");
    liveness = (h->flags & detail::flag_liveness) != 0;
    if (liveness && !liveness_) return std::string("a liveness connection where none is expected");
    lane = liveness ? 0 : detail::lane_of_flags(h->flags);
    // The client opens the first data connection, and only after it the others, as many as the hosts call for.
    if (lane > 0 && (!links_.in.socket || lane > links_.more_in.size()))
      return "data connection " + std::to_string(lane) + " of a link that has " +
             std::to_string(links_.in.socket ? links_.more_in.size() + 1 : 0) + " (expected: first connection 0, and "
             "more only between hosts)";
    const bool have_token = !token_.empty();
    detail::hello_reply reply;
    reply.status = detail::judge_hello(*h, static_cast<std::uint32_t>(n_), static_cast<std::uint32_t>(prev()),
                                       cluster_digest_, model_digest_, have_token, streams_, encrypts());
    reply.flags = static_cast<std::uint8_t>((have_token ? detail::flag_token : 0) | (want_shm_ ? detail::flag_shm : 0) |
                                            (encrypts() ? detail::flag_encrypt : 0));
    reply.world = static_cast<std::uint32_t>(n_);
    reply.rank = static_cast<std::uint32_t>(rank_);
    reply.nonce = detail::random_nonce();
    reply.host = host_;
    const detail::handshake_binding bound{h->host, reply.host, h->flags, reply.flags};
    if (reply.status == detail::refusal::none && have_token)
      reply.proof = detail::handshake_proof(token_, true, h->nonce, reply.nonce, cluster_digest_, reply.world,
                                            h->rank, reply.rank, bound);
    std::array<std::uint8_t, detail::hello_reply_size> out{};
    detail::encode(reply, out);
    const auto sent = detail::write_all(fd, out.data(), out.size(), limit);
    if (reply.status != detail::refusal::none) {
      std::string why = detail::refusal_text(reply.status);
      if (reply.status == detail::refusal::wrong_world)
        why += " (peer says " + std::to_string(h->world) + ", ours is " + std::to_string(n_) + ")";
      if (reply.status == detail::refusal::wrong_rank)
        why += " (peer says rank " + std::to_string(h->rank) + ", expected " + std::to_string(prev()) + ")";
      if (reply.status == detail::refusal::streams_mismatch)
        why += " (peer says " + std::to_string(detail::streams_of_flags(h->flags)) + ", ours is " +
               std::to_string(streams_) + ")";
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
                                                h->rank, reply.rank, bound);
      if (!detail::digest_equal(want, proof->proof)) verdict.status = detail::refusal::bad_proof;
    }
    detail::encode(verdict, fin);
    const auto told = detail::write_all(fd, fin.data(), fin.size(), limit);
    if (verdict.status != detail::refusal::none) return std::string(detail::refusal_text(verdict.status));
    if (told.status != detail::io_status::ok) return "verdict failed (" + told.describe() + ")";
    if (!liveness && lane == 0) {
      // A new first connection (also one retried): the link's other connections follow it, one per stream when the
      // previous rank is on another host.
      links_.in.adopt({});
      links_.more_in.clear();
      links_.more_in.resize(detail::digest_equal(h->host, host_) ? 0 : streams_ - 1);
    }
    auto seal = seal_of(h->host, false, h->nonce, reply.nonce, h->rank, reply.rank);
    if (liveness) links_.liveness_in_seal = std::move(seal);  // the accept loop takes its socket beside it
    else (lane == 0 ? links_.in : links_.more_in[lane - 1]).seal = std::move(seal);
    if (!liveness && lane == 0 && same_host(h->flags, h->host)) return accept_shm(fd, limit);
    return std::nullopt;
  }

  [[nodiscard]] bool encrypts() const { return seal_ == detail::seal_mode::encrypt; }

  // The frame seal of a data or liveness connection: keyed from this handshake when the peer is on another host and
  // there is a token, else none (shared memory and TCP within a host carry no tag).
  detail::link_seal seal_of(const detail::digest& peer_host, bool as_client, const detail::digest& client_nonce,
                            const detail::digest& server_nonce, std::uint32_t client_rank,
                            std::uint32_t server_rank) const {
    if (seal_ == detail::seal_mode::none || detail::digest_equal(peer_host, host_)) return {};
    return detail::link_seal::keyed(token_, seal_, as_client, client_nonce, server_nonce, cluster_digest_, client_rank,
                                    server_rank);
  }

  // Both ends want shared memory and share a kernel, user and namespaces.
  bool same_host(std::uint16_t peer_flags, const detail::digest& peer_host) const {
    return want_shm_ && (peer_flags & detail::flag_shm) != 0 && detail::digest_equal(peer_host, host_);
  }

  // The shared-memory set-up of a link (startup_shm.hpp), adopted by the link when it succeeds.
  std::optional<std::string> accept_shm(int fd, steady::time_point limit) {
    std::optional<detail::shm_region> mapped;
    auto failed = detail::accept_shm_offer(fd, limit, chunk_bytes_, peer(prev()),
                                           [this](const std::string& t) { log(t); }, mapped);
    if (mapped) links_.in.adopt(std::move(*mapped));
    return failed;
  }
  std::optional<std::string> offer_shm(int fd, steady::time_point limit) {
    std::optional<detail::shm_region> offered;
    auto failed = detail::offer_shm_region(fd, limit, chunk_bytes_, peer(next()), rank_,
                                           [this](const std::string& t) { log(t); }, offered);
    if (offered) links_.out.adopt(std::move(*offered));
    return failed;
  }
  std::string peer(int r) const { return ranks_.peer(r); }

  // The data connection to the next rank, then its others when it is on another host (streams_per_peer), then
  // (unless this ring has none) its liveness connection.
  void connect_next(steady::time_point deadline) {
    links_.out.socket = connect_one(deadline, false, 0);
    links_.out.seal = std::move(client_seal_);
    for (unsigned lane = 1; lane < out_lanes_; ++lane) {
      detail::send_link more;
      more.socket = connect_one(deadline, false, lane);
      more.seal = std::move(client_seal_);
      links_.more_out.push_back(std::move(more));
    }
    if (liveness_) {
      links_.liveness_out = connect_one(deadline, true, 0);
      links_.liveness_out_seal = std::move(client_seal_);
    }
  }

  detail::unique_socket connect_one(steady::time_point deadline, bool liveness, unsigned lane) {
    const int to = next();
    std::string last = "not tried";
    auto backoff = connect_backoff_first;
    while (steady::now() < deadline) {
      const auto ep = resolve(to, false);
      detail::unique_socket fd(::socket(ep.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd) throw io_error({"ring", rank_}, std::string("socket: ") + std::strerror(errno));
      if (liveness) {
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      } else {
        detail::tune_socket(fd.get(), options_.socket_buffer_bytes);
      }
      int rc = ::connect(fd.get(), ep.data(), static_cast<socklen_t>(ep.size()));
      if (rc < 0 && errno == EINPROGRESS) {
        const auto limit = std::min(deadline, steady::now() + connect_attempt_limit);
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
        const auto limit = std::min(deadline, deadline_after(options_.handshake_timeout));
        auto outcome = client_handshake(fd.get(), limit, liveness, lane);
        if (!outcome) return fd;
        last = *outcome;
      } else {
        last = std::strerror(errno);
      }
      const auto pause = std::min(backoff, std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::max(deadline - steady::now(), steady::duration::zero())));
      std::this_thread::sleep_for(pause);
      backoff = std::min(backoff * 2, connect_backoff_max);
    }
    std::string refused;
    {
      const std::lock_guard lock(refusal_mutex_);
      if (!last_refusal_.empty()) refused = "; meanwhile refused a connection from " + last_refusal_;
    }
    throw timeout_error({"ring", rank_},
                        "could not connect " +
                            std::string(liveness ? "the liveness connection "
                                        : lane > 0 ? "data connection " + std::to_string(lane) + " "
                                                   : "") +
                            "to " + peer(to) + " within " +
                            std::to_string(options_.connect_timeout.count()) + " ms: " + last + refused,
                        to);
  }

  // Whether a refusal may be the peer's being in another ring of this job rather than a misconfiguration: a ring
  // rebuilt from a running one (generation > 0: shrunk, grown, or the members' own after a join fell through) is
  // built by ranks that leave the previous ring at different moments, so the next rank may still be in the old
  // one's start-up, listening on the same address with another world, neighbour or membership. It comes over before
  // this start-up's deadline or the deadline names it; a first ring's refusals are final.
  bool peer_may_catch_up(detail::refusal why) const {
    if (options_.generation == 0) return false;
    return why == detail::refusal::wrong_world || why == detail::refusal::wrong_rank ||
           why == detail::refusal::cluster_mismatch;
  }

  // The client side; nullopt on success, a reason for transient failures (retried); throws when the peer
  // answers but refuses us or is not an mwstrat peer (retrying cannot help).
  std::optional<std::string> client_handshake(int fd, steady::time_point limit, bool liveness, unsigned lane) {
    const int to = next();
    const auto who = peer(to);
    const bool have_token = !token_.empty();
    detail::hello h;
    h.flags = static_cast<std::uint16_t>((have_token ? detail::flag_token : 0) |
                                         (want_shm_ && !liveness ? detail::flag_shm : 0) |
                                         (liveness ? detail::flag_liveness : 0) | (encrypts() ? detail::flag_encrypt : 0) |
                                         detail::lane_flags(lane, streams_));
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
    if (reply->status != detail::refusal::none) {
      const std::string why = who + " refused this rank: " + detail::refusal_text(reply->status);
      if (peer_may_catch_up(reply->status)) return why + " (it is still in another ring of the job; retried)";
      throw protocol_error({"ring", rank_}, why);
    }
    detail::hello_finish fin;
    if (reply->version != detail::protocol_version) fin.status = detail::refusal::bad_version;
    else if (reply->world != h.world) fin.status = detail::refusal::wrong_world;
    else if (reply->rank != static_cast<std::uint32_t>(to)) fin.status = detail::refusal::wrong_rank;
    else if (have_token && (reply->flags & detail::flag_token) == 0) fin.status = detail::refusal::token_required;
    else if (!have_token && (reply->flags & detail::flag_token) != 0) fin.status = detail::refusal::token_unexpected;
    else if (((reply->flags & detail::flag_encrypt) != 0) != encrypts()) fin.status = detail::refusal::encrypt_mismatch;
    const detail::handshake_binding bound{h.host, reply->host, h.flags, reply->flags};
    if (fin.status == detail::refusal::none && have_token &&
        !detail::digest_equal(reply->proof, detail::handshake_proof(token_, true, h.nonce, reply->nonce, cluster_digest_,
                                                                    h.world, h.rank, reply->rank, bound)))
      fin.status = detail::refusal::bad_proof;
    if (fin.status == detail::refusal::none && have_token)
      fin.proof = detail::handshake_proof(token_, false, h.nonce, reply->nonce, cluster_digest_, h.world, h.rank,
                                          reply->rank, bound);
    std::array<std::uint8_t, detail::hello_finish_size> fraw{};
    detail::encode(fin, fraw);
    const auto sent = detail::write_all(fd, fraw.data(), fraw.size(), limit);
    if (fin.status != detail::refusal::none) {
      const std::string why = "refusing " + who + ": " + detail::refusal_text(fin.status);
      if (peer_may_catch_up(fin.status)) return why + " (it is still in another ring of the job; retried)";
      throw protocol_error({"ring", rank_}, why);
    }
    if (sent.status != detail::io_status::ok) return "proof: " + sent.describe();
    if (auto r = detail::read_exact(fd, fraw.data(), fraw.size(), limit); r.status != detail::io_status::ok)
      return "verdict: " + r.describe();
    const auto verdict = detail::decode_hello_finish(fraw);
    if (!verdict) throw protocol_error({"ring", rank_}, who + " is not an mwstrat ring peer (bad verdict)");
    if (verdict->status != detail::refusal::none)
      throw protocol_error({"ring", rank_}, who + " refused this rank: " + detail::refusal_text(verdict->status));
    client_seal_ = seal_of(reply->host, true, h.nonce, reply->nonce, h.rank, reply->rank);
    if (liveness || lane > 0) return std::nullopt;
    out_lanes_ = detail::digest_equal(reply->host, host_) ? 1 : streams_;  // more only to another host
    if (same_host(reply->flags, reply->host)) return offer_shm(fd, limit);
    return std::nullopt;
  }

  const ring_options& options_;
  rank_map ranks_;  // names the ranks in this start-up's errors and logs
  int n_ = 0;
  int rank_ = 0;
  const std::vector<mwstrat::address>& parsed_;
  const std::string& token_;
  std::size_t chunk_bytes_ = 0;
  digest cluster_digest_{}, model_digest_{};
  bool want_shm_ = false;
  digest host_{};
  int listener_ = -1;
  bool quiet_ = false;
  bool liveness_ = true;
  unsigned streams_ = 1;
  unsigned out_lanes_ = 1;  // data connections to the next rank: streams_ when it is on another host
  detail::seal_mode seal_ = detail::seal_mode::none;
  detail::link_seal client_seal_;  // the seal of the connection client_handshake just made
  std::mutex refusal_mutex_;
  std::string last_refusal_;  // the acceptor's latest refusal, for the connector's error
  ring_links links_;
};

}  // namespace mwstrat::detail
