// A batch: the atomic unit of change, built in memory and applied whole by the committer, like
// LevelDB's WriteBatch. Its byte layout (docs/storage.md) is a sequence of operations:
//
//   op      : u8  (1 = put, 2 = erase, 3 = release_message, 4 = set_delivery_count,
//                  5 = remove_entry, 6 = promote_scheduled, 7 = remove_scheduled)
//   table   : u8  (escrow::storage::table)
//   key     : varint length, bytes
//   value   : varint length, bytes        (put and set_delivery_count only)
//
// Encoding and decoding are pure functions over bytes, so tests need no disk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace escrow::storage {

// The named sub-databases of the environment. See schema.h for what each holds.
enum class table : std::uint8_t {
  meta = 0, queues = 1, messages = 2, message_refs = 3, entries = 4, branches = 5, expiries = 6,
  decisions = 7, duplicate_ids = 8, duplicate_order = 9, scheduled = 10
};
inline constexpr int kTableCount = 11;
// The tables schema version 6 added: a store of an older version that escrowd has not opened
// since (it creates every table at open) lacks them, and reads as if they were empty.
inline constexpr int kFirstTableOfVersion6 = 7;  // then version 7's (scheduled) after them
const char* table_name(table t);

class batch {
 public:
  enum class op : std::uint8_t {
    put = 1, erase = 2, release_message = 3, set_delivery_count = 4, remove_entry = 5, promote_scheduled = 6,
    remove_scheduled = 7
  };

  // Stores `value` under `key`, replacing what was there.
  void put(table t, std::string_view key, std::string_view value);
  // Stores under `key` a value of exactly `size` bytes that the caller appends to the returned
  // string at once, before any other call on this batch: a large value (a message record) is
  // written into the batch without a copy of its own.
  std::string& put_in_place(table t, std::string_view key, std::size_t size);
  // Removes `key`; a missing key is not an error.
  void erase(table t, std::string_view key);
  // Drops one reference to the message stored under `message_key`: the message is deleted with
  // its last reference (a message_refs record holds the count when it is above one).
  void release_message(std::string_view message_key);
  // Sets the delivery count at the head of an entry's value, keeping the message stored inline
  // after it; an entry that is gone (acknowledged meanwhile) stays gone.
  void set_delivery_count(std::string_view entry_key, std::uint32_t count);
  // Removes a queue entry, its record in the expiry index (when its message expires) and, unless
  // the message is stored inline in it, the entry's reference to the message (release_message).
  void remove_entry(std::string_view entry_key);
  // A scheduled message's time has come (schema.h, `scheduled`): its record under `scheduled_key`
  // becomes the queue entry it stands for, value unchanged, with its expiry index record when the
  // message expires. A record that is gone (delivered or deleted meanwhile) stays gone.
  void promote_scheduled(std::string_view scheduled_key);
  // Removes a scheduled message's record and, unless the message is stored inline in it, its
  // reference to the message (release_message).
  void remove_scheduled(std::string_view scheduled_key);

  // Room for `bytes` more of operations, to spare reallocations when a large value follows.
  void reserve(std::size_t bytes) { rep_.reserve(rep_.size() + bytes); }
  bool empty() const { return rep_.empty(); }
  std::size_t byte_size() const { return rep_.size(); }
  const std::string& rep() const { return rep_; }
  void append(const batch& other) { rep_ += other.rep_; }

  // Calls `visit` for each operation in order. Returns false if the bytes are malformed.
  using visitor = std::function<void(op, table, std::string_view key, std::string_view value)>;
  static bool decode(std::string_view rep, const visitor& visit);

 private:
  std::string rep_;
};

}  // namespace escrow::storage
