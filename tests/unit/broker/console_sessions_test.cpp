// The web console's sessions (broker/admin/console_sessions.h): random ids and CSRF tokens, the
// idle timeout, the most held at once, logout. tests/integration/test_console.py drives the login
// through a real escrowd and Chromium.
#include <doctest/doctest.h>

#include <thread>

#include "console_sessions.h"

using namespace escrow::broker;

TEST_SUITE("console sessions") {
  TEST_CASE("a session is found by its id, with its user; ids and tokens are random and distinct") {
    console_sessions sessions(std::chrono::minutes(30), 10, 16);
    console_session a = sessions.create({"alice", {"operators"}}, true);
    console_session b = sessions.create({"bob", {}}, false);
    CHECK(a.id.size() == 64);
    CHECK(a.csrf.size() == 64);
    CHECK(a.id != b.id);
    CHECK(a.id != a.csrf);
    auto found = sessions.find(a.id);
    REQUIRE(found);
    CHECK(found->user.user == "alice");
    CHECK(found->user.roles == std::vector<std::string>{"operators"});
    CHECK(found->admin);
    CHECK(found->csrf == a.csrf);
    CHECK_FALSE(sessions.find(""));
    CHECK_FALSE(sessions.find(a.csrf));  // the CSRF token is no session id
    sessions.end(a.id);
    CHECK_FALSE(sessions.find(a.id));
    CHECK(sessions.find(b.id));
  }

  TEST_CASE("a session ends after the idle timeout; a request starts it again") {
    console_sessions sessions(std::chrono::milliseconds(200), 10, 16);
    console_session a = sessions.create({"alice", {}}, false);
    console_session b = sessions.create({"bob", {}}, false);
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
      CHECK(sessions.find(a.id));  // used every 80 ms: kept
    }
    CHECK_FALSE(sessions.find(b.id));  // idle for 320 ms: gone
    CHECK(sessions.size() == 1);
  }

  TEST_CASE("at most max-sessions: a new login ends the least recently used") {
    console_sessions sessions(std::chrono::minutes(30), 3, 16);
    auto s1 = sessions.create({"u1", {}}, false);
    auto s2 = sessions.create({"u2", {}}, false);
    auto s3 = sessions.create({"u3", {}}, false);
    CHECK(sessions.find(s1.id));  // s2 is now the least recently used
    auto s4 = sessions.create({"u4", {}}, false);
    CHECK(sessions.size() == 3);
    CHECK_FALSE(sessions.find(s2.id));
    CHECK(sessions.find(s1.id));
    CHECK(sessions.find(s3.id));
    CHECK(sessions.find(s4.id));
  }

  TEST_CASE("one user holds at most max-sessions-per-user: their new login ends their own oldest") {
    constexpr std::size_t kPerUser = 16;
    console_sessions sessions(std::chrono::minutes(30), 1000, kPerUser);
    auto operator_session = sessions.create({"olga", {}}, true);
    std::vector<console_session> mallory;
    for (std::size_t i = 0; i < 3 * kPerUser; ++i)
      mallory.push_back(sessions.create({"mallory", {}}, false));
    CHECK(sessions.find(operator_session.id));
    CHECK(sessions.size() == 1 + kPerUser);
    CHECK_FALSE(sessions.find(mallory.front().id));
    CHECK(sessions.find(mallory.back().id));
  }

  TEST_CASE("same_secret compares whole strings") {
    CHECK(same_secret("abc", "abc"));
    CHECK_FALSE(same_secret("abc", "abd"));
    CHECK_FALSE(same_secret("abc", "ab"));
    CHECK_FALSE(same_secret("", "a"));
    CHECK(same_secret("", ""));
  }
}
