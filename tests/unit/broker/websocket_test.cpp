// STOMP over WebSocket's pure parts: the subprotocol answered (broker/net/websocket.h), which
// writes go out as text (valid UTF-8), the Origin check (broker/security/http_access.h) and the
// [[websocket-listener]] and [http] keys of the configuration. tests/integration/test_websocket.py
// drives the same through a real escrowd with @stomp/stompjs.
#include <doctest/doctest.h>

#include <string>

#include "escrow/broker/config/config.h"
#include "escrow/broker/security/http_access.h"
#include "websocket.h"

using namespace escrow::broker;

TEST_SUITE("websocket") {
  TEST_CASE("the best STOMP subprotocol offered is answered; none offered is STOMP all the same") {
    CHECK(choose_subprotocol(std::nullopt) == std::string());
    CHECK(choose_subprotocol("v10.stomp, v11.stomp, v12.stomp") == std::string("v12.stomp"));
    CHECK(choose_subprotocol("v11.stomp,v10.stomp") == std::string("v11.stomp"));
    CHECK(choose_subprotocol(" v10.stomp ") == std::string("v10.stomp"));
    CHECK(choose_subprotocol("mqtt, v12.stomp") == std::string("v12.stomp"));
    CHECK_FALSE(choose_subprotocol("mqtt").has_value());
    CHECK_FALSE(choose_subprotocol("").has_value());
    CHECK_FALSE(choose_subprotocol("V12.STOMP").has_value());  // subprotocol tokens are case-sensitive
  }

  TEST_CASE("text messages only for valid UTF-8") {
    CHECK(valid_utf8(""));
    CHECK(valid_utf8("MESSAGE\ndestination:/queue/a\n\nhello\0"));
    CHECK(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    CHECK_FALSE(valid_utf8("\xff"));
    CHECK_FALSE(valid_utf8("\xc3"));               // cut short
    CHECK_FALSE(valid_utf8("\xc0\xaf"));           // overlong '/'
    CHECK_FALSE(valid_utf8("\xed\xa0\x80"));       // a surrogate
    CHECK_FALSE(valid_utf8("\xf4\x90\x80\x80"));   // past U+10FFFF
    CHECK_FALSE(valid_utf8("\xe2\x82"));           // cut short at the end
    CHECK_FALSE(valid_utf8("a\x80z"));             // a continuation byte alone
  }

  TEST_CASE("origins: none, loopback, the request's own host, the allowed list") {
    std::vector<std::string> none;
    CHECK(origin_allowed(std::nullopt, "broker.example:8161", none));  // not a browser
    CHECK(origin_allowed("http://localhost:3000", "broker.example:8161", none));
    CHECK(origin_allowed("http://127.0.0.1:8080", "broker.example:8161", none));
    CHECK(origin_allowed("https://[::1]", "broker.example:8161", none));
    CHECK(origin_allowed("http://broker.example:8161", "broker.example:8161", none));
    CHECK(origin_allowed("HTTP://Broker.Example:8161", "broker.example:8161", none));
    CHECK(origin_allowed("http://broker.example", "broker.example", none));
    CHECK_FALSE(origin_allowed("http://broker.example:8162", "broker.example:8161", none));
    CHECK_FALSE(origin_allowed("https://evil.example", "broker.example:8161", none));
    CHECK_FALSE(origin_allowed("null", "broker.example:8161", none));
    CHECK_FALSE(origin_allowed("http://localhost.evil.example", "broker.example:8161", none));
    CHECK_FALSE(origin_allowed("file://", "broker.example:8161", none));
    CHECK_FALSE(origin_allowed("http://broker.example:8161/path", "broker.example:8161", none));
    std::vector<std::string> app{"https://app.example"};
    CHECK(origin_allowed("https://app.example", "broker.example:8161", app));
    CHECK(origin_allowed("https://app.example:443", "broker.example:8161", app));
    CHECK_FALSE(origin_allowed("http://app.example", "broker.example:8161", app));       // another scheme
    CHECK_FALSE(origin_allowed("https://app.example:8443", "broker.example:8161", app)); // another port
    // A dedicated listener checks no Host: a rebound name naming itself in both must not pass.
    origin_rules no_host{.any_loopback = true, .own_host = false};
    CHECK_FALSE(origin_allowed("http://attacker.example:61614", "attacker.example:61614", none, no_host));
    CHECK(origin_allowed("http://localhost:3000", "attacker.example:61614", none, no_host));
    // A console session's user: its own origin only, not any page of this machine.
    origin_rules strict{.any_loopback = false, .own_host = true};
    CHECK_FALSE(origin_allowed("http://127.0.0.1:3000", "127.0.0.1:8161", none, strict));
    CHECK(origin_allowed("http://127.0.0.1:8161", "127.0.0.1:8161", none, strict));
    CHECK(origin_allowed(std::nullopt, "127.0.0.1:8161", none, strict));
    CHECK(origin_allowed("https://anything.example", "b:1", {"*"}));
    CHECK(origin_allowed("null", "b:1", {"*"}));
  }

  TEST_CASE("allowed-origins entries are origins or *") {
    CHECK(check_allowed_origin("https://app.example.com").empty());
    CHECK(check_allowed_origin("http://10.0.0.5:8080").empty());
    CHECK(check_allowed_origin("*").empty());
    CHECK_FALSE(check_allowed_origin("app.example.com").empty());
    CHECK_FALSE(check_allowed_origin("https://app.example.com/").empty());
    CHECK_FALSE(check_allowed_origin("ftp://app.example.com").empty());
  }

  TEST_CASE("[[websocket-listener]]: ws, wss, and what is wrong named with its line") {
    broker_config c;
    REQUIRE(load_config_text("[[websocket-listener]]\nlisten = \"127.0.0.1:61614\"\nallowed-origins = [\"https://a.example\"]\n"
                             "[[websocket-listener]]\nlisten = \"127.0.0.1:61615\"\ncertificate-chain = \"c.pem\"\n"
                             "private-key = \"k.pem\"\n",
                             "w.toml", c)
                .empty());
    REQUIRE(c.websocket_listeners.size() == 2);
    CHECK_FALSE(c.websocket_listeners[0].secure);
    CHECK(c.websocket_listeners[0].tls.listen.port == 61614);
    CHECK(c.websocket_listeners[0].allowed_origins == std::vector<std::string>{"https://a.example"});
    CHECK(c.websocket_listeners[1].secure);
    CHECK(c.websocket_listeners[1].tls.private_key == "k.pem");

    broker_config d;
    CHECK(load_config_text("[[websocket-listener]]\nallowed-origins = []\n", "w.toml", d).find("has no listen key") !=
          std::string::npos);
    CHECK(load_config_text("[[websocket-listener]]\nlisten = \"127.0.0.1:1\"\ncertificate-chain = \"c.pem\"\n", "w.toml", d)
              .find("certificate-chain without private-key") != std::string::npos);
    CHECK(load_config_text("[[websocket-listener]]\nlisten = \"127.0.0.1:1\"\nmin-version = \"1.3\"\n", "w.toml", d)
              .rfind("w.toml:3: websocket-listener[1].min-version: a TLS setting", 0) == 0);
    CHECK(load_config_text("[[websocket-listener]]\nlisten = \"127.0.0.1:1\"\nallowed-origins = [\"a.example\"]\n",
                           "w.toml", d)
              .rfind("w.toml:3: websocket-listener[1].allowed-origins 'a.example' is not an origin", 0) == 0);
  }

  TEST_CASE("[http]: on by default at 127.0.0.1:8161, WebSocket at /stomp, the console's keys") {
    broker_config c;
    REQUIRE(c.http_listen.has_value());
    CHECK(c.http_listen->host == "127.0.0.1");
    CHECK(c.http_listen->port == 8161);
    CHECK(c.http_listen_is_default);
    CHECK(c.http_websocket);
    REQUIRE(load_config_text("[http]\nlisten = \"127.0.0.1:0\"\nwebsocket = false\nallowed-origins = [\"*\"]\n"
                             "session-timeout-ms = 60000\nmax-sessions = 5\n",
                             "h.toml", c)
                .empty());
    CHECK_FALSE(c.http_listen_is_default);
    CHECK_FALSE(c.http_websocket);
    CHECK(c.http_allowed_origins == std::vector<std::string>{"*"});
    CHECK(c.http_session_timeout_ms == 60000);
    CHECK(c.http_max_sessions == 5);
    broker_config off;
    REQUIRE(load_config_text("[http]\nlisten = \"\"\n", "h.toml", off).empty());
    CHECK_FALSE(off.http_listen.has_value());
    CHECK(load_config_text("[http]\nmax-sessions = 0\n", "h.toml", off).rfind("h.toml:2: http.max-sessions", 0) == 0);
  }
}
