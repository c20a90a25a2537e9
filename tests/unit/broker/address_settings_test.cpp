// Address patterns (HornetQ/Artemis wildcards), which of several matches is the most specific,
// how settings merge from the least to the most specific match, and the redelivery delay formula.
#include <doctest/doctest.h>

#include "escrow/broker/config/address_settings.h"

using namespace escrow::broker;

namespace {
address_setting_entry entry(std::string match) {
  address_setting_entry e;
  e.match = std::move(match);
  return e;
}
}  // namespace

TEST_SUITE("broker/address_settings") {
  TEST_CASE("wildcards: * is one word, # is zero or more words") {
    CHECK(pattern_matches("orders", "orders"));
    CHECK_FALSE(pattern_matches("orders", "orders.eu"));
    CHECK(pattern_matches("orders.*", "orders.eu"));
    CHECK_FALSE(pattern_matches("orders.*", "orders"));
    CHECK_FALSE(pattern_matches("orders.*", "orders.eu.paris"));
    CHECK(pattern_matches("orders.#", "orders"));
    CHECK(pattern_matches("orders.#", "orders.eu.paris"));
    CHECK(pattern_matches("#", "anything.at.all"));
    CHECK(pattern_matches("#.paris", "orders.eu.paris"));
    CHECK(pattern_matches("*.eu.#", "orders.eu"));
    CHECK_FALSE(pattern_matches("*.eu.#", "eu"));
    CHECK(pattern_matches("a.#.z", "a.z"));
    CHECK(pattern_matches("a.#.z", "a.b.c.z"));
    CHECK_FALSE(pattern_matches("a.#.z", "a.b.c"));
  }

  TEST_CASE("a pattern with an empty word is refused") {
    CHECK(check_pattern("orders.#").empty());
    CHECK_FALSE(check_pattern("").empty());
    CHECK_FALSE(check_pattern("orders..eu").empty());
    CHECK_FALSE(check_pattern(".orders").empty());
    CHECK_FALSE(check_pattern("orders.").empty());
  }

  TEST_CASE("specificity: literal beats wildcards, then * beats # word by word, then longer") {
    CHECK(more_specific("orders.eu", "orders.*"));
    CHECK(more_specific("orders.eu", "orders.eu.#"));  // an exact name beats any pattern
    CHECK(more_specific("orders.*", "orders.#"));
    CHECK(more_specific("orders.#", "#"));
    CHECK(more_specific("orders.*", "*.eu"));          // decided at the first word
    CHECK(more_specific("a.#.z", "a.#"));
    CHECK_FALSE(more_specific("#", "orders.#"));
    CHECK_FALSE(more_specific("orders.*", "orders.*"));
  }

  TEST_CASE("each key comes from the most specific match that sets it") {
    auto all = entry("#");
    all.dead_letter_address = "DLQ";
    all.expiry_address = "ExpiryQueue";
    all.max_delivery_attempts = 10;
    auto orders = entry("orders.#");
    orders.max_delivery_attempts = 3;
    orders.redelivery_delay_ms = 100;
    auto eu = entry("orders.eu");
    eu.dead_letter_address = "orders.eu.DLQ";
    std::vector<address_setting_entry> table{eu, all, orders};  // file order must not matter

    auto s = resolve_settings(table, "orders.eu");
    CHECK(s.dead_letter_address == "orders.eu.DLQ");
    CHECK(s.max_delivery_attempts == 3);
    CHECK(s.redelivery_delay_ms == 100);
    CHECK(s.expiry_address == "ExpiryQueue");

    auto us = resolve_settings(table, "orders.us");
    CHECK(us.dead_letter_address == "DLQ");
    CHECK(us.max_delivery_attempts == 3);

    auto other = resolve_settings(table, "payments");
    CHECK(other.max_delivery_attempts == 10);
    CHECK(other.redelivery_delay_ms == 0);
    CHECK(other.redelivery_multiplier == 1.0);
    CHECK(other.expiry_delay_ms == -1);
  }

  TEST_CASE("kinds compared word by word: a literal word decides first, then the longer pattern wins") {
    auto first = entry("a.#.c");
    first.max_delivery_attempts = 1;
    auto second = entry("a.#.c.#");  // as specific as the first up to its length, then longer
    second.max_delivery_attempts = 2;
    CHECK(resolve_settings({first, second}, "a.b.c").max_delivery_attempts == 2);
    auto x = entry("*.b");
    x.max_delivery_attempts = 5;
    auto y = entry("a.*");
    y.max_delivery_attempts = 6;
    CHECK(resolve_settings({x, y}, "a.b").max_delivery_attempts == 6);  // literal first word wins
    CHECK(resolve_settings({y, x}, "a.b").max_delivery_attempts == 6);
  }

  TEST_CASE("no match at all gives the defaults of the seed") {
    auto s = resolve_settings({}, "orders");
    CHECK(s.max_delivery_attempts == 10);
    CHECK(s.dead_letter_address.empty());
    CHECK(s.expiry_address.empty());
    CHECK(s.collision_avoidance_factor == 0.0);
  }

  TEST_CASE("queue limits: unbounded FAIL by default, each key from the most specific match that sets it") {
    auto none = resolve_settings({}, "orders");
    CHECK(none.max_size_messages == -1);
    CHECK(none.max_size_bytes == -1);
    CHECK(none.ring_size == -1);
    CHECK(none.address_full_policy == full_policy::fail);
    CHECK_FALSE(none.dead_letter_on_drop);
    CHECK_FALSE(none.limited());

    auto all = entry("#");
    all.max_size_messages = 1000;
    all.address_full_policy = full_policy::block;
    auto orders = entry("orders.*");
    orders.max_size_bytes = 4096;
    orders.address_full_policy = full_policy::drop_head;
    orders.dead_letter_on_drop = true;
    auto eu = entry("orders.eu");
    eu.max_size_messages = -1;  // an explicit -1 lifts a limit a wider match set
    eu.ring_size = 5;
    std::vector<address_setting_entry> table{eu, orders, all};

    auto s = resolve_settings(table, "orders.eu");
    CHECK(s.max_size_messages == -1);
    CHECK(s.max_size_bytes == 4096);
    CHECK(s.ring_size == 5);
    CHECK(s.address_full_policy == full_policy::drop_head);
    CHECK(s.dead_letter_on_drop);
    CHECK(s.limited());
    auto us = resolve_settings(table, "orders.us");
    CHECK(us.max_size_messages == 1000);
    CHECK(us.max_size_bytes == 4096);
    CHECK(us.ring_size == -1);
    auto other = resolve_settings(table, "payments");
    CHECK(other.max_size_messages == 1000);
    CHECK(other.max_size_bytes == -1);
    CHECK(other.address_full_policy == full_policy::block);
    CHECK_FALSE(other.dead_letter_on_drop);
    auto ring_only = entry("ring");
    ring_only.ring_size = 1;
    CHECK(resolve_settings({ring_only}, "ring").limited());
    CHECK_FALSE(resolve_settings({ring_only}, "ring.x").limited());
  }

  TEST_CASE("last-value queues: none by default; a key named wins over last-value in one table") {
    CHECK(resolve_settings({}, "prices").last_value_key.empty());
    auto all = entry("#");
    all.last_value = true;
    auto prices = entry("prices.*");
    prices.last_value_key = "sym";
    prices.last_value = false;  // the key named in the same table wins
    auto off = entry("prices.off");
    off.last_value = false;  // lifts what a wider match set
    std::vector<address_setting_entry> table{all, prices, off};
    CHECK(resolve_settings(table, "other").last_value_key == "_AMQ_LVQ_NAME");
    CHECK(resolve_settings(table, "prices.ibm").last_value_key == "sym");
    CHECK(resolve_settings(table, "prices.off").last_value_key.empty());
  }

  TEST_CASE("address-full-policy names: case-insensitive, with RabbitMQ's x-overflow spellings") {
    CHECK(parse_full_policy("FAIL") == full_policy::fail);
    CHECK(parse_full_policy("fail") == full_policy::fail);
    CHECK(parse_full_policy("reject-publish") == full_policy::fail);
    CHECK(parse_full_policy("Reject-Publish") == full_policy::fail);
    CHECK(parse_full_policy("DROP") == full_policy::drop);
    CHECK(parse_full_policy("drop-head") == full_policy::drop_head);
    CHECK(parse_full_policy("DROP-HEAD") == full_policy::drop_head);
    CHECK(parse_full_policy("Block") == full_policy::block);
    for (const char* bad : {"", "PAGE", "drop_head", "reject-publish-dlx", " FAIL", "FAIL "}) {
      INFO(bad);
      CHECK_FALSE(parse_full_policy(bad).has_value());
    }
    for (auto p : {full_policy::fail, full_policy::drop, full_policy::drop_head, full_policy::block})
      CHECK(parse_full_policy(to_string(p)) == p);
    CHECK(std::string(to_string(full_policy::drop_head)) == "DROP-HEAD");
  }

  TEST_CASE("redelivery delay: delay x multiplier^(n-1), capped, spread by the avoidance factor") {
    address_settings s;
    CHECK(s.redelivery_delay_for(1, 0.0) == 0);
    s.redelivery_delay_ms = 100;
    CHECK(s.redelivery_delay_for(1, 0.0) == 100);
    CHECK(s.redelivery_delay_for(5, 0.0) == 100);  // multiplier 1.0
    s.redelivery_multiplier = 2.0;
    CHECK(s.redelivery_delay_for(2, 0.0) == 200);
    CHECK(s.redelivery_delay_for(3, 0.0) == 400);
    CHECK(s.redelivery_delay_for(10, 0.0) == 1000);  // default cap: 10 x the delay
    s.max_redelivery_delay_ms = 300;
    CHECK(s.redelivery_delay_for(3, 0.0) == 300);
    s.collision_avoidance_factor = 0.5;
    CHECK(s.redelivery_delay_for(1, 1.0) == 150);
    CHECK(s.redelivery_delay_for(1, -1.0) == 50);
  }
}

TEST_SUITE("broker/address_settings/cost") {
  TEST_CASE("many # words against a long address match in polynomial time") {
    std::string pattern, address;
    for (int i = 0; i < 40; ++i) pattern += "#.";
    pattern += "never";
    for (int i = 0; i < 200; ++i) address += "w.";
    address += "x";
    CHECK_FALSE(pattern_matches(pattern, address));  // exponential backtracking would not finish
    CHECK(pattern_matches(pattern.substr(0, pattern.size() - 5) + "x", address));
  }
}
