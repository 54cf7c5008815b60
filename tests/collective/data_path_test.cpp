// The ring's data path (collective/ring/detail/data_path.hpp) alone, without start-up: three ranks as threads in
// this process, each link a connected pair of stream sockets, each rank's pump running one all-reduce plan. It
// moves every chunk and combines it in the ring's fixed order (the same bits on every rank), narrows the wire to
// 16 bits when the plan says so, and, when a neighbour goes away mid-operation, returns the failure naming that
// rank and its address instead of waiting for the deadline (a rank that fails tells its neighbours through
// abort_neighbours, as the ring does).
#include <mwstrat/collective/ring/detail/data_path.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace data_path_test {

using namespace mwstrat::detail;
using mwstrat::reduce_op;
using mwstrat::wire_compression;
using namespace std::chrono_literals;

constexpr int world = 3;

// links[r]: rank r's two data connections, the link r -> r + 1 being one socket pair.
std::vector<ring_links> socket_ring() {
  std::vector<ring_links> links(world);
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair failed");
    links[static_cast<std::size_t>(r)].out.socket = unique_socket(fds[0]);
    links[static_cast<std::size_t>((r + 1) % world)].in.socket = unique_socket(fds[1]);
  }
  return links;
}

const std::vector<std::string> addresses = {"10.9.0.1:7000", "10.9.0.2:7001", "10.9.0.3:7002"};

ring_plan sum_plan(int rank, std::vector<float>& data, std::size_t chunk_bytes, wire_compression wire) {
  ring_plan p;
  p.sched = all_reduce_schedule(op_kind::all_reduce, rank, world, data.size(), sizeof(float), chunk_bytes);
  p.type = dtype_of<float>();
  p.op = reduce_op::sum;
  p.reduction = static_cast<std::uint8_t>(reduce_op::sum);
  p.seq = 1;
  p.esize = sizeof(float);
  p.wire = wire;
  p.wire_esize = wire == wire_compression::none ? sizeof(float) : sizeof(std::uint16_t);
  p.base = reinterpret_cast<std::uint8_t*>(data.data());
  return p;
}

std::vector<float> input_of(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + rank)) + 0.25f * static_cast<float>(rank);
  return v;
}

// The sum of every rank's input, in double.
std::vector<double> expected_sum(std::size_t count) {
  std::vector<double> sum(count, 0.0);
  for (int r = 0; r < world; ++r) {
    const auto v = input_of(r, count);
    for (std::size_t i = 0; i < count; ++i) sum[i] += v[i];
  }
  return sum;
}

struct outcome {
  std::vector<float> data;
  std::optional<ring_failure> failure;
  std::chrono::milliseconds took{};
};

// Runs one all-reduce on every rank in `running` (the others' links are closed at once, as a dead process's are).
std::vector<outcome> run_ring(std::size_t count, std::size_t chunk_bytes, wire_compression wire,
                              const std::vector<bool>& running) {
  auto links = socket_ring();
  std::vector<outcome> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    auto& o = out[static_cast<std::size_t>(r)];
    o.data = input_of(r, count);
    if (!running[static_cast<std::size_t>(r)]) {
      links[static_cast<std::size_t>(r)] = ring_links{};  // closes both of its connections
      continue;
    }
    threads.emplace_back([&, r] {
      ring_data_path path(links[static_cast<std::size_t>(r)], r, world, chunk_bytes, 50us, rank_map(addresses));
      if (wire != wire_compression::none) path.make_wire_stage();
      const ring_plan p = sum_plan(r, out[static_cast<std::size_t>(r)].data, chunk_bytes, wire);
      const auto start = steady::now();
      auto& failure = out[static_cast<std::size_t>(r)].failure;
      failure = path.pump<float>(p, start + 10s, 10000ms);
      if (failure) path.abort_neighbours(p, *failure);  // as the ring does: the neighbours hear why, then the close
      out[static_cast<std::size_t>(r)].took =
          std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ring_data_path, an_all_reduce_over_many_chunks_gives_every_rank_the_same_sum) {
  const std::size_t count = 10007;  // segments that are not whole chunks
  const auto out = run_ring(count, 1024, wire_compression::none, {true, true, true});
  for (int r = 0; r < world; ++r) {
    ASSERT_FALSE(out[static_cast<std::size_t>(r)].failure) << out[static_cast<std::size_t>(r)].failure->text;
    EXPECT_EQ(std::memcmp(out[0].data.data(), out[static_cast<std::size_t>(r)].data.data(), count * sizeof(float)), 0)
        << "rank " << r << " holds other bits than rank 0";
  }
  const std::vector<double> want_all = expected_sum(count);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double want = want_all[i];
    if (std::abs(out[0].data[i] - want) > 1e-5 * (1 + std::abs(want)) && bad++ < 3)
      ADD_FAILURE() << "element " << i << ": " << out[0].data[i] << ", want " << want;
  }
  EXPECT_EQ(bad, 0U);
}

TEST(ring_data_path, a_sixteen_bit_wire_keeps_the_ranks_identical_within_its_rounding) {
  const std::size_t count = 4099;
  for (const auto wire : {wire_compression::bf16, wire_compression::fp16}) {
    const auto out = run_ring(count, 512, wire, {true, true, true});
    for (int r = 0; r < world; ++r) {
      ASSERT_FALSE(out[static_cast<std::size_t>(r)].failure) << out[static_cast<std::size_t>(r)].failure->text;
      EXPECT_EQ(std::memcmp(out[0].data.data(), out[static_cast<std::size_t>(r)].data.data(), count * sizeof(float)), 0);
    }
    const double unit = wire == wire_compression::bf16 ? 1.0 / 128 : 1.0 / 1024;  // a 16-bit value's rounding
    const std::vector<double> want_all = expected_sum(count);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double want = want_all[i];
      if (std::abs(out[0].data[i] - want) > 4 * unit * (1 + std::abs(want)) && bad++ < 3)
        ADD_FAILURE() << "element " << i << ": " << out[0].data[i] << ", want " << want;
    }
    EXPECT_EQ(bad, 0U);
  }
}

TEST(ring_data_path, a_neighbour_gone_during_an_operation_is_named_at_once_not_at_the_deadline) {
  const auto out = run_ring(100000, 4096, wire_compression::none, {true, true, false});
  // Rank 2 is gone: rank 1 sends to it and rank 0 receives from it; each names it (found itself, or told by the
  // other's abort before that one closed), long before the 10 s deadline.
  for (int r : {0, 1}) {
    const auto& o = out[static_cast<std::size_t>(r)];
    ASSERT_TRUE(o.failure) << "rank " << r << " finished an all-reduce without rank 2";
    EXPECT_NE(o.failure->text.find("rank 2 (10.9.0.3:7002)"), std::string::npos) << "rank " << r << ": " << o.failure->text;
    EXPECT_NE(o.failure->text.find("all_reduce #1"), std::string::npos) << o.failure->text;
    EXPECT_LT(o.took, 5000ms) << o.failure->text;
  }
}

}  // namespace data_path_test
