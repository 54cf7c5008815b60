#pragma once
// The joiner's side of the join protocol (join_wire.hpp): a worker started after the job (elastic training) tries the
// join addresses in turn — only the chief of the moment listens on its own — until one hears it, waits there to be
// admitted at a step boundary, and returns the options of the ring it was admitted into. A chief that goes away
// while the joiner waits sends it back to the list (the next chief listens on another address).

#include <mwstrat/collective/ring/detail/join_wire.hpp>
#include <mwstrat/collective/ring/detail/log.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace mwstrat::detail {

// `o`'s rank and address are this worker's own (its slot of the job); `o.join_via` the addresses to try. Returns `o`
// as the chief admitted it: the grown ring's addresses, this rank in it, its generation and cluster fingerprint, and
// no join addresses (it has joined). Throws config_error when the chief refuses it (another job token: retrying
// cannot help), timeout_error when nobody admits it within `o.connect_timeout`.
inline ring_options join_job(ring_options o) {
  const auto deadline = steady::now() + o.connect_timeout;
  const std::string token = o.job_token.value_or(std::string());
  const std::string me = o.addresses.at(static_cast<std::size_t>(o.rank));
  const std::string worker = std::to_string(o.rank);
  std::string last = "no join address answered";
  auto pause = std::chrono::milliseconds(20);
  bool said = false;
  while (steady::now() < deadline) {
    for (const auto& desk : o.join_via) {
      std::string why;
      const auto attempt = std::min(deadline, steady::now() + std::chrono::seconds(2));
      unique_socket fd = join_connect(desk, attempt, why);
      if (!fd) {  // not the chief (nothing listens there), or gone
        last = desk + ": " + why;
        continue;
      }
      const std::string nonce = hex_of(random_nonce());
      const join_message hello{std::string(join_hello_tag), nonce, me, worker, token.empty() ? "0" : "1"};
      const auto shake = std::min(deadline, steady::now() + o.handshake_timeout);
      if (send_join_message(fd.get(), hello, shake).status != io_status::ok) continue;
      const auto challenge = read_join_message(fd.get(), shake, why);
      if (!challenge || challenge->size() != 2 || (*challenge)[0] != "challenge") {
        last = desk + ": no challenge (" + why + ")";
        continue;
      }
      const std::string desk_nonce = (*challenge)[1];
      const join_message bound{nonce, desk_nonce, me, worker};
      const std::string proof = token.empty() ? std::string() : join_proof(token, "join request", bound);
      if (send_join_message(fd.get(), {proof}, shake).status != io_status::ok) continue;
      const auto verdict = read_join_message(fd.get(), shake, why);
      if (!verdict || verdict->empty()) {
        last = desk + ": no answer to the request (" + why + ")";
        continue;
      }
      if ((*verdict)[0] == "refused") {
        throw config_error({"ring.join", o.rank}, "the job's chief at " + desk + " refused this worker: " +
                                                      (verdict->size() > 1 ? (*verdict)[1] : "no reason given"));
      }
      if ((*verdict)[0] != "pending") {
        last = desk + ": an answer that is not this protocol's";
        continue;
      }
      if (!said) {
        ring_log(o, o.rank, "asked the job's chief at " + desk + " to join; waiting to be admitted at a step boundary");
        said = true;
      }
      // Admitted at a step boundary: as long as the chief lives, however long its steps are.
      const auto admission = read_join_message(fd.get(), deadline, why);
      if (!admission || admission->size() < 6 || (*admission)[0] != "admitted") {
        last = desk + ": left waiting (" + why + ")";
        continue;  // that chief went away: the next one listens elsewhere
      }
      join_message check{nonce, desk_nonce};
      check.insert(check.end(), admission->begin(), admission->end() - 1);
      if (!token.empty() && !same_proof(admission->back(), join_proof(token, "join admit", check))) {
        throw protocol_error({"ring.join", o.rank}, "the admission from " + desk +
                                                        " carries no valid proof of the job token");
      }
      ring_options in = o;
      try {
        in.generation = std::stoull((*admission)[1]);
        in.rank = std::stoi((*admission)[2]);
      } catch (const std::exception&) {
        throw protocol_error({"ring.join", o.rank}, "the admission from " + desk + " is malformed");
      }
      in.cluster_fingerprint = (*admission)[3];
      in.addresses.assign(admission->begin() + 4, admission->end() - 1);
      if (in.rank < 0 || in.rank >= static_cast<int>(in.addresses.size()) ||
          in.addresses[static_cast<std::size_t>(in.rank)] != me) {
        throw protocol_error({"ring.join", o.rank}, "the admission from " + desk + " does not place this worker");
      }
      in.join_via.clear();
      in.connect_timeout = std::max(std::chrono::milliseconds(1), std::chrono::ceil<std::chrono::milliseconds>(
                                                                      deadline - steady::now()));
      ring_log(in, in.rank, "admitted as rank " + std::to_string(in.rank) + " of " +
                                std::to_string(in.addresses.size()) + " (ring generation " +
                                std::to_string(in.generation) + ")");
      return in;
    }
    std::this_thread::sleep_for(std::min(pause, std::chrono::ceil<std::chrono::milliseconds>(
                                                    std::max(deadline - steady::now(), steady::duration::zero()))));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  throw timeout_error({"ring.join", o.rank},
                      "no chief admitted this worker into the job within " + std::to_string(o.connect_timeout.count()) +
                          " ms (tried " + std::to_string(o.join_via.size()) + " join address(es); " + last + ")");
}

}  // namespace mwstrat::detail
