#pragma once
// The shared-memory set-up of one same-host link at start-up (startup.hpp runs it after the handshake): the
// sending rank creates a region, offers its name, and the receiving rank maps it and returns the first bytes it
// sees, so both know they map the same object (not merely the same name in separate /dev/shm mounts). Either end
// may decline; the link then carries its payloads over TCP, and both ends log why.

#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/socket_io.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace mwstrat::detail {

// Slots of a link's shared-memory region: enough to keep a few chunks in flight (as the socket buffers do for
// TCP) while bounding its memory to ring_shm_slots x chunk_bytes.
inline constexpr std::size_t ring_shm_slots = 8;

// Where the set-up says which way a link's payloads go (the ring's log).
using shm_setup_log = std::function<void(const std::string&)>;

// The receiving end of a same-host link, from rank `from`: maps the region it offers into `mapped`, or says why not
// (then the link carries payloads over TCP). A reason when the connection itself failed.
inline std::optional<std::string> accept_shm_offer(int fd, steady::time_point limit, std::size_t chunk_bytes,
                                                   const std::string& from, const shm_setup_log& log,
                                                   std::optional<shm_region>& mapped) {
  std::array<std::uint8_t, detail::shm_offer_size> raw{};
  if (auto r = detail::read_exact(fd, raw.data(), raw.size(), limit); r.status != detail::io_status::ok)
    return "no shared-memory offer (" + r.describe() + ")";
  const auto offer = detail::decode_shm_offer(raw);
  if (!offer) return std::string("malformed shared-memory offer");
  if (offer->status == 0) {
    log("payloads from " + from + " over TCP: it could not set up shared memory");
    return std::nullopt;
  }
  detail::shm_region region;
  std::string why;
  if (offer->slot_bytes != chunk_bytes || offer->slots > ring_shm_slots) {  // judged before mapping anything
    why = "its region (" + std::to_string(offer->slots) + " x " + std::to_string(offer->slot_bytes) +
          " bytes) does not match our chunk_bytes (" + std::to_string(chunk_bytes) + ")";
    detail::shm_region::discard(detail::shm_directory, offer->name);
  } else {
    why = region.open(detail::shm_directory, offer->name, offer->slots, offer->slot_bytes);
  }
  detail::shm_answer answer;
  answer.mapped = why.empty();
  // What this side sees at the start of the region: the sender's proof only if both map the same object.
  if (answer.mapped) std::memcpy(answer.proof.data(), region.data(), answer.proof.size());
  std::array<std::uint8_t, detail::shm_answer_size> raw_answer{};
  detail::encode(answer, raw_answer);
  if (auto r = detail::write_all(fd, raw_answer.data(), raw_answer.size(), limit); r.status != detail::io_status::ok)
    return "shared-memory answer failed (" + r.describe() + ")";
  if (!why.empty()) {
    log("payloads from " + from + " over TCP: shared memory declined: " + why);
    return std::nullopt;
  }
  std::array<std::uint8_t, detail::shm_verdict_size> raw_verdict{};
  if (auto r = detail::read_exact(fd, raw_verdict.data(), raw_verdict.size(), limit);
      r.status != detail::io_status::ok)
    return "no shared-memory verdict (" + r.describe() + ")";
  const auto proven = detail::decode_shm_verdict(raw_verdict);
  if (!proven) return std::string("malformed shared-memory verdict");
  if (!*proven) {
    log("payloads from " + from + " over TCP: the region mapped here is not the one it wrote (a separate /dev/shm)");
    return std::nullopt;
  }
  mapped = std::move(region);
  return std::nullopt;
}

// The sending end, to rank `to`: creates the region (bounded: ring_shm_slots × chunk_bytes), offers it, and
// hands it to `offered` once that rank has mapped it. The name is gone from /dev/shm when this returns, whatever
// happened. A reason when the connection itself failed (the caller retries).
inline std::optional<std::string> offer_shm_region(int fd, steady::time_point limit, std::size_t chunk_bytes,
                                                   const std::string& to, int rank, const shm_setup_log& log,
                                                   std::optional<shm_region>& offered) {
  detail::shm_region region;
  const std::string why = region.create(detail::shm_directory, ring_shm_slots, chunk_bytes);
  detail::shm_offer offer;
  detail::shm_proof proof{};
  if (why.empty()) {
    const auto nonce = detail::random_nonce();
    std::copy_n(nonce.begin(), proof.size(), proof.begin());
    std::memcpy(region.data(), proof.data(), proof.size());  // slot 0, overwritten by the first payload
    std::atomic_thread_fence(std::memory_order_release);
    offer.status = 1;
    offer.slots = static_cast<std::uint32_t>(ring_shm_slots);
    offer.slot_bytes = chunk_bytes;
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
  std::array<std::uint8_t, detail::shm_answer_size> raw_answer{};
  const auto r = detail::read_exact(fd, raw_answer.data(), raw_answer.size(), limit);
  region.unlink();  // the receiver unlinks it once it has it open; this covers every other path
  if (r.status != detail::io_status::ok) return "shared-memory answer: " + r.describe();
  const auto answer = detail::decode_shm_answer(raw_answer);
  if (!answer) throw protocol_error({"ring", rank}, to + " sent a malformed shared-memory answer");
  if (!answer->mapped) {
    log("payloads to " + to + " over TCP: it declined the shared memory (see its log)");
    return std::nullopt;
  }
  const bool proven = answer->proof == proof;
  std::array<std::uint8_t, detail::shm_verdict_size> raw_verdict{};
  detail::encode_shm_verdict(proven, raw_verdict);
  if (auto w = detail::write_all(fd, raw_verdict.data(), raw_verdict.size(), limit); w.status != detail::io_status::ok)
    return "shared-memory verdict: " + w.describe();
  if (!proven) {
    log("payloads to " + to + " over TCP: it mapped another object under the region's name (a separate /dev/shm: "
        "another container or mount namespace)");
    return std::nullopt;
  }
  offered = std::move(region);
  return std::nullopt;
}

}  // namespace mwstrat::detail
