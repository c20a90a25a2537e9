// Password hashes (format, salt, verification, refusal of weak or malformed ones) and how the
// roles holding a permission on an address are resolved from [[security-settings]].
#include <doctest/doctest.h>

#include "escrow/broker/security/password_hash.h"
#include "escrow/broker/security/security.h"

using namespace escrow::broker;

namespace {
security_setting_entry grant(std::string match, permission p, std::vector<std::string> roles) {
  security_setting_entry e;
  e.match = std::move(match);
  e.roles[static_cast<std::size_t>(p)] = std::move(roles);
  return e;
}
}  // namespace

TEST_SUITE("broker/security") {
  TEST_CASE("a hash verifies its password only, and each has its own salt") {
    std::string h = make_password_hash("s3cret", kMinPasswordIterations);
    CHECK(check_password_hash(h).empty());
    CHECK(h.rfind("pbkdf2-sha256:10000:", 0) == 0);
    CHECK(verify_password("s3cret", h));
    CHECK_FALSE(verify_password("s3cret ", h));
    CHECK_FALSE(verify_password("", h));
    CHECK(make_password_hash("s3cret", kMinPasswordIterations) != h);
  }

  TEST_CASE("malformed or weak hashes are refused with a reason, and never verify") {
    std::string key(64, '0');
    for (const std::string& bad : std::vector<std::string>{"plain", "pbkdf2-sha256:600000:00112233", "md5:1:00:00",
                                   "pbkdf2-sha256:x:0011223344556677:" + key,
                                   "pbkdf2-sha256:9999:0011223344556677:" + key,
                                   "pbkdf2-sha256:600000:0011:" + key,
                                   "pbkdf2-sha256:600000:0011223344556677:abcd",
                                   "pbkdf2-sha256:600000:zz11223344556677:" + key}) {
      CAPTURE(bad);
      CHECK_FALSE(check_password_hash(bad).empty());
      CHECK_FALSE(verify_password("anything", bad));
    }
  }

  TEST_CASE("each permission comes from the most specific pattern that sets it") {
    std::vector<security_setting_entry> entries{
        grant("#", permission::admin, {"ops"}),
        grant("orders.#", permission::send, {"app"}),
        grant("orders.audit", permission::send, {}),
    };
    entries[1].roles[static_cast<std::size_t>(permission::consume)] = std::vector<std::string>{"app", "reader"};
    auto eu = resolve_grants(entries, "orders.eu");
    CHECK(holds(eu, permission::send, {"app"}));
    CHECK_FALSE(holds(eu, permission::send, {"reader"}));
    CHECK(holds(eu, permission::consume, {"x", "reader"}));
    CHECK(holds(eu, permission::admin, {"ops"}));  // only "#" sets admin
    auto audit = resolve_grants(entries, "orders.audit");
    CHECK_FALSE(holds(audit, permission::send, {"app"}));     // [] beats orders.#
    CHECK(holds(audit, permission::consume, {"reader"}));     // not set there: orders.# decides
    auto other = resolve_grants(entries, "payments");
    CHECK_FALSE(holds(other, permission::send, {"app"}));
    CHECK_FALSE(holds(other, permission::browse, {"ops", "app"}));  // granted nowhere: nobody
  }
}
