#include <mwstrat/error.hpp>

#include <gtest/gtest.h>

#include <type_traits>

namespace error_test {

using namespace mwstrat;

TEST(error, message_names_component_and_rank) {
  const peer_lost_error e({"ring", 1}, 0, "127.0.0.1:12345",
                          "recv from rank 0 (127.0.0.1:12345): connection reset during all_reduce #42");
  EXPECT_STREQ(e.what(),
               "[mwstrat.ring] rank 1: recv from rank 0 (127.0.0.1:12345): connection reset during all_reduce #42");
  EXPECT_EQ(e.kind(), error_kind::peer_lost);
  EXPECT_EQ(e.component(), "ring");
  EXPECT_EQ(e.rank(), 1);
  EXPECT_EQ(e.peer_rank(), 0);
  EXPECT_EQ(e.peer_address(), "127.0.0.1:12345");
}

TEST(error, message_without_rank_leaves_it_out) {
  const config_error e({"cluster"}, "TF_CONFIG: task.index: 3 is out of range for 'worker' (2 tasks)");
  EXPECT_STREQ(e.what(), "[mwstrat.cluster] TF_CONFIG: task.index: 3 is out of range for 'worker' (2 tasks)");
  EXPECT_FALSE(e.rank().has_value());
  EXPECT_EQ(e.detail(), "TF_CONFIG: task.index: 3 is out of range for 'worker' (2 tasks)");
}

TEST(error, kinds_form_one_hierarchy) {
  static_assert(std::is_base_of_v<std::runtime_error, error>);
  static_assert(std::is_base_of_v<error, config_error>);
  static_assert(std::is_base_of_v<error, io_error>);
  static_assert(std::is_base_of_v<io_error, peer_lost_error>);
  static_assert(std::is_base_of_v<io_error, protocol_error>);
  static_assert(std::is_base_of_v<error, timeout_error>);
  static_assert(std::is_base_of_v<error, checkpoint_error>);
  static_assert(std::is_base_of_v<error, data_error>);
  static_assert(!std::is_base_of_v<io_error, timeout_error>, "a timeout is not an I/O failure");
  EXPECT_EQ(io_error({"x"}, "y").kind(), error_kind::io);
  EXPECT_EQ(protocol_error({"x"}, "y").kind(), error_kind::protocol);
  EXPECT_EQ(timeout_error({"x"}, "y").kind(), error_kind::timeout);
}

TEST(error, carries_what_the_caller_needs) {
  const checkpoint_error c({"checkpoint", 0}, "/tmp/a.safetensors", "/tmp/a.safetensors: CRC32C mismatch");
  EXPECT_EQ(c.path(), "/tmp/a.safetensors");
  EXPECT_EQ(c.kind(), error_kind::checkpoint);
  const data_error d({"data"}, "train-images", "train-images: truncated");
  EXPECT_EQ(d.path(), "train-images");
  const timeout_error t({"ring", 2}, "all_reduce #7: no data from rank 1 within 5000 ms", 1);
  EXPECT_EQ(t.peer_rank(), 1);
}

TEST(error, catchable_as_base) {
  try {
    throw data_error({"idx", 0}, "f.idx", "f.idx: bad magic 0x00000000");
  } catch (const error& e) {
    EXPECT_EQ(e.kind(), error_kind::data);
    EXPECT_EQ(to_string(e.kind()), "data");
    return;
  }
  FAIL() << "data_error was not caught as mwstrat::error";
}

}  // namespace error_test
