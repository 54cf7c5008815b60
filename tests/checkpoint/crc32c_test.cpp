#include <mwstrat/checkpoint/crc32c.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <random>
#include <span>
#include <vector>

namespace crc32c_test {

using mwstrat::crc32c;
using mwstrat::crc32c_extend;

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

// Check values from the iSCSI specification (RFC 3720, B.4) and the usual "123456789" check.
TEST(crc32c, matches_published_check_values) {
  EXPECT_EQ(crc32c(std::string_view("")), 0u);
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  std::vector<std::byte> zeros(32, std::byte{0});
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  std::vector<std::byte> ones(32, std::byte{0xFF});
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  std::vector<std::byte> up(32);
  for (std::size_t i = 0; i < up.size(); ++i) up[i] = static_cast<std::byte>(i);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  std::vector<std::byte> down(32);
  for (std::size_t i = 0; i < down.size(); ++i) down[i] = static_cast<std::byte>(31 - i);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(bytes_of({0x61})), 0xC1D04330u);  // "a"
}

// Every hardware path this CPU has (AVX-512 VPCLMULQDQ folding, three crc32 streams stitched with shift tables)
// must agree with the portable table loop for every length around the block boundaries and at every alignment.
TEST(crc32c, fast_paths_agree_with_portable_path) {
  std::mt19937 rng(42);
  std::vector<std::byte> data(3 * 4096 * 3 + 64);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  using update = std::uint32_t (*)(std::uint32_t, const std::byte*, std::size_t) noexcept;
  std::vector<std::pair<const char*, update>> paths = {{"dispatched", &mwstrat::detail::crc32c_update}};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))  // crc32c.hpp's x86 paths
  if (mwstrat::detail::cpu_has_sse42()) paths.emplace_back("sse4.2", &mwstrat::detail::crc32c_update_sse42);
  if (mwstrat::detail::cpu_has_vpclmul()) paths.emplace_back("vpclmulqdq", &mwstrat::detail::crc32c_update_vpclmul);
#endif
  std::printf("crc32c paths tested:");
  for (const auto& [name, fn] : paths) std::printf(" %s", name);
  std::printf("\n");
  const std::size_t block = 3 * 4096;
  for (std::size_t length : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                             std::size_t{1023}, std::size_t{1024}, std::size_t{1025}, std::size_t{1279},
                             std::size_t{1280}, std::size_t{4095}, block - 1, block, block + 1, block + 13, 2 * block,
                             2 * block + 7, 3 * block}) {
    for (std::size_t offset = 0; offset < 8; ++offset) {
      const std::byte* p = data.data() + offset;
      for (std::uint32_t seed : {0u, 0xFFFFFFFFu, 0x12345678u}) {
        const std::uint32_t expected = mwstrat::detail::crc32c_update_portable(seed, p, length);
        for (const auto& [name, fn] : paths)
          EXPECT_EQ(fn(seed, p, length), expected) << name << ": length " << length << " offset " << offset;
      }
    }
  }
}

TEST(crc32c, extend_equals_crc_of_concatenation) {
  std::mt19937 rng(7);
  std::vector<std::byte> data(50000);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  const std::span<const std::byte> all(data);
  const std::uint32_t whole = crc32c(all);
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{12289}, std::size_t{25000}, data.size()}) {
    EXPECT_EQ(crc32c_extend(crc32c(all.first(cut)), all.subspan(cut)), whole) << "cut at " << cut;
  }
}

TEST(crc32c, detects_every_single_bit_flip) {
  std::vector<std::byte> data(4096 * 3 + 100);
  std::mt19937 rng(3);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  const std::uint32_t clean = crc32c(data);
  for (std::size_t bit = 0; bit < data.size() * 8; bit += 97) {
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    EXPECT_NE(crc32c(data), clean) << "bit " << bit;
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
}

}  // namespace crc32c_test
