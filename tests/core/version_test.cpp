#include <mwstrat/version.hpp>

#include <gtest/gtest.h>

#include <string>

TEST(version, string_matches_numbers) {
  const std::string expected = std::to_string(mwstrat::version.major) + "." + std::to_string(mwstrat::version.minor) +
                               "." + std::to_string(mwstrat::version.patch);
  EXPECT_EQ(expected, mwstrat::version_string);
}
