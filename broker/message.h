// A message as the core holds it: immutable once accepted, shared by every queue entry and
// delivery that refers to it (a topic message is stored and held once for all subscriptions).
#pragma once

#include <cstdint>
#include <memory>

#include "escrow/storage/schema.h"

namespace escrow::broker {

struct message {
  std::uint64_t id = 0;
  storage::message_record record;
};
using message_ptr = std::shared_ptr<const message>;

}  // namespace escrow::broker
