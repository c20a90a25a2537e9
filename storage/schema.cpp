// Typed keys and values of the store's tables; layout documented in schema.h.
#include "escrow/storage/schema.h"

#include <algorithm>

#include "escrow/common/hex.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/store.h"

namespace escrow::storage {

std::string message_key(std::uint64_t message_id) {
  std::string k;
  put_u64(k, message_id);
  return k;
}

bool parse_message_key(std::string_view key, std::uint64_t& message_id) {
  return key.size() == 8 && get_u64(key, message_id);
}

std::string entry_key::encode() const {
  std::string k;
  k.reserve(13);
  put_u32(k, queue_id);
  k.push_back(static_cast<char>(9 - priority));
  put_u64(k, message_id);
  return k;
}

bool entry_key::decode(std::string_view key, entry_key& out) {
  if (key.size() != 13) return false;
  get_u32(key, out.queue_id);
  auto inverted = static_cast<std::uint8_t>(key.front());
  if (inverted > 9) return false;
  out.priority = static_cast<std::uint8_t>(9 - inverted);
  key.remove_prefix(1);
  return get_u64(key, out.message_id);
}

std::string queue_prefix(std::uint32_t queue_id) {
  std::string k;
  put_u32(k, queue_id);
  return k;
}

std::string expiry_key(std::uint64_t expires, const entry_key& entry) {
  std::string k;
  k.reserve(21);
  put_u64(k, expires);
  k += entry.encode();
  return k;
}

bool parse_expiry_key(std::string_view key, std::uint64_t& expires, entry_key& entry) {
  return key.size() == 21 && get_u64(key, expires) && entry_key::decode(key, entry);
}

std::uint64_t scheduled_due(std::uint64_t deliver_at, std::uint64_t expires) {
  return expires != 0 && expires < deliver_at ? expires : deliver_at;
}

std::string scheduled_key(std::uint64_t due, const entry_key& entry) {
  std::string k;
  k.reserve(21);
  put_u32(k, entry.queue_id);
  put_u64(k, due);
  k.push_back(static_cast<char>(9 - entry.priority));
  put_u64(k, entry.message_id);
  return k;
}

bool parse_scheduled_key(std::string_view key, std::uint64_t& due, entry_key& entry) {
  if (key.size() != 21) return false;
  get_u32(key, entry.queue_id);
  get_u64(key, due);
  auto inverted = static_cast<std::uint8_t>(key.front());
  if (inverted > 9) return false;
  entry.priority = static_cast<std::uint8_t>(9 - inverted);
  key.remove_prefix(1);
  return get_u64(key, entry.message_id);
}

namespace {
constexpr char kPersistentFlag = 1;
constexpr char kScheduledFlag = 2;  // a u64 deliver_at follows the timestamp
// The bytes before the destination: version, flags, priority, expires, timestamp (and deliver_at).
std::size_t fixed_prefix(std::string_view record) {
  return 19 + ((record[1] & kScheduledFlag) ? 8 : 0);
}
}  // namespace

std::uint64_t peek_expires(std::string_view record) {
  // Layout (message_record::encode): u8 version | u8 flags | u8 priority | u64 expires | ...
  std::uint64_t expires = 0;
  if (record.size() < 11 || record[0] != 1) return 0;
  record.remove_prefix(3);
  return get_u64(record, expires) ? expires : 0;
}

bool peek_sender(std::string_view record, std::string_view& sender) {
  if (record.size() < 19 || record[0] != 1 || record.size() < fixed_prefix(record)) return false;
  record.remove_prefix(fixed_prefix(record));
  std::string_view s;
  std::uint64_t count = 0;
  if (!get_string(record, s) || !get_varint(record, count) || count > record.size()) return false;
  for (std::uint64_t i = 0; i < 2 * count + 1; ++i)  // the headers' names and values, then the body
    if (!get_string(record, s)) return false;
  return !record.empty() && get_string(record, sender) && record.empty();
}

std::string encode_delivery_count(std::uint32_t count) {
  std::string v;
  put_u32(v, count);
  return v;
}

std::uint32_t decode_delivery_count(std::string_view value) {
  std::uint32_t count = 0;
  return get_u32(value, count) ? count : 0;
}

std::string queue_record::encode() const {
  std::string v;
  put_u32(v, id);
  v.push_back(static_cast<char>(type));
  put_string(v, topic);
  if (creator || !selector.empty()) put_string(v, creator.value_or(""));
  if (!selector.empty()) put_string(v, selector);
  return v;
}

bool queue_record::decode(std::string_view value, queue_record& out) {
  if (!get_u32(value, out.id) || value.empty()) return false;
  auto k = static_cast<std::uint8_t>(value.front());
  if (k != 1 && k != 2) return false;
  out.type = static_cast<kind>(k);
  value.remove_prefix(1);
  std::string_view topic;
  if (!get_string(value, topic)) return false;
  out.topic = topic;
  out.creator.reset();
  out.selector.clear();
  if (value.empty()) return true;
  std::string_view creator;
  if (!get_string(value, creator)) return false;
  out.creator = std::string(creator);
  out.selector.clear();
  if (value.empty()) return true;
  std::string_view selector;
  if (!get_string(value, selector) || selector.empty()) return false;
  out.selector = selector;
  return value.empty();
}

// Layout: string database | string owner | u64 decided_ms.
std::string decision_record::encode() const {
  std::string v;
  put_string(v, database);
  put_string(v, owner);
  put_u64(v, decided_ms);
  return v;
}

bool decision_record::decode(std::string_view value, decision_record& out) {
  std::string_view database, owner;
  if (!get_string(value, database) || !get_string(value, owner) || !get_u64(value, out.decided_ms)) return false;
  out.database = database;
  out.owner = owner;
  return value.empty() && !out.database.empty();
}

std::string duplicate_address_prefix(std::string_view address) {
  std::string k;
  put_string(k, address);
  return k;
}

std::string duplicate_id_key(std::string_view address, std::string_view id) {
  std::string k = duplicate_address_prefix(address);
  k.append(id);
  return k;
}

bool parse_duplicate_id_key(std::string_view key, std::string_view& address, std::string_view& id) {
  if (!get_string(key, address) || address.empty() || key.empty()) return false;
  id = key;
  return true;
}

// Newest first: the sequence inverted, so that a forward cursor from an address's prefix meets its
// newest id first, and one from a sequence meets the older ones after it.
std::string duplicate_order_key(std::string_view address, std::uint64_t sequence) {
  std::string k = duplicate_address_prefix(address);
  put_u64(k, ~sequence);
  return k;
}

bool parse_duplicate_order_key(std::string_view key, std::string_view& address, std::uint64_t& sequence) {
  std::uint64_t inverted = 0;
  if (!get_string(key, address) || address.empty() || key.size() != 8 || !get_u64(key, inverted)) return false;
  sequence = ~inverted;
  return sequence != 0;
}

std::string encode_duplicate_sequence(std::uint64_t sequence) {
  std::string v;
  put_u64(v, sequence);
  return v;
}

bool decode_duplicate_sequence(std::string_view value, std::uint64_t& sequence) {
  return value.size() == 8 && get_u64(value, sequence) && sequence != 0;
}

bool duplicate_key_fits(std::string_view address, std::string_view id) {
  return string_size(address) + std::max<std::size_t>(id.size(), 8) <= kMaxDuplicateKeyBytes;
}

void put_duplicate_id(batch& b, std::string_view address, std::string_view id, std::uint64_t sequence) {
  b.put(table::duplicate_ids, duplicate_id_key(address, id), encode_duplicate_sequence(sequence));
  b.put(table::duplicate_order, duplicate_order_key(address, sequence), id);
}

// Layout: u8 version(1) | u8 flags (bit 0 persistent, bit 1 scheduled) | u8 priority | u64 expires
//         | u64 timestamp | u64 deliver_at (only when scheduled) | string destination | varint header count | (string name, string value)* | string body
std::string message_record::encode() const {
  std::string v;
  v.reserve(encoded_size());
  encode_to(v);
  return v;
}

std::size_t message_record::encoded_size() const {
  std::size_t size = 3 + 8 + 8 + (deliver_at != 0 ? 8 : 0) + string_size(destination) + varint_size(headers.size()) + string_size(body);
  for (const auto& [n, val] : headers) size += string_size(n) + string_size(val);
  if (sender) size += string_size(*sender);
  return size;
}

void message_record::encode_to(std::string& v) const {
  v.push_back(1);
  v.push_back(static_cast<char>((persistent ? kPersistentFlag : 0) | (deliver_at != 0 ? kScheduledFlag : 0)));
  v.push_back(static_cast<char>(priority));
  put_u64(v, expires);
  put_u64(v, timestamp);
  if (deliver_at != 0) put_u64(v, deliver_at);
  put_string(v, destination);
  put_varint(v, headers.size());
  for (const auto& [n, val] : headers) {
    put_string(v, n);
    put_string(v, val);
  }
  put_string(v, body);
  if (sender) put_string(v, *sender);
}

bool message_record::decode(std::string_view value, message_record& out) {
  // Only what encode() writes: a flag byte of 0 or 1 and a priority of 0-9 (found by
  // tests/fuzz/fuzz_schema: a corrupt priority would be served, and a dead letter or expired copy
  // made from it would get an entry key that no longer decodes).
  if (value.size() < 3 || value[0] != 1 || static_cast<std::uint8_t>(value[1]) > 3 ||
      static_cast<std::uint8_t>(value[2]) > 9)
    return false;
  out.persistent = (value[1] & kPersistentFlag) != 0;
  bool scheduled = (value[1] & kScheduledFlag) != 0;
  out.priority = static_cast<std::uint8_t>(value[2]);
  value.remove_prefix(3);
  std::string_view s;
  std::uint64_t count = 0;
  out.deliver_at = 0;
  if (!get_u64(value, out.expires) || !get_u64(value, out.timestamp) ||
      (scheduled && (!get_u64(value, out.deliver_at) || out.deliver_at == 0)) || !get_string(value, s))
    return false;
  out.destination = s;
  if (!get_varint(value, count) || count > value.size()) return false;
  out.headers.clear();
  out.headers.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::string_view n, val;
    if (!get_string(value, n) || !get_string(value, val)) return false;
    out.headers.emplace_back(n, val);
  }
  if (!get_string(value, s)) return false;
  out.body = s;
  out.sender.reset();
  if (value.empty()) return true;
  if (!get_string(value, s)) return false;
  out.sender = std::string(s);
  return value.empty();
}

std::string printable_key(std::string_view key) {
  if (key.empty()) return "'' (empty)";
  bool printable = true;
  for (char c : key) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return "'" + std::string(key) + "'";
  return "0x" + hex::encode(key);
}

status corrupt_record(table t, std::string_view key, std::string_view problem) {
  return {status::code::corrupt,
          "the " + std::string(table_name(t)) + " table holds a record that cannot be decoded, key " +
              printable_key(key) + ": " + std::string(problem) +
              ". The store is corrupted: stop escrowd and restore the data directory from a backup "
              "(docs/storage.md, \"A corrupted store\")"};
}

void put_message(batch& b, std::uint64_t message_id, const message_record& record,
                 const std::vector<entry_key>& entries) {
  const bool scheduled = record.deliver_at != 0;
  const table where = scheduled ? table::scheduled : table::entries;
  const std::uint64_t due = scheduled_due(record.deliver_at, record.expires);
  auto key_of = [&](const entry_key& e) { return scheduled ? scheduled_key(due, e) : e.encode(); };
  if (record.expires != 0 && !scheduled)
    for (const auto& e : entries) b.put(table::expiries, expiry_key(record.expires, e), {});
  // The record is encoded straight into the batch: the body is copied once here, not three times.
  if (entries.size() == 1) {
    std::string& value = b.put_in_place(where, key_of(entries.front()), 4 + record.encoded_size());
    put_u32(value, 0);  // the delivery count (encode_delivery_count), then the message inline
    record.encode_to(value);
    return;
  }
  for (const auto& e : entries) b.put(where, key_of(e), encode_delivery_count(0));
  std::string key = message_key(message_id);
  record.encode_to(b.put_in_place(table::messages, key, record.encoded_size()));
  if (entries.size() > 1) {
    std::string refs;
    put_u32(refs, static_cast<std::uint32_t>(entries.size()));
    b.put(table::message_refs, key, refs);
  }
}

void erase_entry(batch& b, const entry_key& key) { b.remove_entry(key.encode()); }

bool decode_inline_message(std::string_view entry_value, message_record& out) {
  return entry_value.size() > 4 && message_record::decode(entry_value.substr(4), out);
}

void put_next_message_id(batch& b, std::uint64_t next) {
  std::string v;
  put_u64(v, next);
  b.put(table::meta, kNextMessageIdKey, v);
}

void put_next_queue_id(batch& b, std::uint32_t next) {
  std::string v;
  put_u32(v, next);
  b.put(table::meta, kNextQueueIdKey, v);
}

status read_next_ids(const store& s, next_ids& out) {
  out = next_ids{};
  std::string value;
  auto read = [&](std::string_view key, std::size_t size) -> status {
    value.clear();
    status r = s.get(table::meta, key, value);
    if (r.which() == status::code::not_found) return {};
    if (!r.ok()) return r;
    if (value.size() != size)
      return corrupt_record(table::meta, key, "a u" + std::to_string(size * 8) + " is " + std::to_string(size) +
                                                  " bytes, this value is " + std::to_string(value.size()));
    return {};
  };
  if (status r = read(kNextMessageIdKey, 8); !r.ok()) return r;
  if (std::string_view v = value; !v.empty()) get_u64(v, out.message);
  if (status r = read(kNextQueueIdKey, 4); !r.ok()) return r;
  if (std::string_view v = value; !v.empty()) get_u32(v, out.queue);
  return {};
}

}  // namespace escrow::storage
