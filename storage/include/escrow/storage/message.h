// A message as the broker and the resource manager hold it in memory: its id and its stored
// record, immutable once accepted, shared by every queue entry, delivery and transaction branch
// that refers to it (a topic message is held once for all its subscriptions).
#pragma once

#include <cstdint>
#include <memory>

#include "escrow/storage/schema.h"

namespace escrow::storage {

struct message {
  std::uint64_t id = 0;
  message_record record;
};
using message_ptr = std::shared_ptr<const message>;

}  // namespace escrow::storage
