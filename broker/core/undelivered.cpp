// Messages that are not delivered the ordinary way (HornetQ's chapters in ../shared/seeds/):
// expiry (the reaper, over the storage expiry index and each queue's in-memory index), redelivery
// after a delay, and dead letters after max-delivery-attempts. A message leaves its queue for an
// expiry or dead letter address in one storage batch that removes its entry and stores the copy,
// so it is never lost and never in both places. Entries that are held (in flight, in a transaction
// branch, waiting out a delay) are left alone; the rules apply once they return to the queue.
#include <spdlog/spdlog.h>

#include "core.h"
#include "core_timers.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {
namespace {

// The headers a moved message carries about where it came from and why; older copies of them
// (a message moved twice) are replaced.
bool is_move_header(std::string_view name) { return name.rfind("_HQ_", 0) == 0; }

// An address setting names a queue ("DLQ"), or a destination ("/queue/DLQ", "/topic/audit").
std::string destination_of(const std::string& address) {
  if (address.rfind("/queue/", 0) == 0 || address.rfind("/topic/", 0) == 0) return address;
  return "/queue/" + address;
}

}  // namespace

double reaper_share(unsigned priority) {
  // 0 yields nearly everything to deliveries; 3 (HornetQ's default) a quarter; 9 runs the pass
  // back to back, turns interleaved only with what is queued on the core already.
  static constexpr double kShare[10] = {0.05, 0.10, 0.15, 0.25, 0.33, 0.50, 0.67, 0.80, 0.90, 1.0};
  return kShare[priority > 9 ? 9 : priority];
}

std::chrono::steady_clock::duration reaper_pause(std::chrono::steady_clock::duration took, unsigned priority) {
  double share = reaper_share(priority);
  if (share >= 1.0) return std::chrono::steady_clock::duration::zero();
  auto pause = std::chrono::duration_cast<std::chrono::steady_clock::duration>(took * ((1.0 - share) / share));
  return std::max<std::chrono::steady_clock::duration>(pause, std::chrono::microseconds(100));
}

const address_settings& broker::impl::settings_for(const std::string& address) {
  auto it = undelivered.settings_cache.find(address);
  if (it == undelivered.settings_cache.end())
    it = undelivered.settings_cache.emplace(address, resolve_settings(config.address_settings, address)).first;
  return it->second;
}

bool broker::impl::dead_letter_due(const queue_ptr& q, const queue_entry& e) {
  std::int64_t max = settings_for(q->address()).max_delivery_attempts;
  return max != -1 && e.delivery_count >= static_cast<std::uint64_t>(max);
}

void broker::impl::plan_move(const queue_ptr& q, queue_entry e, move_reason reason, storage::batch& b,
                             std::vector<move_plan>& plans, bool in_bulk) {
  const address_settings& s = settings_for(q->address());
  bool expiry = reason == move_reason::expired;
  const std::string& address = expiry ? s.expiry_address : s.dead_letter_address;
  std::string destination = address.empty() ? std::string() : destination_of(address);
  std::vector<queue_ptr> targets;
  if (!destination.empty() && !resolve_destination(destination, b, targets))
    spdlog::error("address settings of '{}': {} '{}' is not a valid destination", q->address(),
                  expiry ? "expiry-address" : "dead-letter-address", address);

  if (targets.empty()) {
    if (e.stored) storage::erase_entry(b, e.key);
    const message& m = *e.msg;
    ++(expiry ? undelivered.counters.expired_dropped : undelivered.counters.dead_letters_dropped);
    spdlog::warn("queue {}: message {} {}; dropped, as {} (set {} in the address settings to keep such messages)",
                 q->name(), m.id, expiry ? "expired" : "reached max-delivery-attempts",
                 destination.empty() ? "no address is configured" : "nothing listens to " + destination,
                 expiry ? "expiry-address" : "dead-letter-address");
    plans.push_back(move_plan{reason, in_bulk, q, std::move(e), {}});
    return;
  }
  ++(expiry ? undelivered.counters.expired : undelivered.counters.dead_lettered);
  plan_copy(q, std::move(e), reason, targets, destination, b, plans, in_bulk);
}

void broker::impl::plan_copy(const queue_ptr& q, queue_entry e, move_reason reason,
                             const std::vector<queue_ptr>& targets, const std::string& destination,
                             storage::batch& b, std::vector<move_plan>& plans, bool in_bulk) {
  if (e.stored) storage::erase_entry(b, e.key);
  const message& m = *e.msg;
  bool expiry = reason == move_reason::expired;
  move_plan plan{reason, in_bulk, q, std::move(e), {}};

  auto copy = std::make_shared<message>();
  copy->id = next_message_id++;
  storage::message_record& r = copy->record;
  r.persistent = m.record.persistent;
  r.priority = m.record.priority;
  r.timestamp = m.record.timestamp;
  r.destination = destination;
  r.body = m.record.body;
  for (const auto& h : m.record.headers)
    if (!is_move_header(h.first)) r.headers.push_back(h);
  // An operator's move (dead letters back to work) gives the message a fresh start: no _HQ_
  // headers, delivery count 0; if it fails again it is dead-lettered again with new ones.
  if (reason != move_reason::moved_by_operator) {
    r.headers.emplace_back("_HQ_ORIG_ADDRESS", m.record.destination);
    r.headers.emplace_back("_HQ_ORIG_QUEUE", q->name());
    r.headers.emplace_back("_HQ_ORIG_MESSAGE_ID", std::to_string(m.id));
    r.headers.emplace_back("_HQ_REASON", expiry                                 ? "expired"
                                         : reason == move_reason::address_full ? "address-full"
                                                                                : "max-delivery-attempts");
    if (expiry) {
      r.headers.emplace_back("_HQ_ACTUAL_EXPIRY", std::to_string(now_ms()));
    } else {
      r.headers.emplace_back("_HQ_ORIG_DELIVERY_COUNT", std::to_string(plan.old.delivery_count));
    }
  }
  // r.expires stays 0: a message in an expiry or dead letter address does not expire again.

  std::vector<storage::entry_key> stored;
  for (const auto& t : targets) {
    // A topic subscription with a selector gets a copy only if it selects it, as on SEND.
    if (t->filter && !selects(*t->filter, r, copy->id)) continue;
    storage::entry_key key{t->id(), r.priority, copy->id};
    bool keep = r.persistent && t->durable();
    if (keep) {
      t->hold(key);
      stored.push_back(key);
    }
    plan.to.emplace_back(t, queue_entry{key, 0, keep, copy});
  }
  if (!stored.empty()) {
    storage::put_message(b, copy->id, r, stored);
    storage::put_next_message_id(b, next_message_id);
  }
  plans.push_back(std::move(plan));
}

void broker::impl::submit_moves(storage::batch b, std::vector<move_plan> plans,
                                std::function<void(const storage::status&)> then) {
  if (plans.empty() && b.empty()) {
    if (then) then(storage::status{});
    return;
  }
  auto finish = [this, plans = std::move(plans), then = std::move(then)](const storage::status& s) mutable {
    bool stored = s.ok();
    std::vector<queue_ptr> touched;
    for (auto& p : plans) {
      p.from->release_hold(p.old.key);
      if (stored) {
        queue_counters& n = p.from->counters;
        if (p.reason == move_reason::moved_by_operator) n.left(stored_size(p.old));
        else n.removed(p.reason == move_reason::expired ? n.expired : n.dead_lettered, stored_size(p.old));
        if (p.to.empty()) continue;  // dropped (logged when planned)
        const message& copy = *p.to.front().second.msg;
        const char* why = p.reason == move_reason::expired               ? "expired"
                          : p.reason == move_reason::max_delivery_attempts ? "reached max-delivery-attempts"
                                                                           : "moved by an operator";
        spdlog::log(p.in_bulk ? spdlog::level::debug : spdlog::level::info,
                    "queue {}: message {} {}; moved to {} as message {}", p.from->name(), p.old.key.message_id, why,
                    copy.record.destination, copy.id);
        publish(p.to);
        continue;
      }
      // The store refused: the message stays where it was, as it still is in storage.
      for (auto& [t, e] : p.to)
        if (e.stored) t->release_hold(e.key);
      p.from->push(std::move(p.old));
      touched.push_back(p.from);
    }
    for (auto& q : touched) dispatch(q);
    if (then) then(s);
  };
  // Never run it in the caller's turn: the caller may be iterating the consumers or deliveries
  // that publishing would change.
  if (b.empty()) return post([this, finish = std::move(finish)]() mutable {
    finish(storage::status{});
    flush();
  });
  submit(std::move(b), [finish = std::move(finish)](const storage::status& s) mutable {
    if (!s.ok()) spdlog::error("moving messages out of their queues: {}; they stay where they were", s.message());
    finish(s);
  });
}

void broker::impl::offer_again(const queue_ptr& q, queue_entry e, bool at_once) {
  if (dead_letter_due(q, e) && load_message(e)) {
    storage::batch b;
    std::vector<move_plan> plans;
    plan_move(q, std::move(e), move_reason::max_delivery_attempts, b, plans);
    return submit_moves(std::move(b), std::move(plans));
  }
  ++q->counters.redelivered;
  const address_settings& s = settings_for(q->address());
  double spread = 0.0;
  if (s.collision_avoidance_factor > 0) spread = std::uniform_real_distribution<double>(-1.0, 1.0)(random);
  if (std::uint64_t delay = at_once ? 0 : s.redelivery_delay_for(e.delivery_count, spread); delay > 0)
    return delay_redelivery(q, std::move(e), delay);
  q->release_hold(e.key);
  q->push(std::move(e));
}

// The wait shares one timer with scheduled delivery (schedule.cpp, arm_due_timer).
void broker::impl::delay_redelivery(const queue_ptr& q, queue_entry e, std::uint64_t delay_ms) {
  auto due = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
  undelivered.delayed.emplace(due, std::pair{q, std::move(e)});  // stays held in q meanwhile
  arm_due_timer();
}

void broker::impl::redeliver_due() {
  auto now = std::chrono::steady_clock::now();
  std::vector<queue_ptr> touched;
  while (!undelivered.delayed.empty() && undelivered.delayed.begin()->first <= now) {
    auto node = undelivered.delayed.extract(undelivered.delayed.begin());
    auto& [q, e] = node.mapped();
    q->release_hold(e.key);
    q->push(std::move(e));
    touched.push_back(q);
  }
  for (auto& q : touched) dispatch(q);
}

void broker::impl::schedule_reaper() {
  if (config.message_expiry_scan_period_ms < 0) return;
  timers->reaper.expires_after(std::chrono::milliseconds(config.message_expiry_scan_period_ms));
  timers->reaper.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (!undelivered.reap_in_progress) reap();
    flush();
    schedule_reaper();
  });
}

void broker::impl::reap(std::string from) {
  // A turn handles at most this many index records, so that the core strand stays responsive; the
  // rest of the pass continues in the next turn.
  constexpr std::size_t kPerTurn = 256;
  std::uint64_t now = now_ms();
  auto turn_started = std::chrono::steady_clock::now();
  if (from.empty()) {
    undelivered.reap_started_ms = now;
    undelivered.reap_moved = 0;
  }
  std::vector<std::string> due;
  std::string next;
  storage::status s = store.scan(storage::table::expiries, from, {}, [&](std::string_view k, std::string_view) {
    std::uint64_t expires = 0;
    storage::entry_key key;
    if (storage::parse_expiry_key(k, expires, key) && expires > now) return false;
    if (due.size() == kPerTurn) {
      next = k;
      return false;
    }
    due.emplace_back(k);
    return true;
  });
  if (!s.ok()) spdlog::error("expiry reaper: cannot read the expiry index: {}", s.message());

  storage::batch b;
  std::vector<move_plan> plans;
  for (const auto& k : due) {
    std::uint64_t expires = 0;
    storage::entry_key key;
    queue_ptr q = storage::parse_expiry_key(k, expires, key) ? find_by_id(key.queue_id) : nullptr;
    if (!q) {
      b.erase(storage::table::expiries, k);  // a record without a queue: nothing to expire
      continue;
    }
    std::optional<queue_entry> e = q->take(key);
    if (!e) continue;  // held (in flight, in a branch, delayed: expired when it comes back) or gone
    if (!load_message(*e)) continue;  // unreadable (logged): stays stored and held, never served
    plan_move(q, std::move(*e), move_reason::expired, b, plans, true);
  }
  if (from.empty()) {
    // A move may create its target queue: iterate over a copy of the queue list.
    std::vector<queue_ptr> all;
    all.reserve(topology.queues_by_id.size());
    for (auto& [id, q] : topology.queues_by_id) all.push_back(q);
    for (auto& q : all)
      for (auto& e : q->take_expired_in_memory(now)) plan_move(q, std::move(e), move_reason::expired, b, plans, true);
  }
  undelivered.reap_moved += plans.size();
  submit_moves(std::move(b), std::move(plans));
  if (!next.empty()) {
    // Expiry is not urgent (an expired message is never delivered anyway): between turns the core
    // serves deliveries for as long as message-expiry-thread-priority leaves them (reaper_share),
    // so that deliveries keep flowing during a large pass.
    undelivered.reap_in_progress = true;
    auto took = std::chrono::steady_clock::now() - turn_started;
    timers->reaper_turn.expires_after(reaper_pause(took, config.message_expiry_thread_priority));
    timers->reaper_turn.async_wait([this, next](const boost::system::error_code& ec) {
      if (ec) return;
      reap(next);
      flush();
    });
    return;
  }
  undelivered.reap_in_progress = false;
  if (undelivered.reap_moved > 0) {
    std::uint64_t end = now_ms();
    spdlog::info("expiry reaper: {} messages expired in a pass of {} ms (epoch ms {} to {})",
                 undelivered.reap_moved, end - undelivered.reap_started_ms, undelivered.reap_started_ms, end);
  }
}

void broker::impl::create_undelivered_queues(storage::batch& b) {
  for (const auto& e : config.address_settings) {
    for (const auto* address : {&e.expiry_address, &e.dead_letter_address}) {
      if (!*address || address->value().empty()) continue;
      std::string destination = destination_of(**address);
      if (destination.rfind("/queue/", 0) == 0 && destination.size() > 7) find_or_create_queue(destination.substr(7), b);
    }
  }
}

}  // namespace escrow::broker
