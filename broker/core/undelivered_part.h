// Internal to broker/core: the part of the core's state that undelivered.cpp keeps for messages
// leaving their queues without an acknowledgement (address settings, expiry, redelivery delays,
// dead letters): the resolved settings by address, the returned messages waiting out their delay,
// the expiry reaper's pass under way, and the counts. A member of broker::impl (`undelivered`),
// touched only on the core strand.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "escrow/broker/config/address_settings.h"
#include "queue.h"

namespace escrow::broker {

// Why the broker moves a message out of its queue without a consumer acknowledging it.
// (moved_by_operator: `escrow move`, e.g. dead letters back to their queue; address_full: the
// oldest message of a full DROP-HEAD or ring queue, with dead-letter-on-drop, address_limits.cpp.)
enum class move_reason { expired, max_delivery_attempts, moved_by_operator, address_full };

// A message on its way out of `from` (held there) to the expiry or dead letter address: once the
// batch that moves it is durable, `to` is published; if the store refuses, `old` goes back.
struct move_plan {
  move_reason reason;
  bool in_bulk;  // part of a reaper pass or an operator's move: logged per message only at debug
                 // level (the pass or the move logs its totals)
  queue_ptr from;
  queue_entry old;
  std::vector<std::pair<queue_ptr, queue_entry>> to;
};

// Messages that left their queues unacknowledged, since start (logged; for the metrics).
struct undelivered_counters {
  std::uint64_t expired = 0;             // moved to an expiry address
  std::uint64_t expired_dropped = 0;     // expired with no expiry address (or nobody listening)
  std::uint64_t dead_lettered = 0;       // moved to a dead letter address
  std::uint64_t dead_letters_dropped = 0;
};

struct undelivered_part {
  undelivered_counters counters;
  // Returned messages waiting out their redelivery delay (held in their queue meanwhile).
  std::multimap<std::chrono::steady_clock::time_point, std::pair<queue_ptr, queue_entry>> delayed;
  std::unordered_map<std::string, address_settings> settings_cache;  // by address; bounded
  std::uint64_t reap_started_ms = 0;  // the reaper pass under way: when it began, what it moved
  std::size_t reap_moved = 0;
  bool reap_in_progress = false;  // a pass waits for its next turn: the period does not start another
};

}  // namespace escrow::broker
