// ring_collective: start-up, refusal of strangers, and failure semantics with real processes on 127.0.0.1.

#include "liveness_checks.hpp"
#include "process.hpp"

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

namespace ring_test {

using namespace mwstrat;
using namespace std::chrono_literals;
namespace ip = boost::asio::ip;

std::vector<std::string> loopback(const std::vector<int>& ports) {
  std::vector<std::string> a;
  for (int p : ports) a.push_back("127.0.0.1:" + std::to_string(p));
  return a;
}

// Every rank but `culprit` ends with "ERROR <kind> <culprit>".
void expect_all_report(test::ring_run& ring, int culprit, const std::string& kind) {
  for (std::size_t r = 0; r < ring.workers.size(); ++r) {
    if (static_cast<int>(r) == culprit) continue;
    const auto out = ring.workers[r].stdout_text();
    EXPECT_EQ(ring.workers[r].exit_code, 3) << ring.report();
    EXPECT_NE(out.find("ERROR " + kind + " " + std::to_string(culprit)), std::string::npos)
        << "rank " << r << ":\n" << ring.report();
  }
}

// "tcp" or "auto" (shared memory between these same-host processes); checks the ring really uses it.
void expect_transport(const test::ring_run& ring, const std::string& transport) {
  const std::string want = transport == "tcp" ? "transport=tcp" : "transport=shm";
  for (const auto& w : ring.workers) EXPECT_NE(w.stdout_text().find(want), std::string::npos) << ring.report();
}

// The "ERROR peer_lost <rank> <message>" line a worker printed, or "".
std::string error_line(const test::worker& w) {
  const auto out = w.stdout_text();
  const auto at = out.find("ERROR ");
  return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
}

void sigkill_mid_all_reduce(const std::string& transport) {
  test::ring_run ring(4, "loop", {"timeout_ms=60000", "transport=" + transport});
  ASSERT_TRUE(test::wait_for_output(ring.workers[2], "ready", 30s)) << ring.report();
  expect_transport(ring, transport);
  std::this_thread::sleep_for(20ms);
  ::kill(ring.workers[2].pid, SIGKILL);
  // The deadline is 60 s: finishing well inside 30 s means the failure was detected, not timed out.
  ASSERT_TRUE(ring.wait_all(30s)) << ring.report();
  expect_all_report(ring, 2, "peer_lost");
  EXPECT_EQ(ring.workers[2].signal, SIGKILL);
  // One verdict, in the same words everywhere (after each rank's own "[mwstrat.ring] rank r: ").
  const std::string verdict = "rank 2 (" + ring.address(2) + ") was lost: its connection closed (the process ended)";
  for (int r : {0, 1, 3}) {
    const auto line = error_line(ring.workers[static_cast<std::size_t>(r)]);
    EXPECT_NE(line.find("] rank " + std::to_string(r) + ": " + verdict), std::string::npos) << ring.report();
  }
  for (int r : {0, 1, 3}) EXPECT_NE(ring.workers[static_cast<std::size_t>(r)].stdout_text().find("127.0.0.1:"), std::string::npos);
  // Neither the killed rank nor the ranks that exited through errors left a shared-memory object behind.
  EXPECT_EQ(test::shm_leftovers(ring.pids()), std::vector<std::string>{});
}

TEST(ring_collective, sigkill_of_one_rank_mid_all_reduce_gives_every_other_rank_peer_lost_naming_it) {
  sigkill_mid_all_reduce("tcp");
}

TEST(ring_collective, sigkill_of_one_rank_mid_all_reduce_through_shared_memory_gives_peer_lost_and_leaves_no_shm) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  sigkill_mid_all_reduce("auto");
}

void sigstop_gives_timeout(const std::string& transport) {
  test::ring_run ring(3, "loop", {"timeout_ms=1500", "transport=" + transport});
  ASSERT_TRUE(test::wait_for_output(ring.workers[1], "ready", 30s)) << ring.report();
  expect_transport(ring, transport);
  ::kill(ring.workers[1].pid, SIGSTOP);
  const bool others_done = test::wait_workers({&ring.workers[0], &ring.workers[2]}, 30s);
  ::kill(ring.workers[1].pid, SIGKILL);
  ::kill(ring.workers[1].pid, SIGCONT);
  ASSERT_TRUE(others_done) << ring.report();
  for (int r : {0, 2}) {
    EXPECT_EQ(ring.workers[static_cast<std::size_t>(r)].exit_code, 3) << ring.report();
    EXPECT_NE(ring.workers[static_cast<std::size_t>(r)].stdout_text().find("ERROR timeout"), std::string::npos)
        << ring.report();
  }
  EXPECT_EQ(test::shm_leftovers(ring.pids()), std::vector<std::string>{});
}

TEST(ring_collective, sigstop_of_one_rank_gives_the_others_timeout_error) { sigstop_gives_timeout("tcp"); }

TEST(ring_collective, sigstop_of_one_rank_through_shared_memory_gives_the_others_timeout_error) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  sigstop_gives_timeout("auto");
}

// Liveness apart from step time: one of `n` ranks is SIGSTOPped in the middle of its all-reduces (the operation
// timeout is 60 s); every other rank names it, with its address and the cause, within the liveness timeout (5 s, the
// default) plus a margin — none blames the neighbour it was waiting on. Returns the seconds until the last one failed.
double sigstop_is_named_by_every_survivor(int n, int stopped, const std::string& transport,
                                          const std::string& hosts = "") {
  std::vector<std::string> args = {"timeout_ms=60000", "transport=" + transport};
  if (!hosts.empty()) args.push_back("hosts=" + hosts);
  test::ring_run ring(n, "loop", args);
  EXPECT_TRUE(test::wait_for_output(ring.workers[static_cast<std::size_t>(stopped)], "ready", 30s)) << ring.report();
  std::this_thread::sleep_for(50ms);
  ::kill(ring.workers[static_cast<std::size_t>(stopped)].pid, SIGSTOP);
  const auto stopped_at = std::chrono::steady_clock::now();
  std::vector<test::worker*> survivors;
  for (int r = 0; r < n; ++r)
    if (r != stopped) survivors.push_back(&ring.workers[static_cast<std::size_t>(r)]);
  const bool done = test::wait_workers(survivors, 30s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  ::kill(ring.workers[static_cast<std::size_t>(stopped)].pid, SIGKILL);
  ::kill(ring.workers[static_cast<std::size_t>(stopped)].pid, SIGCONT);
  EXPECT_TRUE(done) << ring.report();
  // Five heartbeats per timeout: the last one before the stop left at most a fifth of it before; the margin is for a
  // loaded machine.
  EXPECT_GE(seconds, 5.0 * 4 / 5 - 0.2) << ring.report();
  EXPECT_LE(seconds, 5.0 + 3.0) << ring.report();
  // One verdict: the same words on every survivor after its own "[mwstrat.ring] rank r: ".
  const std::string verdict = "rank " + std::to_string(stopped) + " (" + ring.address(stopped) +
                              ") was lost: silent for 5.0 s (no heartbeat within the liveness timeout; the operation "
                              "timeout was not needed)";
  for (auto* w : survivors) {
    EXPECT_EQ(w->exit_code, 3) << ring.report();
    const auto line = error_line(*w);
    EXPECT_EQ(line.rfind("ERROR peer_lost " + std::to_string(stopped) + " ", 0), 0u) << ring.report();
    const auto colon = line.find("]");
    if (colon == std::string::npos) { ADD_FAILURE() << line; continue; }
    const auto detail = line.substr(line.find(": ", colon) + 2);
    EXPECT_EQ(detail, verdict) << ring.report();
  }
  EXPECT_EQ(test::shm_leftovers(ring.pids()), std::vector<std::string>{});
  if (!hosts.empty()) {
    for (const auto& w : ring.workers) {
      EXPECT_NE(w.stderr_text().find("hierarchical=1"), std::string::npos) << ring.report();
    }
  }
  std::printf("[ liveness ] SIGSTOP of rank %d of %d (%s%s): every survivor named it after %.2f s\n", stopped, n,
              transport.c_str(), hosts.empty() ? "" : ", hierarchical", seconds);
  return seconds;
}

TEST(ring_liveness, sigstop_of_one_of_three_ranks_is_named_by_both_others_within_the_liveness_timeout) {
  sigstop_is_named_by_every_survivor(3, 1, "tcp");
}

// In a ring of four, rank 0 is no neighbour of rank 2: it hears the verdict, and names rank 2, not the neighbour
// that stopped sending to it.
TEST(ring_liveness, sigstop_in_a_ring_of_four_is_named_by_the_ranks_that_are_not_its_neighbours_too) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  sigstop_is_named_by_every_survivor(4, 2, "auto");
}

// Hierarchical (two simulated hosts of two ranks): the survivors wait in the rings inside, which have no liveness
// connections of their own; the flat ring's verdict ends them.
TEST(ring_liveness, sigstop_in_a_hierarchical_ring_is_named_by_every_survivor) {
  sigstop_is_named_by_every_survivor(4, 3, "tcp", "a,a,b,b");
}

// A rank whose training thread computes for longer than the liveness timeout (a long step, an evaluation, a
// checkpoint write) is alive: its ring's own thread keeps beating, and the job finishes.
TEST(ring_liveness, a_step_longer_than_the_liveness_timeout_is_not_a_loss) {
  test::ring_run ring(3, "steps", {"steps=3", "slow_rank=1", "slow_ms=3000", "liveness_ms=1000", "timeout_ms=60000"});
  ASSERT_TRUE(ring.wait_all(60s)) << ring.report();
  for (const auto& w : ring.workers) {
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    EXPECT_NE(w.stdout_text().find("steps=3\nOK"), std::string::npos) << ring.report();
  }
}

TEST(ring_liveness, a_rank_stopped_and_continued_every_two_seconds_is_slow_not_lost) {
  EXPECT_GE(test::stopped_and_continued_finishes(40), 2);  // ~8 s
}

// A rank that leaves normally says goodbye: a neighbour whose ring lives on (here 1.5 s, five liveness timeouts)
// does not take its silence for a loss (the monitor would log "was lost").
TEST(ring_liveness, ranks_that_finish_at_different_times_are_not_lost) {
  test::ring_run ring(3, "steps", {"steps=2", "liveness_ms=300", "linger_rank=1", "linger_ms=1500"});
  ASSERT_TRUE(ring.wait_all(60s)) << ring.report();
  for (const auto& w : ring.workers) {
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    EXPECT_EQ(w.stderr_text().find("was lost"), std::string::npos) << ring.report();
  }
}

TEST(ring_collective, ranks_calling_different_sizes_get_a_protocol_error) {
  for (const std::string transport : {"tcp", "auto"}) {
    test::ring_run ring(3, "mismatch", {"timeout_ms=20000", "transport=" + transport});
    ASSERT_TRUE(ring.wait_all(30s)) << ring.report();
    for (auto& w : ring.workers) {
      EXPECT_EQ(w.exit_code, 3) << transport << "\n" << ring.report();
      EXPECT_NE(w.stdout_text().find("ERROR protocol"), std::string::npos) << transport << "\n" << ring.report();
    }
  }
}

// Opens a TCP connection to 127.0.0.1:port, retrying briefly while the listener comes up.
ip::tcp::socket connect_raw(boost::asio::io_context& io, int port) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    ip::tcp::socket s(io);
    boost::system::error_code ec;
    s.connect({ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
    if (!ec) return s;
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("cannot connect: " + ec.message());
    std::this_thread::sleep_for(20ms);
  }
}

// Reads until the server closes, bounded; returns what it sent.
std::vector<std::uint8_t> read_until_closed(ip::tcp::socket& s) {
  std::vector<std::uint8_t> got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  s.non_blocking(true);
  while (std::chrono::steady_clock::now() < deadline) {
    std::array<std::uint8_t, 256> buf{};
    boost::system::error_code ec;
    const auto n = s.read_some(boost::asio::buffer(buf), ec);
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    if (ec == boost::asio::error::would_block) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    if (ec) return got;
  }
  throw std::runtime_error("the ring kept a stranger's connection open");
}

detail::hello make_hello(const std::string& fingerprint, bool token) {
  detail::hello h;
  h.world = 2;
  h.rank = 1;
  h.flags = token ? detail::flag_token : 0;
  h.cluster = detail::sha256(fingerprint);
  h.model = detail::sha256("");
  h.nonce = detail::random_nonce();
  return h;
}

TEST(ring_collective, garbage_a_wrong_token_and_a_wrong_fingerprint_are_refused_and_the_job_goes_on) {
  test::temp_dir dir;
  const auto ports = test::free_ports(2);
  const auto port_list = test::join_ports(ports);
  const std::vector<std::string> env = {};  // the workers get the job token as an option (token=...)
  auto rank0 = test::spawn_worker(dir.path(), "rank0", {"pair", "0", port_list, "connect_ms=30000", "token=right-token"}, env);
  boost::asio::io_context io;
  {  // garbage
    auto s = connect_raw(io, ports[0]);
    std::vector<std::uint8_t> junk(300, 0x5a);
    boost::asio::write(s, boost::asio::buffer(junk));
    read_until_closed(s);
  }
  {  // a well-formed hello, then a proof made with the wrong token
    auto s = connect_raw(io, ports[0]);
    const auto h = make_hello("test-cluster", true);
    std::array<std::uint8_t, detail::hello_size> raw{};
    detail::encode(h, raw);
    boost::asio::write(s, boost::asio::buffer(raw));
    std::array<std::uint8_t, detail::hello_reply_size> rep{};
    boost::asio::read(s, boost::asio::buffer(rep));
    const auto reply = detail::decode_hello_reply(rep);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, detail::refusal::none);
    detail::hello_finish fin;
    const detail::handshake_binding bound{h.host, reply->host, h.flags, reply->flags};
    fin.proof = detail::handshake_proof("wrong-token", false, h.nonce, reply->nonce, h.cluster, 2, 1, 0, bound);
    std::array<std::uint8_t, detail::hello_finish_size> fraw{};
    detail::encode(fin, fraw);
    boost::asio::write(s, boost::asio::buffer(fraw));
    const auto verdict_raw = read_until_closed(s);
    ASSERT_EQ(verdict_raw.size(), detail::hello_finish_size);
    const auto verdict = detail::decode_hello_finish(verdict_raw);
    ASSERT_TRUE(verdict.has_value());
    EXPECT_EQ(verdict->status, detail::refusal::bad_proof);
  }
  {  // the right token, but over a rewritten host identity (what would turn frame sealing off between hosts)
    auto s = connect_raw(io, ports[0]);
    const auto h = make_hello("test-cluster", true);
    std::array<std::uint8_t, detail::hello_size> raw{};
    detail::encode(h, raw);
    boost::asio::write(s, boost::asio::buffer(raw));
    std::array<std::uint8_t, detail::hello_reply_size> rep{};
    boost::asio::read(s, boost::asio::buffer(rep));
    const auto reply = detail::decode_hello_reply(rep);
    ASSERT_TRUE(reply.has_value());
    // The server's proof binds what it sent and what it received.
    EXPECT_TRUE(detail::digest_equal(reply->proof, detail::handshake_proof(
        "right-token", true, h.nonce, reply->nonce, h.cluster, 2, 1, 0,
        detail::handshake_binding{h.host, reply->host, h.flags, reply->flags})));
    detail::hello_finish fin;
    fin.proof = detail::handshake_proof("right-token", false, h.nonce, reply->nonce, h.cluster, 2, 1, 0,
                                        detail::handshake_binding{reply->host, reply->host, h.flags, reply->flags});
    std::array<std::uint8_t, detail::hello_finish_size> fraw{};
    detail::encode(fin, fraw);
    boost::asio::write(s, boost::asio::buffer(fraw));
    const auto verdict_raw = read_until_closed(s);
    ASSERT_EQ(verdict_raw.size(), detail::hello_finish_size);
    EXPECT_EQ(detail::decode_hello_finish(verdict_raw)->status, detail::refusal::bad_proof);
  }
  {  // a wrong cluster fingerprint
    auto s = connect_raw(io, ports[0]);
    const auto h = make_hello("another-cluster", true);
    std::array<std::uint8_t, detail::hello_size> raw{};
    detail::encode(h, raw);
    boost::asio::write(s, boost::asio::buffer(raw));
    const auto rep = read_until_closed(s);
    ASSERT_EQ(rep.size(), detail::hello_reply_size);
    EXPECT_EQ(detail::decode_hello_reply(rep)->status, detail::refusal::cluster_mismatch);
  }
  // The real rank 1 still gets in, and the pair works.
  auto rank1 = test::spawn_worker(dir.path(), "rank1", {"pair", "1", port_list, "connect_ms=30000", "token=right-token"}, env);
  const bool done = test::wait_workers({&rank0, &rank1}, 60s);
  const auto log0 = rank0.stderr_text();
  ASSERT_TRUE(done) << log0 << rank1.stderr_text();
  EXPECT_EQ(rank0.exit_code, 0) << rank0.stdout_text() << log0;
  EXPECT_EQ(rank1.exit_code, 0) << rank1.stdout_text() << rank1.stderr_text();
  EXPECT_NE(log0.find("started: tcp://127.0.0.1:" + std::to_string(ports[0]) + ", waiting for 2 workers"),
            std::string::npos) << log0;
  EXPECT_NE(log0.find("not an mwstrat ring peer"), std::string::npos) << log0;
  EXPECT_NE(log0.find("wrong MWSTRAT_JOB_TOKEN"), std::string::npos) << log0;
  EXPECT_NE(log0.find("cluster fingerprint differs"), std::string::npos) << log0;
}

// In-process rings (threads) for start-up behaviour; each rank's outcome is recorded.
struct outcome {
  std::exception_ptr error;
  bool ok = false;
  std::chrono::steady_clock::time_point finished;
};

// Stands for a rank that is never started, in start_ring's `late`.
constexpr std::chrono::milliseconds never{-1};

// `late[r]`: how long rank r waits before it starts (none when absent; `never`: it does not start).
std::vector<outcome> start_ring(std::vector<ring_options> opts, std::vector<std::string>* logs = nullptr,
                                const std::vector<std::chrono::milliseconds>& late = {}) {
  std::vector<outcome> out(opts.size());
  std::vector<std::thread> threads;
  std::mutex log_mutex;
  for (std::size_t r = 0; r < opts.size(); ++r) {
    if (logs) opts[r].log = [&, logs](std::string_view line) {
      const std::lock_guard lock(log_mutex);
      logs->emplace_back(line);
    };
    if (r < late.size() && late[r] == never) continue;
    threads.emplace_back([&, r] {
      if (r < late.size()) std::this_thread::sleep_for(late[r]);
      try {
        ring_collective ring(opts[r]);
        std::vector<std::int32_t> v(5, ring.rank());
        ring.all_reduce(std::span<std::int32_t>(v), reduce_op::sum);
        out[r].ok = v[4] == static_cast<std::int32_t>(opts.size() * (opts.size() - 1) / 2);
      } catch (...) {
        out[r].error = std::current_exception();
      }
      out[r].finished = std::chrono::steady_clock::now();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<ring_options> options_for(int n, std::chrono::milliseconds connect = 10s) {
  const auto addrs = loopback(test::free_ports(n));
  std::vector<ring_options> v(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& o = v[static_cast<std::size_t>(r)];
    o.addresses = addrs;
    o.rank = r;
    o.connect_timeout = connect;
    o.op_timeout = 10s;
    o.job_token = "";
    o.cluster_fingerprint = "c";
  }
  return v;
}

TEST(ring_collective, matching_tokens_connect) {
  auto opts = options_for(3);
  for (auto& o : opts) o.job_token = "s3cret";
  for (auto& r : start_ring(opts)) EXPECT_TRUE(r.ok && !r.error);
}

template <class E>
bool throws_kind(const std::exception_ptr& e, std::string* what = nullptr) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const E& x) {
    if (what) *what = x.what();
    return true;
  } catch (...) {
    return false;
  }
}

// The rank whose hello is refused fails at once; the refusing rank logs the reason and keeps waiting for the
// right peer (a stranger must not end the job). Here each rank is the other's previous rank, so the refusing rank
// is usually refused in turn (the refused one answers it before leaving); if not, it fails at its deadline, naming
// the refusal.
TEST(ring_collective, a_mismatched_fingerprint_or_token_fails_fast_with_a_reason) {
  for (int variant = 0; variant < 2; ++variant) {
    auto opts = options_for(2, 3s);
    if (variant == 0) opts[1].cluster_fingerprint = "other";
    if (variant == 1) opts[1].job_token = "only-one-side";
    const std::string reason = variant == 0 ? "cluster fingerprint differs" : "token";
    std::vector<std::string> logs;
    const auto start = std::chrono::steady_clock::now();
    const auto out = start_ring(opts, &logs);
    const auto first = std::min(out[0].finished, out[1].finished);
    EXPECT_LT(first - start, 2s) << "no rank failed fast";
    int protocol_errors = 0;
    for (auto& r : out) {
      ASSERT_TRUE(r.error) << "variant " << variant;
      std::string what;
      if (throws_kind<protocol_error>(r.error, &what)) {
        ++protocol_errors;
        EXPECT_NE(what.find(reason), std::string::npos) << what;
      } else {
        EXPECT_TRUE(throws_kind<timeout_error>(r.error, &what)) << "variant " << variant;
        EXPECT_NE(what.find(reason), std::string::npos) << what;
      }
    }
    EXPECT_GE(protocol_errors, 1);
    bool logged = false;
    for (auto& l : logs) logged = logged || l.find(reason) != std::string::npos;
    EXPECT_TRUE(logged);
  }
}

// In-memory recovery rebuilds a ring of the next generation (ring_options::generation, folded into the handshake's
// cluster digest): a rank of another generation is refused like a stranger, one of the same generation connects, and
// next_generation() keeps everything else of the ring.
TEST(ring_collective, ranks_of_different_generations_refuse_each_other_and_the_next_generation_connects) {
  auto opts = options_for(2, 3s);
  opts[1].generation = 1;
  const auto mixed = start_ring(opts);
  // Neither rank gets a ring. The refused side reports the refusal; the refusing side may instead reach its own
  // connect deadline first (a timeout naming the rank that never came properly), so the words are required once.
  int protocol_errors = 0, named_cause = 0;
  std::string texts;
  for (const auto& r : mixed) {
    ASSERT_TRUE(r.error) << "a generation 0 rank and a generation 1 rank formed a ring";
    std::string what;
    if (throws_kind<protocol_error>(r.error, &what)) ++protocol_errors;
    if (what.empty()) (void)throws_kind<std::exception>(r.error, &what);
    if (what.find("cluster fingerprint differs") != std::string::npos) ++named_cause;
    texts += what + "\n";
  }
  EXPECT_GE(protocol_errors, 1) << texts;
  EXPECT_GE(named_cause, 1) << texts;

  auto next = options_for(2, 10s);
  std::vector<ring_options> rebuilt;
  {
    // next_generation needs a ring: a world of one of each rank's options (nothing connects).
    for (const auto& o : next) {
      ring_options alone = o;
      alone.addresses = {"127.0.0.1:0"};
      alone.rank = 0;
      const ring_collective ring(alone);
      EXPECT_EQ(ring.generation(), 0u);
      ring_options n = ring.next_generation(7s);
      EXPECT_EQ(n.generation, 1u);
      EXPECT_EQ(n.connect_timeout, 7s);
      EXPECT_EQ(n.cluster_fingerprint, o.cluster_fingerprint);
      n.addresses = o.addresses;
      n.rank = o.rank;
      rebuilt.push_back(std::move(n));
    }
  }
  for (const auto& r : start_ring(rebuilt)) EXPECT_TRUE(r.ok && !r.error);
}

// Elastic training: the survivors of a ring of four that lost rank 1 build the ring of the other three
// (without_ranks): their addresses in order, renumbered 0, 1, 2, the next generation (which a stale rank's handshake
// fails: the test above), and it connects.
TEST(ring_collective, without_ranks_gives_the_survivors_a_smaller_ring_of_the_next_generation) {
  const auto opts = options_for(4, 10s);
  std::vector<ring_options> smaller(3);
  std::vector<std::string> errors(4);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        try {
          const ring_collective ring(opts[static_cast<std::size_t>(r)]);
          const std::array<int, 1> lost{1};
          if (r == 1) {
            EXPECT_THROW((void)ring.without_ranks(lost, 5s), config_error) << "a rank cannot drop itself";
            return;
          }
          const std::array<int, 1> outside{4};
          EXPECT_THROW((void)ring.without_ranks(outside, 5s), config_error);
          EXPECT_THROW((void)ring.without_ranks(std::span<const int>(), 5s), config_error);
          smaller[static_cast<std::size_t>(r == 0 ? 0 : r - 1)] = ring.without_ranks(lost, 5s);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  for (const auto& e : errors) ASSERT_EQ(e, "");
  const std::vector<std::string> survivors{opts[0].addresses[0], opts[0].addresses[2], opts[0].addresses[3]};
  for (int r = 0; r < 3; ++r) {
    const auto& o = smaller[static_cast<std::size_t>(r)];
    EXPECT_EQ(o.addresses, survivors);
    EXPECT_EQ(o.rank, r);
    EXPECT_EQ(o.generation, 1u);
    EXPECT_EQ(o.connect_timeout, 5s);
    EXPECT_EQ(o.cluster_fingerprint, "c|members " + survivors[0] + " " + survivors[1] + " " + survivors[2]);
  }
  for (const auto& r : start_ring(smaller)) EXPECT_TRUE(r.ok && !r.error);
}

// Start-up connects each rank to its two neighbours only. In a ring of four whose rank 2 starts 6 s late, ranks 0
// and 3 have their links at once; creation must still wait for rank 2 within connect_timeout (30 s here), not fail
// their first operation under the shorter op_timeout (2 s, which still bounds the operations after start-up on a
// loaded machine), and rank 0 says the ring is connected only once it is.
TEST(ring_collective, a_rank_that_starts_late_within_the_connect_timeout_joins_the_ring) {
  auto opts = options_for(4, 30s);
  for (auto& o : opts) o.op_timeout = 2s;
  std::vector<std::string> logs;
  const auto out = start_ring(opts, &logs, {0ms, 0ms, 6s});
  for (std::size_t r = 0; r < out.size(); ++r) {
    std::string what;
    if (out[r].error) throws_kind<std::exception>(out[r].error, &what);
    EXPECT_TRUE(out[r].ok && !out[r].error) << "rank " << r << ": " << what;
  }
  EXPECT_EQ(std::ranges::count_if(logs, [](const std::string& l) { return l.find("ring of 4 ranks connected") != l.npos; }),
            1);
}

TEST(ring_collective, a_missing_rank_is_a_timeout_naming_it) {
  auto opts = options_for(2, 300ms);
  try {
    ring_collective ring(opts[0]);
    FAIL() << "connected to nobody";
  } catch (const timeout_error& e) {
    EXPECT_EQ(e.peer_rank(), 1);
    EXPECT_NE(std::string(e.what()).find(opts[0].addresses[1]), std::string::npos) << e.what();
  }
}

// In a ring of four whose rank 2 never starts, ranks 1 and 3 fail to reach it, and rank 0, whose own links came up,
// learns why from them: every rank's error names rank 2, none blames the neighbour that gave up on it.
TEST(ring_collective, a_rank_that_never_starts_is_named_by_every_rank) {
  const auto opts = options_for(4, 2s);
  const auto out = start_ring(opts, nullptr, {0ms, 0ms, never, 0ms});
  const std::string missing = "rank 2 (" + opts[2].addresses[2] + ")";
  for (const std::size_t r : {0u, 1u, 3u}) {
    std::string what;
    ASSERT_TRUE(out[r].error) << "rank " << r;
    ASSERT_TRUE(throws_kind<timeout_error>(out[r].error, &what)) << "rank " << r << ": " << what;
    try {
      std::rethrow_exception(out[r].error);
    } catch (const timeout_error& e) {
      EXPECT_EQ(e.peer_rank(), 2) << what;
    }
    const std::string says = r == 1 ? "could not connect to " + missing
                           : r == 3 ? missing + " did not connect"
                                    : "could not join the ring: ";
    EXPECT_NE(what.find(says), std::string::npos) << what;
    EXPECT_EQ(what.find("was lost"), std::string::npos) << "rank " << r << ": " << what;
  }
}

// Runs `body(ring)` on each rank of an in-process ring (threads); each rank's exception, if any.
template <class Body>
std::vector<std::exception_ptr> on_each_rank(const std::vector<ring_options>& opts, Body body) {
  std::vector<std::exception_ptr> errors(opts.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < opts.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        ring_collective ring(opts[r]);
        body(ring);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// A rank that takes itself for a broadcast's root only sends: ranks called with different roots used to end with
// different data and no error, and a root never saw another rank's different size or type. Every rank now fails,
// before any data moves, naming what differed.
TEST(ring_collective, a_broadcast_whose_ranks_disagree_fails_on_every_rank_naming_the_difference) {
  struct disagreement {
    const char* named;
    std::function<void(ring_collective&)> call;
  };
  const std::vector<disagreement> cases = {
      {"roots from 0 to 1", [](ring_collective& ring) {
         std::vector<float> v(8, static_cast<float>(ring.rank()));
         ring.broadcast(std::span<float>(v), ring.rank() == 1 ? 1 : 0);
       }},
      {"element counts from 4 to 8", [](ring_collective& ring) {
         std::vector<float> v(ring.rank() == 0 ? 8 : 4);
         ring.broadcast(std::span<float>(v), 0);
       }},
      {"element types from float to double", [](ring_collective& ring) {
         if (ring.rank() == 2) {
           std::vector<double> v(8);
           ring.broadcast(std::span<double>(v), 0);
         } else {
           std::vector<float> v(8);
           ring.broadcast(std::span<float>(v), 0);
         }
       }},
  };
  for (const auto& c : cases) {
    const auto errors = on_each_rank(options_for(3, 10s), c.call);
    for (std::size_t r = 0; r < errors.size(); ++r) {
      std::string what;
      ASSERT_TRUE(throws_kind<protocol_error>(errors[r], &what)) << c.named << ", rank " << r << ": " << what;
      EXPECT_NE(what.find(c.named), std::string::npos) << what;
      EXPECT_NE(what.find("broadcast #"), std::string::npos) << what;
    }
  }
  // Ranks that agree still broadcast (every root, a size that is not a multiple of the rank count).
  const auto errors = on_each_rank(options_for(3, 10s), [](ring_collective& ring) {
    for (int root = 0; root < ring.size(); ++root) {
      std::vector<std::int64_t> v(7, ring.rank() == root ? 40 + root : -1);
      ring.broadcast(std::span<std::int64_t>(v), root);
      for (const auto x : v)
        if (x != 40 + root) throw std::runtime_error("broadcast from " + std::to_string(root) + " gave " + std::to_string(x));
    }
  });
  for (const auto& e : errors) {
    std::string what;
    if (e) (void)throws_kind<std::exception>(e, &what);
    EXPECT_FALSE(e) << what;
  }
}

// A timeout of milliseconds::max() means "no deadline", not a deadline already past (now() + max overflowed).
TEST(ring_collective, the_longest_timeouts_wait_instead_of_expiring_at_once) {
  auto opts = options_for(2, std::chrono::milliseconds::max());
  for (auto& o : opts) o.op_timeout = std::chrono::milliseconds::max();
  const auto errors = on_each_rank(opts, [](ring_collective& ring) {
    if (ring.rank() == 1) std::this_thread::sleep_for(300ms);
    std::vector<float> v(4, 1.0f);
    ring.all_reduce(std::span<float>(v), reduce_op::sum, op_options{std::chrono::milliseconds::max()});
    ring.all_reduce(std::span<float>(v), reduce_op::sum);
    if (v[0] != 4.0f) throw std::runtime_error("sum " + std::to_string(v[0]));
  });
  for (const auto& e : errors) {
    std::string what;
    if (e) (void)throws_kind<std::exception>(e, &what);
    EXPECT_FALSE(e) << what;
  }
}

TEST(ring_collective, the_address_of_a_rank_outside_the_ring_is_a_config_error) {
  ring_options o;
  o.addresses = {"127.0.0.1:0"};
  ring_collective ring(o);
  EXPECT_EQ(ring.address(0), "127.0.0.1:0");
  for (const int r : {-1, 1}) {
    try {
      (void)ring.address(r);
      ADD_FAILURE() << "address(" << r << ") answered";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("address(" + std::to_string(r) + "): no such rank in a ring of 1"),
                std::string::npos) << e.what();
    }
  }
}

TEST(ring_collective, bad_options_are_config_errors) {
  ring_options o;
  EXPECT_THROW(ring_collective{o}, config_error);
  o.addresses = {"127.0.0.1:1"};
  o.rank = 1;
  EXPECT_THROW(ring_collective{o}, config_error);
  o.rank = 0;
  o.addresses = {"no-port"};
  EXPECT_THROW(ring_collective{o}, config_error);
  o.addresses = {"::1:5"};
  EXPECT_THROW(ring_collective{o}, config_error);
  o.addresses = {"127.0.0.1:1"};
  o.spin = std::chrono::microseconds(-1);
  EXPECT_THROW(ring_collective{o}, config_error);
  o.spin = std::chrono::microseconds(0);
  o.liveness_timeout = std::chrono::milliseconds(-1);
  EXPECT_THROW(ring_collective{o}, config_error);
  o.liveness_timeout = std::chrono::milliseconds(20);  // two beats per timeout: noise would decide
  EXPECT_THROW(ring_collective{o}, config_error);
  o.liveness_timeout = std::chrono::seconds(5);
  // A time of zero or less (seconds written as a count of 0, say) names the option instead of timing out.
  for (auto ring_options::*field :
       {&ring_options::connect_timeout, &ring_options::op_timeout, &ring_options::handshake_timeout})
    for (const auto bad : {std::chrono::milliseconds(0), std::chrono::milliseconds(-1000)}) {
      ring_options b = o;
      b.*field = bad;
      try {
        ring_collective ring{b};
        ADD_FAILURE() << "accepted a time of " << bad.count() << " ms";
      } catch (const config_error& e) {
        EXPECT_NE(std::string(e.what()).find("timeout is " + std::to_string(bad.count()) + " ms: expected a positive"),
                  std::string::npos)
            << e.what();
      }
    }
}

// With or without spinning, operations give the same results. (The environment's MWSTRAT_RING_SPIN_US is read
// by the configuration layer, and tested there.)
TEST(ring_collective, with_or_without_spinning_operations_give_the_same_results) {
  for (const long long us : {0LL, 1000000LL}) {
    auto opts = options_for(2);
    for (auto& o : opts) o.spin = std::chrono::microseconds(us);
    std::vector<double> sums(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ring_collective ring(opts[static_cast<std::size_t>(r)]);
        std::vector<double> v(1000, static_cast<double>(r + 1));
        for (int i = 0; i < 5; ++i) ring.barrier();
        ring.all_reduce(std::span<double>(v), reduce_op::sum);
        sums[static_cast<std::size_t>(r)] = v[999];
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(sums, (std::vector<double>{3.0, 3.0})) << "spin " << us << " us";
  }
}

TEST(ring_collective, a_single_rank_needs_no_network) {
  ring_options o;
  o.addresses = {"127.0.0.1:1"};
  std::vector<std::string> logs;
  o.log = [&](std::string_view l) { logs.emplace_back(l); };
  ring_collective ring(o);
  std::vector<double> v = {1.5, 2.5};
  ring.all_reduce(std::span<double>(v), reduce_op::mean);
  EXPECT_EQ(v[1], 2.5);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0], "[mwstrat.ring] rank 0: started: tcp://127.0.0.1:1, waiting for 1 worker (itself)");
}

TEST(ring_collective, results_are_bitwise_deterministic_for_non_integer_floats_and_the_same_on_both_transports) {
  // Values whose sums depend on the order of addition: every run, every rank and both transports get the same bits.
  auto opts = options_for(3);
  std::vector<std::vector<float>> results(3);
  for (auto& o : opts) o.chunk_bytes = 4096;
  const bool shm = test::have_dev_shm();
  for (int run = 0; run < 3; ++run) {
    for (auto& o : opts) o.transport = run == 0 ? ring_transport::tcp : ring_transport::automatic;
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        ring_collective ring(opts[static_cast<std::size_t>(r)]);
        EXPECT_EQ(ring.uses_shared_memory(), run > 0 && shm) << "run " << run << ", rank " << r;
        std::vector<float> v(50001);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / static_cast<float>(i + 1 + 1000 * r) + 1e-3f * static_cast<float>(r);
        ring.all_reduce(std::span<float>(v), reduce_op::mean);
        if (run == 0) results[static_cast<std::size_t>(r)] = v;
        else EXPECT_EQ(results[static_cast<std::size_t>(r)], v) << "difference on rank " << r << " in run " << run;
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(results[0], results[1]);
    EXPECT_EQ(results[0], results[2]);
  }
}

// A link whose shared memory cannot be agreed on logs why and carries its payloads over TCP; the job goes on.
// Here rank 1's chunk size differs from rank 0's (both fit the small operation in one chunk), so rank 1 declines
// rank 0's region.
TEST(ring_collective, a_declined_shared_memory_region_falls_back_to_tcp_with_a_logged_reason) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  auto opts = options_for(2);
  opts[1].chunk_bytes = 8192;
  std::vector<std::string> logs;
  for (auto& r : start_ring(opts, &logs)) EXPECT_TRUE(r.ok && !r.error);
  bool declined = false, told = false;
  for (auto& l : logs) {
    declined = declined || (l.find("rank 1:") != std::string::npos && l.find("over TCP: shared memory declined") !=
                                                                            std::string::npos && l.find("chunk_bytes") != std::string::npos);
    told = told || (l.find("rank 0:") != std::string::npos && l.find("it declined the shared memory") != std::string::npos);
  }
  EXPECT_TRUE(declined && told) << ::testing::PrintToString(logs);
  EXPECT_EQ(test::shm_leftovers({::getpid()}), std::vector<std::string>{}) << "a declined region's name must go too";
}

// (MWSTRAT_RING_TRANSPORT is read by the configuration layer, and tested there.)
TEST(ring_collective, the_option_chooses_the_transport) {
  if (!test::have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  const auto ring_uses_shm = [](ring_transport t) {
    auto opts = options_for(2);
    std::vector<int> shm(2, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        opts[static_cast<std::size_t>(r)].transport = t;
        ring_collective ring(opts[static_cast<std::size_t>(r)]);
        shm[static_cast<std::size_t>(r)] = ring.uses_shared_memory() ? 1 : 0;
        ring.barrier();
      });
    for (auto& th : threads) th.join();
    return shm;
  };
  EXPECT_EQ(ring_uses_shm(ring_transport::automatic), (std::vector<int>{1, 1}));
  EXPECT_EQ(ring_uses_shm(ring_transport::tcp), (std::vector<int>{0, 0}));
}

}  // namespace ring_test
