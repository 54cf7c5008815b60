#include <mwstrat/cluster/address.hpp>

#include <gtest/gtest.h>

#include <string>

namespace address_test {

using mwstrat::parse_address;

TEST(address, valid_forms_in_canonical_form) {
  struct item {
    const char* text;
    const char* host;
    int port;
    bool ipv6;
    const char* canonical;
  };
  const item items[] = {
      {"localhost:1", "localhost", 1, false, "localhost:1"},
      {"LocalHost:65535", "localhost", 65535, false, "localhost:65535"},
      {"127.0.0.1:12345", "127.0.0.1", 12345, false, "127.0.0.1:12345"},
      {"node-01.cluster.local:2222", "node-01.cluster.local", 2222, false, "node-01.cluster.local:2222"},
      {"web_1:80", "web_1", 80, false, "web_1:80"},
      {"h:00080", "h", 80, false, "h:80"},
      {"[::1]:8080", "::1", 8080, true, "[::1]:8080"},
      {"[2001:DB8::1]:443", "2001:db8::1", 443, true, "[2001:db8::1]:443"},
      {"[::ffff:10.0.0.1]:9", "::ffff:10.0.0.1", 9, true, "[::ffff:10.0.0.1]:9"},
      {"[fe80::1%eth0]:7", "fe80::1%eth0", 7, true, "[fe80::1%eth0]:7"},
  };
  for (const item& i : items) {
    const mwstrat::address a = parse_address(i.text);
    EXPECT_EQ(a.host, i.host) << i.text;
    EXPECT_EQ(a.port, i.port) << i.text;
    EXPECT_EQ(a.ipv6, i.ipv6) << i.text;
    EXPECT_EQ(a.to_string(), i.canonical) << i.text;
    EXPECT_EQ(parse_address(a.to_string()), a) << i.text;  // canonical text parses back to itself
  }
}

TEST(address, invalid_forms_say_why) {
  const std::pair<const char*, const char*> items[] = {
      {"", "empty"},
      {"host", "no port"},
      {"host:", "port is empty"},
      {":80", "host is empty"},
      {"host:65536", "port 65536 is out of range (1..65535)"},
      {"host:99999999999999999999", "is out of range"},
      {"host:0", "port 0 is out of range"},
      {"host:8o", "not a decimal number"},
      {"host:+80", "not a decimal number"},
      {"ho st:80", "whitespace"},
      {"tcp://host:80", "scheme prefix"},
      {"host.:80", "empty label"},
      {".host:80", "empty label"},
      {"a-:80", "ends with '-'"},
      {"h@st:80", "contains \"@\""},
      {"999.0.0.1:80", "not a valid IPv4"},
      {"1.2.3:80", "not a valid IPv4"},
      {"::1:80", "without brackets"},
      {"[::1]80", "no port"},
      {"[::1:80", "no closing"},
      {"[1.2.3.4]:80", "not a valid IPv6"},
      {"[]:80", "not a valid IPv6"},
      {"[fe80::1%]:80", "empty zone"},
      {"[fe80::1%e/0]:80", "not an interface name"},
      {"x]:80", "misplaced bracket"},
  };
  for (const auto& [text, why] : items) {
    try {
      (void)parse_address(text, "flags --peers");
      ADD_FAILURE() << "no error for " << text;
    } catch (const mwstrat::config_error& e) {
      const std::string message = e.detail();
      EXPECT_EQ(message.rfind("flags --peers: \"", 0), 0U) << message;
      EXPECT_NE(message.find(why), std::string::npos) << text << " -> " << message;
    }
  }
  const std::string long_label(64, 'a');
  EXPECT_THROW((void)parse_address(long_label + ":1"), mwstrat::config_error);
  EXPECT_NO_THROW((void)parse_address(long_label.substr(1) + ":1"));
}

}  // namespace address_test
