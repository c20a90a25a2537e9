// What each table holds, and the typed keys and values that live in it (schema version 7).
//
//   meta          "schema-version" -> u32;  "next-message-id" -> u64 (ids below it were used);
//                 "next-queue-id" -> u32 (queue ids are never reused, even after a queue is dropped);
//                 "log-position" -> the commit log record LMDB holds last (commit_log.h);
//                 "store-id" -> u64, random, given at creation: the commit log names it
//   queues        queue name -> queue_record (id, kind, topic)
//   messages      u64 message id -> message_record (headers and body, stored once)
//   message_refs  u64 message id -> u32 references, only while a message has more than one
//   entries       entry_key (u32 queue id, u8 9-priority, u64 message id) -> u32 delivery count,
//                 followed by the message_record itself when this entry is the message's only
//                 stored entry (a queue message: one B-tree value instead of two)
//   branches      xid::encode() -> a prepared or heuristically completed branch (rm/record.h)
//   expiries      u64 expires (epoch ms) | entry_key -> empty: the expiry index, one record per
//                 stored entry whose message expires, so the reaper reads only what has expired
//   decisions     PostgreSQL global transaction id -> decision_record: a coordinated transaction
//                 committed here whose COMMIT PREPARED in its database is not known to be done
//                 (written in the batch that commits the transaction, erased once the database
//                 has committed too; docs/exactly-once.md)
//   duplicate_ids    string address | id -> u64 sequence: the _AMQ_DUPL_ID values each address
//                    remembers (id-cache-size of them); an address is a SEND's destination
//                    ("/queue/orders" and "/topic/orders" are two), a varint-prefixed string, so no
//                    address's keys run into another's
//   duplicate_order  string address | u64 (2^64-1 - sequence) -> id: the same ids in the order
//                    they were stored, newest first; sequences count up per address from 1. Each
//                    record of one table has its twin in the other (written and erased together,
//                    in the batch that stores the message or commits its transaction)
//   scheduled     u32 queue id | u64 due (epoch ms) | u8 9-priority | u64 message id -> the value
//                 the entry will have (u32 delivery count, the message inline when this is its
//                 only stored entry): a stored message whose delivery time has not come, not yet
//                 an entry of its queue. Due is the message's deliver_at, or its expires when that
//                 is earlier (it then goes to the expiry address, never to a consumer). Per queue in
//                 time order, so a pass reads only what is due; promote_scheduled makes it an entry
//                 (with its expiry index record) when due. Added by schema version 7
//
// Queue order is key order: a cursor over a queue's entries yields them by priority, highest
// first, then by arrival. All integers are big-endian. docs/storage.md has the same layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "escrow/storage/batch.h"
#include "escrow/storage/status.h"

namespace escrow::storage {

inline constexpr std::string_view kSchemaVersionKey = "schema-version";
inline constexpr std::string_view kNextMessageIdKey = "next-message-id";
inline constexpr std::string_view kNextQueueIdKey = "next-queue-id";
inline constexpr std::string_view kLogPositionKey = "log-position";
inline constexpr std::string_view kStoreIdKey = "store-id";

std::string message_key(std::uint64_t message_id);
bool parse_message_key(std::string_view key, std::uint64_t& message_id);

// The position of one message in one queue.
struct entry_key {
  std::uint32_t queue_id = 0;
  std::uint8_t priority = 4;  // 0-9, 9 first
  std::uint64_t message_id = 0;

  std::string encode() const;
  static bool decode(std::string_view key, entry_key& out);
  // Queue order: higher priority first, then older first.
  friend bool operator<(const entry_key& a, const entry_key& b) {
    if (a.queue_id != b.queue_id) return a.queue_id < b.queue_id;
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.message_id < b.message_id;
  }
  friend bool operator==(const entry_key&, const entry_key&) = default;
};
// The 4-byte prefix shared by every entry of a queue.
std::string queue_prefix(std::uint32_t queue_id);

// A record of the expiry index: the entry's message expires at `expires` (epoch ms, not 0).
std::string expiry_key(std::uint64_t expires, const entry_key& entry);
bool parse_expiry_key(std::string_view key, std::uint64_t& expires, entry_key& entry);
// The `expires` field of an encoded message_record without decoding the rest; 0 when malformed.
std::uint64_t peek_expires(std::string_view message_record_bytes);
// The time a scheduled message (deliver_at set) leaves the `scheduled` table: deliver_at, or the
// expiry when that comes first.
std::uint64_t scheduled_due(std::uint64_t deliver_at, std::uint64_t expires);
// A record of the `scheduled` table (layout above): 21 bytes.
std::string scheduled_key(std::uint64_t due, const entry_key& entry);
bool parse_scheduled_key(std::string_view key, std::uint64_t& due, entry_key& entry);
// The `sender` of an encoded message_record, skipping the rest without copying it: true and
// `sender` set when it has one; false when it has none or is malformed.
bool peek_sender(std::string_view message_record_bytes, std::string_view& sender);

std::string encode_delivery_count(std::uint32_t count);
std::uint32_t decode_delivery_count(std::string_view value);

struct queue_record {
  enum class kind : std::uint8_t { queue = 1, durable_subscription = 2 };
  std::uint32_t id = 0;
  kind type = kind::queue;
  std::string topic;  // the topic a durable subscription listens to; empty for a queue
  // The user whose frame created it ("" anonymous); none for the broker's or an operator's queues
  // and for records stored before queues had creators. Optional at the end of the record.
  std::optional<std::string> creator;
  // A durable subscription's selector (SUBSCRIBE's `selector`), as its text; empty: none. After
  // the creator (written, "" if none, whenever a selector is), optional at the end of the record.
  std::string selector;

  std::string encode() const;
  static bool decode(std::string_view value, queue_record& out);
};

// A message as stored: the headers it was sent with (in order, first occurrence wins) and body.
struct message_record {
  bool persistent = true;
  std::uint8_t priority = 4;
  std::uint64_t expires = 0;    // epoch ms, 0 = never
  std::uint64_t timestamp = 0;  // epoch ms when the broker accepted it
  std::string destination;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The user whose SEND stored it ("" anonymous), counted in limits.max-stored-bytes-per-user;
  // none for records stored before schema version 5. Optional at the end of the record; a dead
  // letter or expired copy keeps it.
  std::optional<std::string> sender;
  // Scheduled delivery (_AMQ_SCHED_DELIVERY and its spellings, docs/stomp.md): the epoch ms before
  // which no consumer gets it; 0 = at once. A record with it is stored in `scheduled` until due.
  std::uint64_t deliver_at = 0;

  // The value of header `name` (exact: STOMP's headers are case-sensitive), the first if repeated;
  // null when it has none.
  const std::string* find_header(std::string_view name) const {
    for (const auto& [n, v] : headers)
      if (n == name) return &v;
    return nullptr;
  }

  std::string encode() const;
  // Appends the encoding to `out` (straight into a batch: see put_message), exactly
  // encoded_size() bytes.
  void encode_to(std::string& out) const;
  std::size_t encoded_size() const;
  static bool decode(std::string_view value, message_record& out);
};

// A commit decision of a coordinated PostgreSQL transaction (table `decisions`, keyed by its gid).
struct decision_record {
  std::string database;         // the [[coordinator.postgresql]] name it was prepared in
  std::string owner;            // the user whose transaction it was
  std::uint64_t decided_ms = 0;  // wall clock, for operators

  std::string encode() const;
  static bool decode(std::string_view value, decision_record& out);
};

// Duplicate detection (broker/core/duplicates.cpp; docs/stomp.md, "Duplicate detection"). Keys
// of duplicate_ids and duplicate_order (layout above); an id is at most kMaxDuplicateIdBytes, and
// the key it makes with its address at most kMaxDuplicateKeyBytes (LMDB's key limit).
inline constexpr std::size_t kMaxDuplicateIdBytes = 256;
inline constexpr std::size_t kMaxDuplicateKeyBytes = 511;
std::string duplicate_address_prefix(std::string_view address);  // what every key of the address starts with
std::string duplicate_id_key(std::string_view address, std::string_view id);
bool parse_duplicate_id_key(std::string_view key, std::string_view& address, std::string_view& id);
std::string duplicate_order_key(std::string_view address, std::uint64_t sequence);
bool parse_duplicate_order_key(std::string_view key, std::string_view& address, std::uint64_t& sequence);
std::string encode_duplicate_sequence(std::uint64_t sequence);  // the value of a duplicate_ids record
bool decode_duplicate_sequence(std::string_view value, std::uint64_t& sequence);
// Whether an id record for `id` at `address` fits in a key (both tables' keys then fit).
bool duplicate_key_fits(std::string_view address, std::string_view id);
// The twin records of `id`, the `sequence`-th id of `address`.
void put_duplicate_id(batch& b, std::string_view address, std::string_view id, std::uint64_t sequence);

// A corrupted store (docs/storage.md, "A corrupted store"): a record that does not decode.
// printable_key: the key as text when every byte is printable ASCII, else as hex ("0x0001...").
std::string printable_key(std::string_view key);
// A status (code corrupt) naming the table, the key and what is wrong with the record, and saying
// what to do: stop escrowd and restore the data directory from a backup.
status corrupt_record(table t, std::string_view key, std::string_view problem);

class store;

// The id counters in `meta`. A batch that stores an id carries the counter past it, so that a
// restart never hands the id out again. Absent counters read as 1.
struct next_ids {
  std::uint64_t message = 1;
  std::uint32_t queue = 1;
};
void put_next_message_id(batch& b, std::uint64_t next);
void put_next_queue_id(batch& b, std::uint32_t next);
// Reads both counters; a corrupt status when one has the wrong size.
status read_next_ids(const store& s, next_ids& out);

// Batch helpers for the changes every path makes the same way.
// Stores a new message for its stored entries, with delivery count 0: inline in the entry when
// there is one, else once in `messages` (with a message_refs record) and referenced by each; and,
// when the message expires, one expiry index record per entry. A scheduled message (deliver_at
// set) gets `scheduled` records in place of entries, and no expiry records until it is promoted.
void put_message(batch& b, std::uint64_t message_id, const message_record& record,
                 const std::vector<entry_key>& entries);
// Removes one queue entry and drops its reference to the message (deleted with the last one).
void erase_entry(batch& b, const entry_key& key);
// The message stored inline in an entry's value, if it has one.
bool decode_inline_message(std::string_view entry_value, message_record& out);

}  // namespace escrow::storage
