#pragma once
// Agreeing on who is left (elastic training, docs/fault-tolerance.md "Membership"). After a ring's verdict the
// survivors settle on one membership before they build the smaller ring. With one worker lost every verdict names the
// same rank; with two or more lost at once the verdicts can differ (a survivor whose neighbours both died cannot pass
// its verdict on), and without this round each survivor would build a ring of another membership and none would form.
//
// The round, on every survivor, over its own ring address (the next ring listens there only after it):
//   - it listens and holds every hello it hears, unanswered, until it knows its own role;
//   - it tries the lower ranks in order, skipping those it knows are dead or its verdict names, each for at most
//     `wait`: the first that answers is its coordinator (one that is itself a follower redirects it to its own);
//   - a rank no lower rank answered is a coordinator: it gathers hellos until every rank not known dead or named has
//     spoken, or for `wait`, then announces the membership (itself and those heard) to each, or that there is none;
//   - a hello carries what its rank knows (dead ranks, named ranks), so a rank stops waiting for one another knows
//     dead.
//
// Never two groups: a membership is announced only when it is a strict majority of the old ring's ranks not known to
// be dead. "Dead" is evidence, never a guess: a liveness connection that ended with no verdict and no goodbye before
// it (liveness.hpp) — a live rank always sends its verdict on every liveness connection before it closes one. A rank
// that is merely silent (stopped, cut off) counts against the majority, so two sides of a cut can never both go on: a
// group of two cut in half stops rather than training as two. Two coordinators' memberships are disjoint, so at most
// one of them can be a majority. A hello and its answer carry an HMAC of the job token when there is one, the old
// ring's generation and a digest of its cluster fingerprint: a stranger or a stale rank cannot be counted.

#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/ring/detail/join_wire.hpp>
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/error.hpp>

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat::detail {

inline constexpr std::string_view regroup_tag = "mwstrat-regroup 1";

// What one survivor knows when the round starts.
struct regroup_view {
  std::set<int> dead;   // ranks whose process is gone (liveness_monitor::dead_neighbours)
  std::set<int> named;  // ranks its verdict names: lost, but maybe only stopped or cut off
  // Asked again while the round waits: deaths found since it started (two workers killed at once die a few
  // milliseconds apart). Empty: none.
  std::function<std::vector<int>()> more_dead;
};

inline std::string rank_list_text(const std::set<int>& ranks) {
  std::string out;
  for (const int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

// "1,3" -> {1, 3}; nullopt when a field is not a rank of a ring of `n`.
inline std::optional<std::set<int>> parse_rank_list(const std::string& text, int n) {
  std::set<int> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const std::string one = text.substr(at, comma - at);
    if (one.empty() || one.size() > 6 || one.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const int r = std::stoi(one);
    if (r >= n) return std::nullopt;
    out.insert(r);
    at = comma + 1;
  }
  return out;
}

class regroup_round {
 public:
  // `options`: the failed ring's; `wait`: how long a lower rank is tried, and how long a coordinator gathers;
  // `timeout`: the bound of the whole round.
  regroup_round(const ring_options& options, regroup_view mine, std::chrono::milliseconds wait,
                std::chrono::milliseconds timeout)
      : o_(options),
        n_(static_cast<int>(options.addresses.size())),
        me_(options.rank),
        token_(options.job_token.value_or("")),
        wait_(wait),
        deadline_(deadline_after(timeout)),
        more_dead_(std::move(mine.more_dead)),
        dead_(std::move(mine.dead)),
        named_(std::move(mine.named)) {
    const std::string& fp = o_.cluster_fingerprint;
    const auto bytes = std::span(reinterpret_cast<const std::uint8_t*>(fp.data()), fp.size());
    digest_ = hex_of(hmac_sha256("mwstrat regroup", bytes));
  }

  // The old ranks of the agreed membership, ascending, this rank among them. Throws removed_error when the
  // coordinator's view names this rank, peer_lost_error when no majority is left (or no coordinator answered).
  std::vector<int> run() {
    listen();
    accepting_ = std::thread([this] { accept_loop(); });
    struct joiner_guard {
      regroup_round* r;
      ~joiner_guard() {
        r->stop_ = true;
        if (r->accepting_.joinable()) r->accepting_.join();
      }
    } guard{this};
    if (auto members = follow()) {
      finish_as_follower();
      return *members;
    }
    return coordinate();
  }

 private:
  struct held {
    unique_socket socket;
    int from = -1;
    join_message hello;  // as heard, for the answer's proof
  };

  void log(const std::string& text) const { ring_log(o_, me_, text); }

  [[noreturn]] void fail(const std::string& why, bool removed = false) const {
    const std::string text = "the survivors of ring generation " + std::to_string(o_.generation) +
                             " could not agree on who is left: " + why;
    if (removed) throw removed_error({"ring.regroup", me_}, me_, o_.addresses[static_cast<std::size_t>(me_)], text);
    throw peer_lost_error({"ring.regroup", me_}, -1, "", text);
  }

  void listen() {
    namespace ip = boost::asio::ip;
    std::string why;
    const auto ep = join_endpoint(o_.addresses[static_cast<std::size_t>(me_)], true, why);
    if (!ep) throw io_error({"ring.regroup", me_}, why);
    boost::asio::io_context io;
    boost::system::error_code ec;
    ip::tcp::acceptor acceptor(io);
    acceptor.open(ep->protocol(), ec);
    if (!ec) acceptor.set_option(ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(*ep, ec);
    if (!ec) acceptor.listen(64, ec);
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) throw io_error({"ring.regroup", me_}, "cannot listen on " + o_.addresses[static_cast<std::size_t>(me_)] +
                                                      ": " + ec.message());
    listener_ = unique_socket(acceptor.release(ec));
  }

  // The listener's thread: every hello that proves itself is held for the main thread, which alone answers.
  void accept_loop() {
    while (!stop_) {
      if (wait_fd(listener_.get(), POLLIN, steady::now() + std::chrono::milliseconds(20)).status != io_status::ok)
        continue;
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;
      unique_socket conn(fd);
      std::string why;
      // A ring start-up knocking early (a survivor already past the round) sends no regroup message: dropped soon.
      const auto msg = read_join_message(conn.get(), std::min(deadline_, deadline_after(std::chrono::seconds(1))), why);
      if (!msg || msg->size() != 8 || (*msg)[0] != regroup_tag || (*msg)[1] != "hello") continue;
      const auto& m = *msg;
      const join_message body(m.begin(), m.end() - 1);
      if (m[2] != std::to_string(o_.generation) || m[3] != digest_) continue;  // another ring's survivor
      if (!token_.empty() && !same_proof(m[7], join_proof(token_, "regroup hello", body))) {
        log("refused a regroup hello that fails the job token's proof");
        continue;
      }
      const auto from = parse_rank_list(m[4], n_);
      const auto dead = parse_rank_list(m[5], n_);
      const auto named = parse_rank_list(m[6], n_);
      if (!from || from->size() != 1 || !dead || !named || *from->begin() == me_) continue;
      const std::lock_guard lock(mutex_);
      const int r = *from->begin();
      dead_.insert(dead->begin(), dead->end());
      named_.insert(named->begin(), named->end());
      heard_alive_.insert(r);
      held_.push_back(held{std::move(conn), r, m});
      arrived_.notify_all();
    }
  }

  join_message hello() const {
    join_message m{std::string(regroup_tag), "hello", std::to_string(o_.generation), digest_, std::to_string(me_)};
    {
      const std::lock_guard lock(mutex_);
      m.push_back(rank_list_text(dead_));
      m.push_back(rank_list_text(named_));
    }
    m.push_back(token_.empty() ? std::string() : join_proof(token_, "regroup hello", m));
    return m;
  }

  // The answer to `h`: kind and payload, bound to the hello it answers.
  void answer(held& h, const std::string& kind, const std::string& payload) const {
    join_message reply{std::string(regroup_tag), kind, payload};
    join_message bound = h.hello;
    bound.insert(bound.end(), reply.begin(), reply.end());
    reply.push_back(token_.empty() ? std::string() : join_proof(token_, "regroup answer", bound));
    (void)send_join_message(h.socket.get(), reply, std::min(deadline_, deadline_after(std::chrono::seconds(1))));
  }

  std::vector<held> take_held() {
    const std::lock_guard lock(mutex_);
    std::vector<held> out;
    out.swap(held_);
    return out;
  }

  // Deaths this rank has found since the round began.
  void look_again() {
    if (!more_dead_) return;
    const auto found = more_dead_();
    const std::lock_guard lock(mutex_);
    dead_.insert(found.begin(), found.end());
  }

  bool ruled_out(int r) const {
    const std::lock_guard lock(mutex_);
    return (dead_.count(r) != 0 && heard_alive_.count(r) == 0) || named_.count(r) != 0;
  }

  // Tries the lower ranks; the membership a coordinator announced, or nullopt when none answered (this rank then
  // coordinates). Hellos held meanwhile stay held: this rank's role is not known yet.
  std::optional<std::vector<int>> follow() {
    int hops = 0;
    for (int k = 0; k < me_; ++k) {
      int target = k;
      while (target >= 0) {
        if (ruled_out(target)) break;
        const auto outcome = ask(target);
        if (outcome.members) {
          coordinator_ = target;
          return outcome.members;
        }
        if (outcome.redirect < 0 || ++hops > n_) break;
        target = outcome.redirect;
      }
      if (steady::now() >= deadline_) fail("no coordinator answered within the recovery timeout");
    }
    return std::nullopt;
  }

  struct asked {
    std::optional<std::vector<int>> members;
    int redirect = -1;
  };

  // One lower rank, for at most `wait` (or until another rank's hello says it is dead).
  asked ask(int target) {
    const auto give_up = std::min(deadline_, steady::now() + wait_);
    auto pause = std::chrono::milliseconds(5);
    while (steady::now() < give_up && (look_again(), !ruled_out(target))) {
      std::string why;
      unique_socket fd = join_connect(o_.addresses[static_cast<std::size_t>(target)],
                                      std::min(give_up, steady::now() + std::chrono::milliseconds(500)), why);
      if (fd) {
        const join_message mine = hello();
        if (send_join_message(fd.get(), mine, give_up).status == io_status::ok) {
          // The coordinator may gather for up to `wait` before it answers: wait past give_up, to the round's bound.
          if (auto reply = read_join_message(fd.get(), deadline_, why)) {
            if (auto result = judge(target, mine, *reply)) return *result;
          }
        }
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
    return {};
  }

  // What an answer from `target` means: a membership (throws when it is "none" or "removed"), a redirect, or
  // nullopt when it is not a valid answer (tried again).
  std::optional<asked> judge(int target, const join_message& mine, const join_message& reply) const {
    if (reply.size() != 4 || reply[0] != regroup_tag) return std::nullopt;
    if (!token_.empty()) {
      join_message bound = mine;
      bound.insert(bound.end(), reply.begin(), reply.end() - 1);
      if (!same_proof(reply[3], join_proof(token_, "regroup answer", bound))) return std::nullopt;
    }
    const std::string& kind = reply[1];
    if (kind == "removed") fail("rank " + std::to_string(target) + " found this rank lost: " + reply[2], true);
    if (kind == "none") fail("rank " + std::to_string(target) + " coordinated and found: " + reply[2]);
    if (kind == "redirect") {
      const auto to = parse_rank_list(reply[2], n_);
      if (!to || to->size() != 1) return std::nullopt;
      return asked{std::nullopt, *to->begin()};
    }
    if (kind != "members") return std::nullopt;
    const auto ranks = parse_rank_list(reply[2], n_);
    if (!ranks || ranks->count(me_) == 0) return std::nullopt;
    return asked{std::vector<int>(ranks->begin(), ranks->end()), -1};
  }

  // A follower sends those who knocked to its coordinator (the listener closed first: nobody is left unanswered).
  void finish_as_follower() {
    stop_ = true;
    accepting_.join();
    for (auto& h : take_held()) answer(h, "redirect", std::to_string(coordinator_));
  }

  std::vector<int> coordinate() {
    std::map<int, held> heard;
    const auto until = std::min(deadline_, steady::now() + wait_);
    std::set<int> removed;
    for (;;) {
      for (auto& h : take_held()) {
        if (named_has(h.from)) {
          answer(h, "removed", "this rank's verdict, or another survivor's, names it");
          removed.insert(h.from);
          continue;
        }
        heard[h.from] = std::move(h);
      }
      look_again();
      bool everyone = true;
      for (int r = 0; r < n_ && everyone; ++r)
        if (r != me_ && heard.count(r) == 0 && !ruled_out(r)) everyone = false;
      if (everyone || steady::now() >= until) break;
      std::unique_lock lock(mutex_);
      arrived_.wait_for(lock, std::chrono::milliseconds(20), [this] { return !held_.empty(); });
    }
    stop_ = true;  // a hello from now on finds no listener; its rank is not counted and fails its own round
    accepting_.join();
    for (auto& h : take_held()) heard[h.from] = std::move(h);  // heard before the listener closed
    look_again();
    std::set<int> members{me_};
    for (auto& [r, h] : heard) {
      if (named_has(r)) {
        answer(h, "removed", "another survivor's verdict names it");
      } else {
        members.insert(r);
      }
    }
    std::set<int> dead;
    {
      const std::lock_guard lock(mutex_);
      for (const int r : dead_)
        if (members.count(r) == 0) dead.insert(r);
    }
    const int alive_or_unknown = n_ - static_cast<int>(dead.size());
    const bool majority = 2 * static_cast<int>(members.size()) > alive_or_unknown;
    std::string summary = "ranks " + rank_list_text(members) + " of " + std::to_string(n_) + " answered; dead: " +
                          (dead.empty() ? std::string("none known") : rank_list_text(dead));
    if (!majority) {
      const std::string why = summary + "; not a majority of the " + std::to_string(alive_or_unknown) +
                              " not known dead, so another group may be training (a cut link): this one stops";
      for (auto& [r, h] : heard)
        if (members.count(r) != 0) answer(h, "none", why);
      fail(why);
    }
    const std::string list = rank_list_text(members);
    for (auto& [r, h] : heard)
      if (members.count(r) != 0) answer(h, "members", list);
    log("regrouped as ranks " + list + " (" + summary + ")");
    return std::vector<int>(members.begin(), members.end());
  }

  bool named_has(int r) const {
    const std::lock_guard lock(mutex_);
    return named_.count(r) != 0;
  }

  const ring_options& o_;
  int n_;
  int me_;
  std::string token_;
  std::chrono::milliseconds wait_;
  steady::time_point deadline_;
  std::function<std::vector<int>()> more_dead_;
  std::string digest_;
  unique_socket listener_;
  std::thread accepting_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::set<int> dead_, named_;  // what this rank knows, and what the hellos it heard told it
  std::set<int> heard_alive_;   // ranks whose hello arrived (alive, whatever another said)
  std::vector<held> held_;
  int coordinator_ = -1;
};

// The round for rank `options.rank` of the failed ring `options`: see the top of this header.
inline std::vector<int> agree_survivors(const ring_options& options, regroup_view mine, std::chrono::milliseconds wait,
                                        std::chrono::milliseconds timeout) {
  regroup_round round(options, std::move(mine), wait, timeout);
  return round.run();
}

}  // namespace mwstrat::detail
