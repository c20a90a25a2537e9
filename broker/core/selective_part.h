// Internal to broker/core: a queue's selective consumers (SUBSCRIBE's `selector` on a queue;
// docs/stomp.md, "Selectors"). Per distinct selector of a queue's consumers, the queue keeps what
// it knows of the messages that selector picks: the keys of the ready ones found so far, in queue
// order, and how far the queue has been classified. A consumer with a selector takes the first
// key of its index (queue::take_match) instead of the queue's head, so the messages it skips stay
// in their place for the others, and finding its next match never starts again from the head:
//  - every ready entry below `scanned` is classified: if the selector picks it, its key is in
//    `matched` (queue.cpp keeps this when entries are pushed or taken);
//  - the scan moves `scanned` on through memory and storage, a bounded number of entries a
//    turn, and stops while `matched` is full (kMaxMatched keys: bounded memory per selector);
//  - a new or returning message is classified when it is pushed, so once the scan has reached the
//    end a selective consumer costs one evaluation per message that arrives.
// Core strand only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>

#include "escrow/storage/schema.h"

namespace escrow::broker {

class selector;

// Whether `s` selects the message of `r` whose id is `id`, after `delivery_count` deliveries that
// ended without an acknowledgement: its headers, and those the broker adds on MESSAGE
// (message-id, destination, priority, persistent, expires, timestamp, redelivered,
// delivery-count, also as JMSXDeliveryCount) read from the record (selective.cpp).
bool selects(const selector& s, const storage::message_record& r, std::uint64_t id, std::uint32_t delivery_count = 0);

struct selector_index {
  static constexpr std::size_t kMaxMatched = 4096;

  std::shared_ptr<const selector> sel;
  std::size_t users = 0;                // consumers of the queue with this selector
  std::set<storage::entry_key> matched;  // ready entries below `scanned` that it picks
  std::optional<storage::entry_key> scanned;  // the first key not classified; nullopt: none left
  bool continuation = false;  // a later pass of the scan is posted (delivery.cpp)
};

}  // namespace escrow::broker
