// Internal to broker/core: the state address_limits.cpp keeps for the queue limits of the address
// settings (max-size-messages, max-size-bytes, address-full-policy, dead-letter-on-drop, ring-size;
// docs/configuration.md, "Queue limits"). Per queue (queue_room, a member of each queue): the room
// reserved for messages being stored and for transactions being prepared or committed, the oldest
// messages whose removal is being stored, whether its depth is known yet, the drops counted for the
// metrics and the connections whose SEND waits for room (BLOCK). Per connection (parked_send): the
// SEND that waits and every later frame of that connection. For the core (limits_part, a member of
// broker::impl): the room each prepared branch holds until it is decided, and the queues producers
// wait on. Core strand only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

#include "escrow/common/descriptors.h"
#include "escrow/frame.h"

namespace escrow::rm {
struct branch;
}

namespace escrow::broker {

struct queue_room {
  // What is on its way in and counts already: SENDs being stored, the sends of transactions being
  // prepared, prepared or being committed (reserved at prepare or one-phase commit, released when
  // decided or done), in messages and stored bytes.
  std::int64_t reserved = 0;
  std::int64_t reserved_bytes = 0;
  // Oldest messages whose removal (DROP-HEAD, ring-size) is in a batch being stored: they no longer
  // count, since the batch that removes them is the one that stores what replaces them.
  std::int64_t dropping = 0;
  std::int64_t dropping_bytes = 0;
  // Whether depth and bytes are known: false for a queue opened from the store until its stored
  // messages are counted (at open for a limited queue, else by the background count).
  bool counted = true;
  // Messages dropped since start (escrow_messages_dropped_total, by reason).
  std::uint64_t dropped_full = 0;  // new ones not taken (DROP, or DROP-HEAD for one that never fits)
  std::uint64_t dropped_head = 0;  // the oldest removed for DROP-HEAD
  std::uint64_t dropped_ring = 0;  // the oldest removed for ring-size
  // Connections whose SEND waits for room here (BLOCK), in the order they came.
  std::deque<std::uint64_t> blocked;
  // At most one log line per queue every few seconds about its drops, with the count since the last.
  log_throttle drop_log{std::chrono::seconds(5)};
  std::uint64_t drops_unlogged = 0;
};

// A SEND that waits for room (BLOCK) and the frames its connection sent after it, replayed in order
// once it is taken. What they hold counts as the connection's frames waiting for the core
// (inbound_bytes, unstored_part), and the connection is not read meanwhile.
struct parked_send {
  std::uint32_t queue_id = 0;  // the queue it waits for
  std::int64_t bytes = 0;      // its message's stored size
  std::function<void()> resume;  // takes the SEND up again (it checks the room again, and may wait again)
  std::deque<frame> behind;
  std::uint64_t held_bytes = 0;  // of the SEND and of `behind`, as on_frames counts them
};

// Room held in one queue: by a prepared branch, or by a commit being written.
struct room_held {
  std::uint32_t queue_id = 0;
  std::int64_t messages = 0;
  std::int64_t bytes = 0;
};

struct limits_part {
  // The room each prepared (or heuristically undecided) branch holds, until it is committed or
  // rolled back.
  std::unordered_map<const rm::branch*, std::vector<room_held>> prepared;
  // Queues that connections wait on (BLOCK), by id: looked at when a core turn ends (flush()).
  std::vector<std::uint32_t> waited_on;
  bool waking = false;    // wake_blocked() is running (frames it replays may flush)
  // The queue a waiting SEND is being taken up again for: if it waits on that queue again, it
  // keeps its place there; on any other queue it queues behind that queue's waiting ones.
  std::optional<std::uint32_t> resuming;
};

}  // namespace escrow::broker
