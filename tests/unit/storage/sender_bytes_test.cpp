// The bytes of stored messages by sender (limits.max-stored-bytes-per-user): the record's optional
// sender, and the store's count of it, changed by committed batches only.
#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "small_store.h"

using namespace escrow::storage;
using escrow::testing::open_or_fail;
using escrow::testing::small_store;
using escrow::testing::temp_dir;

namespace {

message_record record_of(const std::optional<std::string>& sender, std::size_t body = 100) {
  message_record m;
  m.destination = "/queue/q";
  m.headers = {{"k", "v"}};
  m.body = std::string(body, 'b');
  m.sender = sender;
  return m;
}

status submit_and_wait(store& s, batch b) {
  auto p = std::make_shared<std::promise<status>>();
  auto f = p->get_future();
  s.submit(std::move(b), [p](status st) { p->set_value(std::move(st)); });
  return f.get();
}

}  // namespace

TEST_SUITE("storage/sender bytes") {
  TEST_CASE("a message record's sender round trips, optional at its end") {
    for (std::optional<std::string> sender : {std::optional<std::string>{}, std::optional<std::string>{""},
                                              std::optional<std::string>{"bob"}}) {
      message_record m = record_of(sender);
      std::string bytes = m.encode();
      CHECK(bytes.size() == m.encoded_size());
      message_record out;
      out.sender = "stale";
      REQUIRE(message_record::decode(bytes, out));
      CHECK(out.sender == sender);
      CHECK(out.body == m.body);
      std::string_view peeked;
      CHECK(peek_sender(bytes, peeked) == sender.has_value());
      if (sender) CHECK(peeked == *sender);
      // Cut anywhere, it does not decode, but where the record without a sender ends.
      const std::size_t without = record_of(std::nullopt).encode().size();
      for (std::size_t n = 0; n + 1 < bytes.size(); ++n) {
        std::string_view cut(bytes.data(), n);
        CHECK(message_record::decode(cut, out) == (n == without));
        CHECK_FALSE(peek_sender(cut, peeked));
      }
    }
    // A record of schema 4 (no sender) is what a record without one encodes to.
    CHECK(record_of(std::nullopt).encode() + std::string(1, '\0') == record_of(std::string()).encode());
  }

  TEST_CASE("committed batches count each sender's records once, removals give them back") {
    temp_dir dir;
    auto s = open_or_fail(small_store(dir.path()));
    message_record bob = record_of("bob"), alice = record_of("alice", 300), old = record_of(std::nullopt);
    batch b;
    put_message(b, 1, bob, {entry_key{1, 4, 1}});                       // inline in its entry
    put_message(b, 2, bob, {entry_key{2, 4, 2}, entry_key{3, 4, 2}});   // shared by two entries
    put_message(b, 3, alice, {entry_key{1, 4, 3}});
    put_message(b, 4, old, {entry_key{1, 4, 4}});                       // no sender: nobody's
    REQUIRE(submit_and_wait(*s, std::move(b)).ok());
    CHECK(s->stored_bytes_of("bob") == 2 * bob.encoded_size());
    CHECK(s->stored_bytes_of("alice") == alice.encoded_size());
    CHECK(s->stored_bytes_of("") == 0);

    batch r;
    erase_entry(r, entry_key{1, 4, 1});
    erase_entry(r, entry_key{2, 4, 2});  // one of two references: the shared record stays
    REQUIRE(submit_and_wait(*s, std::move(r)).ok());
    CHECK(s->stored_bytes_of("bob") == bob.encoded_size());
    batch last;
    erase_entry(last, entry_key{3, 4, 2});
    erase_entry(last, entry_key{1, 4, 3});
    erase_entry(last, entry_key{1, 4, 3});  // twice: the second finds nothing
    REQUIRE(submit_and_wait(*s, std::move(last)).ok());
    CHECK(s->stored_bytes_of("bob") == 0);
    CHECK(s->stored_bytes_of("alice") == 0);

    // What was stored before open is added once, from the count at open; changes since add up.
    s->add_stored_bytes({{"carol", 1000}});
    CHECK(s->stored_bytes_of("carol") == 1000);
  }

  TEST_CASE("a refused batch counts nothing (invariant 8)") {
    temp_dir dir;
    auto s = open_or_fail(small_store(dir.path(), "commit:1:enospc"));
    batch b;
    put_message(b, 1, record_of("bob"), {entry_key{1, 4, 1}});
    CHECK_FALSE(submit_and_wait(*s, std::move(b)).ok());
    CHECK(s->stored_bytes_of("bob") == 0);
    batch again;
    put_message(again, 1, record_of("bob"), {entry_key{1, 4, 1}});
    REQUIRE(submit_and_wait(*s, std::move(again)).ok());
    CHECK(s->stored_bytes_of("bob") == record_of("bob").encoded_size());
  }

  TEST_CASE("stored_sender reads an entry's inline record or a messages value") {
    std::string entry = encode_delivery_count(3) + record_of("bob").encode();
    std::string_view sender;
    std::size_t bytes = 0;
    REQUIRE(store::stored_sender(table::entries, entry, sender, bytes));
    CHECK(sender == "bob");
    CHECK(bytes == entry.size() - 4);
    CHECK_FALSE(store::stored_sender(table::entries, encode_delivery_count(0), sender, bytes));
    CHECK_FALSE(store::stored_sender(table::queues, entry, sender, bytes));
  }
}
