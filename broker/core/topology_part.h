// Internal to broker/core: the part of the core's state that says which queues and topics there
// are: every queue, durable subscription and non-durable subscription's queue by key and by id, the
// topics with their subscriptions, the next queue id, the queues whose record is not yet durable,
// and the counters of the queues deleted since start. A member of broker::impl (`topology`),
// touched only on the core strand; send.cpp (add_queue, remove_queue, find_or_create_queue) and
// subscribe.cpp change it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "queue.h"

namespace escrow::broker {

// A topic: every subscription (durable or not) gets a copy of each message.
struct topic {
  std::vector<queue_ptr> subscriptions;
};

struct topology_part {
  std::map<std::string, queue_ptr> queues;  // by storage name ("q/NAME", "d/CLIENT\0SUB")
  std::unordered_map<std::uint32_t, queue_ptr> queues_by_id;
  std::map<std::string, topic> topics;      // by topic name
  std::uint32_t next_queue_id = 1;
  // Queues whose record went into a batch not yet submitted or completed; submit() takes from it
  // the ones whose record the batch carries, and marks them durable once that batch is stored.
  std::vector<queue_ptr> records_carried;
  // The counters of queues deleted since start (auto-delete, ended durable subscriptions), so that
  // the broker-wide totals only grow; retire() adds a queue's as it leaves `queues`.
  queue_counters retired;
  void retire(const queue& q) {
    retired.enqueued += q.counters.enqueued;
    retired.delivered += q.counters.delivered;
    retired.acknowledged += q.counters.acknowledged;
  }
};

}  // namespace escrow::broker
