// Reading a queue's stored messages straight from LMDB, without touching the queue: nothing is
// held, delivered or counted. For the admin commands (broker/admin: browse, the oldest message's
// age) and the core's purges and moves (sweeps.cpp). Short read transactions, safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "escrow/storage/schema.h"
#include "escrow/storage/status.h"

namespace escrow::storage {
class store;
}

namespace escrow::broker {

struct stored_entry {
  storage::entry_key key;
  std::uint32_t delivery_count = 0;  // as stored (deliveries that ended without an ack)
  storage::message_record record;    // filled when asked for and readable
  bool readable = false;             // the record was asked for and decoded
};

// The message of the stored entry `key` whose value is `value`: decoded from the value when the
// message is stored inline in it, else read from the messages table. False when it does not decode.
bool read_record(const storage::store& s, const storage::entry_key& key, std::string_view value,
                 storage::message_record& out);

// The stored entries of queue `queue_id` in queue order, at most `limit` (0: all), those after
// `after` only when it is set (a page that goes on from the last entry of the one before). With
// `with_messages`, each entry's message record is read too.
storage::status read_stored_entries(const storage::store& s, std::uint32_t queue_id, std::size_t limit,
                                    bool with_messages, std::vector<stored_entry>& out,
                                    std::optional<storage::entry_key> after = std::nullopt);

// The timestamp (epoch ms) of the queue's oldest stored message, 0 when it has none: the lowest
// message id among the first entry of each priority, so at most ten short reads.
std::uint64_t oldest_stored_timestamp(const storage::store& s, std::uint32_t queue_id);

}  // namespace escrow::broker
