// The digest replicas compare for fingerprints must be the same on every platform and build: FNV-1a 64's
// published test vectors, at compile time and at run time.
#include <mwstrat/strategy/detail/hash.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using mwstrat::detail::fingerprint_hash;

static_assert(fingerprint_hash("") == 0xcbf29ce484222325ull);
static_assert(fingerprint_hash("a") == 0xaf63dc4c8601ec8cull);
static_assert(fingerprint_hash("foobar") == 0x85944171f73967e8ull);

TEST(fingerprint_hash, matches_fnv1a_64_and_sees_every_byte) {
  const std::string with_nul("a\0b", 3);
  EXPECT_EQ(fingerprint_hash("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(fingerprint_hash(with_nul), fingerprint_hash("ab"));
  EXPECT_NE(fingerprint_hash("conv2d(32,3x3)"), fingerprint_hash("conv2d(32,3x4)"));
  EXPECT_NE(fingerprint_hash("\xff"), fingerprint_hash("\x7f")) << "bytes are unsigned";
}

}  // namespace
