// Scheduled messages in a real store: a message with deliver_at is stored in `scheduled` (not in
// `entries`, no expiry record) under its due time; promote_scheduled makes it the entry it stands
// for, with its expiry record; remove_scheduled releases a shared message with its last
// reference; and the record's scheduled flag round-trips with the fields behind it readable.
#include <doctest/doctest.h>

#include <future>
#include <memory>

#include "../temp_dir.h"
#include "escrow/storage/check.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

using namespace escrow::storage;

namespace {

struct fixture {
  escrow::testing::temp_dir dir;
  std::unique_ptr<store> db;
  fixture() {
    store_options options;
    options.path = dir.path();
    options.map_size = 64ull << 20;
    REQUIRE(store::open(options, db).ok());
    batch b;
    queue_record q{1, queue_record::kind::queue, "", std::nullopt, ""};
    queue_record q2{2, queue_record::kind::queue, "", std::nullopt, ""};
    b.put(table::queues, "q/a", q.encode());
    b.put(table::queues, "q/b", q2.encode());
    put_next_queue_id(b, 3);
    put_next_message_id(b, 100);
    apply(std::move(b));
  }
  void apply(batch b) {
    std::promise<bool> done;
    db->submit(std::move(b), [&](status s) { done.set_value(s.ok()); });
    REQUIRE(done.get_future().get());
  }
  bool has(table t, const std::string& key) {
    std::string value;
    return db->get(t, key, value).ok();
  }
  std::size_t count(table t) {
    std::size_t n = 0;
    REQUIRE(db->scan(t, {}, {}, [&](std::string_view, std::string_view) { return ++n, true; }).ok());
    return n;
  }
  bool consistent() {
    db.reset();
    check_options o;
    o.path = dir.path();
    check_report r = check_store(o);
    for (const auto& p : r.problems) MESSAGE(p);
    store_options options;
    options.path = dir.path();
    options.map_size = 64ull << 20;
    REQUIRE(store::open(options, db).ok());
    return r.outcome == check_report::result::consistent;
  }
};

message_record scheduled(std::uint64_t deliver_at, std::uint64_t expires = 0) {
  message_record r;
  r.destination = "/queue/a";
  r.headers = {{"_AMQ_SCHED_DELIVERY", std::to_string(deliver_at)}};
  r.body = "body";
  r.deliver_at = deliver_at;
  r.expires = expires;
  r.sender = "alice";
  return r;
}

}  // namespace

TEST_SUITE("storage/scheduled") {
  TEST_CASE("a scheduled record round-trips, and the fields after its delivery time are read right") {
    message_record r = scheduled(1234567890123, 99);
    std::string bytes = r.encode();
    CHECK(bytes.size() == r.encoded_size());
    message_record back;
    REQUIRE(message_record::decode(bytes, back));
    CHECK(back.deliver_at == 1234567890123);
    CHECK(back.expires == 99);
    CHECK(back.body == "body");
    CHECK(peek_expires(bytes) == 99);
    std::string_view sender;
    REQUIRE(peek_sender(bytes, sender));
    CHECK(sender == "alice");
    // Without a delivery time the layout is the old one: no flag, no field.
    r.deliver_at = 0;
    std::string plain = r.encode();
    CHECK(plain.size() + 8 == bytes.size());
    CHECK(plain[1] == 1);
    REQUIRE(message_record::decode(plain, back));
    CHECK(back.deliver_at == 0);
  }

  TEST_CASE("a record flagged scheduled with a zero or missing delivery time does not decode") {
    std::string bytes = scheduled(5).encode();
    std::string zero = bytes;
    for (int i = 0; i < 8; ++i) zero[19 + i] = 0;
    message_record out;
    CHECK_FALSE(message_record::decode(zero, out));
    CHECK_FALSE(message_record::decode(bytes.substr(0, 22), out));
    std::string bad_flags = bytes;
    bad_flags[1] = 4;
    CHECK_FALSE(message_record::decode(bad_flags, out));
  }

  TEST_CASE("scheduled keys: queue first, then due time, priority and message id") {
    entry_key e{7, 6, 42};
    std::string k = scheduled_key(1000, e);
    CHECK(k.size() == 21);
    CHECK(k.substr(0, 4) == queue_prefix(7));
    std::uint64_t due = 0;
    entry_key back;
    REQUIRE(parse_scheduled_key(k, due, back));
    CHECK(due == 1000);
    CHECK(back == e);
    CHECK(scheduled_key(999, entry_key{7, 0, 99}) < k);   // earlier due first, whatever the priority
    CHECK(scheduled_key(1000, entry_key{7, 9, 99}) < k);  // same due: higher priority first
    CHECK(k < scheduled_key(0, entry_key{8, 4, 1}));      // another queue's records after
    CHECK_FALSE(parse_scheduled_key(k.substr(1), due, back));
    CHECK(scheduled_due(1000, 0) == 1000);
    CHECK(scheduled_due(1000, 500) == 500);
    CHECK(scheduled_due(1000, 2000) == 1000);
  }

  TEST_CASE("a scheduled message is stored in scheduled, then promoted to its entry with its expiry record") {
    fixture f;
    entry_key e{1, 4, 10};
    batch b;
    put_message(b, 10, scheduled(5000, 9000), {e});
    f.apply(std::move(b));
    CHECK_FALSE(f.has(table::entries, e.encode()));
    CHECK(f.count(table::expiries) == 0);
    CHECK(f.has(table::scheduled, scheduled_key(5000, e)));
    CHECK(f.consistent());

    batch p;
    p.promote_scheduled(scheduled_key(5000, e));
    f.apply(std::move(p));
    CHECK(f.count(table::scheduled) == 0);
    std::string value;
    REQUIRE(f.db->get(table::entries, e.encode(), value).ok());
    message_record r;
    REQUIRE(decode_inline_message(value, r));
    CHECK(r.deliver_at == 5000);
    CHECK(f.has(table::expiries, expiry_key(9000, e)));
    CHECK(f.consistent());

    batch again;  // a second promotion (an operator's and a pass's) finds nothing: a no-op
    again.promote_scheduled(scheduled_key(5000, e));
    f.apply(std::move(again));
    CHECK(f.count(table::entries) == 1);
  }

  TEST_CASE("a message expiring before its time is due at its expiry") {
    fixture f;
    entry_key e{1, 4, 11};
    batch b;
    put_message(b, 11, scheduled(5000, 3000), {e});
    f.apply(std::move(b));
    CHECK(f.has(table::scheduled, scheduled_key(3000, e)));
    CHECK(f.consistent());
  }

  TEST_CASE("a shared scheduled message: promoted for one queue, removed for the other, released with the last") {
    fixture f;
    entry_key a{1, 4, 12}, c{2, 4, 12};
    batch b;
    put_message(b, 12, scheduled(5000), {a, c});
    f.apply(std::move(b));
    CHECK(f.has(table::messages, message_key(12)));
    CHECK(f.count(table::scheduled) == 2);
    CHECK(f.consistent());
    batch p;
    p.promote_scheduled(scheduled_key(5000, a));
    f.apply(std::move(p));
    CHECK(f.has(table::entries, a.encode()));
    CHECK(f.consistent());
    batch r;
    r.remove_scheduled(scheduled_key(5000, c));
    f.apply(std::move(r));
    CHECK(f.count(table::scheduled) == 0);
    CHECK(f.has(table::messages, message_key(12)));  // the promoted entry still references it
    CHECK(f.consistent());
    batch last;
    erase_entry(last, a);
    f.apply(std::move(last));
    CHECK_FALSE(f.has(table::messages, message_key(12)));
    CHECK(f.consistent());
  }

  TEST_CASE("removing an inline scheduled message takes its bytes off its sender") {
    fixture f;
    entry_key e{1, 4, 13};
    batch b;
    message_record m = scheduled(5000);
    put_message(b, 13, m, {e});
    f.apply(std::move(b));
    CHECK(f.db->stored_bytes_of("alice") == m.encoded_size());
    batch r;
    r.remove_scheduled(scheduled_key(5000, e));
    f.apply(std::move(r));
    CHECK(f.db->stored_bytes_of("alice") == 0);
    CHECK(f.count(table::scheduled) == 0);
  }

  TEST_CASE("escrow check finds a scheduled record whose due time disagrees with its message") {
    fixture f;
    entry_key e{1, 4, 14};
    batch b;
    std::string value(4, '\0');
    scheduled(5000).encode_to(value);
    b.put(table::scheduled, scheduled_key(4000, e), value);
    f.apply(std::move(b));
    CHECK_FALSE(f.consistent());
  }
}
