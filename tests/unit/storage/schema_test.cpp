// Typed keys and values of the store's tables: pure functions, no disk.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"

using namespace escrow::storage;

TEST_SUITE("storage/schema") {
  TEST_CASE("message keys are 8 big-endian bytes and round trip") {
    CHECK(message_key(0x0102030405060708ull) == std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
    CHECK(message_key(1) < message_key(2));
    CHECK(message_key(0xff) < message_key(0x100));
    for (std::uint64_t id : {0ull, 1ull, 255ull, 256ull, 0xffffffffffffffffull}) {
      std::uint64_t out = 12345;
      REQUIRE(parse_message_key(message_key(id), out));
      CHECK(out == id);
    }
    std::uint64_t out = 0;
    CHECK_FALSE(parse_message_key("", out));
    CHECK_FALSE(parse_message_key("1234567", out));
    CHECK_FALSE(parse_message_key("123456789", out));
  }

  TEST_CASE("entry keys round trip") {
    for (std::uint32_t queue : {0u, 1u, 0x01020304u, 0xffffffffu}) {
      for (int priority = 0; priority <= 9; ++priority) {
        for (std::uint64_t id : {0ull, 1ull, 0x8000000000000000ull, 0xffffffffffffffffull}) {
          entry_key k{queue, static_cast<std::uint8_t>(priority), id};
          std::string bytes = k.encode();
          CHECK(bytes.size() == 13);
          CHECK(bytes.substr(0, 4) == queue_prefix(queue));
          entry_key out{7, 7, 7};
          REQUIRE(entry_key::decode(bytes, out));
          CHECK(out == k);
        }
      }
    }
  }

  TEST_CASE("entry key layout: queue id, inverted priority, message id") {
    entry_key k{0x0a0b0c0d, 9, 0x1122334455667788ull};
    CHECK(k.encode() == std::string("\x0a\x0b\x0c\x0d\x00\x11\x22\x33\x44\x55\x66\x77\x88", 13));
    k.priority = 0;
    CHECK(k.encode()[4] == 9);
  }

  TEST_CASE("entry key decode rejects malformed keys") {
    entry_key out;
    CHECK_FALSE(entry_key::decode("", out));
    std::string good = entry_key{1, 4, 2}.encode();
    CHECK_FALSE(entry_key::decode(good.substr(0, 12), out));
    CHECK_FALSE(entry_key::decode(good + "x", out));
    std::string bad_priority = good;
    bad_priority[4] = 10;
    CHECK_FALSE(entry_key::decode(bad_priority, out));
    bad_priority[4] = '\xff';
    CHECK_FALSE(entry_key::decode(bad_priority, out));
  }

  TEST_CASE("byte order of encoded entry keys matches operator<") {
    std::vector<entry_key> keys;
    for (std::uint32_t queue : {0u, 1u, 2u, 255u, 256u, 0x10000u, 0xffffffffu})
      for (int priority = 0; priority <= 9; ++priority)
        for (std::uint64_t id : {0ull, 1ull, 255ull, 256ull, 0x100000000ull, 0xffffffffffffffffull})
          keys.push_back({queue, static_cast<std::uint8_t>(priority), id});

    for (const auto& a : keys)
      for (const auto& b : keys) {
        if ((a.encode() < b.encode()) != (a < b)) {
          FAIL_CHECK("order differs for (", a.queue_id, ",", int(a.priority), ",", a.message_id, ") and (",
                     b.queue_id, ",", int(b.priority), ",", b.message_id, ")");
        }
      }

    // Sorting by bytes gives queue order: queue id groups, priority 9 first, then oldest first.
    std::mt19937 rng(42);
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<std::string> encoded;
    for (const auto& k : keys) encoded.push_back(k.encode());
    std::sort(encoded.begin(), encoded.end());
    std::sort(keys.begin(), keys.end());
    REQUIRE(encoded.size() == keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) CHECK(encoded[i] == keys[i].encode());
  }

  TEST_CASE("queue order in a concrete case") {
    const entry_key p9_old{5, 9, 100}, p9_new{5, 9, 200}, p4{5, 4, 1}, p0{5, 0, 2}, other_queue{6, 9, 0},
        earlier_queue{4, 0, 999};
    std::vector<std::string> encoded = {p0.encode(), other_queue.encode(), p4.encode(), p9_new.encode(),
                                        earlier_queue.encode(), p9_old.encode()};
    std::sort(encoded.begin(), encoded.end());
    const std::vector<std::string> expected = {earlier_queue.encode(), p9_old.encode(), p9_new.encode(),
                                               p4.encode(), p0.encode(), other_queue.encode()};
    CHECK(encoded == expected);
    CHECK(p9_old < p9_new);
    CHECK(p9_new < p4);
    CHECK(p4 < p0);
    CHECK(p0 < other_queue);
    CHECK_FALSE(p0 < p0);
  }

  TEST_CASE("delivery counts") {
    CHECK(encode_delivery_count(0x01020304) == std::string("\x01\x02\x03\x04", 4));
    for (std::uint32_t n : {0u, 1u, 7u, 0xffffffffu}) CHECK(decode_delivery_count(encode_delivery_count(n)) == n);
    CHECK(decode_delivery_count("") == 0);
    CHECK(decode_delivery_count("ab") == 0);
  }

  TEST_CASE("queue records round trip") {
    queue_record q;
    q.id = 42;
    q.type = queue_record::kind::queue;
    queue_record out;
    REQUIRE(queue_record::decode(q.encode(), out));
    CHECK(out.id == 42);
    CHECK(out.type == queue_record::kind::queue);
    CHECK(out.topic.empty());

    queue_record sub;
    sub.id = 0xfffffffe;
    sub.type = queue_record::kind::durable_subscription;
    sub.topic = std::string("/topic/prices\0eu", 16);
    REQUIRE(queue_record::decode(sub.encode(), out));
    CHECK(out.id == 0xfffffffe);
    CHECK(out.type == queue_record::kind::durable_subscription);
    CHECK(out.topic == sub.topic);
    CHECK_FALSE(out.creator);
  }

  TEST_CASE("queue records carry their creator at the end, and records without one still read") {
    queue_record q;
    q.id = 7;
    q.creator = "alice";
    queue_record out;
    REQUIRE(queue_record::decode(q.encode(), out));
    CHECK(out.creator == std::optional<std::string>("alice"));
    q.creator = "";  // anonymous is a creator too
    REQUIRE(queue_record::decode(q.encode(), out));
    CHECK(out.creator == std::optional<std::string>(""));
    q.creator.reset();
    std::string old_form = q.encode();
    REQUIRE(queue_record::decode(old_form, out));
    CHECK_FALSE(out.creator);
    CHECK_FALSE(queue_record::decode(old_form + std::string("\x05") + "ab", out));  // cut short
    q.creator = "bob";
    CHECK_FALSE(queue_record::decode(q.encode() + "x", out));  // trailing bytes
  }

  TEST_CASE("queue record decode rejects garbage") {
    queue_record sub;
    sub.id = 3;
    sub.type = queue_record::kind::durable_subscription;
    sub.topic = "/topic/t";
    const std::string good = sub.encode();
    queue_record out;
    for (std::size_t n = 0; n < good.size(); ++n) {
      INFO("length ", n);
      CHECK_FALSE(queue_record::decode(good.substr(0, n), out));
    }
    CHECK_FALSE(queue_record::decode(good + "x", out));
    std::string bad_kind = good;
    bad_kind[4] = 0;
    CHECK_FALSE(queue_record::decode(bad_kind, out));
    bad_kind[4] = 3;
    CHECK_FALSE(queue_record::decode(bad_kind, out));
    CHECK_FALSE(queue_record::decode("garbage!", out));
  }

  TEST_CASE("message records round trip") {
    message_record m;
    m.persistent = true;
    m.priority = 9;
    m.expires = 0x0102030405060708ull;
    m.timestamp = 1700000000123ull;
    m.destination = "/queue/orders";
    m.headers = {{"content-type", "text/plain"}, {"x-tag", "first"}, {"x-tag", "second"},
                 {"", ""},                       {"x-tag", "third"}, {"nul", std::string("a\0b", 3)}};

    SUBCASE("body with NUL bytes") { m.body = std::string("\0body\0\0with nuls\0", 18); }
    SUBCASE("empty body") { m.body.clear(); }
    SUBCASE("large body") { m.body = std::string(1 << 20, '\x7f'); }
    SUBCASE("no headers, not persistent") {
      m.headers.clear();
      m.persistent = false;
      m.priority = 0;
      m.expires = 0;
      m.destination.clear();
      m.body = "x";
    }

    // encoded_size() is exact, and a record written in place into a batch is what put() stores.
    CHECK(m.encoded_size() == m.encode().size());
    batch in_place;
    m.encode_to(in_place.put_in_place(table::messages, "k", m.encoded_size()));
    in_place.erase(table::meta, "after");
    batch copied;
    copied.put(table::messages, "k", m.encode());
    copied.erase(table::meta, "after");
    CHECK(in_place.rep() == copied.rep());

    message_record out;
    out.headers = {{"stale", "header"}};
    REQUIRE(message_record::decode(m.encode(), out));
    CHECK(out.persistent == m.persistent);
    CHECK(out.priority == m.priority);
    CHECK(out.expires == m.expires);
    CHECK(out.timestamp == m.timestamp);
    CHECK(out.destination == m.destination);
    CHECK(out.headers == m.headers);  // repeated names kept, in order
    CHECK(out.body == m.body);
    CHECK(out.body.size() == m.body.size());
  }

  TEST_CASE("message record decode rejects garbage") {
    message_record m;
    m.destination = "/queue/a";
    m.headers = {{"k", "v"}, {"k2", "v2"}};
    m.body = "payload";
    const std::string good = m.encode();
    message_record out;
    for (std::size_t n = 0; n < good.size(); ++n) {
      INFO("length ", n);
      CHECK_FALSE(message_record::decode(good.substr(0, n), out));
    }
    CHECK_FALSE(message_record::decode(good + "x", out));
    std::string bad_version = good;
    bad_version[0] = 2;
    CHECK_FALSE(message_record::decode(bad_version, out));
    bad_version[0] = 0;
    CHECK_FALSE(message_record::decode(bad_version, out));

    // A header count far beyond the bytes that follow must fail, not reserve gigabytes.
    std::string huge_count;
    huge_count.push_back(1);
    huge_count.push_back(1);
    huge_count.push_back(4);
    put_u64(huge_count, 0);
    put_u64(huge_count, 0);
    put_string(huge_count, "/queue/a");
    put_varint(huge_count, 0xffffffffffffull);
    put_string(huge_count, "");
    CHECK_FALSE(message_record::decode(huge_count, out));

    CHECK_FALSE(message_record::decode("", out));
    CHECK_FALSE(message_record::decode(std::string(64, '\xff'), out));
    CHECK_FALSE(message_record::decode(std::string(64, '\x01'), out));
  }

  TEST_CASE("a corrupt record is named by table and key, as text or as hex") {
    CHECK(printable_key("q/orders") == "'q/orders'");
    CHECK(printable_key(std::string("d/app\0sub", 9)) == "0x642f61707000737562");
    CHECK(printable_key("") == "'' (empty)");
    status s = corrupt_record(table::queues, "q/orders", "it does not decode");
    CHECK(s.which() == status::code::corrupt);
    CHECK(s.message().rfind("the queues table holds a record that cannot be decoded, key 'q/orders': it does not decode.",
                            0) == 0);
    CHECK(s.message().find("restore the data directory from a backup") != std::string::npos);
  }

  // Regression, found by tests/fuzz/fuzz_schema (corpus/schema/regression-priority-126): a record
  // with a priority above 9 (here 126) or an unknown flag bit decoded, and would have been served.
  TEST_CASE("message record decode rejects a priority above 9 and unknown flags") {
    const std::string found("\x01\x7e\xff\xff\xff\x01\x00\x00\x00\x00\x00\xff\xff\xfd\xff\xff\xff\xff\xff\x00\x00\x00", 22);
    message_record out;
    CHECK_FALSE(message_record::decode(found, out));

    message_record m;
    m.priority = 9;
    m.destination = "/queue/a";
    std::string good = m.encode();
    REQUIRE(message_record::decode(good, out));
    CHECK(out.priority == 9);
    std::string bad = good;
    bad[2] = 10;  // priority
    CHECK_FALSE(message_record::decode(bad, out));
    bad = good;
    bad[1] = 3;  // flags: bit 1 is not defined
    CHECK_FALSE(message_record::decode(bad, out));
    CHECK_FALSE(decode_inline_message(encode_delivery_count(0) + bad, out));
  }

  TEST_CASE("a commit decision round trips; a truncated or empty-database one does not decode") {
    decision_record d{"shop", "alice", 1764633600000};
    std::string v = d.encode();
    decision_record out;
    REQUIRE(decision_record::decode(v, out));
    CHECK(out.database == "shop");
    CHECK(out.owner == "alice");
    CHECK(out.decided_ms == 1764633600000);
    CHECK_FALSE(decision_record::decode(v.substr(0, v.size() - 1), out));
    CHECK_FALSE(decision_record::decode(v + "x", out));
    CHECK_FALSE(decision_record::decode(decision_record{"", "alice", 1}.encode(), out));
    CHECK(decision_record::decode(decision_record{"shop", "", 1}.encode(), out));  // anonymous
  }

  TEST_CASE("duplicate id keys: the address varint-prefixed, then the id; they round trip") {
    std::string k = duplicate_id_key("/queue/orders", "order-17");
    CHECK(k == std::string("\x0d/queue/ordersorder-17"));
    CHECK(k.rfind(duplicate_address_prefix("/queue/orders"), 0) == 0);
    std::string_view address, id;
    REQUIRE(parse_duplicate_id_key(k, address, id));
    CHECK(address == "/queue/orders");
    CHECK(id == "order-17");
    // /queue/x and /topic/x are two addresses; no address's keys start with another's prefix.
    CHECK(duplicate_id_key("/queue/x", "1") != duplicate_id_key("/topic/x", "1"));
    CHECK(duplicate_id_key("/queue/ab", "c").rfind(duplicate_address_prefix("/queue/a"), 0) != 0);
    CHECK(duplicate_id_key("/queue/a", "bc").rfind(duplicate_address_prefix("/queue/ab"), 0) != 0);
    // Binary ids are ids too.
    std::string binary("\x00\xff\x01", 3);
    std::string binary_key = duplicate_id_key("/topic/t", binary);  // the views point into it
    REQUIRE(parse_duplicate_id_key(binary_key, address, id));
    CHECK(id == binary);
  }

  TEST_CASE("duplicate id keys: malformed ones do not parse") {
    std::string_view address, id;
    CHECK_FALSE(parse_duplicate_id_key("", address, id));
    CHECK_FALSE(parse_duplicate_id_key(duplicate_address_prefix("/queue/a"), address, id));  // no id
    CHECK_FALSE(parse_duplicate_id_key(std::string("\x00", 1) + "id", address, id));      // empty address
    CHECK_FALSE(parse_duplicate_id_key("\x09/queue", address, id));                        // cut short
  }

  TEST_CASE("duplicate order keys: newest first within an address, and they round trip") {
    for (std::uint64_t seq : {1ull, 2ull, 255ull, 256ull, 0xfffffffffffffffeull}) {
      std::string k = duplicate_order_key("/queue/orders", seq);
      CHECK(k.size() == 1 + 13 + 8);
      std::string_view address;
      std::uint64_t out = 0;
      REQUIRE(parse_duplicate_order_key(k, address, out));
      CHECK(address == "/queue/orders");
      CHECK(out == seq);
    }
    CHECK(duplicate_order_key("/queue/a", 2) < duplicate_order_key("/queue/a", 1));
    CHECK(duplicate_order_key("/queue/a", 256) < duplicate_order_key("/queue/a", 255));
    std::string_view address;
    std::uint64_t out = 0;
    CHECK_FALSE(parse_duplicate_order_key("", address, out));
    CHECK_FALSE(parse_duplicate_order_key(duplicate_order_key("/queue/a", 1).substr(0, 15), address, out));
    CHECK_FALSE(parse_duplicate_order_key(duplicate_order_key("/queue/a", 1) + "x", address, out));
    CHECK_FALSE(parse_duplicate_order_key(duplicate_order_key("/queue/a", 0), address, out));  // numbers start at 1
  }

  TEST_CASE("duplicate id values are a u64 sequence of at least 1") {
    std::uint64_t out = 0;
    REQUIRE(decode_duplicate_sequence(encode_duplicate_sequence(0x0102030405060708ull), out));
    CHECK(out == 0x0102030405060708ull);
    CHECK(encode_duplicate_sequence(1) == std::string("\x00\x00\x00\x00\x00\x00\x00\x01", 8));
    CHECK_FALSE(decode_duplicate_sequence(encode_duplicate_sequence(0), out));
    CHECK_FALSE(decode_duplicate_sequence("1234567", out));
    CHECK_FALSE(decode_duplicate_sequence("123456789", out));
  }

  TEST_CASE("put_duplicate_id writes the twin records; the key limit is LMDB's") {
    batch b;
    put_duplicate_id(b, "/queue/orders", "id-1", 7);
    std::vector<std::tuple<table, std::string, std::string>> ops;
    REQUIRE(batch::decode(b.rep(), [&](batch::op o, table t, std::string_view k, std::string_view v) {
      CHECK(o == batch::op::put);
      ops.emplace_back(t, std::string(k), std::string(v));
    }));
    REQUIRE(ops.size() == 2);
    CHECK(ops[0] == std::make_tuple(table::duplicate_ids, duplicate_id_key("/queue/orders", "id-1"),
                                    encode_duplicate_sequence(7)));
    CHECK(ops[1] == std::make_tuple(table::duplicate_order, duplicate_order_key("/queue/orders", 7), std::string("id-1")));
    CHECK(duplicate_key_fits("/queue/orders", std::string(kMaxDuplicateIdBytes, 'x')));
    std::string long_address = "/queue/" + std::string(300, 'a');
    CHECK(duplicate_key_fits(long_address, std::string(200, 'x')));
    CHECK_FALSE(duplicate_key_fits(long_address, std::string(210, 'x')));
  }
}
