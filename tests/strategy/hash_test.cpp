// The digest replicas compare for fingerprints must be the same on every platform and build: FNV-1a 64's
// published test vectors, at compile time and at run time.
#include <mwstrat/detail/hash.hpp>

#include <gtest/gtest.h>

#include <string>

namespace hash_test {

using mwstrat::detail::fnv1a64;

static_assert(fnv1a64("") == 0xcbf29ce484222325ull);
static_assert(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
static_assert(fnv1a64("foobar") == 0x85944171f73967e8ull);

TEST(fnv1a64, matches_fnv1a_64_and_sees_every_byte) {
  const std::string with_nul("a\0b", 3);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(fnv1a64(with_nul), fnv1a64("ab"));
  EXPECT_NE(fnv1a64("conv2d(32,3x3)"), fnv1a64("conv2d(32,3x4)"));
  EXPECT_NE(fnv1a64("\xff"), fnv1a64("\x7f")) << "bytes are unsigned";
}

}  // namespace hash_test
