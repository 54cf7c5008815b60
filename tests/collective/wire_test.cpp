// The ring's wire formats: addresses, handshake messages, frame headers, abort notices, HMAC.

#include <mwstrat/collective/ring/detail/wire.hpp>

#include <gtest/gtest.h>

namespace {

using namespace mwstrat::detail;

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
  std::array<std::uint8_t, hello_size> raw{};
  encode(h, raw);
  const auto back = decode_hello(raw);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 2u);
  EXPECT_EQ(back->nonce, h.nonce);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("m"), true), refusal::none);
  EXPECT_EQ(judge_hello(*back, 5, 2, sha256("c"), sha256("m"), true), refusal::wrong_world);
  EXPECT_EQ(judge_hello(*back, 4, 1, sha256("c"), sha256("m"), true), refusal::wrong_rank);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("x"), sha256("m"), true), refusal::cluster_mismatch);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("x"), true), refusal::model_mismatch);
  EXPECT_EQ(judge_hello(*back, 4, 2, sha256("c"), sha256("m"), false), refusal::token_unexpected);
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

}  // namespace
