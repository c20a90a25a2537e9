// Internal to broker/core: a message's place in one queue (queue.h), apart so that the parts a
// queue is made of (last_values_part.h) can hold entries too.
#pragma once

#include <cstdint>

#include "escrow/storage/message.h"
#include "escrow/storage/schema.h"

namespace escrow::broker {

struct queue_entry {
  storage::entry_key key;
  std::uint32_t delivery_count = 0;  // deliveries that ended without an acknowledgement
  bool stored = false;               // the entry is in LMDB (persistent message, durable queue)
  storage::message_ptr msg;          // null until loaded for a stored entry
};

}  // namespace escrow::broker
