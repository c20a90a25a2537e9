// The in-memory window of a queue over its entries in LMDB (see queue.h for the invariants).
#include "queue.h"

#include <spdlog/spdlog.h>

#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {

const char* queue::kind_name(kind k) {
  switch (k) {
    case kind::queue: return "queue";
    case kind::durable_subscription: return "durable-subscription";
    case kind::subscription: return "subscription";
  }
  return "queue";
}

queue::queue(std::uint32_t id, std::string name, kind k, std::string topic, storage::store* store,
             std::size_t memory_window, std::uint64_t memory_bytes)
    : id_(id), name_(std::move(name)), kind_(k), topic_(std::move(topic)), store_(store),
      memory_window_(memory_window == 0 ? 1 : memory_window), memory_bytes_(memory_bytes) {}

void queue::count(const queue_entry& e, bool in) {
  std::uint64_t n = e.msg ? memory_bytes(*e.msg) : 0;
  std::uint64_t& total = e.stored ? stored_bytes_ : unstored_bytes_;
  total = in ? total + n : total - std::min(n, total);
  if (e.stored) stored_in_memory_ = in ? stored_in_memory_ + 1 : stored_in_memory_ - 1;
}

void queue::push(queue_entry entry) {
  if (!selective_.empty()) classify(entry);
  if (entry.stored && !in_window(entry.key)) return;  // storage has it; the cursor will reach it
  auto [it, inserted] = ready_.emplace(entry.key, std::move(entry));
  const queue_entry& e = it->second;
  if (!inserted) return;
  if (!e.stored && e.msg && e.msg->record.expires != 0) expiring_in_memory_.emplace(e.msg->record.expires, e.key);
  count(e, true);
  if (e.stored && (stored_in_memory_ > memory_window_ || stored_bytes_ > memory_bytes_)) evict();
}

// Drops the last stored entries from memory until the window fits, moving the bound down to the
// smallest one dropped: everything from there on is read again from storage when needed.
void queue::evict() {
  auto it = ready_.end();
  while ((stored_in_memory_ > memory_window_ || stored_bytes_ > memory_bytes_) && it != ready_.begin()) {
    --it;
    if (!it->second.stored) continue;
    bound_ = it->first;
    count(it->second, false);
    it = ready_.erase(it);
  }
}

void queue::refill() {
  if (!bound_ || !store_) return;
  std::size_t want = memory_window_ > stored_in_memory_ ? memory_window_ - stored_in_memory_ : 0;
  if (want == 0) return;
  std::size_t taken = 0;
  std::optional<storage::entry_key> last;
  bool stopped_early = false;
  std::string prefix = storage::queue_prefix(id_);
  storage::status s = store_->scan(storage::table::entries, bound_->encode(), prefix,
                                   [&](std::string_view k, std::string_view v) {
    if (taken >= want) {
      stopped_early = true;
      return false;
    }
    // A record that does not decode is never handed out (docs/storage.md, "A corrupted store"): a
    // key that is no entry key is passed over, an entry without its delivery count stays held.
    storage::entry_key key;
    if (!storage::entry_key::decode(k, key)) {
      spdlog::error("queue {}: skipped: {}", name_,
                    storage::corrupt_record(storage::table::entries, k,
                                            "an entry key is a u32 queue id, u8 9 - priority (0-9), u64 message id")
                        .message());
      return true;
    }
    last = key;
    if (held_.count(key) || ready_.count(key)) return true;
    if (v.size() < 4) {
      spdlog::error("queue {}: message {} is not delivered and stays stored: {}", name_, key.message_id,
                    storage::corrupt_record(storage::table::entries, k,
                                            "an entry starts with a u32 delivery count, this one is " +
                                                std::to_string(v.size()) + " bytes")
                        .message());
      held_.insert(key);
      return true;
    }
    auto [at, inserted] = ready_.emplace(key, queue_entry{key, storage::decode_delivery_count(v), true, nullptr});
    if (inserted) count(at->second, true);
    ++taken;
    return true;
  });
  if (!s.ok()) {
    spdlog::error("queue {}: cannot read entries from storage: {}", name_, s.message());
    return;
  }
  if (!stopped_early) {
    bound_.reset();
  } else if (last) {
    // The next possible key after the last one read: same queue and priority, next message id.
    bound_ = storage::entry_key{last->queue_id, last->priority, last->message_id + 1};
  }
}

bool queue::has_ready() {
  if (ready_.empty() || (bound_ && stored_in_memory_ == 0)) refill();
  return !ready_.empty();
}

std::optional<queue_entry> queue::pop() {
  if (!has_ready()) return std::nullopt;
  // A non-stored entry may sort after stored entries not yet loaded: load them first.
  if (bound_ && !(ready_.begin()->first < *bound_)) {
    refill();
  }
  auto it = ready_.begin();
  count(it->second, false);
  queue_entry e = std::move(it->second);
  ready_.erase(it);
  forget_expiring(e);
  held_.insert(e.key);
  unindex(e.key);
  return e;
}

void queue::forget_expiring(const queue_entry& e) {
  if (!e.stored && e.msg && e.msg->record.expires != 0) expiring_in_memory_.erase({e.msg->record.expires, e.key});
}

std::optional<queue_entry> queue::take(const storage::entry_key& key) {
  if (held_.count(key)) return std::nullopt;
  auto it = ready_.find(key);
  if (it == ready_.end()) {
    // Within the window every entry that exists is ready or held: this one is gone (acknowledged).
    if (in_window(key)) return std::nullopt;
    held_.insert(key);
    unindex(key);
    return queue_entry{key, 0, true, nullptr};  // only in storage
  }
  held_.insert(key);
  unindex(key);
  count(it->second, false);
  queue_entry e = std::move(it->second);
  ready_.erase(it);
  forget_expiring(e);
  return e;
}

std::vector<queue_entry> queue::take_unstored_ready() { return take_oldest_unstored(UINT64_MAX); }

std::vector<queue_entry> queue::take_oldest_unstored(std::uint64_t bytes) {
  std::vector<queue_entry> out;
  std::uint64_t taken = 0;
  for (auto it = ready_.begin(); it != ready_.end() && taken < bytes;) {
    if (it->second.stored) {
      ++it;
      continue;
    }
    taken += it->second.msg ? memory_bytes(*it->second.msg) : 0;
    held_.insert(it->first);
    unindex(it->first);
    forget_expiring(it->second);
    count(it->second, false);
    out.push_back(std::move(it->second));
    it = ready_.erase(it);
  }
  return out;
}

std::vector<queue_entry> queue::take_expired_in_memory(std::uint64_t now) {
  std::vector<queue_entry> out;
  while (!expiring_in_memory_.empty() && expiring_in_memory_.begin()->first <= now) {
    storage::entry_key key = expiring_in_memory_.begin()->second;
    expiring_in_memory_.erase(expiring_in_memory_.begin());
    auto it = ready_.find(key);
    if (it == ready_.end()) continue;
    count(it->second, false);
    out.push_back(std::move(it->second));
    ready_.erase(it);
    held_.insert(key);
    unindex(key);
  }
  return out;
}

}  // namespace escrow::broker

namespace escrow::broker {

bool queue::has(const storage::entry_key& key) const {
  if (ready_.count(key) || held_.count(key)) return true;
  if (in_window(key) || !store_) return false;  // within the window what exists is ready or held
  std::string value;
  return store_->get(storage::table::entries, key.encode(), value).ok();
}

}  // namespace escrow::broker
