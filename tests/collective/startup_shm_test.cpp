// The shared-memory set-up of one same-host link (collective/ring/detail/startup_shm.hpp) on its own, over a real
// socket pair and the real /dev/shm: both ends map one object; a mismatched region, a malformed message, a closed
// connection or a receiver that mapped some other object each leave the link on TCP, with the reason in the log
// (or returned, when the connection itself failed). Whatever happens, no name of this process is left in /dev/shm.
#include <mwstrat/collective/ring/detail/startup_shm.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace startup_shm_test {

namespace d = mwstrat::detail;
using namespace std::chrono_literals;

constexpr std::size_t chunk = 4096;

struct link_ends {
  d::unique_socket sender, receiver;
};
// A connected pair of non-blocking stream sockets, as the ring's links are.
link_ends socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0)
    throw std::system_error(errno, std::generic_category(), "socketpair");
  return {d::unique_socket(fds[0]), d::unique_socket(fds[1])};
}
d::steady::time_point limit() { return d::steady::now() + 10s; }

// The names this process has in /dev/shm (the ring's regions are named mwstrat-ring-<pid>-<random>).
std::vector<std::string> our_names() {
  const std::string prefix = std::string(d::shm_prefix) + std::to_string(::getpid()) + "-";
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d::shm_directory))
    if (e.path().filename().string().starts_with(prefix)) names.push_back(e.path().filename().string());
  return names;
}

struct log_lines {
  std::vector<std::string> lines;
  d::shm_setup_log sink() {
    return [this](const std::string& line) { lines.push_back(line); };
  }
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The log holds exactly one line, and it says `part`.
void expect_one_line(const log_lines& log, const std::string& part) {
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_TRUE(has(log.lines[0], part)) << log.lines[0];
}

template <std::size_t N>
void send(int fd, const std::array<std::uint8_t, N>& bytes) {
  ASSERT_EQ(d::write_all(fd, bytes.data(), bytes.size(), limit()).status, d::io_status::ok);
}
template <std::size_t N>
std::array<std::uint8_t, N> receive(int fd) {
  std::array<std::uint8_t, N> bytes{};
  EXPECT_EQ(d::read_exact(fd, bytes.data(), bytes.size(), limit()).status, d::io_status::ok);
  return bytes;
}

TEST(RingStartupShm, BothEndsMapOneObjectAndItsNameIsGone) {
  link_ends link = socket_pair();
  log_lines sent_log, received_log;
  std::optional<d::shm_region> offered, mapped;
  std::optional<std::string> receiver_failure;
  std::thread receiving([&] {
    receiver_failure = d::accept_shm_offer(link.receiver.get(), limit(), chunk, "rank 0", received_log.sink(), mapped);
  });
  const auto sender_failure =
      d::offer_shm_region(link.sender.get(), limit(), chunk, "rank 1", 0, sent_log.sink(), offered);
  receiving.join();
  EXPECT_EQ(sender_failure, std::nullopt);
  EXPECT_EQ(receiver_failure, std::nullopt);
  ASSERT_TRUE(offered && *offered);
  ASSERT_TRUE(mapped && *mapped);
  EXPECT_TRUE(sent_log.lines.empty());
  EXPECT_TRUE(received_log.lines.empty());
  EXPECT_EQ(offered->slots(), d::ring_shm_slots);
  EXPECT_EQ(offered->slot_bytes(), chunk);
  EXPECT_EQ(mapped->size(), d::ring_shm_slots * chunk);
  // One object: what the sender writes into a slot, the receiver reads from its own mapping.
  offered->slot(3)[17] = 0xab;
  offered->slot(7)[chunk - 1] = 0x5c;
  EXPECT_EQ(mapped->slot(3)[17], 0xab);
  EXPECT_EQ(mapped->slot(7)[chunk - 1], 0x5c);
  // The mappings outlive the name: nothing is left in /dev/shm for a crash to leak.
  EXPECT_TRUE(our_names().empty());
}

TEST(RingStartupShm, AReceiverWithAnotherChunkSizeDeclinesAndBothEndsSayWhy) {
  link_ends link = socket_pair();
  log_lines sent_log, received_log;
  std::optional<d::shm_region> offered, mapped;
  std::optional<std::string> receiver_failure;
  std::thread receiving([&] {
    receiver_failure =
        d::accept_shm_offer(link.receiver.get(), limit(), 2 * chunk, "rank 0", received_log.sink(), mapped);
  });
  const auto sender_failure =
      d::offer_shm_region(link.sender.get(), limit(), chunk, "rank 1", 0, sent_log.sink(), offered);
  receiving.join();
  EXPECT_EQ(sender_failure, std::nullopt);  // a decline is not a failure: the link goes on over TCP
  EXPECT_EQ(receiver_failure, std::nullopt);
  EXPECT_FALSE(offered);
  EXPECT_FALSE(mapped);
  expect_one_line(received_log, "payloads from rank 0 over TCP: shared memory declined: its region (8 x 4096 bytes) "
                                "does not match our chunk_bytes (8192)");
  expect_one_line(sent_log, "payloads to rank 1 over TCP: it declined the shared memory");
  EXPECT_TRUE(our_names().empty());
}

TEST(RingStartupShm, AMalformedOfferIsAFailureOfTheConnection) {
  link_ends link = socket_pair();
  send(link.sender.get(), std::array<std::uint8_t, d::shm_offer_size>{});  // no magic, nothing valid
  log_lines received_log;
  std::optional<d::shm_region> mapped;
  const auto failure = d::accept_shm_offer(link.receiver.get(), limit(), chunk, "rank 0", received_log.sink(), mapped);
  EXPECT_EQ(failure, std::optional<std::string>("malformed shared-memory offer"));
  EXPECT_FALSE(mapped);
}

TEST(RingStartupShm, AClosedConnectionIsReturnedAndTheOfferedNameStillGoes) {
  {  // The receiver's side: the sender went away before offering.
    link_ends link = socket_pair();
    link.sender.reset();
    log_lines received_log;
    std::optional<d::shm_region> mapped;
    const auto failure =
        d::accept_shm_offer(link.receiver.get(), limit(), chunk, "rank 0", received_log.sink(), mapped);
    ASSERT_TRUE(failure);
    EXPECT_TRUE(has(*failure, "no shared-memory offer (")) << *failure;
    EXPECT_FALSE(mapped);
  }
  {  // The sender's side: the receiver read the offer and went away without answering.
    link_ends link = socket_pair();
    std::thread receiving([&] {
      (void)receive<d::shm_offer_size>(link.receiver.get());
      link.receiver.reset();
    });
    log_lines sent_log;
    std::optional<d::shm_region> offered;
    const auto failure = d::offer_shm_region(link.sender.get(), limit(), chunk, "rank 1", 0, sent_log.sink(), offered);
    receiving.join();
    ASSERT_TRUE(failure);
    EXPECT_TRUE(has(*failure, "shared-memory answer: ")) << *failure;
    EXPECT_FALSE(offered);
    EXPECT_TRUE(our_names().empty());
  }
}

TEST(RingStartupShm, AReceiverThatMappedAnotherObjectKeepsTheLinkOnTcp) {
  // What a receiver in another /dev/shm (another container or mount namespace) answers: "mapped", with bytes that
  // are not the sender's proof.
  link_ends link = socket_pair();
  std::optional<bool> verdict;
  std::thread receiving([&] {
    (void)receive<d::shm_offer_size>(link.receiver.get());
    d::shm_answer answer;
    answer.mapped = true;
    answer.proof.fill(0x5a);
    std::array<std::uint8_t, d::shm_answer_size> raw{};
    d::encode(answer, raw);
    send(link.receiver.get(), raw);
    verdict = d::decode_shm_verdict(receive<d::shm_verdict_size>(link.receiver.get()));
  });
  log_lines sent_log;
  std::optional<d::shm_region> offered;
  const auto failure = d::offer_shm_region(link.sender.get(), limit(), chunk, "rank 1", 0, sent_log.sink(), offered);
  receiving.join();
  EXPECT_EQ(failure, std::nullopt);
  EXPECT_FALSE(offered);
  EXPECT_EQ(verdict, std::optional<bool>(false));  // the receiver is told, so it does not use its mapping either
  expect_one_line(sent_log, "payloads to rank 1 over TCP: it mapped another object under the region's name");
  EXPECT_TRUE(our_names().empty());
}

TEST(RingStartupShm, ASenderThatSawAnotherObjectKeepsTheReceiverOnTcp) {
  // The receiver's side of the same: it maps the offered region, and the sender's verdict says the proof it echoed
  // was not the one written.
  link_ends link = socket_pair();
  d::shm_region region;
  ASSERT_EQ(region.create(d::shm_directory, d::ring_shm_slots, chunk), "");
  std::thread sending([&] {
    d::shm_offer offer;
    offer.status = 1;
    offer.slots = static_cast<std::uint32_t>(d::ring_shm_slots);
    offer.slot_bytes = chunk;
    offer.name = region.name();
    std::array<std::uint8_t, d::shm_offer_size> raw{};
    d::encode(offer, raw);
    send(link.sender.get(), raw);
    (void)receive<d::shm_answer_size>(link.sender.get());
    std::array<std::uint8_t, d::shm_verdict_size> verdict{};
    d::encode_shm_verdict(false, verdict);
    send(link.sender.get(), verdict);
  });
  log_lines received_log;
  std::optional<d::shm_region> mapped;
  const auto failure = d::accept_shm_offer(link.receiver.get(), limit(), chunk, "rank 0", received_log.sink(), mapped);
  sending.join();
  EXPECT_EQ(failure, std::nullopt);
  EXPECT_FALSE(mapped);
  expect_one_line(received_log, "payloads from rank 0 over TCP: the region mapped here is not the one it wrote");
  region.unlink();
  EXPECT_TRUE(our_names().empty());
}

TEST(RingStartupShm, AMalformedAnswerIsAProtocolErrorNamingThePeer) {
  link_ends link = socket_pair();
  std::thread receiving([&] {
    (void)receive<d::shm_offer_size>(link.receiver.get());
    std::array<std::uint8_t, d::shm_answer_size> garbage{};
    garbage.fill(0xee);
    send(link.receiver.get(), garbage);
  });
  log_lines sent_log;
  std::optional<d::shm_region> offered;
  try {
    (void)d::offer_shm_region(link.sender.get(), limit(), chunk, "rank 1", 0, sent_log.sink(), offered);
    ADD_FAILURE() << "a malformed answer was taken";
  } catch (const mwstrat::protocol_error& e) {
    EXPECT_TRUE(has(e.what(), "rank 1 sent a malformed shared-memory answer")) << e.what();
  }
  receiving.join();
  EXPECT_FALSE(offered);
  EXPECT_TRUE(our_names().empty());
}

}  // namespace startup_shm_test
