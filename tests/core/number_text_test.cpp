// Numbers as text in the C locale's form whatever locale the program set (mwstrat/detail/number_text.hpp).
#include <mwstrat/detail/number_text.hpp>

#include <support/comma_locale.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace number_text_test {

using mwstrat::detail::exact_text;
using mwstrat::detail::fixed_text;
using mwstrat::detail::general_text;
using mwstrat::detail::parse_number;

std::vector<double> samples() {
  using limits = std::numeric_limits<double>;
  return {0.0,  -0.0, 1.0,          -2.5,         0.1,         2e-4,          1.0 / 3.0,          123456789.125,
          1e-310 /* subnormal */,   limits::min(), limits::max(), limits::denorm_min(), -limits::max(), 0.6931471805599453,
          static_cast<double>(0.05f), 1e300, 5e-324};
}

std::string printf_text(const char* format, double v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// In the C locale the functions write exactly what printf wrote before them (files and fingerprints stay the same).
TEST(number_text, matches_printf_in_the_c_locale) {
  for (const double v : samples()) {
    EXPECT_EQ(fixed_text(v, 4), printf_text("%.4f", v)) << v;
    EXPECT_EQ(fixed_text(v, 6), printf_text("%f", v)) << v;
    EXPECT_EQ(general_text(v, 9), printf_text("%.9g", v)) << v;
    EXPECT_EQ(general_text(v, 17), printf_text("%.17g", v)) << v;
    EXPECT_EQ(exact_text(v), printf_text("%a", v)) << v;
  }
  for (const double v : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(exact_text(v), printf_text("%a", v));
    EXPECT_EQ(general_text(v, 9), printf_text("%.9g", v));
  }
}

TEST(number_text, writes_and_reads_a_decimal_point_under_a_comma_locale) {
  const mwstrat::test::comma_locale comma;
  EXPECT_EQ(printf_text("%.4f", 0.5), "0,5000") << "the locale is in force";
  EXPECT_EQ(fixed_text(0.5, 4), "0.5000");
  EXPECT_EQ(general_text(0.693147182, 9), "0.693147182");
  EXPECT_EQ(general_text(2e-4, 17), "0.00020000000000000001");
  EXPECT_EQ(exact_text(0.1), "0x1.999999999999ap-4");
  EXPECT_EQ(exact_text(-3.0), "-0x1.8p+1");
  EXPECT_EQ(parse_number("0.25"), 0.25);
  EXPECT_EQ(parse_number("-1e-3"), -1e-3);
  EXPECT_EQ(parse_number("0x1.8p+1"), 3.0);
  EXPECT_EQ(parse_number("-0x1.8p+1"), -3.0);
  for (const double v : samples()) {
    const std::optional<double> back = parse_number(exact_text(v));
    ASSERT_TRUE(back.has_value()) << exact_text(v);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(*back), std::bit_cast<std::uint64_t>(v)) << exact_text(v);
    EXPECT_EQ(parse_number(general_text(v, 17)), v) << general_text(v, 17);
  }
  EXPECT_EQ(parse_number("inf"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_number("-inf"), -std::numeric_limits<double>::infinity());
  ASSERT_TRUE(parse_number("nan").has_value());
  EXPECT_TRUE(std::isnan(*parse_number("nan")));
}

TEST(number_text, refuses_what_is_not_a_whole_number) {
  for (const char* text : {"", "-", "0,25", " 1", "1 ", "--1", "+1", "-+1", "0x", "0x-1p0", "0x+1p0", "0xinf",
                           "0xnan", "1e999", "-1e999", "1.5x", "abc", "0x1.8p+1 "}) {
    EXPECT_FALSE(parse_number(text).has_value()) << "'" << text << "'";
  }
}

}  // namespace number_text_test
