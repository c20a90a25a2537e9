// Internal to broker/core: the part of the core's state that says who is connected: each
// connection with its subscriptions, their unacknowledged deliveries, its local transactions and
// its outbox; the connections whose outbox has frames to send at the end of this core turn; and the
// open connections of each user (limits.max-connections-per-user). A member of broker::impl
// (`clients`), touched only on the core strand; broker.cpp adds and removes connections.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "escrow/broker/core/broker.h"
#include "escrow/broker/core/outbound.h"
#include "escrow/rm/branch.h"
#include "queue.h"

namespace escrow::broker {

enum class ack_mode { auto_ack, client, client_individual };

struct connection;

// A message handed to a consumer and not yet acknowledged.
struct delivery {
  queue_ptr source;
  queue_entry entry;
  std::uint64_t bytes = 0;  // memory_bytes() of its message when it was handed out (0: not loaded)
};

struct subscription {
  std::string id;
  connection* owner = nullptr;
  queue_ptr source;
  ack_mode mode = ack_mode::auto_ack;
  std::uint32_t window = 0;                // most unacknowledged messages at once
  std::map<std::uint64_t, delivery> unacked;  // by ack tag, in delivery order
  std::uint64_t unacked_bytes = 0;         // memory_bytes() of unacked's loaded messages (max-consumer-window-bytes)
  // Consumer priority (activemq.priority, x-priority): a queue serves its highest-priority
  // consumers with room first (delivery.cpp). Exclusive (activemq.exclusive): one consumer of the
  // queue receives at a time.
  std::int32_t priority = 0;
  bool exclusive = false;
  std::uint64_t served = 0;  // its queue's served_turns when it last took a turn (round robin)
  // A queue consumer's selector: its index in the queue (selective_part.h); null: it takes any.
  // (A topic subscription's selector filters at routing instead: queue::filter.)
  selector_index* selective = nullptr;
  // persist-delivery-count-before-delivery: deliveries not written yet, in tag order, and those of
  // them whose raised delivery count is still being stored (delivery.cpp, write_unwritten).
  std::deque<std::uint64_t> unwritten;
  std::set<std::uint64_t> awaiting_count;

  using unacked_iterator = std::map<std::uint64_t, delivery>::iterator;
  void add_unacked(std::uint64_t tag, delivery d) {
    d.bytes = d.entry.msg ? memory_bytes(*d.entry.msg) : 0;
    unacked_bytes += d.bytes;
    unacked.emplace(tag, std::move(d));
  }
  // Erases [first, last) of unacked (their entries may have been moved out: bytes stays).
  void erase_unacked(unacked_iterator first, unacked_iterator last) {
    for (auto it = first; it != last; ++it) unacked_bytes -= std::min(it->second.bytes, unacked_bytes);
    unacked.erase(first, last);
  }
  void clear_unacked() {
    unacked.clear();
    unacked_bytes = 0;
  }
};

struct connection {
  std::uint64_t id = 0;
  std::shared_ptr<outbound> out;
  connect_info info;
  std::map<std::string, std::unique_ptr<subscription>> subscriptions;  // by subscription id
  std::unordered_map<std::uint64_t, subscription*> tag_owner;         // ack tag -> subscription
  std::uint64_t next_tag = 1;
  std::map<std::string, rm::branch_ptr> transactions;  // local transactions by STOMP name
  std::vector<std::weak_ptr<rm::branch>> started_branches;  // XA branches it started (limits)
  bool admitted = false;       // counted in connections_part::connections_per_user
  bool input_closed = false;   // ERROR or DISCONNECT: later frames are ignored
  bool output_closed = false;  // ERROR sent or connection gone: nothing more is written
  std::string outbox;          // frames encoded during this core turn, sent at its end
  // A SEND waiting for room in a full queue (address-full-policy BLOCK) and the frames behind it;
  // null when none waits (address_limits.cpp).
  std::unique_ptr<parked_send> parked;
  std::size_t last_outbox = 0; // bytes of the outbox sent last: the next one starts with that room
};
using connection_ptr = std::shared_ptr<connection>;

struct connections_part {
  std::unordered_map<std::uint64_t, connection_ptr> connections;  // by connection id
  std::vector<connection_ptr> dirty;  // connections with frames in their outbox
  std::unordered_map<std::string, std::uint32_t> connections_per_user;  // by user ("" anonymous)
  std::unordered_map<std::string, std::uint32_t> subscriptions_per_user;  // by user, over its connections
};

}  // namespace escrow::broker
