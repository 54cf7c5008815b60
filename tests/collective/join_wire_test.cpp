// The join protocol's pieces by themselves, without a ring: the wire's framing and proofs (detail/join_wire.hpp), and
// the chief's desk (detail/join_desk.hpp) talking to the joiner's client (detail/join_client.hpp) over 127.0.0.1.

#include <support/process.hpp>  // free_ports

#include <mwstrat/collective/ring/detail/join_client.hpp>
#include <mwstrat/collective/ring/detail/join_desk.hpp>
#include <mwstrat/collective/ring/detail/join_wire.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace join_wire_test {

using namespace mwstrat;
using namespace std::chrono_literals;

struct socket_pair {
  detail::unique_socket a, b;
  socket_pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    a = detail::unique_socket(fds[0]);
    b = detail::unique_socket(fds[1]);
  }
};

detail::steady::time_point soon() { return detail::steady::now() + 2s; }

TEST(join_wire, a_message_reads_back_field_by_field_and_a_malformed_one_is_named) {
  socket_pair p;
  const detail::join_message sent{"admitted", "", std::string("with\0nul", 8), std::string(5000, 'x')};
  ASSERT_EQ(detail::send_join_message(p.a.get(), sent, soon()).status, detail::io_status::ok);
  std::string why;
  const auto got = detail::read_join_message(p.b.get(), soon(), why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(*got, sent);

  // A field longer than its message, a size past the limit, and a closed connection: nothing read, a reason said.
  const unsigned char lying[] = {8, 0, 0, 0, 9, 0, 0, 0, 'a', 'b', 'c', 'd'};
  ASSERT_EQ(::send(p.a.get(), lying, sizeof lying, 0), static_cast<ssize_t>(sizeof lying));
  EXPECT_FALSE(detail::read_join_message(p.b.get(), soon(), why));
  EXPECT_EQ(why, "a field longer than its message");
  const unsigned char huge[] = {0, 0, 0, 0x10};
  ASSERT_EQ(::send(p.a.get(), huge, sizeof huge, 0), static_cast<ssize_t>(sizeof huge));
  EXPECT_FALSE(detail::read_join_message(p.b.get(), soon(), why));
  EXPECT_NE(why.find("not an mwstrat joiner"), std::string::npos) << why;
  p.a.reset();
  EXPECT_FALSE(detail::read_join_message(p.b.get(), soon(), why));
  EXPECT_EQ(why, "connection closed");
}

TEST(join_wire, a_proof_binds_its_token_its_label_and_every_field) {
  const detail::join_message fields{"nonce a", "nonce b", "127.0.0.1:1"};
  const std::string proof = detail::join_proof("secret", "join request", fields);
  EXPECT_EQ(proof.size(), 64u) << "HMAC-SHA256, hex";
  EXPECT_TRUE(detail::same_proof(proof, detail::join_proof("secret", "join request", fields)));
  EXPECT_FALSE(detail::same_proof(proof, detail::join_proof("guess", "join request", fields)));
  EXPECT_FALSE(detail::same_proof(proof, detail::join_proof("secret", "join admit", fields)));
  EXPECT_FALSE(detail::same_proof(proof, detail::join_proof("secret", "join request", {"nonce a", "nonce b",
                                                                                        "127.0.0.1:2"})));
  // Fields are length-prefixed: moving a byte from one field to the next is another message.
  EXPECT_FALSE(
      detail::same_proof(detail::join_proof("k", "l", {"ab", "c"}), detail::join_proof("k", "l", {"a", "bc"})));
}

// The desk hears the client, keeps it pending, and admits it into a ring its options describe; the client returns
// those options, placed as the last rank. No ring is built: the options are what a ring would be built from.
TEST(join_desk, a_pending_joiner_is_told_the_ring_it_was_admitted_into) {
  const auto ports = test::free_ports(2);
  const std::string desk_address = "127.0.0.1:" + std::to_string(ports[0]);
  const std::string joiner_address = "127.0.0.1:" + std::to_string(ports[1]);
  std::vector<std::string> said;
  std::mutex said_mutex;
  detail::join_desk desk(desk_address, "secret", 2s, [&](const std::string& line) {
    const std::lock_guard lock(said_mutex);
    said.push_back(line);
  });
  ring_options asking;
  asking.addresses = {"127.0.0.1:1", joiner_address};
  asking.rank = 1;
  asking.job_token = "secret";
  asking.connect_timeout = 10s;
  asking.join_via = {"127.0.0.1:9", desk_address};  // the first is nobody's: the client goes on to the next
  ring_options admitted;
  std::string error;
  std::thread joiner([&] {
    try {
      admitted = detail::join_job(asking);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  EXPECT_EQ(desk.await(8s), 1);
  const auto taken = desk.take(3);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].address, joiner_address);
  EXPECT_EQ(taken[0].worker, 1);
  EXPECT_EQ(desk.pending(), 0);
  ring_options grown;
  grown.addresses = {"127.0.0.1:1", "127.0.0.1:2", joiner_address};
  grown.generation = 4;
  grown.cluster_fingerprint = "c|members ...";
  desk.admit(grown);
  joiner.join();
  ASSERT_EQ(error, "");
  EXPECT_EQ(admitted.addresses, grown.addresses);
  EXPECT_EQ(admitted.rank, 2);
  EXPECT_EQ(admitted.generation, 4u);
  EXPECT_EQ(admitted.cluster_fingerprint, grown.cluster_fingerprint);
  EXPECT_TRUE(admitted.join_via.empty()) << "joined: a rebuilt ring must not ask again";
  const std::lock_guard lock(said_mutex);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("waits to be admitted"), std::string::npos) << said[0];
}

TEST(join_desk, a_connection_that_is_not_a_joiner_is_dropped_and_said) {
  const auto ports = test::free_ports(1);
  const std::string address = "127.0.0.1:" + std::to_string(ports[0]);
  std::vector<std::string> said;
  std::mutex said_mutex;
  detail::join_desk desk(address, "", 1s, [&](const std::string& line) {
    const std::lock_guard lock(said_mutex);
    said.push_back(line);
  });
  std::string why;
  {
    detail::unique_socket fd = detail::join_connect(address, soon(), why);
    ASSERT_TRUE(fd) << why;
    ASSERT_EQ(detail::send_join_message(fd.get(), {"GET / HTTP/1.1"}, soon()).status, detail::io_status::ok);
  }
  for (int i = 0; i < 100; ++i) {
    {
      const std::lock_guard lock(said_mutex);
      if (!said.empty()) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(desk.pending(), 0);
  const std::lock_guard lock(said_mutex);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("not an mwstrat joiner"), std::string::npos) << said[0];
}

TEST(join_desk, a_join_address_it_cannot_listen_on_is_an_io_error_naming_it) {
  EXPECT_THROW(detail::join_desk("not an address", "", 1s, [](const std::string&) {}), io_error);
}

}  // namespace join_wire_test
