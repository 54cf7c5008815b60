// The ring's wire formats: addresses, handshake messages, frame headers, abort notices, HMAC.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/ring/detail/option_checks.hpp>
#include <mwstrat/collective/ring/detail/shm_region.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>

#include <support/temp_dir.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace wire_test {

using namespace mwstrat::detail;
using mwstrat::config_error;
using mwstrat::ring_options;

// Encodes `h` and decodes it back, as the receiving end would; the decoder's reason lands in `why` on refusal.
std::optional<frame_header> round_trip(const frame_header& h, std::string& why) {
  std::array<std::uint8_t, frame_header_size> raw{};
  encode(h, raw);
  return decode_frame_header(raw, &why);
}

// The ring's addresses go through the cluster layer's one parser (cluster/address.hpp); nullopt when it refuses.
std::optional<mwstrat::address> parse_address(std::string_view text) {
  auto parsed = parse_address_nothrow(text);
  if (!parsed.reason.empty()) return std::nullopt;
  return parsed.value;
}

// The options are checked before anything listens (detail::check_ring_options): a good set passes, and each bad
// field is a config_error naming that field, without a ring being made.
TEST(ring_options_check, each_bad_field_is_named) {
  ring_options good;
  good.addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  good.rank = 1;
  EXPECT_NO_THROW(check_ring_options(good));
  const auto refused = [&](auto change, const std::string& named) {
    ring_options o = good;
    change(o);
    try {
      check_ring_options(o);
      ADD_FAILURE() << "accepted: " << named;
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  refused([](ring_options& o) { o.addresses.clear(); }, "ring_options.addresses is empty");
  refused([](ring_options& o) { o.rank = 2; }, "rank 2 is out of range");
  refused([](ring_options& o) { o.spin = std::chrono::microseconds(-1); }, "ring_options.spin is negative");
  refused([](ring_options& o) { o.op_timeout = std::chrono::milliseconds(0); }, "ring_options.op_timeout is 0 ms");
  refused([](ring_options& o) { o.connect_timeout = std::chrono::milliseconds(-3); },
          "ring_options.connect_timeout is -3 ms");
  refused([](ring_options& o) { o.host_identity = std::string(); }, "ring_options.host_identity is empty");
}

TEST(ring_wire, addresses) {
  auto a = parse_address("127.0.0.1:2222");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 2222);
  auto v6 = parse_address("[::1]:80");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 80);
  EXPECT_TRUE(parse_address("worker-0.example:12345"));
  for (const char* bad : {"", "host", "host:", ":80", "::1:80", "[::1]80", "[::1]:", "h:65536", "h:12a", "h:-1",
                          "h:123456", "[::1"})
    EXPECT_FALSE(parse_address(bad)) << bad;
}

TEST(ring_wire, hmac_sha256_matches_rfc_4231_case_2) {
  const std::string msg = "what do ya want for nothing?";
  const auto d = hmac_sha256("Jefe", std::span(reinterpret_cast<const std::uint8_t*>(msg.data()), msg.size()));
  const digest want = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                       0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  EXPECT_EQ(d, want);
}

TEST(ring_wire, hello_round_trips_and_is_judged) {
  hello h;
  h.world = 4;
  h.rank = 2;
  h.flags = flag_token;
  h.cluster = sha256("c");
  h.model = sha256("m");
  h.nonce = random_nonce();
  h.host = host_identity();
  std::array<std::uint8_t, hello_size> raw{};
  encode(h, raw);
  const auto back = decode_hello(raw);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 2u);
  EXPECT_EQ(back->nonce, h.nonce);
  EXPECT_EQ(back->host, h.host);
  EXPECT_EQ(back->version, 7);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("m"), true), refusal::none);
  // streams_per_peer travels in the flags (with the connection's index) and must match.
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("m"), true, 2), refusal::streams_mismatch);
  hello striped = *back;
  striped.flags = static_cast<std::uint16_t>(striped.flags | lane_flags(3, 4));
  encode(striped, raw);
  const auto striped_back = decode_hello(raw);
  ASSERT_TRUE(striped_back);
  EXPECT_EQ(lane_of_flags(striped_back->flags), 3u);
  EXPECT_EQ(streams_of_flags(striped_back->flags), 4u);
  EXPECT_EQ(judge_hello(*striped_back, 4, 2, sha256("c"), sha256("m"), true, 4), refusal::none);
  EXPECT_EQ(judge_hello(*striped_back, 4, 2, sha256("c"), sha256("m"), true, 1), refusal::streams_mismatch);
  EXPECT_EQ(streams_of_flags(lane_flags(0, max_streams_per_peer)), max_streams_per_peer);
  EXPECT_EQ(judge_hello(*back, 5, 2, sha256("c"), sha256("m"), true), refusal::wrong_world);
  EXPECT_EQ(judge_hello(*back, 4, 1, sha256("c"), sha256("m"), true), refusal::wrong_rank);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("x"), sha256("m"), true), refusal::cluster_mismatch);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("x"), true), refusal::model_mismatch);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("m"), false), refusal::token_unexpected);
  // Both ends must agree on encrypting the frames between hosts (flag_encrypt).
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("m"), true, 1, true), refusal::encrypt_mismatch);
  hello encrypting = *back;
  encrypting.flags = static_cast<std::uint16_t>(encrypting.flags | flag_encrypt);
  EXPECT_EQ(judge_hello(encrypting, 4, 2, sha256("c"), sha256("m"), true, 1, true), refusal::none);
  EXPECT_EQ(judge_hello(encrypting, 4, 2, sha256("c"), sha256("m"), true, 1, false), refusal::encrypt_mismatch);
  raw[0] = 'X';
  EXPECT_FALSE(decode_hello(raw));
  EXPECT_FALSE(decode_hello(std::span(raw).first(10)));
}

TEST(ring_wire, proofs_depend_on_token_role_and_nonces) {
  const auto c = random_nonce(), s = random_nonce(), cl = sha256("c");
  const auto p = handshake_proof("t", true, c, s, cl, 2, 1, 0);
  EXPECT_EQ(p, handshake_proof("t", true, c, s, cl, 2, 1, 0));
  EXPECT_NE(p, handshake_proof("u", true, c, s, cl, 2, 1, 0));
  EXPECT_NE(p, handshake_proof("t", false, c, s, cl, 2, 1, 0));
  EXPECT_NE(p, handshake_proof("t", true, s, c, cl, 2, 1, 0));
  // Both host identities and both flags are bound (they decide whether frames are sealed, encrypted or in shared
  // memory): a peer's hello or reply rewritten on the path no longer verifies.
  const handshake_binding bound{sha256("h1"), sha256("h2"), flag_token, flag_token};
  const auto b = handshake_proof("t", true, c, s, cl, 2, 1, 0, bound);
  EXPECT_NE(b, p);
  for (auto changed : {handshake_binding{sha256("h2"), sha256("h2"), flag_token, flag_token},
                       handshake_binding{sha256("h1"), sha256("h1"), flag_token, flag_token},
                       handshake_binding{sha256("h1"), sha256("h2"), flag_token | flag_encrypt, flag_token},
                       handshake_binding{sha256("h1"), sha256("h2"), flag_token, flag_token | flag_shm}})
    EXPECT_NE(b, handshake_proof("t", true, c, s, cl, 2, 1, 0, changed));
}

TEST(ring_wire, frame_headers_are_validated_before_payload) {
  frame_header h;
  h.op = op_kind::all_reduce;
  h.type_of_elements = wire_dtype::f64;
  h.reduction = 2;
  h.seq = 42;
  h.count = 1000;
  h.step = 3;
  h.chunk = 1;
  h.payload = 800;
  std::array<std::uint8_t, frame_header_size> raw{};
  encode(h, raw);
  std::string why;
  const auto back = decode_frame_header(raw, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_FALSE(frame_mismatch(*back, h));
  auto other = h;
  other.seq = 43;
  const auto bad = frame_mismatch(*back, other);
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->find("all_reduce<double> #43"), std::string::npos) << *bad;
  other = h;
  other.payload = 1ull << 40;
  EXPECT_TRUE(frame_mismatch(*back, other));
  auto corrupt = raw;
  corrupt[0] ^= 1;
  EXPECT_FALSE(decode_frame_header(corrupt, &why));
  EXPECT_EQ(why, "bad frame magic");
  corrupt = raw;
  corrupt[5] = 9;
  EXPECT_FALSE(decode_frame_header(corrupt, &why));
  h.type = frame_type::abort;
  h.payload = 1u << 20;  // an abort notice longer than allowed
  encode(h, raw);
  EXPECT_FALSE(decode_frame_header(raw, &why));
}

TEST(ring_wire, abort_notices_round_trip_and_stay_printable) {
  abort_notice a;
  a.kind = 2;
  a.culprit = 3;
  a.seq = 7;
  a.text = "lost\nrank 3";
  std::array<std::uint8_t, abort_fixed_size + max_abort_text> raw{};
  const auto len = encode(a, raw);
  const auto back = decode_abort(std::span(raw.data(), len), 4);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->culprit, 3);
  EXPECT_EQ(back->text, "lost?rank 3");
  EXPECT_FALSE(decode_abort(std::span(raw.data(), len), 3));      // culprit out of range
  EXPECT_FALSE(decode_abort(std::span(raw.data(), len - 1), 4));  // length disagrees
}

TEST(ring_wire, host_identity_is_stable_within_a_process_and_hides_its_inputs) {
  EXPECT_EQ(host_identity(), host_identity());
  EXPECT_NE(host_identity(), digest{});
  hello_reply r;
  r.host = host_identity();
  r.flags = flag_shm;
  std::array<std::uint8_t, hello_reply_size> raw{};
  encode(r, raw);
  const auto back = decode_hello_reply(raw);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->host, r.host);
  EXPECT_EQ(back->flags, flag_shm);
}

TEST(ring_wire, shared_memory_offers_round_trip_and_reject_foreign_names) {
  shm_offer o;
  o.status = 1;
  o.slots = 8;
  o.slot_bytes = 512 << 10;
  o.name = "mwstrat-ring-1234-0123456789abcdef0123456789abcdef";
  std::array<std::uint8_t, shm_offer_size> raw{};
  encode(o, raw);
  const auto back = decode_shm_offer(raw);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, o.name);
  EXPECT_EQ(back->slots, 8u);
  EXPECT_EQ(back->slot_bytes, o.slot_bytes);
  const auto rejected = [&](shm_offer bad) {
    encode(bad, raw);
    return !decode_shm_offer(raw);
  };
  auto bad = o;
  bad.name = "../../etc/passwd";
  EXPECT_TRUE(rejected(bad));
  bad.name = "mwstrat-ring-1234/../x";
  EXPECT_TRUE(rejected(bad));
  bad.name = "mwstrat-ring-";
  EXPECT_TRUE(rejected(bad));
  bad = o;
  bad.slots = 0;
  EXPECT_TRUE(rejected(bad));
  bad.slots = max_shm_slots + 1;
  EXPECT_TRUE(rejected(bad));
  bad = o;
  bad.slot_bytes = 1000;  // not a multiple of 64
  EXPECT_TRUE(rejected(bad));
  bad.slot_bytes = max_shm_slot_bytes * 2;
  EXPECT_TRUE(rejected(bad));
  bad = o;
  bad.status = 7;
  EXPECT_TRUE(rejected(bad));
  // "none" carries nothing else.
  shm_offer none;
  encode(none, raw);
  const auto n = decode_shm_offer(raw);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 0);
  none.slots = 3;
  EXPECT_TRUE(rejected(none));
  // A name without its terminating NUL, or with bytes after it, is malformed.
  encode(o, raw);
  raw[shm_offer_size - 1] = 'a';
  EXPECT_FALSE(decode_shm_offer(raw));
  encode(o, raw);
  raw[0] = 'X';  // not our magic
  EXPECT_FALSE(decode_shm_offer(raw));

  std::array<std::uint8_t, shm_answer_size> ans{};
  shm_answer mapped;
  mapped.mapped = true;
  for (std::size_t i = 0; i < mapped.proof.size(); ++i) mapped.proof[i] = static_cast<std::uint8_t>(i * 7 + 1);
  encode(mapped, ans);
  const auto got = decode_shm_answer(ans);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->mapped);
  EXPECT_EQ(got->proof, mapped.proof);  // the proof travels back unchanged
  encode(shm_answer{}, ans);
  ASSERT_TRUE(decode_shm_answer(ans));
  EXPECT_FALSE(decode_shm_answer(ans)->mapped);
  ans[shm_answer_size - 1] = 1;  // a declined answer carries no proof
  EXPECT_FALSE(decode_shm_answer(ans));
  encode(mapped, ans);
  ans[8] = 2;
  EXPECT_FALSE(decode_shm_answer(ans));

  std::array<std::uint8_t, shm_verdict_size> verdict{};
  encode_shm_verdict(true, verdict);
  EXPECT_EQ(decode_shm_verdict(verdict), std::optional<bool>(true));
  encode_shm_verdict(false, verdict);
  EXPECT_EQ(decode_shm_verdict(verdict), std::optional<bool>(false));
  verdict[8] = 2;
  EXPECT_FALSE(decode_shm_verdict(verdict));
}

TEST(ring_wire, slot_and_credit_frames) {
  frame_header h;
  h.type = frame_type::slot;
  h.seq = 5;
  h.count = 100;
  h.payload = 400;
  std::string why;
  const auto back = round_trip(h, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->type, frame_type::slot);
  EXPECT_FALSE(frame_mismatch(*back, h));
  auto data = h;
  data.type = frame_type::data;
  const auto bad = frame_mismatch(*back, data);  // a slot frame where TCP payload was expected, or the reverse
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->find("shared-memory all_reduce"), std::string::npos) << *bad;
  h.type = frame_type::credit;
  h.payload = 0;
  ASSERT_TRUE(round_trip(h, why)) << why;
  h.payload = 1;  // credits carry nothing
  EXPECT_FALSE(round_trip(h, why));
  EXPECT_EQ(why, "credit frame with a payload");
  std::array<std::uint8_t, frame_header_size> raw{};
  encode(h, raw);
  raw[4] = 7;  // unknown type
  EXPECT_FALSE(decode_frame_header(raw, &why));
}

TEST(ring_wire, heartbeat_and_goodbye_frames_carry_nothing) {
  for (const auto type : {frame_type::heartbeat, frame_type::goodbye}) {
    frame_header h;
    h.type = type;
    std::string why;
    const auto back = round_trip(h, why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->type, type);
    h.payload = 8;
    EXPECT_FALSE(round_trip(h, why));
    EXPECT_EQ(why, "liveness frame with a payload");
  }
}

// The region's own checks: creation failures are reasons (the ring then uses TCP), the receiver refuses objects
// of the wrong size or mode, and names never outlive the set-up.
TEST(ring_shm_region, creation_failure_is_a_reason_not_a_crash) {
  shm_region r;
  const auto why = r.create("/nonexistent-mwstrat-dir", 2, 4096);
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
  EXPECT_FALSE(r);
}

TEST(ring_shm_region, sender_and_receiver_share_slots_and_the_name_is_unlinked) {
  const mwstrat::test::temp_dir tmp("mwstrat-shm-test");
  const auto& dir = tmp.path();
  shm_region out, in;
  ASSERT_EQ(out.create(dir.string(), 3, 4096), "");
  const auto path = dir / out.name();
  EXPECT_TRUE(std::filesystem::exists(path));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(in.open(dir.string(), out.name(), 3, 8192), std::string(path.string() + " holds 12288 bytes, expected 24576"));
  EXPECT_FALSE(std::filesystem::exists(path)) << "a failed open must still remove the name";
  // Again, properly.
  ASSERT_EQ(out.create(dir.string(), 3, 4096), "");
  ASSERT_EQ(in.open(dir.string(), out.name(), 3, 4096), "");
  EXPECT_FALSE(std::filesystem::exists(dir / out.name()));
  out.slot(4)[7] = 42;  // slot 4 is slot 1 of 3
  EXPECT_EQ(in.slot(1)[7], 42);
  EXPECT_EQ(in.open(dir.string(), "../passwd", 3, 4096), "malformed shared-memory name");
  // A sender that goes away before the receiver maps the region leaves nothing behind either.
  {
    shm_region gone;
    ASSERT_EQ(gone.create(dir.string(), 1, 4096), "");
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

}  // namespace wire_test
