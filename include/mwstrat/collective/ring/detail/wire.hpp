#pragma once
// The ring's wire formats, as pure functions over bytes (no sockets), so they can be fuzzed:
// the handshake messages, frame headers and abort payloads, plus the HMAC-SHA256 proofs (OpenSSL libcrypto).
// All integers are little-endian. Each message's fields are listed once (wire_fields<Msg>, see wire_fields.hpp);
// its size, encoder and decoder come from that list. See docs/collectives.md for the protocol.

#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/wire_fields.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mwstrat::detail {

using digest = std::array<std::uint8_t, 32>;

// ---- crypto ----

inline digest sha256(std::string_view text) {
  digest out{};
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

inline digest hmac_sha256(std::string_view key, std::span<const std::uint8_t> message) {
  digest out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(), out.data(), &len);
  return out;
}

inline bool digest_equal(const digest& a, const digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

inline digest random_nonce() {
  digest out{};
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    // No entropy is a broken system; fall back to a digest of the address of a local and the time rather
    // than a predictable zero nonce.
    const auto seed = std::to_string(reinterpret_cast<std::uintptr_t>(&out)) + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    out = sha256(seed);
  }
  return out;
}

// ---- handshake ----

inline constexpr std::array<std::uint8_t, 8> hello_magic = {'M', 'W', 'S', 'R', 'I', 'N', 'G', '1'};
// 2: host identity, shm offer, slot/credit frames; 3: shm proof; 4: a liveness connection beside each link
// (flag_liveness), heartbeat and goodbye frames; 5: several data connections per link between hosts (lane_flags);
// 6: each broadcast starts with a broadcast_check all-reduce of the ranks' roots, types and counts; 7: with a token,
// frames on data connections between hosts carry an AES-256-GCM tag (frame_seal.hpp), flag_encrypt.
inline constexpr std::uint16_t protocol_version = 7;
inline constexpr std::uint16_t flag_token = 1;     // the sender holds a job token and will prove it
inline constexpr std::uint16_t flag_shm = 2;       // the sender would carry payloads through shared memory
inline constexpr std::uint16_t flag_liveness = 4;  // this connection is the link's liveness connection (liveness.hpp)
inline constexpr std::uint16_t flag_encrypt = 8;   // the sender encrypts frames between hosts (frame_seal.hpp)
// A hello's top byte (protocol v5): which data connection of the link this is (bits 8-11, 0 for the first, which
// also carries the back channel, aborts and shared memory) and how many the sender opens to a peer on another host
// (bits 12-15, minus one: ring_options::streams_per_peer). Both ends must be configured alike.
inline constexpr unsigned lane_shift = 8, streams_shift = 12;
inline constexpr unsigned max_streams_per_peer = 16;
inline constexpr std::uint16_t lane_flags(unsigned lane, unsigned streams) {
  return static_cast<std::uint16_t>(((lane & 0xFu) << lane_shift) | (((streams - 1) & 0xFu) << streams_shift));
}
inline constexpr unsigned lane_of_flags(std::uint16_t flags) { return (flags >> lane_shift) & 0xFu; }
inline constexpr unsigned streams_of_flags(std::uint16_t flags) { return ((flags >> streams_shift) & 0xFu) + 1; }

// Why a server refused a client, sent back in the reply so both sides log the same reason.
enum class refusal : std::uint8_t {
  none = 0,
  bad_version = 1,
  wrong_world = 2,
  wrong_rank = 3,
  cluster_mismatch = 4,
  model_mismatch = 5,
  token_required = 6,
  token_unexpected = 7,
  bad_proof = 8,
  streams_mismatch = 9,
  encrypt_mismatch = 10,
};

template <>
struct enum_range<refusal> {
  static constexpr refusal first = refusal::none, last = refusal::encrypt_mismatch;
  static constexpr const char* unknown = "unknown refusal";
};

inline const char* refusal_text(refusal r) {
  switch (r) {
    case refusal::none: return "accepted";
    case refusal::bad_version: return "protocol version differs";
    case refusal::wrong_world: return "world size differs";
    case refusal::wrong_rank: return "unexpected rank (not our ring neighbour)";
    case refusal::cluster_mismatch: return "cluster fingerprint differs";
    case refusal::model_mismatch: return "model fingerprint differs";
    case refusal::token_required: return "a job token is required (MWSTRAT_JOB_TOKEN) but the peer has none";
    case refusal::token_unexpected: return "the peer holds a job token but this side has none";
    case refusal::bad_proof: return "job token proof (HMAC-SHA256) does not verify: wrong MWSTRAT_JOB_TOKEN";
    case refusal::streams_mismatch: return "streams per peer differ (ring_options::streams_per_peer, MWSTRAT_RING_STREAMS)";
    case refusal::encrypt_mismatch:
      return "one side encrypts frames between hosts and the other does not (ring_options::encrypt, MWSTRAT_RING_ENCRYPT)";
  }
  return "unknown refusal";
}

// client -> server
struct hello {
  std::uint16_t version = protocol_version;
  std::uint16_t flags = 0;
  std::uint32_t world = 0;
  std::uint32_t rank = 0;
  digest cluster{};
  digest model{};
  digest nonce{};
  digest host{};  // host_identity(): equal on both ends means shared memory can reach the peer
};
template <>
struct wire_fields<hello> {
  using type = field_list<field<&hello::version>, field<&hello::flags>, field<&hello::world>, field<&hello::rank>,
                          field<&hello::cluster>, field<&hello::model>, field<&hello::nonce>, field<&hello::host>>;
};

// server -> client
struct hello_reply {
  std::uint16_t version = protocol_version;
  refusal status = refusal::none;
  std::uint8_t flags = 0;
  std::uint32_t world = 0;
  std::uint32_t rank = 0;
  digest nonce{};
  digest proof{};  // HMAC over the transcript, zero without a token
  digest host{};
};
template <>
struct wire_fields<hello_reply> {
  using type = field_list<field<&hello_reply::version>, field<&hello_reply::status>, field<&hello_reply::flags>,
                          field<&hello_reply::world>, field<&hello_reply::rank>, field<&hello_reply::nonce>,
                          field<&hello_reply::proof>, field<&hello_reply::host>>;
};

// client -> server (its proof), then server -> client (the verdict), both this shape.
struct hello_finish {
  refusal status = refusal::none;
  digest proof{};
};
template <>
struct wire_fields<hello_finish> {
  using type = field_list<field<&hello_finish::status>, field<&hello_finish::proof>>;
};

// Each handshake message: the magic, then its fields.
inline constexpr std::size_t hello_size = hello_magic.size() + fields_size<hello>;
inline constexpr std::size_t hello_reply_size = hello_magic.size() + fields_size<hello_reply>;
inline constexpr std::size_t hello_finish_size = hello_magic.size() + fields_size<hello_finish>;
static_assert(hello_size == 148 && hello_reply_size == 116 && hello_finish_size == 41, "the wire format changed");

inline bool has_magic(std::span<const std::uint8_t> in) {
  return in.size() >= hello_magic.size() && std::memcmp(in.data(), hello_magic.data(), hello_magic.size()) == 0;
}

// The magic then Msg's fields, into exactly `Size` bytes.
template <class Msg, std::size_t Size>
void encode_with_magic(const Msg& m, std::span<std::uint8_t, Size> out) {
  static_assert(Size == hello_magic.size() + fields_size<Msg>);
  byte_writer w(out);
  w.bytes(hello_magic);
  encode_fields(m, w);
}

// nullopt when the size or the magic is wrong (a stranger) or a field cannot be (an unknown enum value).
template <class Msg>
std::optional<Msg> decode_with_magic(std::span<const std::uint8_t> in) {
  if (in.size() != hello_magic.size() + fields_size<Msg> || !has_magic(in)) return std::nullopt;
  byte_reader r(in.subspan(hello_magic.size()));
  Msg m;
  const char* why = nullptr;
  if (!decode_fields(m, r, why)) return std::nullopt;
  return m;
}

inline void encode(const hello& h, std::span<std::uint8_t, hello_size> out) { encode_with_magic(h, out); }
// Other fields are judged by the caller (judge_hello).
inline std::optional<hello> decode_hello(std::span<const std::uint8_t> in) { return decode_with_magic<hello>(in); }

inline void encode(const hello_reply& h, std::span<std::uint8_t, hello_reply_size> out) { encode_with_magic(h, out); }
inline std::optional<hello_reply> decode_hello_reply(std::span<const std::uint8_t> in) {
  return decode_with_magic<hello_reply>(in);
}

inline void encode(const hello_finish& h, std::span<std::uint8_t, hello_finish_size> out) { encode_with_magic(h, out); }
inline std::optional<hello_finish> decode_hello_finish(std::span<const std::uint8_t> in) {
  return decode_with_magic<hello_finish>(in);
}

// What the server checks in a client's hello, given what it expects; refusal::none when acceptable.
inline refusal judge_hello(const hello& h, std::uint32_t world, std::uint32_t expected_rank, const digest& cluster,
                           const digest& model, bool have_token, unsigned streams = 1, bool encrypt = false) {
  if (h.version != protocol_version) return refusal::bad_version;
  if (streams_of_flags(h.flags) != streams) return refusal::streams_mismatch;
  if (h.world != world) return refusal::wrong_world;
  if (h.rank != expected_rank) return refusal::wrong_rank;
  if (!digest_equal(h.cluster, cluster)) return refusal::cluster_mismatch;
  if (!digest_equal(h.model, model)) return refusal::model_mismatch;
  const bool peer_token = (h.flags & flag_token) != 0;
  if (have_token && !peer_token) return refusal::token_required;
  if (!have_token && peer_token) return refusal::token_unexpected;
  if (((h.flags & flag_encrypt) != 0) != encrypt) return refusal::encrypt_mismatch;
  return refusal::none;
}

// What else of a handshake its proofs bind: both sides' host identities and flags, which decide whether the
// connection's frames are sealed (frame_seal.hpp), encrypted, or go through shared memory. Unbound, someone on the
// path could rewrite both host identities to match and so turn sealing off between two hosts.
struct handshake_binding {
  digest client_host{}, server_host{};
  std::uint16_t client_flags = 0;
  std::uint8_t server_flags = 0;
};

// The proof a side sends: HMAC(token, label || client nonce || server nonce || cluster || world || ranks || both host
// identities || both flags). Distinct labels keep one side's proof from being replayed as the other's.
inline digest handshake_proof(std::string_view token, bool from_server, const digest& client_nonce,
                              const digest& server_nonce, const digest& cluster, std::uint32_t world,
                              std::uint32_t client_rank, std::uint32_t server_rank,
                              const handshake_binding& bound = {}) {
  std::array<std::uint8_t, 16 + 32 * 3 + 12 + 32 * 2 + 3> msg{};
  byte_writer w(msg);
  const char* label = from_server ? "mwstrat-server.2" : "mwstrat-client.2";
  w.bytes(std::span(reinterpret_cast<const std::uint8_t*>(label), 16));
  w.bytes(client_nonce);
  w.bytes(server_nonce);
  w.bytes(cluster);
  w.u32(world);
  w.u32(client_rank);
  w.u32(server_rank);
  w.bytes(bound.client_host);
  w.bytes(bound.server_host);
  w.u16(bound.client_flags);
  w.u8(bound.server_flags);
  return hmac_sha256(token, msg);
}

// ---- shared-memory offer (after a successful handshake, when both ends are on one host and want it) ----

// Names of the regions: our prefix, the creator's pid, '-', 32 random hex digits (see shm_region.hpp).
inline constexpr std::string_view shm_prefix = "mwstrat-ring-";
inline constexpr std::size_t shm_name_size = 64;  // on the wire, NUL-padded
inline constexpr std::uint32_t max_shm_slots = 64;
inline constexpr std::uint64_t max_shm_slot_bytes = std::uint64_t{1} << 30;

// Only names of our own shape: nothing that could walk out of /dev/shm or name someone else's object.
inline bool valid_shm_name(std::string_view name) {
  if (name.size() <= shm_prefix.size() || name.size() >= shm_name_size || !name.starts_with(shm_prefix)) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(shm_prefix.size()), name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-'; });
}

// sender (client) -> receiver (server): the region it created, or none (status 0) when it could not.
struct shm_offer {
  std::uint8_t status = 0;  // 1 = offered
  std::uint32_t slots = 0;
  std::uint64_t slot_bytes = 0;
  std::string name;
};
template <>
struct wire_fields<shm_offer> {
  using type = field_list<field<&shm_offer::status>, pad<3>, field<&shm_offer::slots>, field<&shm_offer::slot_bytes>,
                          fixed_string<&shm_offer::name, shm_name_size>>;
};
inline constexpr std::size_t shm_offer_size = hello_magic.size() + fields_size<shm_offer>;
static_assert(shm_offer_size == 88, "the wire format changed");

// The proof that both ends of a link reach the same shared-memory object: random bytes the sender writes at the
// start of the region it offers, which the receiver reads from what it mapped and echoes over TCP. Two processes
// whose /dev/shm differ (containers or mount namespaces on one kernel) cannot echo it, even if a name matches.
inline constexpr std::size_t shm_proof_size = 16;
using shm_proof = std::array<std::uint8_t, shm_proof_size>;

// receiver -> sender: 0 = mapped, with the proof read from the region; 1 = declined (TCP), proof all zero.
inline constexpr std::size_t shm_answer_size = 8 + 1 + shm_proof_size;
struct shm_answer {
  bool mapped = false;
  shm_proof proof{};
};

inline void encode(const shm_offer& o, std::span<std::uint8_t, shm_offer_size> out) { encode_with_magic(o, out); }

// nullopt when malformed: bad magic, unknown status, non-zero padding, slots or slot size out of range, a name
// not NUL-padded or not of our shape.
inline std::optional<shm_offer> decode_shm_offer(std::span<const std::uint8_t> in) {
  auto o = decode_with_magic<shm_offer>(in);
  if (!o) return std::nullopt;
  if (o->status == 0) return o->slots == 0 && o->slot_bytes == 0 && o->name.empty() ? o : std::nullopt;
  if (o->status != 1 || o->slots < 1 || o->slots > max_shm_slots || o->slot_bytes < 64 ||
      o->slot_bytes > max_shm_slot_bytes || o->slot_bytes % 64 != 0)
    return std::nullopt;
  if (!valid_shm_name(o->name)) return std::nullopt;
  return o;
}

inline void encode(const shm_answer& a, std::span<std::uint8_t, shm_answer_size> out) {
  byte_writer w(out);
  w.bytes(hello_magic);
  w.u8(a.mapped ? 0 : 1);
  w.bytes(a.mapped ? a.proof : shm_proof{});
}

// nullopt = malformed (bad magic, unknown status, a declined answer that carries a proof).
inline std::optional<shm_answer> decode_shm_answer(std::span<const std::uint8_t> in) {
  if (in.size() != shm_answer_size || !has_magic(in) || in[8] > 1) return std::nullopt;
  shm_answer a;
  a.mapped = in[8] == 0;
  std::copy(in.begin() + 9, in.end(), a.proof.begin());
  if (!a.mapped && a.proof != shm_proof{}) return std::nullopt;
  return a;
}

// sender -> receiver, after a "mapped" answer: 0 = the proof matched, payloads go through the region; 1 = it did
// not (the receiver mapped some other object), payloads go over TCP.
inline constexpr std::size_t shm_verdict_size = 8 + 1;

inline void encode_shm_verdict(bool proven, std::span<std::uint8_t, shm_verdict_size> out) {
  byte_writer w(out);
  w.bytes(hello_magic);
  w.u8(proven ? 0 : 1);
}

// true = proven, false = not, nullopt = malformed.
inline std::optional<bool> decode_shm_verdict(std::span<const std::uint8_t> in) {
  if (in.size() != shm_verdict_size || !has_magic(in) || in[8] > 1) return std::nullopt;
  return in[8] == 0;
}

// ---- data frames ----

inline constexpr std::uint32_t frame_magic = 0x4653574DU;  // "MWSF" on the wire
// data: the payload follows on the socket. slot: the payload is in the link's next shared-memory slot (nothing
// follows). credit: on the back channel, the receiver is done with its oldest slot (no payload). abort: see below.
// heartbeat, goodbye: on a liveness connection only, no payload: "still here", and "leaving normally, do not count
// my silence" (liveness.hpp); a liveness connection's verdict on a lost peer travels as an abort frame.
enum class frame_type : std::uint8_t { data = 1, abort = 2, slot = 3, credit = 4, heartbeat = 5, goodbye = 6 };

template <>
struct enum_range<frame_type> {
  static constexpr frame_type first = frame_type::data, last = frame_type::goodbye;
  static constexpr const char* unknown = "unknown frame type";
};
template <>
struct enum_range<op_kind> {
  static constexpr op_kind first = op_kind::all_reduce, last = op_kind::broadcast_check;
  static constexpr const char* unknown = "unknown operation in frame";
};
template <>
struct enum_range<wire_dtype> {
  static constexpr wire_dtype first = wire_dtype::f32, last = wire_dtype::i64;
  static constexpr const char* unknown = "unknown element type in frame";
};
template <>
struct enum_range<error_kind> {
  static constexpr error_kind first = error_kind::config, last = error_kind::data;
  static constexpr const char* unknown = "unknown error kind";
};

// The payload of an abort frame: why the sender gave up, and which rank it blames; its text follows the fields,
// after its length.
struct abort_notice {
  std::uint8_t kind = 0;  // error_kind
  std::int32_t culprit = -1;
  std::uint64_t seq = 0;
  std::string text;
};
template <>
struct wire_fields<abort_notice> {
  using type = field_list<field<&abort_notice::kind>, ignored<3>, signed_field<&abort_notice::culprit>,
                          field<&abort_notice::seq>>;
};
inline constexpr std::size_t abort_fixed_size = fields_size<abort_notice> + sizeof(std::uint32_t);  // + text length
static_assert(abort_fixed_size == 20, "the wire format changed");

struct frame_header {
  frame_type type = frame_type::data;
  op_kind op = op_kind::all_reduce;
  wire_dtype type_of_elements = wire_dtype::f32;
  std::uint8_t reduction = 0;  // reduce_op for all_reduce, 0 otherwise
  std::uint64_t seq = 0;       // the operation's sequence number (the same on every rank)
  std::uint64_t count = 0;     // elements of the whole operation
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::uint64_t payload = 0;   // bytes that follow
};
template <>
struct wire_fields<frame_header> {
  using type = field_list<field<&frame_header::type>, field<&frame_header::op>, field<&frame_header::type_of_elements>,
                          field<&frame_header::reduction>, field<&frame_header::seq>, field<&frame_header::count>,
                          field<&frame_header::step>, field<&frame_header::chunk>, field<&frame_header::payload>>;
};
inline constexpr std::size_t frame_header_size = sizeof(frame_magic) + fields_size<frame_header>;
static_assert(frame_header_size == 40, "the wire format changed");
inline constexpr std::size_t max_abort_text = 1024;

inline void encode(const frame_header& h, std::span<std::uint8_t, frame_header_size> out) {
  byte_writer w(out);
  w.u32(frame_magic);
  encode_fields(h, w);
}

// Decodes and checks everything that does not depend on the expected operation: magic, enums, and an abort
// frame's bounded payload. nullopt with `why` set when the header cannot be trusted.
inline std::optional<frame_header> decode_frame_header(std::span<const std::uint8_t> in, std::string* why) {
  const auto fail = [&](const char* reason) -> std::optional<frame_header> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (in.size() != frame_header_size) return fail("short frame header");
  byte_reader r(in);
  if (r.u32() != frame_magic) return fail("bad frame magic");
  frame_header h;
  const char* bad = nullptr;
  if (!decode_fields(h, r, bad)) return fail(bad);
  if (h.type == frame_type::abort && (h.payload < abort_fixed_size || h.payload > abort_fixed_size + max_abort_text))
    return fail("abort frame with an out-of-range length");
  if (h.type == frame_type::credit && h.payload != 0) return fail("credit frame with a payload");
  if ((h.type == frame_type::heartbeat || h.type == frame_type::goodbye) && h.payload != 0)
    return fail("liveness frame with a payload");
  return h;
}

inline std::string describe(const frame_header& h) {
  std::string s = h.type == frame_type::slot ? "shared-memory " : "";
  s += op_name(h.op);
  s += "<";
  s += dtype_name(h.type_of_elements);
  s += "> #" + std::to_string(h.seq) + " (" + std::to_string(h.count) + " elements, step " + std::to_string(h.step) +
       ", chunk " + std::to_string(h.chunk) + ", " + std::to_string(h.payload) + " bytes)";
  return s;
}

// Compares a received data header with the one this rank expects next; an explanation when they differ.
inline std::optional<std::string> frame_mismatch(const frame_header& got, const frame_header& want) {
  if (got.type != want.type || got.op != want.op || got.type_of_elements != want.type_of_elements ||
      got.reduction != want.reduction || got.seq != want.seq || got.count != want.count || got.step != want.step ||
      got.chunk != want.chunk || got.payload != want.payload)
    return "expected " + describe(want) + ", received " + describe(got);
  return std::nullopt;
}

inline std::size_t encode(const abort_notice& a, std::span<std::uint8_t, abort_fixed_size + max_abort_text> out) {
  byte_writer w(out);
  const auto len = std::min(a.text.size(), max_abort_text);
  encode_fields(a, w);
  w.u32(static_cast<std::uint32_t>(len));
  w.bytes(std::span(reinterpret_cast<const std::uint8_t*>(a.text.data()), len));
  return w.size();
}

inline std::optional<abort_notice> decode_abort(std::span<const std::uint8_t> in, int world) {
  if (in.size() < abort_fixed_size || in.size() > abort_fixed_size + max_abort_text) return std::nullopt;
  byte_reader r(in);
  abort_notice a;
  const char* bad = nullptr;
  (void)decode_fields(a, r, bad);  // no field of the notice can be refused by its bytes alone
  const auto len = r.u32();
  if (len != in.size() - abort_fixed_size || !in_range<error_kind>(static_cast<std::underlying_type_t<error_kind>>(a.kind)) ||
      a.culprit < -1 || a.culprit >= world)
    return std::nullopt;
  a.text.assign(reinterpret_cast<const char*>(in.data()) + abort_fixed_size, len);
  for (auto& c : a.text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // keep logs printable
  return a;
}

}  // namespace mwstrat::detail
