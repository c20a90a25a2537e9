// Internal to broker/core: the part of the core's state that schedule.cpp keeps for scheduled
// delivery (_AMQ_SCHED_DELIVERY and its spellings, docs/stomp.md "Scheduled delivery"). A stored
// scheduled message is a record of the `scheduled` table (storage/schema.h) and nothing in
// memory; what memory holds is one due time per queue that has any, so a million scheduled
// messages cost a few bytes per queue. Scheduled messages not stored (non-persistent, or for a
// non-durable subscription) wait in `waiting`, held in their queue, as a delayed redelivery waits
// in undelivered_part::delayed; one timer serves both (broker::impl::arm_due_timer). A member of broker::impl (`schedule`), touched only on the core strand.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "queue.h"

namespace escrow::broker {

struct schedule_part {
  // The earliest due time (epoch ms) of each queue's stored scheduled messages, by queue id, and
  // the same pairs in time order: the due pass starts with the queue that comes due first.
  std::unordered_map<std::uint32_t, std::uint64_t> due_of;
  std::set<std::pair<std::uint64_t, std::uint32_t>> by_due;
  // Scheduled messages per queue (stored ones and those waiting in memory): changes since open plus
  // the stored count once the background count at open has added it (metrics_collect.cpp).
  std::unordered_map<std::uint32_t, std::int64_t> counts;
  // `scheduled` keys whose promotion or removal is being stored: the due pass and the operator's
  // commands never both write one.
  std::set<std::string> in_flight;
  // Scheduled messages that are not stored, by when they are due (held in their queue meanwhile).
  std::multimap<std::chrono::steady_clock::time_point, std::pair<queue_ptr, queue_entry>> waiting;
  // The bytes of `waiting` by queue id, within limits.max-memory-bytes-per-queue with the ready ones.
  std::unordered_map<std::uint32_t, std::uint64_t> waiting_bytes;
  void unwait(std::uint32_t q, std::uint64_t bytes) {
    auto it = waiting_bytes.find(q);
    if (it == waiting_bytes.end()) return;
    it->second -= std::min(bytes, it->second);
    if (it->second == 0) waiting_bytes.erase(it);
  }
  bool pass_running = false;    // a due pass's batch is being stored: the next waits for it
  std::uint64_t delivered = 0;  // promoted to their queue since start (metrics)
  std::uint64_t deleted = 0;    // deleted by an operator since start

  // Queue `q`'s earliest due time is `due` (none: it has no stored scheduled message left).
  void set_due(std::uint32_t q, std::optional<std::uint64_t> due) {
    auto it = due_of.find(q);
    if (it != due_of.end()) {
      by_due.erase({it->second, q});
      due_of.erase(it);
    }
    if (!due) return;
    due_of.emplace(q, *due);
    by_due.emplace(*due, q);
  }
  // A new stored scheduled message of `q` comes due at `due`: the queue's earliest moves if later.
  void add_due(std::uint32_t q, std::uint64_t due) {
    auto it = due_of.find(q);
    if (it == due_of.end() || due < it->second) set_due(q, due);
  }
  void count(std::uint32_t q, std::int64_t delta) {
    std::int64_t& n = counts[q];
    n += delta;
    if (n == 0) counts.erase(q);
  }
  std::int64_t total() const {
    std::int64_t n = 0;
    for (const auto& [q, c] : counts) n += c;
    return n;
  }
  void forget(std::uint32_t q) {
    set_due(q, std::nullopt);
    counts.erase(q);
    waiting_bytes.erase(q);
  }
};

}  // namespace escrow::broker
