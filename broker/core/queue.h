// One queue: the ready entries the core may hand out, in queue order (priority, then arrival),
// with the rest of a durable queue left in LMDB. Only a bounded window of stored entries is kept in
// memory; when it runs dry the queue reads the next entries from storage through a cursor, so a
// queue may hold far more messages than memory. Entries that are not stored (non-persistent
// messages, or any message on a non-durable subscription) always live in memory.
//
// Invariants (owned by the core strand; no locks):
//  - every stored entry in ready_ has a key below bound_ (when bound_ is set);
//  - every stored entry below bound_ is in ready_ or held_ (taken out: in flight, being written
//    or being deleted), so a refill never hands out an entry twice.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "address_limits_part.h"
#include "groups_part.h"
#include "last_values_part.h"
#include "queue_entry.h"
#include "selective_part.h"
#include "escrow/broker/core/metrics.h"
#include "escrow/storage/message.h"

namespace escrow::storage {
class store;
}

namespace escrow::broker {

using storage::message;
using storage::message_ptr;
struct subscription;
class selector;

// What a message costs in memory, roughly: its body, destination and headers, plus a fixed
// overhead for the objects that hold it. The byte budgets (docs/security.md, "Limits") count this.
inline std::uint64_t memory_bytes(const storage::message_record& r) {
  constexpr std::uint64_t kOverhead = 256, kPerHeader = 64;
  std::uint64_t n = kOverhead + r.body.size() + r.destination.size();
  for (const auto& [name, value] : r.headers) n += kPerHeader + name.size() + value.size();
  return n;
}
inline std::uint64_t memory_bytes(const message& m) { return memory_bytes(m.record); }

// What one message counts for in a queue's bytes (max-size-bytes): its stored size, as
// storage::message_record::encoded_size() (body, headers, destination); 0 until it is loaded.
inline std::uint64_t stored_size(const queue_entry& e) { return e.msg ? e.msg->record.encoded_size() : 0; }

// What happened to a queue's messages since start (depth: since open, counted then from storage);
// kept by the core strand where it moves messages, read by the metrics (docs/operations.md) and by
// the queue limits (address_limits.cpp).
struct queue_counters : message_counts {
  std::int64_t depth = 0;  // in the queue (ready, in flight, held): changes since open, plus the
                           // stored count once the background count at open has added it
  std::int64_t bytes = 0;  // the stored sizes (stored_size()) of what depth counts, kept the same way
  void added(std::uint64_t size) {
    ++depth;
    bytes += static_cast<std::int64_t>(size);
  }
  // A message of `size` left the queue (`why` counts the reason).
  void removed(std::uint64_t& why, std::uint64_t size) {
    ++why;
    left(size);
  }
  void left(std::uint64_t size) {
    --depth;
    bytes -= static_cast<std::int64_t>(size);
  }
};

class queue {
 public:
  enum class kind { queue, durable_subscription, subscription };
  static const char* kind_name(kind k);  // "queue", "durable-subscription", "subscription"

  // memory_window entries and memory_bytes of stored messages' bodies are kept in memory at
  // most ([delivery] queue-memory-window, queue-memory-bytes); the rest stays in storage.
  queue(std::uint32_t id, std::string name, kind k, std::string topic, storage::store* store,
        std::size_t memory_window, std::uint64_t memory_bytes = UINT64_MAX);

  std::uint32_t id() const { return id_; }
  const std::string& name() const { return name_; }
  kind type() const { return kind_; }
  bool durable() const { return kind_ != kind::subscription; }
  const std::string& topic() const { return topic_; }  // for subscriptions: the topic they listen to
  // The address its settings are looked up by: a queue's name, a subscription's topic.
  const std::string& address() const { return kind_ == kind::queue ? name_ : topic_; }

  // Before a stored entry's write is durable: keep a refill from handing it out meanwhile.
  void hold(const storage::entry_key& key) { held_.insert(key); }
  // A held entry's storage work is over (write done, or delete done): forget it.
  void release_hold(const storage::entry_key& key) { held_.erase(key); }
  bool is_held(const storage::entry_key& key) const { return held_.count(key) != 0; }
  const std::set<storage::entry_key>& held() const { return held_; }

  // Takes one entry out of the queue, wherever it is (in memory, or only in storage: then without
  // its message), and holds it. nullopt when it is held already (in flight, in a transaction
  // branch, waiting for redelivery or being moved), or gone: the caller leaves it alone.
  std::optional<queue_entry> take(const storage::entry_key& key);
  // Takes out (and holds) the ready entries kept only in memory whose message expired by `now`.
  std::vector<queue_entry> take_expired_in_memory(std::uint64_t now);
  // Takes out (and holds) every ready entry that is not stored (non-persistent messages): purge.
  std::vector<queue_entry> take_unstored_ready();
  // Takes out (and holds) the first ready entries that are not stored, in queue order, until at
  // least `bytes` of them are taken or none is left: limits.memory-full-policy "drop-oldest".
  std::vector<queue_entry> take_oldest_unstored(std::uint64_t bytes);
  // memory_bytes() of the ready entries that are not stored (limits.max-memory-bytes-per-queue).
  std::uint64_t unstored_bytes() const { return unstored_bytes_; }

  // Makes an entry available: a new message, or one coming back from a delivery (with its
  // delivery count already raised by the caller). A stored entry beyond the in-memory window is
  // left to storage, where the cursor will find it.
  void push(queue_entry entry);

  // Takes the first ready entry in queue order, reading more from storage when the window is empty.
  // The entry is held until release_hold(). nullopt when the queue has nothing ready.
  std::optional<queue_entry> pop();

  // Consumers with a selector (selective_part.h): the index of `sel`'s text, shared by the
  // consumers with the same one (made by the first, gone with the last).
  selector_index& attach_selector(std::shared_ptr<const selector> sel);
  void detach_selector(selector_index& index);
  // Takes (and holds, as take() does) the first entry in queue order that `index`'s selector
  // picks, classifying at most `budget` more entries to find it (budget is lowered by what was
  // read). nullopt when none is ready, or when the budget ran out first: then index.scanned is set.
  std::optional<queue_entry> take_match(selector_index& index, std::size_t& budget);

  bool has_ready();
  // Whether the entry is still in the queue: ready, held, or (beyond the window) in storage.
  bool has(const storage::entry_key& key) const;
  // Calls f(entry) for each ready entry kept in memory that is not stored, in queue order.
  template <typename F>
  void for_each_unstored_ready(F&& f) const {
    for (const auto& [key, e] : ready_)
      if (!e.stored) f(e);
  }

  // For a queue opened from storage: nothing of it is in memory yet; the cursor starts at the top.
  void start_unloaded() { bound_ = storage::entry_key{id_, 9, 0}; }
  std::size_t ready_in_memory() const { return ready_.size(); }

  // The queue's key in the queues table ("q/NAME", or "d/CLIENT-ID\0NAME" for a durable
  // subscription), and whether its record is durably in that table: set only when a batch carrying
  // the record has completed successfully (or the queue was read from the store). Until then every
  // batch that writes for the queue carries its record again (broker::impl::persist_queue_record).
  std::string storage_key;
  bool record_durable = false;
  bool dropping = false;  // its removal is being stored (finish_drop, finish_auto_delete)
  // The user whose frame created it ("" anonymous), counted in limits.max-queues-per-user; none
  // when the broker or an operator made it. Stored in its record.
  std::optional<std::string> creator;
  // When it was last seen empty with no consumer (steady clock, ms); 0 while in use.
  std::int64_t unused_since_ms = 0;

  queue_counters counters;
  queue_room room;  // what its limits see besides its depth (address_limits_part.h)
  last_value_index last_values;  // a last-value queue's newest entry per key (last_values_part.h)
  group_index groups;            // which consumer holds each message group (groups_part.h)
  // A non-durable topic subscription's selector (SUBSCRIBE's `selector`): routing gives it only
  // the messages that match (send.cpp). Null: every message.
  std::shared_ptr<const selector> filter;

  // Consumers attached to this queue, highest priority first (in the order they came within one
  // priority), served round robin (least recently served first) within the highest priority that
  // has room.
  std::vector<subscription*>& consumers() { return consumers_; }
  const std::vector<subscription*>& consumers() const { return consumers_; }
  std::uint64_t served_turns = 0;  // handed-out turns so far (subscription::served: the last one's)
  // Exclusive consumers (docs/stomp.md, "Exclusive consumers"): how many of its consumers asked
  // for it, and the one that receives while the queue is exclusive (null until chosen; it stays
  // until it leaves).
  bool scan_posted = false;  // a dispatch is posted to go on with its selective consumers' scan
  std::size_t exclusive_consumers = 0;
  subscription* exclusive_owner = nullptr;

 private:
  bool in_window(const storage::entry_key& key) const { return !bound_ || key < *bound_; }
  void refill();
  void evict();

  std::uint32_t id_;
  std::string name_;
  kind kind_;
  std::string topic_;
  storage::store* store_;
  std::size_t memory_window_;
  std::uint64_t memory_bytes_;
  std::uint64_t unstored_bytes_ = 0;
  std::uint64_t stored_bytes_ = 0;
  void count(const queue_entry& e, bool in);  // an entry enters (in) or leaves ready_

  void forget_expiring(const queue_entry& e);
  // An entry leaves ready_ (or storage's ready part) for good or into held_: out of every index.
  void unindex(const storage::entry_key& key);
  void classify(const queue_entry& e);  // a pushed entry, for every index (selective.cpp)
  // Classifies entries from index.scanned on; false when it could not go on.
  bool scan(selector_index& index, std::size_t& budget);
  void add_match(selector_index& index, const storage::entry_key& key);

  std::map<storage::entry_key, queue_entry> ready_;
  // Ready entries that are not stored and whose message expires, by expiry time: the reaper's
  // index for what storage does not hold.
  std::set<std::pair<std::uint64_t, storage::entry_key>> expiring_in_memory_;
  std::size_t stored_in_memory_ = 0;
  std::set<storage::entry_key> held_;
  // First key not loaded from storage; nullopt when every stored entry has been loaded. A new
  // durable queue starts fully loaded (empty); a queue opened from storage starts at its beginning.
  std::optional<storage::entry_key> bound_;

  std::vector<subscription*> consumers_;
  std::vector<std::unique_ptr<selector_index>> selective_;
};

using queue_ptr = std::shared_ptr<queue>;

}  // namespace escrow::broker
