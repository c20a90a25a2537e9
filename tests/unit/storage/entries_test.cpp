// Queue entries in a real store: a message stored inline in its only entry, or once in `messages`
// for several entries; delivery-count updates that keep the inline message and never resurrect an
// entry; removal that releases the shared message only with its last entry.
#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <vector>

#include "../temp_dir.h"
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
  std::string value(table t, const std::string& key) {
    std::string v;
    REQUIRE(db->get(t, key, v).ok());
    return v;
  }
};

message_record sample(std::string body) {
  message_record r;
  r.destination = "/queue/q";
  r.headers = {{"content-type", "text/plain"}};
  r.body = std::move(body);
  return r;
}

}  // namespace

TEST_SUITE("storage/entries") {
  TEST_CASE("a message with one stored entry lives inline in it, not in messages") {
    fixture f;
    entry_key k{1, 4, 7};
    batch b;
    put_message(b, 7, sample(std::string("a\0b", 3)), {k});
    f.apply(std::move(b));
    CHECK_FALSE(f.has(table::messages, message_key(7)));
    std::string v = f.value(table::entries, k.encode());
    CHECK(decode_delivery_count(v) == 0);
    message_record r;
    REQUIRE(decode_inline_message(v, r));
    CHECK(r.body == std::string("a\0b", 3));
    CHECK(r.headers.front().second == "text/plain");
  }

  TEST_CASE("a message with several entries is stored once and referenced by each") {
    fixture f;
    std::vector<entry_key> keys{{1, 4, 9}, {2, 4, 9}, {3, 4, 9}};
    batch b;
    put_message(b, 9, sample("fan"), keys);
    f.apply(std::move(b));
    REQUIRE(f.has(table::messages, message_key(9)));
    for (auto& k : keys) {
      message_record r;
      CHECK_FALSE(decode_inline_message(f.value(table::entries, k.encode()), r));
    }
    // Removing entries releases the message only with the last one.
    for (std::size_t i = 0; i < keys.size(); ++i) {
      batch remove;
      erase_entry(remove, keys[i]);
      f.apply(std::move(remove));
      CHECK_FALSE(f.has(table::entries, keys[i].encode()));
      CHECK(f.has(table::messages, message_key(9)) == (i + 1 < keys.size()));
    }
  }

  TEST_CASE("removing an inline entry leaves the messages table alone") {
    fixture f;
    entry_key inline_key{1, 4, 1};
    std::vector<entry_key> shared{{1, 4, 2}, {2, 4, 2}};
    batch b;
    put_message(b, 1, sample("one"), {inline_key});
    put_message(b, 2, sample("two"), shared);
    f.apply(std::move(b));
    batch remove;
    erase_entry(remove, inline_key);
    f.apply(std::move(remove));
    CHECK_FALSE(f.has(table::entries, inline_key.encode()));
    CHECK(f.has(table::messages, message_key(2)));  // the other message is untouched
    CHECK(f.has(table::message_refs, message_key(2)));
  }

  TEST_CASE("set_delivery_count keeps the inline message and never resurrects a removed entry") {
    fixture f;
    entry_key k{1, 4, 3};
    batch b;
    put_message(b, 3, sample("kept"), {k});
    f.apply(std::move(b));
    batch count;
    count.set_delivery_count(k.encode(), 5);
    f.apply(std::move(count));
    std::string v = f.value(table::entries, k.encode());
    CHECK(decode_delivery_count(v) == 5);
    message_record r;
    REQUIRE(decode_inline_message(v, r));
    CHECK(r.body == "kept");

    batch gone;
    erase_entry(gone, k);
    gone.set_delivery_count(k.encode(), 6);  // e.g. a late requeue after the ACK
    f.apply(std::move(gone));
    CHECK_FALSE(f.has(table::entries, k.encode()));
  }
}

TEST_SUITE("storage/expiries") {
  TEST_CASE("an expiring message gets one index record per entry, gone with each entry") {
    fixture f;
    message_record r = sample("x");
    r.expires = 1234;
    entry_key only{1, 4, 7}, a{2, 4, 8}, c{3, 4, 8};
    batch b;
    put_message(b, 7, r, {only});
    put_message(b, 8, r, {a, c});
    f.apply(std::move(b));
    CHECK(f.has(table::expiries, expiry_key(1234, only)));
    CHECK(f.has(table::expiries, expiry_key(1234, a)));
    CHECK(f.has(table::expiries, expiry_key(1234, c)));

    batch gone;
    erase_entry(gone, only);  // inline message
    erase_entry(gone, a);     // shared message, one reference left
    f.apply(std::move(gone));
    CHECK_FALSE(f.has(table::expiries, expiry_key(1234, only)));
    CHECK_FALSE(f.has(table::expiries, expiry_key(1234, a)));
    CHECK(f.has(table::expiries, expiry_key(1234, c)));
    batch last;
    erase_entry(last, c);
    f.apply(std::move(last));
    CHECK_FALSE(f.has(table::expiries, expiry_key(1234, c)));
    CHECK_FALSE(f.has(table::messages, message_key(8)));
  }

  TEST_CASE("a message that never expires has no index record") {
    fixture f;
    batch b;
    put_message(b, 9, sample("y"), {entry_key{1, 4, 9}});
    f.apply(std::move(b));
    int records = 0;
    REQUIRE(f.db->scan(table::expiries, {}, {}, [&](std::string_view, std::string_view) {
      ++records;
      return true;
    }).ok());
    CHECK(records == 0);
  }

  TEST_CASE("index keys sort by expiry time and round-trip") {
    entry_key e{5, 9, 42};
    CHECK(expiry_key(100, e) < expiry_key(200, entry_key{1, 0, 1}));
    std::uint64_t expires = 0;
    entry_key parsed;
    REQUIRE(parse_expiry_key(expiry_key(77, e), expires, parsed));
    CHECK(expires == 77);
    CHECK(parsed == e);
    CHECK_FALSE(parse_expiry_key("short", expires, parsed));
    message_record r = sample("z");
    r.expires = 99;
    CHECK(peek_expires(r.encode()) == 99);
    CHECK(peek_expires("") == 0);
  }
}
