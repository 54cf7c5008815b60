// 16-bit floats on the wire: the conversions alone (every 16-bit pattern, ties, overflow, subnormals), then the
// compressed inter-host leg with real processes: the same bits on every rank and run, within the documented bound
// of the exact sum (docs/collectives.md, "Compression"), and really narrowed.

#include "hierarchy.hpp"
#include "process.hpp"

#include <mwstrat/collective/ring/detail/compress.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace compress_test {

using namespace mwstrat;
using namespace std::chrono_literals;
namespace test = mwstrat::test;

bool is_nan16(std::uint16_t h, wire_compression c) {
  return c == wire_compression::bf16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0
                                     : (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

TEST(wire_compression, every_16_bit_value_survives_widening_and_narrowing) {
  for (auto c : {wire_compression::bf16, wire_compression::fp16}) {
    for (std::uint32_t h = 0; h <= 0xffff; ++h) {
      const auto v = static_cast<std::uint16_t>(h);
      if (is_nan16(v, c)) {
        EXPECT_TRUE(std::isnan(detail::widen(v, c)));
        EXPECT_TRUE(is_nan16(detail::narrow(detail::widen(v, c), c), c));
        continue;
      }
      ASSERT_EQ(detail::narrow(detail::widen(v, c), c), v) << "pattern " << h;
    }
  }
}

TEST(wire_compression, rounds_to_nearest_ties_to_even_and_saturates_to_infinity) {
  using detail::from_bf16;
  using detail::from_fp16;
  using detail::to_bf16;
  using detail::to_fp16;
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0x1p-8f)), 1.0f);                       // tie: to the even neighbour
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0x1p-7f + 0x1p-8f)), 1.0f + 0x1p-6f);   // tie: up to the even one
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);  // past the tie: up
  EXPECT_EQ(from_fp16(to_fp16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(from_fp16(to_fp16(1.0f + 0x1p-10f + 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(to_fp16(65520.0f), 0x7c00);  // the tie above the largest half goes to infinity
  EXPECT_EQ(to_fp16(-1e9f), 0xfc00);
  EXPECT_EQ(to_fp16(0x1p-24f), 0x0001);       // the smallest subnormal half
  EXPECT_EQ(to_fp16(0x1p-25f), 0x0000);       // half of it: a tie, to even (zero)
  EXPECT_EQ(to_fp16(3 * 0x1p-25f), 0x0002);   // 1.5 units: a tie, to even (two)
  EXPECT_EQ(to_fp16(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(from_fp16(0x0400), 0x1p-14f);
  EXPECT_EQ(to_bf16(-0.0f), 0x8000);
}

// The bulk loops (vectorised by the compiler) give exactly the per-element conversions' bits, specials included.
TEST(wire_compression, bulk_loops_match_the_per_element_conversions_bit_for_bit) {
  std::vector<float> in;
  for (std::size_t i = 0; i < 4099; ++i) in.push_back(test::varied_input(5, i) * 1e3f);
  for (float x : {0.0f, -0.0f, 0x1p-130f, -0x1p-149f, 0x1p-25f, 65519.0f, 65520.0f, -1e30f, INFINITY, -INFINITY,
                  NAN, 1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f})
    in.push_back(x);
  const auto bits = [](float f) { return detail::float_bits(f); };
  for (auto c : {wire_compression::bf16, wire_compression::fp16}) {
    std::vector<std::uint16_t> narrow(in.size());
    detail::narrow_into(narrow.data(), in.data(), in.size(), c);
    std::vector<float> rounded = in, widened(in.size()), sums(in.size(), 0.5f);
    detail::round_to_wire(rounded.data(), rounded.size(), c);
    detail::widen_into(widened.data(), narrow.data(), narrow.size(), c);
    detail::widen_add(sums.data(), narrow.data(), narrow.size(), c);
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::uint16_t one = detail::narrow(in[i], c);
      ASSERT_EQ(narrow[i], one) << "narrow_into, element " << i;
      ASSERT_EQ(bits(rounded[i]), bits(detail::widen(one, c))) << "round_to_wire, element " << i;
      ASSERT_EQ(bits(widened[i]), bits(detail::widen(one, c))) << "widen_into, element " << i;
      ASSERT_EQ(bits(sums[i]), bits(0.5f + detail::widen(one, c))) << "widen_add, element " << i;
    }
  }
}

TEST(wire_compression, relative_error_of_one_rounding_is_at_most_the_unit_roundoff) {
  for (std::size_t i = 0; i < 200000; ++i) {
    const float x = test::varied_input(3, i) * 37.0f;
    EXPECT_LE(std::fabs(detail::from_bf16(detail::to_bf16(x)) - x), std::ldexp(std::fabs(x), -8));
    EXPECT_LE(std::fabs(detail::from_fp16(detail::to_fp16(x)) - x), std::ldexp(std::fabs(x), -11));
  }
}

// Every rank's result of one compressed "dump" all-reduce (a sum of test::varied_input) over `hosts`.
std::vector<std::vector<float>> compressed_run(const std::string& hosts, const std::string& compression,
                                               std::size_t count, std::string* chief = nullptr,
                                               const std::string& scenario = "dump") {
  const int n = static_cast<int>(std::count(hosts.begin(), hosts.end(), ',')) + 1;
  test::temp_dir files{"mwstrat-compress"};
  const std::string out = (files.path() / "r").string();
  test::ring_run ring(n, scenario, {"hosts=" + hosts, "count=" + std::to_string(count), "op=sum", "out=" + out,
                                  "chunk=65536", "compression=" + compression});
  EXPECT_TRUE(ring.wait_all(120s)) << ring.report();
  std::vector<std::vector<float>> results;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ring.workers[static_cast<std::size_t>(r)].exit_code, 0) << ring.report();
    if (ring.workers[static_cast<std::size_t>(r)].exit_code != 0) return {};
    results.push_back(test::read_floats(out + std::to_string(r) + ".bin"));
  }
  if (chief) *chief = ring.workers[0].stderr_text();
  return results;
}

// docs/collectives.md: |result − Σx| ≤ (H·u_w + (N−1)·u_32)·(1 + u_w)^H·Σ|x| + H·η, H hosts, N ranks, u_w the
// format's unit roundoff (bf16 2^-8, fp16 2^-11), u_32 = 2^-24, η half its smallest subnormal (fp16 2^-25).
void expect_within_bound(const std::vector<std::vector<float>>& ranks, int hosts, wire_compression c,
                         const std::string& what, bool kept_on_the_wire = true) {
  const int n = static_cast<int>(ranks.size());
  const double uw = c == wire_compression::bf16 ? 0x1p-8 : 0x1p-11, u32 = 0x1p-24;
  const double eta = c == wire_compression::bf16 ? 0x1p-134 : 0x1p-25;
  const auto& got = ranks[0];
  std::size_t bad = 0, narrowed = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < n; ++r) {
      exact += test::varied_input(r, i);
      magnitude += std::fabs(test::varied_input(r, i));
    }
    const double bound = (hosts * uw + (n - 1) * u32) * std::pow(1 + uw, hosts) * magnitude + hosts * eta;
    const double err = std::fabs(got[i] - exact);
    worst = std::max(worst, err / bound);
    if (err > bound && ++bad <= 5) ADD_FAILURE() << what << ": element " << i << " off by " << err << " > " << bound;
    if (err > 4 * (n - 1) * u32 * magnitude) ++narrowed;  // beyond what float32 sums alone could explain
    // The owner kept the value the wire carried: every result is representable in the 16-bit format.
    if (kept_on_the_wire && detail::widen(detail::narrow(got[i], c), c) != got[i] && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is not a 16-bit value";
  }
  EXPECT_EQ(bad, 0u) << what;
  EXPECT_GT(narrowed, got.size() / 4) << what << ": the wire does not seem narrowed";
  std::printf("%s: worst error %.3f of the bound\n", what.c_str(), worst);
  for (std::size_t r = 1; r < ranks.size(); ++r) EXPECT_TRUE(ranks[r] == ranks[0]) << what << ": rank " << r;
}

TEST(wire_compression, two_hosts_of_two_ranks_agree_everywhere_repeat_and_stay_within_the_bound) {
  for (auto [name, c] : {std::pair{"bf16", wire_compression::bf16}, std::pair{"fp16", wire_compression::fp16}}) {
    std::string chief;
    const auto first = compressed_run("a,a,b,b", name, 100003, &chief);
    const auto second = compressed_run("a,a,b,b", name, 100003);
    ASSERT_EQ(first.size(), 4u);
    ASSERT_EQ(second.size(), 4u);
    expect_within_bound(first, 2, c, std::string("2 hosts x 2, ") + name);
    EXPECT_TRUE(first[0] == second[0]) << name << ": two runs differ";
    EXPECT_NE(chief.find(std::string(name) + " on the wire"), std::string::npos) << chief;
  }
}

TEST(wire_compression, a_flat_ring_of_three_hosts_of_one_rank_compresses_every_hop) {
  const auto result = compressed_run("a,b,c", "bf16", 30011);
  ASSERT_EQ(result.size(), 3u);
  expect_within_bound(result, 3, wire_compression::bf16, "3 hosts x 1, bf16");
}

// all_reduce_update narrows the reduce-scatter's gradients and gathers the parameters exact: flat (2 hosts × 1)
// and hierarchical (2 × 2), every rank ends with the same parameters, within the bound of the exact update.
TEST(wire_compression, all_reduce_update_narrows_gradients_and_agrees_on_the_parameters) {
  for (const std::string hosts : {"a,b", "a,a,b,b"}) {
    const auto result = compressed_run(hosts, "bf16", 20011, nullptr, "dump_update");
    ASSERT_EQ(result.size(), hosts == "a,b" ? 2u : 4u);
    expect_within_bound(result, 2, wire_compression::bf16, "all_reduce_update over " + hosts + ", bf16", false);
  }
}

// all_reduce_streamed narrows as all_reduce does, and the parts it reports carry all_reduce's bits: 2 hosts × 1 and
// a flat ring of 3 (where parts are forwarded before they are reported), bf16.
TEST(wire_compression, all_reduce_streamed_reports_the_bits_of_the_narrowed_all_reduce) {
  for (const std::string hosts : {"a,b", "a,b,c"}) {
    const auto plain = compressed_run(hosts, "bf16", 20011);
    const auto streamed = compressed_run(hosts, "bf16", 20011, nullptr, "dump_streamed");
    ASSERT_EQ(streamed.size(), plain.size());
    expect_within_bound(streamed, static_cast<int>(streamed.size()), wire_compression::bf16,
                        "all_reduce_streamed over " + hosts + ", bf16");
    for (std::size_t r = 0; r < plain.size(); ++r) EXPECT_TRUE(streamed[r] == plain[r]) << hosts << ": rank " << r;
  }
}

}  // namespace compress_test
