// Auto-delete (docs/configuration.md, "auto-delete-queues"): queues are created by the first SEND
// or SUBSCRIBE that names them, so without this every name ever used would keep a record and an
// entry in memory for good. As in Artemis, a queue that is empty and unused goes: no message (in
// memory or stored), no consumer, nothing in flight, in a transaction or waiting for redelivery,
// not named as an expiry or dead letter address, for auto-delete-queues-delay (default 60 s).
// Swept once a second on the core strand. Its removal is a batch like any other: the queue is
// forgotten only once it is stored, and a SEND or SUBSCRIBE meanwhile keeps it (its batch stores
// the record again).
#include <spdlog/spdlog.h>

#include <chrono>
#include <set>

#include "core.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {
namespace {

std::int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool broker::impl::in_use(const queue_ptr& q) {
  if (q->counters.depth > 0 || !q->consumers().empty() || !q->held().empty() || q->ready_in_memory() != 0)
    return true;
  if (schedule.due_of.count(q->id()) || schedule.counts.count(q->id())) return true;  // scheduled messages
  for (const auto& [id, b] : transactions.rm.branches()) {
    for (const auto& s : b->work.sends)
      for (const auto& t : s.targets)
        if (t.key.queue_id == q->id()) return true;
    for (const auto& c : b->work.consumed)
      if (c.key.queue_id == q->id()) return true;
  }
  // The depth counts what arrived since start plus the stored count once the background count
  // is done: the store itself has the last word.
  bool stored = false;
  std::string prefix = storage::queue_prefix(q->id());
  storage::status s = store.scan(storage::table::entries, prefix, prefix, [&](std::string_view, std::string_view) {
    stored = true;
    return false;
  });
  return stored || !s.ok();
}

void broker::impl::sweep_unused_queues() {
  std::set<std::string> named;  // expiry and dead letter addresses stay ("NAME" or "/queue/NAME")
  auto keep = [&](const std::optional<std::string>& address) {
    if (!address || address->empty() || address->rfind("/topic/", 0) == 0) return;
    named.insert(address->rfind("/queue/", 0) == 0 ? address->substr(7) : *address);
  };
  for (const auto& e : config.address_settings) {
    keep(e.expiry_address);
    keep(e.dead_letter_address);
  }
  std::int64_t now = steady_ms();
  std::vector<queue_ptr> doomed;
  for (const auto& [key, q] : topology.queues) {
    if (q->type() != queue::kind::queue || q->dropping) continue;
    if (q->counters.depth > 0 || !q->consumers().empty() || !q->held().empty()) {
      q->unused_since_ms = 0;  // the cheap checks first: most queues are in use
      continue;
    }
    if (q->unused_since_ms == 0) {
      q->unused_since_ms = now;
      continue;
    }
    const address_settings& s = settings_for(q->name());
    if (!s.auto_delete_queues || now - q->unused_since_ms < static_cast<std::int64_t>(s.auto_delete_queues_delay_ms))
      continue;
    if (named.count(q->name()) || in_use(q)) continue;
    doomed.push_back(q);
  }
  for (auto& q : doomed) {
    q->dropping = true;
    q->record_durable = false;  // a batch for it from now on stores the record again
    storage::batch b;
    b.erase(storage::table::queues, q->storage_key);
    submit(std::move(b), [this, q](const storage::status& s) { finish_auto_delete(q, s); });
  }
}

void broker::impl::finish_auto_delete(const queue_ptr& q, const storage::status& s) {
  if (!q->dropping) return;  // used again meanwhile: kept, its record stored again by that use
  q->dropping = false;
  if (!s.ok()) {
    q->record_durable = true;  // the removal was refused: the record is where it was
    spdlog::warn("auto-delete of queue {} not stored: {}; it stays", q->name(), s.message());
    return;
  }
  remove_queue(q);
  spdlog::info("queue {} deleted: empty and unused for auto-delete-queues-delay", q->name());
}

}  // namespace escrow::broker
