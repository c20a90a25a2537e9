// The login checks that need no thread (a verified certificate, a login that already succeeded)
// and the one slow hash every other check costs, whatever it is refused for.
#include <doctest/doctest.h>

#include <future>

#include "escrow/broker/security/authenticator.h"
#include "escrow/broker/security/password_hash.h"

using namespace escrow::broker;

namespace {

std::shared_ptr<const users_table> users() {
  auto t = std::make_shared<users_table>();
  user_entry alice{"alice", make_password_hash("alice-secret", kMinPasswordIterations), {"app"}, "", 1};
  user_entry svc{"svc", "", {"app"}, "CN=svc", 2};
  t->by_name["alice"] = alice;
  t->by_name["svc"] = svc;
  t->name_by_subject["CN=svc"] = "svc";
  return t;
}

login_result checked(authenticator& auth, const login_request& r) {
  std::promise<login_result> verdict;
  auto answer = verdict.get_future();
  auth.submit(r, [&verdict](login_result v) { verdict.set_value(std::move(v)); });
  return answer.get();
}

}  // namespace

TEST_SUITE("broker/authenticator") {
  TEST_CASE("every refused password login costs one slow hash, with the same answer") {
    authenticator auth(users(), login_limits{});
    const std::string refused = "login refused: unknown user or wrong passcode";
    std::vector<login_request> bad{{"127.0.0.1", "alice", "wrong", ""},
                                   {"127.0.0.1", "mallory", "x", ""},
                                   {"127.0.0.1", "svc", "x", ""},  // certificate only: the dummy hash
                                   {"127.0.0.1", "", "", ""}};
    for (const auto& r : bad) {
      CAPTURE(r.login);
      CHECK_FALSE(auth.answer_at_once(r).has_value());
      auto before = auth.password_hashes();
      auto v = checked(auth, r);
      CHECK_FALSE(v.ok);
      CHECK(v.problem == refused);
      CHECK(auth.password_hashes() == before + 1);
    }
    CHECK(auth.failed_logins() == bad.size());
  }

  TEST_CASE("a login that succeeded once, and a certificate, are answered at once") {
    authenticator auth(users(), login_limits{});
    login_request r{"127.0.0.1", "alice", "alice-secret", ""};
    CHECK_FALSE(auth.answer_at_once(r).has_value());
    auto first = checked(auth, r);
    CHECK(first.ok);
    CHECK(first.user == "alice");
    auto hashes = auth.password_hashes();
    auto again = auth.answer_at_once(r);
    REQUIRE(again.has_value());
    CHECK(again->ok);
    CHECK(again->roles == std::vector<std::string>{"app"});
    CHECK_FALSE(auth.answer_at_once({"127.0.0.1", "alice", "other", ""}).has_value());
    auto cert = auth.answer_at_once({"127.0.0.1", "", "", "CN=svc"});
    REQUIRE(cert.has_value());
    CHECK(cert->user == "svc");
    auto other = auth.answer_at_once({"127.0.0.1", "alice", "alice-secret", "CN=svc"});
    REQUIRE(other.has_value());
    CHECK_FALSE(other->ok);
    CHECK(auth.password_hashes() == hashes);
    // A reload forgets what succeeded: the next login is checked again.
    auth.replace_users(users());
    CHECK_FALSE(auth.answer_at_once(r).has_value());
  }

  TEST_CASE("over the bound of waiting logins from one address, a login is refused at once") {
    // No login may wait behind the one running: the second from the address is refused unchecked.
    // The first is checked against a hash of the default cost (0.3 s), the second comes at once.
    auto table = std::make_shared<users_table>(*users());
    table->by_name["alice"].password_hash = make_password_hash("alice-secret");
    authenticator auth(table, login_limits{.backoff_max_ms = 10000, .threads = 1, .max_waiting_per_address = 0});
    std::promise<login_result> first;
    auto first_answer = first.get_future();
    login_request r{"127.0.0.1", "alice", "wrong", ""};
    auth.submit(r, [&first](login_result v) { first.set_value(std::move(v)); });
    std::optional<login_result> second;
    auth.submit(r, [&second](login_result v) { second = std::move(v); });
    // Answered before submit returned (the first is still waiting or running: its hash is slow).
    REQUIRE(second.has_value());
    CHECK_FALSE(second->ok);
    CHECK(second->problem == "login refused unchecked: too many logins wait for their check; try again later");
    CHECK(first_answer.get().problem == "login refused: unknown user or wrong passcode");
  }

  TEST_CASE("a waiting check whose client left is dropped, and its place freed") {
    // One thread, busy with a slow check; two more wait behind it (one scheduled, one in line).
    auto table = std::make_shared<users_table>(*users());
    table->by_name["alice"].password_hash = make_password_hash("alice-secret");
    login_limits limits;
    limits.threads = 1;
    limits.max_pending = 3;
    authenticator auth(table, limits);
    std::promise<login_result> first;
    auto first_answer = first.get_future();
    auth.submit({"127.0.0.1", "alice", "wrong", ""}, [&first](login_result v) { first.set_value(std::move(v)); });
    std::optional<login_result> gone, queued;
    auto t1 = auth.submit({"127.0.0.2", "ghost", "x", ""}, [&gone](login_result v) { gone = std::move(v); });
    auto t2 = auth.submit({"127.0.0.2", "ghost2", "x", ""}, [&queued](login_result v) { queued = std::move(v); });
    REQUIRE(t1 != 0);
    REQUIRE(t2 != 0);
    std::optional<login_result> over;
    auth.submit({"127.0.0.3", "bob", "x", ""}, [&over](login_result v) { over = std::move(v); });
    REQUIRE(over.has_value());  // the three places are taken
    auth.cancel(t2);            // in its address's line
    auth.cancel(t1);            // scheduled (its address's turn)
    REQUIRE(gone.has_value());
    REQUIRE(queued.has_value());
    CHECK_FALSE(gone->ok);
    CHECK(auth.abandoned_logins() == 2);
    auth.cancel(t1);  // twice: nothing
    CHECK(auth.abandoned_logins() == 2);
    // Both places are free again, before the slow check has finished.
    std::promise<login_result> next;
    auto next_answer = next.get_future();
    auto t3 = auth.submit({"127.0.0.3", "bob", "x", ""}, [&next](login_result v) { next.set_value(std::move(v)); });
    CHECK(t3 != 0);
    CHECK(first_answer.get().problem == "login refused: unknown user or wrong passcode");
    CHECK(next_answer.get().problem == "login refused: unknown user or wrong passcode");
  }

  TEST_CASE("checks of one login name are bounded; a trusted address skips the bound and the spacing") {
    login_limits limits;
    limits.threads = 1;
    limits.max_waiting_per_user = 2;
    limits.max_delay_ms = 0;  // any delay: try again later
    authenticator auth(users(), limits);
    // alice succeeds once from .1: that (address, user) is trusted from now on.
    CHECK(checked(auth, {"127.0.0.1", "alice", "alice-secret", ""}).ok);
    auth.replace_users(users());  // forget the remembered success: the next logins are checked
    // A guess from .2 fails: alice's next checks from elsewhere would wait her per-user back-off.
    CHECK_FALSE(checked(auth, {"127.0.0.2", "alice", "guess", ""}).ok);
    auto later = checked(auth, {"127.0.0.3", "alice", "guess", ""});
    CHECK(later.problem == "login refused unchecked: too many failed logins of this user lately; try again later");
    // From her own address: no per-user spacing, checked at once.
    CHECK(checked(auth, {"127.0.0.1", "alice", "alice-secret", ""}).ok);
  }

  TEST_CASE("a dropped check gives its per-user turn back") {
    // alice fails three times: her next check waits 400 ms, the one after it 800. With
    // max_delay_ms 600, a check scheduled and then dropped must not leave the next one at 800.
    login_limits limits;
    limits.threads = 1;
    limits.max_delay_ms = 600;
    authenticator auth(users(), limits);
    for (int i = 0; i < 3; ++i) CHECK_FALSE(checked(auth, {"127.0.0.1", "alice", "guess", ""}).ok);
    std::optional<login_result> dropped;
    auto ticket = auth.submit({"127.0.0.2", "alice", "guess", ""}, [&dropped](login_result v) { dropped = std::move(v); });
    REQUIRE(ticket != 0);  // scheduled, about 400 ms out
    auth.cancel(ticket);
    REQUIRE(dropped.has_value());
    // Its turn is free again: the next check takes it (about 400 ms out), not the one after (800).
    std::promise<login_result> next;
    auto answer = next.get_future();
    CHECK(auth.submit({"127.0.0.3", "alice", "alice-secret", ""},
                      [&next](login_result v) { next.set_value(std::move(v)); }) != 0);
    CHECK(answer.get().ok);
  }

  TEST_CASE("checks from a trusted address do not count against the per-user bound") {
    auto table = std::make_shared<users_table>(*users());
    table->by_name["bob"] = user_entry{"bob", make_password_hash("bob-secret"), {"app"}, "", 3};  // 0.3 s
    login_limits limits;
    limits.threads = 1;
    limits.max_waiting_per_user = 1;
    authenticator auth(table, limits);
    CHECK(checked(auth, {"127.0.0.1", "alice", "alice-secret", ""}).ok);  // .1 is trusted for alice
    auth.replace_users(table);                                             // nothing remembered
    std::promise<login_result> slow, trusted, other;
    auto slow_answer = slow.get_future(), trusted_answer = trusted.get_future(), other_answer = other.get_future();
    auth.submit({"127.0.0.9", "bob", "wrong", ""}, [&slow](login_result v) { slow.set_value(std::move(v)); });
    // While bob's check runs: alice from her trusted address waits, and alice from elsewhere is
    // still within the bound of one.
    CHECK(auth.submit({"127.0.0.1", "alice", "alice-secret", ""},
                      [&trusted](login_result v) { trusted.set_value(std::move(v)); }) != 0);
    CHECK(auth.submit({"127.0.0.2", "alice", "alice-secret", ""},
                      [&other](login_result v) { other.set_value(std::move(v)); }) != 0);
    CHECK_FALSE(slow_answer.get().ok);
    CHECK(trusted_answer.get().ok);
    CHECK(other_answer.get().ok);
  }
}
