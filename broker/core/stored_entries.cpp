// Reading stored queue entries (stored_entries.h).
#include "escrow/broker/core/stored_entries.h"

#include <optional>
#include <string>
#include <utility>

#include "escrow/storage/store.h"

namespace escrow::broker {

bool read_record(const storage::store& s, const storage::entry_key& key, std::string_view value,
                 storage::message_record& out) {
  if (value.size() > 4) return storage::decode_inline_message(value, out);
  std::string bytes;
  if (!s.get(storage::table::messages, storage::message_key(key.message_id), bytes).ok()) return false;
  return storage::message_record::decode(bytes, out);
}

storage::status read_stored_entries(const storage::store& s, std::uint32_t queue_id, std::size_t limit,
                                    bool with_messages, std::vector<stored_entry>& out,
                                    std::optional<storage::entry_key> after) {
  const std::string prefix = storage::queue_prefix(queue_id);
  // Where the scan starts: the queue's first entry, or the first key in queue order past `after`
  // (the next message id of its priority; past the last id, the next priority's first).
  std::string from = prefix;
  if (after) {
    storage::entry_key next{queue_id, after->priority, after->message_id + 1};
    if (after->message_id == UINT64_MAX) {
      if (after->priority == 0) return {};
      next = {queue_id, static_cast<std::uint8_t>(after->priority - 1), 0};
    }
    from = next.encode();
  }
  // Keys and values are copied out first: the message records of topic messages are read in
  // transactions of their own, after the scan's has ended.
  std::vector<std::pair<storage::entry_key, std::string>> found;
  storage::status st = s.scan(storage::table::entries, from, prefix, [&](std::string_view k, std::string_view v) {
    storage::entry_key key;
    if (!storage::entry_key::decode(k, key)) return true;
    found.emplace_back(key, with_messages ? std::string(v) : std::string(v.substr(0, 4)));
    return limit == 0 || found.size() < limit;
  });
  if (!st.ok()) return st;
  out.reserve(out.size() + found.size());
  for (auto& [key, value] : found) {
    stored_entry e;
    e.key = key;
    e.delivery_count = storage::decode_delivery_count(value);
    if (with_messages) e.readable = read_record(s, key, value, e.record);
    out.push_back(std::move(e));
  }
  return {};
}

std::uint64_t oldest_stored_timestamp(const storage::store& s, std::uint32_t queue_id) {
  const std::string prefix = storage::queue_prefix(queue_id);
  std::optional<storage::entry_key> oldest;
  std::string oldest_value;
  for (int priority = 9; priority >= 0; --priority) {
    storage::entry_key from{queue_id, static_cast<std::uint8_t>(priority), 0};
    (void)s.scan(storage::table::entries, from.encode(), prefix, [&](std::string_view k, std::string_view v) {
      storage::entry_key key;
      if (storage::entry_key::decode(k, key) && key.priority == priority &&
          (!oldest || key.message_id < oldest->message_id)) {
        oldest = key;
        oldest_value = v;
      }
      return false;
    });
  }
  storage::message_record r;
  if (!oldest || !read_record(s, *oldest, oldest_value, r)) return 0;
  return r.timestamp;
}

}  // namespace escrow::broker
