// Sealed frames between hosts (frame_seal.hpp, docs/security.md). The cipher on its own: a frame opens only as the
// frame of its counter on its connection and direction, and an altered byte anywhere fails it. Then real ranks (processes
// on 127.0.0.1, hosts told apart by their host identity) with a TCP proxy in the middle of a link: a flipped byte in a
// data frame ends the job naming the link (and, without a token, the same flip silently changes the sum: the proxy
// really reaches the payload); an encrypted link carries no run of the known gradient's bytes (an authenticated one
// does); plain, authenticated and encrypted all-reduces give the same bits; refusals when the ends disagree.

#include "hierarchy.hpp"
#include "process.hpp"
#include "tcp_proxy.hpp"

#include <mwstrat/collective.hpp>
#include <mwstrat/collective/ring/detail/frame_seal.hpp>
#include <mwstrat/strategy/communication_options.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace frame_seal_test {

using namespace std::chrono_literals;
using namespace mwstrat::detail;
namespace test = mwstrat::test;

digest nonce_of(std::uint8_t v) {
  digest d{};
  d.fill(v);
  return d;
}

// Both ends of one connection, as the handshake would key them.
std::pair<link_seal, link_seal> pair_of(seal_mode mode, std::string_view client_token = "tok",
                                        std::string_view server_token = "tok") {
  return {link_seal::keyed(client_token, mode, true, nonce_of(1), nonce_of(2), sha256("c"), 0, 1),
          link_seal::keyed(server_token, mode, false, nonce_of(1), nonce_of(2), sha256("c"), 0, 1)};
}

std::vector<std::uint8_t> payload_of(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return v;
}

TEST(frame_seal, a_frame_opens_on_the_other_end_in_both_directions_and_modes) {
  for (const auto mode : {seal_mode::authenticate, seal_mode::encrypt}) {
    auto [client, server] = pair_of(mode);
    const std::array<std::uint8_t, frame_header_size> header{1, 2, 3};
    for (int frame = 0; frame < 3; ++frame) {
      const auto plain = payload_of(1000 + frame);
      auto wire = plain;
      seal_tag tag{};
      ASSERT_TRUE(client.send.seal(header, wire.data(), wire.data(), wire.size(), tag));
      EXPECT_EQ(wire == plain, mode == seal_mode::authenticate) << "the payload travels in the clear only when not encrypted";
      ASSERT_TRUE(server.recv.open(header, wire.data(), wire.size(), tag)) << "frame " << frame;
      EXPECT_EQ(wire, plain);
      // and back (the aborts a server sends to its client)
      ASSERT_TRUE(server.send.seal(header, wire.data(), wire.data(), wire.size(), tag));
      ASSERT_TRUE(client.recv.open(header, wire.data(), wire.size(), tag));
      EXPECT_EQ(wire, plain);
    }
    EXPECT_EQ(client.send.frames(), 3u);
  }
}

TEST(frame_seal, an_altered_payload_header_or_tag_a_replay_and_a_wrong_token_fail) {
  for (const auto mode : {seal_mode::authenticate, seal_mode::encrypt}) {
    const std::array<std::uint8_t, frame_header_size> header{9, 9, 9};
    const auto plain = payload_of(4096);
    // Seals frame 0 and frame 1; the receiver is at frame 0 unless `skip`.
    const auto attempt = [&](auto alter, bool replay_first = false, std::string_view server_token = "tok") {
      auto [client, server] = pair_of(mode, "tok", server_token);
      auto wire = plain;
      auto head = header;
      seal_tag tag{};
      EXPECT_TRUE(client.send.seal(head, wire.data(), wire.data(), wire.size(), tag));
      if (replay_first) {  // the receiver already took this frame: the same bytes again
        auto copy = wire;
        EXPECT_TRUE(server.recv.open(head, copy.data(), copy.size(), tag));
      }
      alter(head, wire, tag);
      return server.recv.open(head, wire.data(), wire.size(), tag);
    };
    const auto none = [](auto&, auto&, auto&) {};
    EXPECT_TRUE(attempt(none));
    EXPECT_FALSE(attempt([](auto&, auto& w, auto&) { w[2049] ^= 0x01; })) << "a flipped payload bit";
    EXPECT_FALSE(attempt([](auto& h, auto&, auto&) { h[5] ^= 0x80; })) << "a flipped header bit";
    EXPECT_FALSE(attempt([](auto&, auto&, auto& t) { t[15] ^= 0x01; })) << "a flipped tag bit";
    EXPECT_FALSE(attempt(none, true)) << "a replayed frame";
    EXPECT_FALSE(attempt(none, false, "other")) << "keys from another token";
  }
  // A frame of one direction is no frame of the other, nor of another connection (other nonces).
  auto [client, server] = pair_of(seal_mode::encrypt);
  const std::array<std::uint8_t, frame_header_size> header{};
  auto wire = payload_of(64);
  seal_tag tag{};
  ASSERT_TRUE(client.send.seal(header, wire.data(), wire.data(), wire.size(), tag));
  auto reflected = wire;
  EXPECT_FALSE(client.recv.open(header, reflected.data(), reflected.size(), tag)) << "reflected back to its sender";
  auto other = link_seal::keyed("tok", seal_mode::encrypt, false, nonce_of(1), nonce_of(3), sha256("c"), 0, 1);
  EXPECT_FALSE(other.recv.open(header, wire.data(), wire.size(), tag)) << "moved to another connection";
}

TEST(frame_seal, keys_differ_by_direction_mode_nonces_and_ranks) {
  const auto key = [](bool up, seal_mode m, std::uint8_t n, std::uint32_t r) {
    return derive_seal_key("tok", nonce_of(n), nonce_of(2), sha256("c"), r, 1, up, m);
  };
  const auto base = key(true, seal_mode::encrypt, 1, 0);
  EXPECT_EQ(base, key(true, seal_mode::encrypt, 1, 0));
  EXPECT_NE(base, key(false, seal_mode::encrypt, 1, 0));
  EXPECT_NE(base, key(true, seal_mode::authenticate, 1, 0));
  EXPECT_NE(base, key(true, seal_mode::encrypt, 4, 0));
  EXPECT_NE(base, key(true, seal_mode::encrypt, 1, 2));
}

// ---- real ranks ----

// Rank 0's data frames towards rank 1 in the proxy's client-to-server stream of the link's first connection: after
// the client's hello and proof, header (payload length at bytes 32..39), payload, then a tag when sealed. Flips one
// bit in the middle of the payload of the first frame of at least `min_payload` bytes.
struct payload_flipper {
  std::size_t tag = 0;
  std::uint64_t min_payload = 4096;
  std::uint64_t at = 0;  // stream offset
  std::uint64_t frame = hello_size + hello_finish_size;
  std::uint64_t next = 0, target = ~std::uint64_t{0};
  std::array<std::uint8_t, frame_header_size> header{};
  bool flipped = false;

  void operator()(std::size_t connection, std::span<std::uint8_t> bytes) {
    if (connection != 0) return;  // the first data connection (the liveness connection comes after it)
    for (auto& b : bytes) {
      if (at >= frame) {
        const std::uint64_t off = at - frame;
        if (off < frame_header_size) {
          header[off] = b;
          if (off + 1 == frame_header_size) {
            std::uint64_t payload = 0;
            for (int k = 7; k >= 0; --k) payload = payload << 8 | header[32 + static_cast<std::size_t>(k)];
            next = frame + frame_header_size + payload + tag;
            if (!flipped && payload >= min_payload) target = frame + frame_header_size + payload / 2;
          }
        } else if (at == target) {
          b ^= 0x01;
          flipped = true;
          target = ~std::uint64_t{0};
        }
        if (off >= frame_header_size - 1 && at + 1 == next) frame = next;
      }
      ++at;
    }
  }
};

struct proxied_result {
  std::vector<std::vector<float>> results;  // per rank, when it finished
  std::vector<std::string> stdout_text;
  std::string report;
  bool finished = false;
  std::vector<std::uint8_t> captured;  // rank 0 -> rank 1, first data connection
};

// Two ranks on two "hosts", one "dump" all-reduce of `count` floats, rank 0 reaching rank 1 through a proxy.
proxied_result proxied_run(const std::vector<std::string>& security, std::size_t count,
                           test::tcp_proxy::tamper_fn tamper = {}) {
  const auto ports = test::free_ports(2);
  test::tcp_proxy proxy(ports[1], std::move(tamper));
  test::temp_dir dir{"mwstrat-seal"};
  const std::string out = (dir.path() / "r").string();
  std::vector<test::worker> workers;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = {"dump", std::to_string(r), test::join_ports(ports), "hosts=a,b", "op=sum",
                                     "count=" + std::to_string(count), "chunk=65536", "out=" + out,
                                     "connect_ports=-," + std::to_string(proxy.port()), "timeout_ms=20000"};
    args.insert(args.end(), security.begin(), security.end());
    workers.push_back(test::spawn_worker(dir.path(), "rank" + std::to_string(r), args, {}));
  }
  proxied_result res;
  res.finished = test::wait_workers({&workers[0], &workers[1]}, 60s);
  for (std::size_t r = 0; r < 2; ++r) {
    res.stdout_text.push_back(workers[r].stdout_text());
    res.report += "--- rank " + std::to_string(r) + " exit " + std::to_string(workers[r].exit_code) + "\n" +
                  workers[r].stdout_text() + workers[r].stderr_text();
    if (workers[r].exit_code == 0) res.results.push_back(test::read_floats(out + std::to_string(r) + ".bin"));
  }
  res.captured = proxy.upstream(0);
  return res;
}

std::vector<float> expected_sum(std::size_t count) {
  std::vector<float> want(count);
  for (std::size_t i = 0; i < count; ++i) want[i] = test::varied_input(0, i) + test::varied_input(1, i);
  return want;
}

const std::vector<std::string> authenticated = {"token=t0ken"};
const std::vector<std::string> encrypted = {"token=t0ken", "encrypt=1"};

TEST(frame_seal, a_byte_flipped_in_a_data_frame_ends_the_job_naming_the_link) {
  for (const auto& security : {authenticated, encrypted}) {
    const std::string what = security.size() == 2 ? "encrypted" : "authenticated";
    payload_flipper flip{seal_tag_size};
    const auto run = proxied_run(security, 200003, std::ref(flip));
    ASSERT_TRUE(run.finished) << what << ": a hang\n" << run.report;
    EXPECT_TRUE(flip.flipped) << what << "\n" << run.report;
    EXPECT_TRUE(run.results.empty()) << what << ": a rank finished with the altered frame\n" << run.report;
    // The receiver names the link and why; the sender learns it from the receiver's abort.
    EXPECT_NE(run.stdout_text[1].find("ERROR protocol"), std::string::npos) << run.report;
    EXPECT_NE(run.stdout_text[1].find("fails authentication"), std::string::npos) << run.report;
    EXPECT_NE(run.stdout_text[1].find("rank 0 (127.0.0.1:"), std::string::npos) << run.report;
    EXPECT_NE(run.stdout_text[1].find("-> rank 1"), std::string::npos) << run.report;
    EXPECT_NE(run.stdout_text[0].find("ERROR"), std::string::npos) << run.report;
    EXPECT_NE(run.stdout_text[0].find("fails authentication"), std::string::npos) << run.report;
  }
}

TEST(frame_seal, without_a_token_the_same_flip_goes_unnoticed_and_changes_the_sum) {
  const std::size_t count = 200003;
  payload_flipper flip{0};
  const auto run = proxied_run({}, count, std::ref(flip));
  ASSERT_TRUE(run.finished) << run.report;
  EXPECT_TRUE(flip.flipped) << run.report;
  ASSERT_EQ(run.results.size(), 2u) << run.report;
  EXPECT_NE(run.results[1], expected_sum(count)) << "the proxy did not reach a payload: the sealed test proves nothing";
}

// Whether any 16 bytes in a row of rank 0's input (4 floats, float-aligned in the input, at any offset of `wire`)
// appear in `wire`.
bool carries_input_run(const std::vector<std::uint8_t>& wire, std::size_t count) {
  std::vector<float> input(count);
  for (std::size_t i = 0; i < count; ++i) input[i] = test::varied_input(0, i);
  std::unordered_set<std::string_view> runs;
  const auto* bytes = reinterpret_cast<const char*>(input.data());
  for (std::size_t i = 0; i + 4 <= count; ++i) runs.insert(std::string_view(bytes + 4 * i, 16));
  const auto* w = reinterpret_cast<const char*>(wire.data());
  for (std::size_t at = 0; at + 16 <= wire.size(); ++at)
    if (runs.count(std::string_view(w + at, 16)) != 0) return true;
  return false;
}

TEST(frame_seal, an_encrypted_link_carries_no_run_of_the_known_gradient_and_an_authenticated_one_does) {
  const std::size_t count = 100003;
  const auto enc = proxied_run(encrypted, count);
  ASSERT_TRUE(enc.finished) << enc.report;
  ASSERT_EQ(enc.results.size(), 2u) << enc.report;
  EXPECT_EQ(enc.results[0], expected_sum(count));
  EXPECT_GT(enc.captured.size(), count * sizeof(float) / 2) << "the capture missed the link's payloads";
  EXPECT_FALSE(carries_input_run(enc.captured, count));
  const auto mac = proxied_run(authenticated, count);
  ASSERT_TRUE(mac.finished) << mac.report;
  ASSERT_EQ(mac.results.size(), 2u) << mac.report;
  EXPECT_TRUE(carries_input_run(mac.captured, count)) << "authenticated frames travel in the clear: the search must find them";
}

// One "dump" all-reduce on `hosts` with the given security; every rank's result.
std::vector<std::vector<float>> dump_run(const std::string& hosts, const std::vector<std::string>& security,
                                         const std::string& topology, int streams, const std::string& compression) {
  const int n = static_cast<int>(std::count(hosts.begin(), hosts.end(), ',')) + 1;
  test::temp_dir files{"mwstrat-seal"};
  const std::string out = (files.path() / "r").string();
  std::vector<std::string> args = {"hosts=" + hosts, "count=600007", "op=mean", "out=" + out, "chunk=65536",
                                   "topology=" + topology, "streams=" + std::to_string(streams),
                                   "compression=" + compression};
  args.insert(args.end(), security.begin(), security.end());
  test::ring_run ring(n, "dump", args);
  EXPECT_TRUE(ring.wait_all(120s)) << ring.report();
  std::vector<std::vector<float>> results;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ring.workers[static_cast<std::size_t>(r)].exit_code, 0) << ring.report();
    if (ring.workers[static_cast<std::size_t>(r)].exit_code != 0) return {};
    results.push_back(test::read_floats(out + std::to_string(r) + ".bin"));
  }
  return results;
}

TEST(frame_seal, plain_authenticated_and_encrypted_all_reduces_give_the_same_bits) {
  struct layout {
    std::string hosts, topology;
    int streams;
    std::string compression;
  };
  for (const auto& l : {layout{"a,b,c", "flat", 1, "none"}, layout{"a,a,b,b", "hierarchical", 2, "none"},
                        layout{"a,b", "flat", 1, "bf16"}}) {
    const std::string what = l.hosts + " " + l.topology + " streams " + std::to_string(l.streams) + " " + l.compression;
    const auto plain = dump_run(l.hosts, {}, l.topology, l.streams, l.compression);
    ASSERT_FALSE(plain.empty()) << what;
    for (const auto& security : {authenticated, encrypted}) {
      const auto sealed = dump_run(l.hosts, security, l.topology, l.streams, l.compression);
      ASSERT_EQ(sealed.size(), plain.size()) << what;
      for (std::size_t r = 0; r < plain.size(); ++r)
        EXPECT_TRUE(sealed[r] == plain[r]) << what << " " << security.size() << ": rank " << r << " differs";
    }
  }
}

// The liveness connection between hosts is sealed too: one bit flipped in the tag of rank 0's first heartbeat to
// rank 1 (the proxy's second connection, after the client's hello and proof) ends a job that would otherwise run
// for a minute, every rank naming the link.
TEST(frame_seal, a_heartbeat_altered_on_the_wire_ends_the_job_naming_the_link) {
  const auto ports = test::free_ports(2);
  const std::uint64_t at = hello_size + hello_finish_size + frame_header_size + 5;  // in the first beat's tag
  std::uint64_t seen = 0;                // the proxy's thread of that connection only
  std::atomic<bool> flipped{false};
  test::tcp_proxy proxy(ports[1], [&](std::size_t connection, std::span<std::uint8_t> bytes) {
    if (connection != 1) return;
    if (at >= seen && at < seen + bytes.size()) {
      bytes[at - seen] ^= 0x01;
      flipped = true;
    }
    seen += bytes.size();
  });
  test::temp_dir dir{"mwstrat-seal"};
  std::vector<test::worker> workers;
  for (int r = 0; r < 2; ++r)
    workers.push_back(test::spawn_worker(dir.path(), "rank" + std::to_string(r),
                                         {"loop", std::to_string(r), test::join_ports(ports), "hosts=a,b", "token=t0ken",
                                          "connect_ports=-," + std::to_string(proxy.port()), "timeout_ms=20000"},
                                         {}));
  ASSERT_TRUE(test::wait_workers({&workers[0], &workers[1]}, 60s)) << "a hang";
  const std::string report = workers[0].stdout_text() + workers[0].stderr_text() + workers[1].stdout_text() +
                             workers[1].stderr_text();
  EXPECT_TRUE(flipped) << report;
  for (auto& w : workers) {
    EXPECT_NE(w.exit_code, 0) << report;
    EXPECT_NE(w.stdout_text().find("ERROR protocol"), std::string::npos) << report;
    EXPECT_NE(w.stdout_text().find("a liveness frame from rank 0"), std::string::npos) << report;
    EXPECT_NE(w.stdout_text().find("fails authentication"), std::string::npos) << report;
  }
}

// A failure on sealed links (ranks calling all-reduces of different sizes) travels as sealed aborts: every rank
// reports the real reason, none a frame that fails authentication (an abort sealed out of turn, or after a frame
// left half-sealed, would read as one).
TEST(frame_seal, aborts_on_sealed_links_carry_the_real_reason) {
  for (const auto& security : {authenticated, encrypted}) {
    std::vector<std::string> args = {"hosts=a,b,c", "chunk=4096", "timeout_ms=20000"};
    args.insert(args.end(), security.begin(), security.end());
    test::ring_run ring(3, "mismatch", args);
    ASSERT_TRUE(ring.wait_all(60s)) << ring.report();
    for (int r = 0; r < 3; ++r) {
      const std::string out = ring.workers[static_cast<std::size_t>(r)].stdout_text();
      EXPECT_NE(out.find("ERROR protocol"), std::string::npos) << "rank " << r << "\n" << ring.report();
      EXPECT_NE(out.find("expected all_reduce"), std::string::npos) << "rank " << r << "\n" << ring.report();
      EXPECT_EQ(out.find("fails authentication"), std::string::npos) << "rank " << r << "\n" << ring.report();
    }
  }
}

TEST(frame_seal, ends_that_disagree_on_encryption_are_refused_naming_it) {
  const auto ports = test::free_ports(2);
  test::temp_dir dir{"mwstrat-seal"};
  std::vector<test::worker> workers;
  for (int r = 0; r < 2; ++r)
    workers.push_back(test::spawn_worker(dir.path(), "rank" + std::to_string(r),
                                         {"pair", std::to_string(r), test::join_ports(ports), "hosts=a,b", "token=t",
                                          r == 0 ? "encrypt=1" : "encrypt=0", "connect_ms=4000"},
                                         {}));
  ASSERT_TRUE(test::wait_workers({&workers[0], &workers[1]}, 60s));
  const std::string all = workers[0].stdout_text() + workers[1].stdout_text() + workers[0].stderr_text() +
                          workers[1].stderr_text();
  EXPECT_NE(workers[0].exit_code, 0) << all;
  EXPECT_NE(workers[1].exit_code, 0) << all;
  EXPECT_NE(all.find("MWSTRAT_RING_ENCRYPT"), std::string::npos) << all;
}

TEST(frame_seal, encryption_without_a_token_is_a_config_error_naming_it) {
  mwstrat::ring_options o;
  o.addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  o.encrypt = true;
  try {
    mwstrat::ring_collective ring(o);
    ADD_FAILURE() << "accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("ring_options.encrypt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("job token"), std::string::npos) << e.what();
  }
  // From the environment: MWSTRAT_RING_ENCRYPT=1 turns it on, anything but 1 or 0 is refused.
  const auto with = [](mwstrat::environment_map vars) {
    return mwstrat::with_environment_defaults({}, mwstrat::environment(std::move(vars)));
  };
  EXPECT_EQ(with({{"MWSTRAT_RING_ENCRYPT", "1"}}).encrypt, true);
  EXPECT_EQ(with({}).encrypt, false);
  EXPECT_THROW((void)with({{"MWSTRAT_RING_ENCRYPT", "yes"}}), mwstrat::config_error);
}

}  // namespace frame_seal_test
