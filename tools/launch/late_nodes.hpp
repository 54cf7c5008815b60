#pragma once
// Nodes that arrive after the job has started: an elastic job under per-node agents grows when the scheduler gives
// it a node back (what `torchrun --nnodes MIN:MAX` does). The first `--nnodes N` nodes meet at the rendezvous as
// always; where `--max-workers M` leaves room past their N·W workers, node 0's agent keeps a *late desk* open for
// the rest of the job, on the rendezvous port + 1. A late node's agent (`--node-rank K` with K >= N, its W workers
// ranks K·W .. K·W+W-1, all within M) registers there as a rendezvous member would, gets every node's address, and
// starts its workers as joiners, which the job takes in at a step boundary (docs/fault-tolerance.md).
//
// The desk answers a registration of node K with K + 1 addresses: the first N nodes', those of the late nodes that
// registered before it, and its own as the desk saw it. A late node that has not registered is given node 0's
// address in its place; a joiner takes only its own address from its TF_CONFIG (the chief tells it the ring), so
// such a stand-in is never connected to as that node. Node 0's agent lost, nobody serves the desk any more: a late
// node then fails at its rendezvous deadline, naming node 0.
#include <mwstrat/cluster/detail/rendezvous.hpp>
#include <mwstrat/error.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat_launch {

// The late desk's port, beside the rendezvous's.
inline int late_desk_port(int rendezvous_port) { return rendezvous_port + 1; }

// Node 0's late desk: a thread that answers late nodes' registrations until the agent ends.
class late_desk {
 public:
  // Listens on `ip`:`port`; `nodes` are the first nodes' addresses (node order); late nodes `nodes.size()` ..
  // `end_late` - 1 may register. Throws mwstrat::io_error when it cannot listen.
  late_desk(const std::string& ip, int port, std::vector<std::string> nodes, int end_late)
      : nodes_(std::move(nodes)), end_late_(end_late) {
    ctx_.endpoint = ip + ":" + std::to_string(port);
    ctx_.rank = 0;
    ctx_.size = static_cast<int>(nodes_.size());
    ctx_.name = "late desk";
    ctx_.member = "node";
    ctx_.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    listener_ = mwstrat::detail::rendezvous_socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    const int on = 1;
    ::setsockopt(listener_.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in a = mwstrat::detail::ipv4_socket_address(ip, static_cast<std::uint16_t>(port));
    if (listener_.fd() < 0 || ::bind(listener_.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_.fd(), 16) != 0) {
      ctx_.fail_io("node 0 cannot listen for late nodes (is the port after the rendezvous's free?)", errno);
    }
    thread_ = std::thread([this] { serve(); });
  }
  late_desk(const late_desk&) = delete;
  late_desk& operator=(const late_desk&) = delete;
  ~late_desk() {
    stop_ = true;
    thread_.join();  // it looks at stop_ at least every poll_slice
  }

 private:
  static constexpr int poll_slice_ms = 200;

  void serve() {
    while (!stop_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, poll_slice_ms) <= 0) continue;
      mwstrat::detail::rendezvous_socket s(::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (s.fd() < 0) continue;
      try {
        answer(s.fd());
      } catch (const std::exception& e) {  // one bad or slow caller never ends the desk, nor the agent
        std::fprintf(stderr, "mwstrat-launch: node 0: late desk: %s\n", e.what());
      }
    }
  }

  // One caller, served alone within a few seconds: a late node registers once, and rarely.
  void answer(int fd) {
    mwstrat::detail::rendezvous_context ctx = ctx_;
    ctx.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    const auto line = mwstrat::detail::read_line(ctx, fd, "a late node's registration");
    if (!line) return;  // it went away
    std::istringstream in(*line);
    std::string magic, endpoint;
    int rank = -1, size = -1;
    in >> magic >> rank >> size >> endpoint;
    const int first_late = static_cast<int>(nodes_.size());
    std::string refusal;
    if (magic != mwstrat::detail::rendezvous_magic || endpoint.empty()) {
      refusal = "a peer sent '" + line->substr(0, 80) + "', not a registration";
    } else if (rank < first_late || rank >= end_late_) {
      refusal = "node " + std::to_string(rank) + " is not a late node of this job (late nodes are " +
                std::to_string(first_late) + ".." + std::to_string(end_late_ - 1) +
                ": --nnodes " + std::to_string(first_late) + " and --max-workers leave room for them)";
    } else if (size != rank + 1) {
      refusal = "node " + std::to_string(rank) + " says " + std::to_string(size) + " nodes, not " +
                std::to_string(rank + 1);
    }
    if (!refusal.empty()) {
      const auto word = mwstrat::detail::refusal_word(mwstrat::detail::rendezvous_refusal::config);
      mwstrat::detail::send_line(ctx, fd, std::string(word) + ' ' + refusal + "\n");
      throw mwstrat::config_error({"launch"}, refusal);
    }
    late_[rank] = endpoint;
    std::string ok = "ok";
    for (int k = 0; k <= rank; ++k) {
      if (k < first_late) ok += ' ' + nodes_[static_cast<std::size_t>(k)] + ":0";
      else if (const auto it = late_.find(k); it != late_.end()) ok += ' ' + it->second;
      else ok += ' ' + nodes_[0] + ":0";  // a stand-in: see the file comment
    }
    mwstrat::detail::send_line(ctx, fd, ok + "\n");
    std::fprintf(stderr, "mwstrat-launch: node 0: late node %d registered from %s; its workers join the job\n", rank,
                 endpoint.substr(0, endpoint.rfind(':')).c_str());
  }

  std::vector<std::string> nodes_;
  int end_late_;
  std::map<int, std::string> late_;  // late node -> its endpoint, as registered
  mwstrat::detail::rendezvous_context ctx_;
  mwstrat::detail::rendezvous_socket listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mwstrat_launch
