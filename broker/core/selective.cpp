// Selective consumers of a queue (selective_part.h): each distinct selector's index of the ready
// messages it picks, kept as entries are pushed and taken, and the bounded scan that extends it
// through memory and storage.
#include <spdlog/spdlog.h>

#include <string>

#include "escrow/broker/selector/selector.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "queue.h"

namespace escrow::broker {

bool selects(const selector& s, const storage::message_record& r, std::uint64_t id, std::uint32_t delivery_count) {
  std::string scratch;
  return s.matches([&](std::string_view name) -> std::optional<std::string_view> {
    auto number = [&](std::uint64_t v) { return std::string_view(scratch = std::to_string(v)); };
    if (name == "message-id") return number(id);
    if (name == "destination") return std::string_view(r.destination);
    if (name == "priority") return number(r.priority);
    if (name == "persistent") return std::string_view(r.persistent ? "true" : "false");
    if (name == "expires") return number(r.expires);
    if (name == "timestamp") return number(r.timestamp);
    if (name == "redelivered") return std::string_view(delivery_count > 0 ? "true" : "false");
    if (name == "delivery-count" || name == "JMSXDeliveryCount") return number(delivery_count + 1);
    if (const std::string* v = r.find_header(name)) return std::string_view(*v);
    return std::nullopt;
  });
}

selector_index& queue::attach_selector(std::shared_ptr<const selector> sel) {
  for (auto& ix : selective_)
    if (ix->sel->text() == sel->text()) {
      ++ix->users;
      return *ix;
    }
  auto ix = std::make_unique<selector_index>();
  ix->sel = std::move(sel);
  ix->users = 1;
  ix->scanned = storage::entry_key{id_, 9, 0};  // the queue's first possible key: nothing known yet
  selective_.push_back(std::move(ix));
  return *selective_.back();
}

void queue::detach_selector(selector_index& index) {
  if (--index.users != 0) return;
  std::erase_if(selective_, [&](const auto& ix) { return ix.get() == &index; });
}

void queue::unindex(const storage::entry_key& key) {
  for (auto& ix : selective_) ix->matched.erase(key);
}

// Keeps `matched` within kMaxMatched: past it the last key is given up, and the scan comes back
// to it (every key from there on is unclassified again).
void queue::add_match(selector_index& ix, const storage::entry_key& key) {
  ix.matched.insert(key);
  if (ix.matched.size() <= selector_index::kMaxMatched) return;
  auto last = std::prev(ix.matched.end());
  ix.scanned = *last;
  ix.matched.erase(last);
}

void queue::classify(const queue_entry& e) {
  for (auto& ix : selective_) {
    if (ix->scanned && !(e.key < *ix->scanned)) continue;  // the scan will reach it
    if (!e.msg) {
      // Not readable here: from its key on, the scan reads again (what it had found there is
      // found again, in order).
      ix->scanned = e.key;
      ix->matched.erase(ix->matched.lower_bound(e.key), ix->matched.end());
      continue;
    }
    if (selects(*ix->sel, e.msg->record, e.key.message_id, e.delivery_count)) add_match(*ix, e.key);
  }
}

bool queue::scan(selector_index& ix, std::size_t& budget) {
  if (!ix.scanned || budget == 0) return false;
  const storage::entry_key from = *ix.scanned;
  std::optional<storage::entry_key> stop;  // the first key not classified when the scan stops early
  if (store_ && durable()) {
    storage::message_record record;
    std::string value;
    storage::status s = store_->scan(
        storage::table::entries, from.encode(), storage::queue_prefix(id_), [&](std::string_view k, std::string_view v) {
          storage::entry_key key;
          if (!storage::entry_key::decode(k, key)) return true;  // refill names it; never handed out
          if (budget == 0 || ix.matched.size() >= selector_index::kMaxMatched) {
            stop = key;
            return false;
          }
          --budget;
          if (held_.count(key)) return true;  // classified when it comes back (push)
          const storage::message_record* r = nullptr;
          std::uint32_t count = v.size() >= 4 ? storage::decode_delivery_count(v) : 0;
          if (auto it = ready_.find(key); it != ready_.end() && it->second.msg) {
            r = &it->second.msg->record;
            count = std::max(count, it->second.delivery_count);
          } else if (v.size() > 4) {
            if (storage::decode_inline_message(v, record)) r = &record;
          } else if (v.size() == 4) {  // a topic's message, stored once in `messages`
            if (store_->get(storage::table::messages, storage::message_key(key.message_id), value).ok() &&
                storage::message_record::decode(value, record))
              r = &record;
          }
          // One that does not decode is never picked (delivery names it if another consumer gets it).
          if (r && selects(*ix.sel, *r, key.message_id, count)) ix.matched.insert(key);
          return true;
        });
    if (!s.ok()) {
      spdlog::error("{} '{}': the selector '{}' cannot read the queue's messages: {}", kind_name(kind_), name_,
                    ix.sel->text(), s.message());
      ix.matched.erase(ix.matched.lower_bound(from), ix.matched.end());
      budget = std::max<std::size_t>(budget, 1);  // no continuation: the next event tries again
      return false;
    }
  }
  // The entries kept only in memory (non-persistent messages) in the same stretch of keys.
  auto end = stop ? ready_.lower_bound(*stop) : ready_.end();
  for (auto it = ready_.lower_bound(from); it != end; ++it)
    if (!it->second.stored && it->second.msg && selects(*ix.sel, it->second.msg->record, it->first.message_id,
                                                         it->second.delivery_count))
      ix.matched.insert(it->first);
  ix.scanned = stop;
  while (ix.matched.size() > selector_index::kMaxMatched) {
    auto last = std::prev(ix.matched.end());
    ix.scanned = *last;
    ix.matched.erase(last);
  }
  return true;
}

std::optional<queue_entry> queue::take_match(selector_index& ix, std::size_t& budget) {
  for (;;) {
    while (!ix.matched.empty()) {
      storage::entry_key key = *ix.matched.begin();
      if (std::optional<queue_entry> e = take(key)) return e;  // take() leaves it out of every index
      ix.matched.erase(ix.matched.begin());  // held or gone meanwhile
    }
    if (!scan(ix, budget)) return std::nullopt;  // classified to the end, out of budget, or unreadable
  }
}

}  // namespace escrow::broker
