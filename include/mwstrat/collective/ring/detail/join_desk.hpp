#pragma once
// The chief's join desk (elastic training, docs/fault-tolerance.md "Growing"): while a rank is rank 0 of a ring whose
// options name a join address, a thread of its own listens there, hears each joiner's request (join_wire.hpp),
// checks its proof of the job token and keeps it pending, or refuses it with a reason. Training never waits on it:
// at a step boundary `fit` asks how many are pending (`pending`), and once every member has agreed to take them in,
// the chief `take`s them and `admit`s them into the next ring, which they then build with the members. The desk
// outlives the rings of one job (each ring hands it to the next through its options), so a joiner that is pending
// while the ring shrinks or grows stays in line.

#include <mwstrat/collective/ring/detail/join_wire.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/error.hpp>

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// A joiner the desk has heard and checked: where its ring listens and which worker of the job it is.
struct join_request {
  std::string address;
  int worker = -1;
};

class join_desk {
 public:
  // Listens on `address` (throws io_error naming it when it cannot); `token`: the job's (empty: none), which every
  // joiner must prove it holds; `log`: where a refusal is said.
  join_desk(const std::string& address, std::string token, std::chrono::milliseconds handshake_timeout,
            std::function<void(const std::string&)> log)
      : token_(std::move(token)), handshake_timeout_(handshake_timeout), log_(std::move(log)) {
    namespace ip = boost::asio::ip;
    std::string why;
    const auto ep = join_endpoint(address, true, why);
    if (!ep) throw io_error({"ring.join", 0}, "join address " + why);
    boost::asio::io_context io;
    boost::system::error_code ec;
    ip::tcp::acceptor acceptor(io);
    acceptor.open(ep->protocol(), ec);
    if (!ec) acceptor.set_option(ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(*ep, ec);
    if (!ec) acceptor.listen(16, ec);
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) throw io_error({"ring.join", 0}, "cannot listen for joiners on " + address + ": " + ec.message());
    listener_ = unique_socket(acceptor.release(ec));
    thread_ = std::thread([this] { serve(); });
  }

  join_desk(const join_desk&) = delete;
  join_desk& operator=(const join_desk&) = delete;

  // Pending joiners learn the desk is gone when their connections close (and try the next chief).
  ~join_desk() {
    stop_ = true;
    thread_.join();
  }

  // How many joiners wait to be admitted.
  [[nodiscard]] int pending() const {
    const std::lock_guard lock(mutex_);
    return static_cast<int>(pending_.size());
  }

  // Waits until at least one joiner is pending, at most `wait`; how many are.
  int await(std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, wait, [this] { return !pending_.empty(); });
    return static_cast<int>(pending_.size());
  }

  // The first `count` pending joiners (fewer if fewer remain), set aside for `admit`.
  std::vector<join_request> take(int count) {
    const std::lock_guard lock(mutex_);
    std::vector<join_request> out;
    while (count-- > 0 && !pending_.empty()) {
      out.push_back(pending_.front().request);
      taken_.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    return out;
  }

  // Tells each joiner set aside by `take` the ring it is in (`grown`, in which the joiners hold the last ranks, in
  // the order taken): its addresses, generation and fingerprint, with this rank's proof. A joiner gone by now just
  // fails to connect, and the members' start-up names it.
  void admit(const ring_options& grown) {
    std::vector<held> admitted;
    {
      const std::lock_guard lock(mutex_);
      admitted.swap(taken_);
    }
    const int first = static_cast<int>(grown.addresses.size() - admitted.size());
    for (std::size_t i = 0; i < admitted.size(); ++i) {
      join_message reply{"admitted", std::to_string(grown.generation), std::to_string(first + static_cast<int>(i)),
                         grown.cluster_fingerprint};
      for (const auto& a : grown.addresses) reply.push_back(a);
      join_message bound{admitted[i].joiner_nonce, admitted[i].desk_nonce};
      bound.insert(bound.end(), reply.begin(), reply.end());
      reply.push_back(token_.empty() ? std::string() : join_proof(token_, "join admit", bound));
      (void)send_join_message(admitted[i].socket.get(), reply, deadline_after(handshake_timeout_));
    }
  }

 private:
  struct held {
    join_request request;
    std::string joiner_nonce, desk_nonce;
    unique_socket socket;
  };

  static steady::time_point deadline_after(std::chrono::milliseconds d) { return steady::now() + d; }

  void serve() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        drop_closed();
        continue;
      }
      unique_socket fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) continue;
      hear(std::move(fd));
    }
  }

  // One joiner's request, within the handshake timeout: pending, or refused with a reason (logged and told).
  void hear(unique_socket fd) {
    const auto deadline = deadline_after(handshake_timeout_);
    std::string why;
    const auto hello = read_join_message(fd.get(), deadline, why);
    if (!hello) return log_("a connection to the join address said nothing usable (" + why + ")");
    if (hello->size() != 5 || (*hello)[0] != join_hello_tag) {
      return log_("a connection to the join address is not an mwstrat joiner of this version");
    }
    held h;
    h.joiner_nonce = (*hello)[1];
    h.request.address = (*hello)[2];
    try {
      h.request.worker = std::stoi((*hello)[3]);
    } catch (const std::exception&) {
      return refuse(fd, h.request, "its worker index '" + (*hello)[3] + "' is not a number");
    }
    const bool has_token = (*hello)[4] == "1";
    const digest nonce = random_nonce();
    h.desk_nonce = hex_of(nonce);
    if (send_join_message(fd.get(), {"challenge", h.desk_nonce}, deadline).status != io_status::ok) return;
    const auto proof = read_join_message(fd.get(), deadline, why);
    if (!proof || proof->size() != 1) return log_("joiner " + h.request.address + " sent no proof (" + why + ")");
    if (has_token != !token_.empty()) {
      return refuse(fd, h.request, token_.empty() ? "it holds a job token and this job has none"
                                                  : "it holds no job token (MWSTRAT_JOB_TOKEN) and this job has one");
    }
    if (!token_.empty()) {
      const join_message bound{h.joiner_nonce, h.desk_nonce, h.request.address, (*hello)[3]};
      if (!same_proof((*proof)[0], join_proof(token_, "join request", bound))) {
        return refuse(fd, h.request, "its job token proof (HMAC-SHA256) does not verify: another MWSTRAT_JOB_TOKEN");
      }
    }
    if (send_join_message(fd.get(), {"pending"}, deadline).status != io_status::ok) return;
    h.socket = std::move(fd);
    log_("joiner " + h.request.address + " (worker " + std::to_string(h.request.worker) +
         ") waits to be admitted at a step boundary");
    const std::lock_guard lock(mutex_);
    pending_.push_back(std::move(h));
    arrived_.notify_all();
  }

  void refuse(unique_socket& fd, const join_request& r, const std::string& reason) {
    log_("refused joiner " + r.address + " (worker " + std::to_string(r.worker) + "): " + reason);
    (void)send_join_message(fd.get(), {"refused", reason}, deadline_after(handshake_timeout_));
  }

  // A pending joiner that went away (its process ended) leaves the line instead of being admitted.
  void drop_closed() {
    const std::lock_guard lock(mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      pollfd p{it->socket.get(), POLLIN, 0};
      char byte = 0;
      const bool gone = ::poll(&p, 1, 0) > 0 && ::recv(it->socket.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
      if (gone) {
        log_("joiner " + it->request.address + " went away before it was admitted");
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::string token_;
  std::chrono::milliseconds handshake_timeout_;
  std::function<void(const std::string&)> log_;
  unique_socket listener_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<held> pending_;
  std::vector<held> taken_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mwstrat::detail
