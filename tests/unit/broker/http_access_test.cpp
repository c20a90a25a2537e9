// The HTTP endpoint's Host check and bearer token (broker/security/http_access.h): which Host headers pass
// by default and with [http] allowed-hosts, the token file's rules, and the Authorization header.
// tests/integration/test_http_access.py checks the same through a real escrowd.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "escrow/broker/config/config.h"
#include "escrow/broker/security/http_access.h"

using namespace escrow::broker;

namespace {

std::string write_file(const std::string& text) {
  char name[] = "/tmp/escrow-token-XXXXXX";
  int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(name) << text;
  return name;
}

std::vector<token_digest> tokens_of(const std::string& text) {
  std::string path = write_file(text);
  std::vector<token_digest> tokens;
  std::string error = load_http_tokens(path, tokens);
  std::remove(path.c_str());
  REQUIRE(error.empty());
  return tokens;
}

}  // namespace

TEST_SUITE("broker/http_access") {
  TEST_CASE("by default: localhost, loopback addresses and the listen host, with the endpoint's port or none") {
    http_access a = make_http_access("127.0.0.1", 8161, {}, {});
    for (const char* ok : {"127.0.0.1:8161", "127.0.0.1", "localhost:8161", "localhost", "LocalHost:8161",
                           "127.9.8.7:8161", "[::1]:8161", "[::1]", "[0:0:0:0:0:0:0:1]:8161"}) {
      INFO(ok);
      CHECK(host_allowed(a, ok));
    }
    for (const char* refused :
         {"evil.example:8161", "evil.example", "localhost:8162", "127.0.0.1:80", "localhost.evil.example",
          "127.0.0.1.evil.example", "localhost.", "", ":8161", "localhost:", "localhost:99999", "[::1", "::1",
          "user@localhost:8161", "localhost:8161/x", "local host", "0127.0.0.1:8161", "128.0.0.1:8161",
          "[::2]:8161", "localhost:8161:8161"}) {
      INFO(refused);
      CHECK_FALSE(host_allowed(a, refused));
    }
  }

  TEST_CASE("the listen host counts, in any case, but a wildcard address is no name") {
    http_access named = make_http_access("Metrics.Internal", 9000, {}, {});
    CHECK(host_allowed(named, "metrics.internal:9000"));
    CHECK(host_allowed(named, "METRICS.INTERNAL"));
    CHECK_FALSE(host_allowed(named, "metrics.internal:9001"));
    http_access v6 = make_http_access("2001:db8::5", 9000, {}, {});
    CHECK(host_allowed(v6, "[2001:db8:0::5]:9000"));
    http_access any = make_http_access("0.0.0.0", 9000, {}, {});
    CHECK_FALSE(host_allowed(any, "0.0.0.0:9000"));
    CHECK(host_allowed(any, "localhost:9000"));
  }

  TEST_CASE("allowed-hosts: a name alone allows any port, a name with a port that port only") {
    http_access a = make_http_access("127.0.0.1", 8161, {"metrics.example.com", "proxy.example:9090", "10.0.0.5",
                                                         "::2", "[2001:db8::7]:80"}, {});
    CHECK(host_allowed(a, "metrics.example.com"));
    CHECK(host_allowed(a, "Metrics.Example.com:443"));
    CHECK(host_allowed(a, "proxy.example:9090"));
    CHECK_FALSE(host_allowed(a, "proxy.example:9091"));
    CHECK_FALSE(host_allowed(a, "proxy.example"));  // port 80
    CHECK(host_allowed(a, "10.0.0.5:8161"));
    CHECK(host_allowed(a, "[::2]:1"));
    CHECK(host_allowed(a, "[2001:db8::7]"));
    CHECK_FALSE(host_allowed(a, "other.example.com"));
    CHECK_FALSE(host_allowed(a, "sub.metrics.example.com"));
    CHECK(host_allowed(a, "localhost:8161"));  // the defaults stay
    CHECK(host_allowed(make_http_access("127.0.0.1", 8161, {"*"}, {}), "anything.example:1"));
  }

  TEST_CASE("allowed-hosts entries are names or addresses, nothing more") {
    for (const char* good : {"metrics.example.com", "a:1", "10.0.0.5", "[::1]:8161", "::1", "*", "host_name"})
      CHECK_MESSAGE(check_allowed_host(good).empty(), good);
    for (const char* bad : {"", "http://metrics.example.com", "metrics.example.com/", "a b", "a:", "a:70000",
                            "*.example.com", "[::1", "user@host"})
      CHECK_MESSAGE(!check_allowed_host(bad).empty(), bad);
    broker_config config;
    std::string error = load_config_text("[http]\nallowed-hosts = [\"ok\", \"http://x\"]\n", "t.toml", config);
    CHECK(error.rfind("t.toml:2: http.allowed-hosts 'http://x' is not a host name", 0) == 0);
    error = load_config_text("[http]\nallowed-hosts = \"x\"\n", "t.toml", config);
    CHECK(error.rfind("t.toml:2: http.allowed-hosts must be an array", 0) == 0);
  }

  TEST_CASE("the token file: one token a line, each of 16 visible characters at least") {
    auto tokens = tokens_of("  0123456789abcdef  \r\n\nanother-token-0001\n");
    CHECK(tokens.size() == 2);
    std::vector<token_digest> out;
    for (const char* bad : {"", "\n  \n", "short\n", "0123456789abcdef and more\n"}) {
      std::string path = write_file(bad);
      CHECK_MESSAGE(!load_http_tokens(path, out).empty(), bad);
      std::remove(path.c_str());
    }
    CHECK(load_http_tokens("/nonexistent/token", out).find("cannot read it") != std::string::npos);
    CHECK(load_http_tokens("/tmp", out).find("not a regular file") != std::string::npos);
  }

  TEST_CASE("a token file that does not load names where it was configured") {
    broker_config config;
    REQUIRE(load_config_text("[http]\ntoken-file = \"/nonexistent/token\"\n", "t.toml", config).empty());
    std::vector<std::array<unsigned char, 32>> tokens;
    std::string error = load_http_token_file(config, tokens);
    CHECK(error.rfind("t.toml:2: http.token-file '/nonexistent/token': cannot read it", 0) == 0);
  }

  TEST_CASE("Authorization: Bearer, any of the tokens, nothing else") {
    http_access a = make_http_access("127.0.0.1", 8161, {}, tokens_of("0123456789abcdef\nfedcba9876543210\n"));
    CHECK(check_bearer(a, "Bearer 0123456789abcdef") == bearer_check::ok);
    CHECK(check_bearer(a, "bearer   fedcba9876543210 ") == bearer_check::ok);
    CHECK(check_bearer(a, "") == bearer_check::missing);
    CHECK(check_bearer(a, "Basic MDEyMzQ1Njc4OWFiY2RlZg==") == bearer_check::missing);
    CHECK(check_bearer(a, "Bearer") == bearer_check::wrong);
    CHECK(check_bearer(a, "Bearer ") == bearer_check::wrong);
    CHECK(check_bearer(a, "Bearer 0123456789abcde") == bearer_check::wrong);
    CHECK(check_bearer(a, "Bearer 0123456789abcdef0") == bearer_check::wrong);
    CHECK(check_bearer(a, "Bearer 0123456789ABCDEF") == bearer_check::wrong);
    CHECK(check_bearer(a, "Bearer0123456789abcdef") == bearer_check::missing);
  }
}
