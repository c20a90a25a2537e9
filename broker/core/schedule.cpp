// Scheduled delivery (docs/stomp.md, "Scheduled delivery"): a SEND's delivery time from its
// headers, the stored schedule (the `scheduled` table, storage/schema.h) and the due pass that
// makes its records queue entries when their time comes, the wait in memory of scheduled messages
// that are not stored, what is loaded at open, and the operator's list, deliver-now and delete.
//
// The clock is the wall clock (the headers' epoch milliseconds). A step back delays what was not
// yet due; a step forward makes due at once what the new time says is due, and the pass releases
// it in due order a batch at a time (kPerPass, one batch being stored at a time), so other traffic
// goes on between batches instead of waiting for the whole backlog.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <tuple>
#include <unordered_set>

#include "core.h"
#include "core_timers.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {
namespace {

// Records one pass promotes at most (one batch): small enough that the core's turn and the
// committer's group stay short, large enough that a backlog moves at the disk's pace.
constexpr std::size_t kPerPass = 512;
// A delivery time from this on (the year 10000) is a mistake, not a schedule.
constexpr std::uint64_t kLatestDeliveryMs = 253402300800000ULL;

bool parse_ms(std::string_view text, std::uint64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::optional<std::string> scheduled_delivery(const frame& f, std::uint64_t now, std::uint64_t& deliver_at) {
  deliver_at = 0;
  const std::string* given = nullptr;
  std::string_view given_name;
  // Absolute times (Artemis, HornetQ) and delays from now (ActiveMQ's STOMP spelling, Artemis's).
  for (std::string_view name : {"_AMQ_SCHED_DELIVERY", "_HQ_SCHED_DELIVERY", "AMQ_SCHEDULED_DELAY", "_AMQ_SCHED_DELAY"}) {
    const std::string* v = f.find(std::string(name));
    if (!v) continue;
    if (given)
      return "SEND has both " + std::string(given_name) + " and " + std::string(name) +
             " headers: give one delivery time";
    given = v;
    given_name = name;
  }
  // ActiveMQ's repeated deliveries are not Escrow's: refuse them rather than deliver once in silence.
  for (std::string_view name : {"AMQ_SCHEDULED_PERIOD", "AMQ_SCHEDULED_REPEAT", "AMQ_SCHEDULED_CRON"}) {
    const std::string* v = f.find(std::string(name));
    if (v && !v->empty() && *v != "0")
      return "SEND's " + std::string(name) +
             " header asks for repeated delivery, which Escrow does not do: a scheduled message is delivered "
             "once (send one message per delivery)";
  }
  if (!given) return std::nullopt;
  std::uint64_t value = 0;
  bool relative = given_name == "AMQ_SCHEDULED_DELAY" || given_name == "_AMQ_SCHED_DELAY";
  if (!parse_ms(*given, value))
    return "invalid " + std::string(given_name) + " header '" + *given + "': use " +
           (relative ? "milliseconds from now (0 or more)" : "epoch milliseconds");
  std::uint64_t at = relative ? (value > kLatestDeliveryMs - now ? kLatestDeliveryMs : now + value) : value;
  if (at >= kLatestDeliveryMs)
    return "invalid " + std::string(given_name) + " header '" + *given +
           "': the delivery time is after the year 9999";
  if (at > now) deliver_at = at;  // a time already past is no schedule
  return std::nullopt;
}

void broker::impl::enqueue(const queue_ptr& q, queue_entry e) {
  if (e.stored) q->release_hold(e.key);
  ++q->counters.enqueued;
  // A last-value queue's entry that a write under way replaces waits for that write (last_values.cpp).
  if (!q->last_values.value_of.empty() && hold_back_superseded(q, e)) return;
  // (A scheduled message counts in the queue's depth and bytes, and so in its limits, from when it
  // is due: address_limits.cpp.)
  if (e.msg && e.msg->record.deliver_at != 0) return schedule_entry(q, std::move(e));
  q->counters.added(stored_size(e));
  q->push(std::move(e));
}

void broker::impl::schedule_entry(const queue_ptr& q, queue_entry e) {
  const storage::message_record& r = e.msg->record;
  const std::uint64_t due = storage::scheduled_due(r.deliver_at, r.expires);
  schedule.count(q->id(), 1);
  if (e.stored) {
    // Its `scheduled` record is durable: memory keeps only the queue's earliest due time.
    schedule.add_due(q->id(), due);
    return arm_due_timer();
  }
  // Not stored: it waits in memory, held in its queue meanwhile (so the queue is in use, and a
  // refill never hands it out), within the queue's memory budget: a queue refused it at the SEND
  // when over (charged_message); a subscription drops the new one, as it drops its oldest ready
  // ones (no subscriber may refuse a publisher's messages).
  std::uint64_t bytes = memory_bytes(*e.msg), now = now_ms();
  std::uint64_t& waiting = schedule.waiting_bytes[q->id()];
  if (q->unstored_bytes() + waiting + bytes > config.max_memory_bytes_per_queue) {
    schedule.count(q->id(), -1);
    if (waiting == 0) schedule.waiting_bytes.erase(q->id());
    ++q->counters.dropped;
    spdlog::debug("{} '{}': dropped a scheduled non-persistent message (limits.max-memory-bytes-per-queue)",
                  queue::kind_name(q->type()), q->name());
    return;
  }
  waiting += bytes;
  q->hold(e.key);
  schedule.waiting.emplace(std::chrono::steady_clock::now() + std::chrono::milliseconds(due > now ? due - now : 0),
                           std::pair{q, std::move(e)});
  arm_due_timer();
}

void broker::impl::arm_due_timer() {
  using clock = std::chrono::steady_clock;
  std::optional<clock::time_point> at;
  auto earliest = [&at](clock::time_point t) {
    if (!at || t < *at) at = t;
  };
  if (!undelivered.delayed.empty()) earliest(undelivered.delayed.begin()->first);
  if (!schedule.waiting.empty()) earliest(schedule.waiting.begin()->first);
  if (!schedule.by_due.empty() && !schedule.pass_running) {
    std::uint64_t due = schedule.by_due.begin()->first, now = now_ms();
    earliest(clock::now() + std::chrono::milliseconds(due > now ? due - now : 0));
  }
  if (!at) return;
  // Scheduled times are the wall clock's, the wait the steady clock's: waking at least once a
  // second while anything is scheduled follows a step of the wall clock forward (or a suspended
  // host) within a second.
  if (!schedule.by_due.empty() || !schedule.waiting.empty()) at = std::min(*at, clock::now() + std::chrono::seconds(1));
  // Armed for this time or earlier already: that wait re-arms for the rest when it ends.
  if (armed_due && *armed_due <= *at) return;
  armed_due = at;
  timers->due.expires_at(*at);
  timers->due.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // re-armed for an earlier time (that wait took over), or shutting down
    armed_due.reset();
    redeliver_due();
    release_waiting();
    promote_due();
    arm_due_timer();
    flush();
  });
}

void broker::impl::release_waiting() {
  auto now = std::chrono::steady_clock::now();
  std::vector<queue_ptr> touched;
  while (!schedule.waiting.empty() && schedule.waiting.begin()->first <= now) {
    auto node = schedule.waiting.extract(schedule.waiting.begin());
    auto& [q, e] = node.mapped();
    // The wait is on the steady clock; the time is the wall clock's. After a step back, not yet.
    std::uint64_t due = storage::scheduled_due(e.msg->record.deliver_at, e.msg->record.expires), wall = now_ms();
    if (due > wall) {
      schedule.waiting.emplace(now + std::chrono::milliseconds(due - wall), std::move(node.mapped()));
      continue;
    }
    q->release_hold(e.key);
    schedule.unwait(q->id(), memory_bytes(*e.msg));
    if (find_by_id(q->id()) != q) continue;  // its queue went away meanwhile (a subscription ended)
    schedule.count(q->id(), -1);
    ++schedule.delivered;
    q->counters.added(stored_size(e));
    q->push(std::move(e));
    if (touched.empty() || touched.back() != q) touched.push_back(q);
  }
  for (auto& q : touched) dispatch(q);
}

std::uint64_t broker::impl::scheduled_size(const storage::entry_key& key, std::string_view value) const {
  if (value.size() > 4) return value.size() - 4;  // the message inline
  std::string record;
  return store.get(storage::table::messages, storage::message_key(key.message_id), record).ok() ? record.size() : 0;
}

void broker::impl::promote_due() {
  if (schedule.pass_running) return;  // its completion runs the next pass
  const std::uint64_t now = now_ms();
  storage::batch b;
  std::vector<promoted_entry> promoted;
  std::vector<std::string> keys;
  while (!schedule.by_due.empty() && schedule.by_due.begin()->first <= now && promoted.size() < kPerPass) {
    std::uint32_t id = schedule.by_due.begin()->second;
    queue_ptr q = find_by_id(id);
    if (!q || q->dropping) {
      // Gone: forgotten. Being dropped: its records go with it; if the store refuses the drop,
      // finish_drop reads its schedule again (reload_schedule).
      if (!q) schedule.forget(id);
      else schedule.set_due(id, std::nullopt);
      continue;
    }
    std::optional<std::uint64_t> next;
    std::string prefix = storage::queue_prefix(id);
    storage::status s = store.scan(storage::table::scheduled, prefix, prefix, [&](std::string_view k, std::string_view v) {
      std::uint64_t due = 0;
      storage::entry_key key;
      if (!storage::parse_scheduled_key(k, due, key) || v.size() < 4) {
        // Never promoted, like an entry that does not decode (docs/storage.md, "A corrupted
        // store"): set aside for good so that the rest of the schedule flows on.
        spdlog::error("queue {}: a scheduled message is never delivered and stays stored: {}", q->name(),
                      storage::corrupt_record(storage::table::scheduled, k,
                                              "a scheduled key is u32 queue id, u64 due, u8 9-priority, u64 message id; "
                                              "its value a u32 delivery count, then the message or nothing")
                          .message());
        schedule.in_flight.emplace(k);
        return true;
      }
      if (due > now || promoted.size() == kPerPass) {
        next = std::min(next.value_or(due), due);
        return false;
      }
      std::string ks(k);
      // An operator's command is storing it, or its SEND's or commit's completion has not run
      // yet (LMDB has the record before the batch is durable): that completion schedules it
      // again (schedule_entry), and a later pass takes it.
      if (schedule.in_flight.count(ks) || q->is_held(key)) return true;
      b.promote_scheduled(ks);
      q->hold(key);  // until its queue has it: a refill after the commit must not hand it out first
      promoted.push_back(promoted_entry{q, key, scheduled_size(key, v)});
      keys.push_back(std::move(ks));
      schedule.in_flight.insert(keys.back());
      return true;
    });
    if (!s.ok()) {
      spdlog::error("scheduled delivery: cannot read the schedule of queue {}: {}; retried in a second", q->name(),
                    s.message());
      next = now + 1000;
    }
    schedule.set_due(id, next);
  }
  if (promoted.empty()) return;
  schedule.pass_running = true;
  submit(std::move(b), [this, promoted = std::move(promoted), keys = std::move(keys)](const storage::status& s) {
    schedule.pass_running = false;
    for (const auto& k : keys) schedule.in_flight.erase(k);
    std::vector<queue_ptr> touched;
    for (const auto& [q, key, size] : promoted) {
      q->release_hold(key);
      if (!s.ok()) {
        // Still in the schedule, as the store says, and the queue's earliest: tried again in a
        // second (not at once, which would spin while the store refuses).
        schedule.set_due(q->id(), now_ms() + 1000);
        continue;
      }
      if (find_by_id(q->id()) != q) continue;  // dropped meanwhile: its drop removed the entry too
      schedule.count(q->id(), -1);
      ++schedule.delivered;
      // (Pushed even while the queue is being dropped: the drop's batch removes the entry with the
      // queue, and if the store refuses the drop, the queue keeps it.)
      q->counters.added(size);
      q->push(queue_entry{key, 0, true, nullptr});
      if (touched.empty() || touched.back() != q) touched.push_back(q);
    }
    if (!s.ok()) {
      spdlog::error("scheduled delivery: {} messages that came due were not made ready: {}; retried in a second",
                    promoted.size(), s.message());
      return arm_due_timer();
    }
    for (auto& q : touched) dispatch(q);
    promote_due();  // the rest of a backlog, one batch at a time
    arm_due_timer();
  });
}

std::optional<std::uint64_t> broker::impl::first_due(std::uint32_t queue_id, storage::status& s) const {
  std::string prefix = storage::queue_prefix(queue_id);
  std::optional<std::uint64_t> first;
  s = store.scan(storage::table::scheduled, prefix, prefix, [&](std::string_view k, std::string_view) {
    std::uint64_t due = 0;
    storage::entry_key key;
    // (Records being stored are left out: a failed batch puts their time back itself.)
    if (storage::parse_scheduled_key(k, due, key) && !schedule.in_flight.count(std::string(k))) first = due;
    return !first;  // the first one is the earliest
  });
  return first;
}

void broker::impl::forget_schedule(const queue_ptr& q) {
  for (auto it = schedule.waiting.begin(); it != schedule.waiting.end();) {
    if (it->second.first == q) it = schedule.waiting.erase(it);
    else ++it;
  }
  schedule.forget(q->id());
  if (!q->durable()) return;
  // A SEND or commit submitted before the drop may have stored a scheduled record after the drop
  // read the table: once the drop is durable nothing else writes for this queue id, so what is
  // left now is all there is.
  storage::batch b;
  std::string prefix = storage::queue_prefix(q->id());
  storage::status s = store.scan(storage::table::scheduled, prefix, prefix, [&](std::string_view k, std::string_view) {
    b.remove_scheduled(k);
    return true;
  });
  if (!s.ok()) spdlog::error("deleting {}: {}; some of its scheduled messages stay in storage", q->name(), s.message());
  if (b.empty()) return;
  submit(std::move(b), [name = q->name()](const storage::status& st) {
    if (!st.ok())
      spdlog::error("deleting {}: its last scheduled messages were not removed: {}; escrow check lists them",
                    name, st.message());
  });
}

void broker::impl::reload_schedule(const queue_ptr& q) {
  storage::status s;
  std::optional<std::uint64_t> first = first_due(q->id(), s);
  if (!s.ok()) first = now_ms() + 1000;
  schedule.set_due(q->id(), first);
  arm_due_timer();
}

storage::status broker::impl::load_schedule() {
  for (const auto& [id, q] : topology.queues_by_id) {
    storage::status s;
    std::optional<std::uint64_t> first = first_due(id, s);
    if (!s.ok()) return s;
    schedule.set_due(id, first);
  }
  return {};
}

std::vector<scheduled_view> broker::impl::list_scheduled(std::uint32_t queue_id, std::optional<scheduled_cursor> after,
                                                         std::size_t limit) {
  std::vector<scheduled_view> out;
  queue_ptr q = find_by_id(queue_id);
  if (!q || limit == 0) return out;
  // The order of the `scheduled` table: due time, then priority (highest first), then id.
  auto order = [](std::uint64_t due, std::uint8_t priority, std::uint64_t id) {
    return std::tuple{due, 9 - priority, id};
  };
  auto is_after = [&](std::uint64_t due, std::uint8_t priority, std::uint64_t id) {
    return !after || order(due, priority, id) > order(after->due, after->priority, after->message_id);
  };
  // Stored ones, in that order, from the cursor on.
  std::string prefix = storage::queue_prefix(queue_id);
  std::string from =
      after ? storage::scheduled_key(after->due, storage::entry_key{queue_id, after->priority, after->message_id})
            : prefix;
  storage::status s = store.scan(storage::table::scheduled, from, prefix, [&](std::string_view k, std::string_view v) {
    std::uint64_t due = 0;
    storage::entry_key key;
    if (!storage::parse_scheduled_key(k, due, key) || !is_after(due, key.priority, key.message_id)) return true;
    scheduled_view view;
    view.message_id = key.message_id;
    view.due = due;
    view.stored = true;
    // (A record that does not decode is listed with what its key says.)
    if (v.size() > 4) {
      (void)storage::decode_inline_message(v, view.record);
    } else if (std::string value; store.get(storage::table::messages, storage::message_key(key.message_id), value).ok()) {
      (void)storage::message_record::decode(value, view.record);
    }
    view.record.priority = key.priority;  // what the order is by, decoded or not
    out.push_back(std::move(view));
    return out.size() < limit;
  });
  if (!s.ok()) spdlog::error("listing the schedule of {}: {}", q->name(), s.message());
  // Those waiting in memory (not stored), merged in due order.
  std::vector<scheduled_view> memory;
  for (const auto& [at, held] : schedule.waiting) {
    const auto& [hq, e] = held;
    if (hq != q) continue;
    std::uint64_t due = storage::scheduled_due(e.msg->record.deliver_at, e.msg->record.expires);
    if (!is_after(due, e.key.priority, e.key.message_id)) continue;
    memory.push_back(scheduled_view{e.key.message_id, due, false, e.msg->record});
  }
  out.insert(out.end(), std::make_move_iterator(memory.begin()), std::make_move_iterator(memory.end()));
  std::sort(out.begin(), out.end(), [&](const scheduled_view& a, const scheduled_view& b) {
    return order(a.due, a.record.priority, a.message_id) < order(b.due, b.record.priority, b.message_id);
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

void broker::impl::end_schedule(std::uint32_t queue_id, bool deliver, const std::vector<std::uint64_t>& ids,
                                std::size_t limit, std::function<void(const storage::status&, std::size_t)> done) {
  queue_ptr q = find_by_id(queue_id);
  if (!q) return done(storage::status{}, 0);
  if (q->dropping)
    return done(storage::status{storage::status::code::failed,
                                q->name() + " is being deleted: its scheduled messages go with it"},
                0);
  const std::unordered_set<std::uint64_t> id_set(ids.begin(), ids.end());
  auto wanted = [&](std::uint64_t id) { return id_set.empty() || id_set.count(id) != 0; };
  // With ids given, at most that many; the scan stops once they are all found.
  if (!id_set.empty()) limit = std::min(limit, id_set.size());
  std::size_t taken = 0;
  // In memory: delivered or dropped now.
  std::vector<queue_entry> ready;
  for (auto it = schedule.waiting.begin(); it != schedule.waiting.end() && taken < limit;) {
    auto& [hq, e] = it->second;
    if (hq != q || !wanted(e.key.message_id)) {
      ++it;
      continue;
    }
    q->release_hold(e.key);
    schedule.count(queue_id, -1);
    schedule.unwait(queue_id, memory_bytes(*e.msg));
    if (deliver) {
      q->counters.added(stored_size(e));
      ready.push_back(std::move(e));
    } else {
      ++schedule.deleted;
    }
    it = schedule.waiting.erase(it);
    ++taken;
  }
  for (auto& e : ready) q->push(std::move(e));
  // Stored: one batch, then the same as a due pass.
  storage::batch b;
  std::vector<std::string> keys;
  std::vector<storage::entry_key> entries;
  std::vector<std::uint64_t> sizes;  // what each counts for in the queue's bytes once delivered
  std::string prefix = storage::queue_prefix(queue_id);
  storage::status s = store.scan(storage::table::scheduled, prefix, prefix, [&](std::string_view k, std::string_view v) {
    if (taken >= limit) return false;
    std::uint64_t due = 0;
    storage::entry_key key;
    if (!storage::parse_scheduled_key(k, due, key) || !wanted(key.message_id)) return true;
    std::string ks(k);
    // A pass is storing it already, or its SEND's completion has not run: left alone.
    if (v.size() < 4 || q->is_held(key) || !schedule.in_flight.insert(ks).second) return true;
    if (deliver) {
      b.promote_scheduled(ks);
      q->hold(key);
    } else {
      b.remove_scheduled(ks);
    }
    keys.push_back(std::move(ks));
    entries.push_back(key);
    sizes.push_back(deliver ? scheduled_size(key, v) : 0);
    ++taken;
    return true;
  });
  if (!s.ok()) {
    for (const auto& k : keys) schedule.in_flight.erase(k);
    for (const auto& key : entries)
      if (deliver) q->release_hold(key);
    if (!ready.empty()) dispatch(q);
    return done(s, 0);
  }
  std::size_t in_memory = taken - keys.size();
  if (keys.empty()) {
    if (in_memory > 0) dispatch(q);
    return done(storage::status{}, in_memory);
  }
  submit(std::move(b), [this, q, deliver, keys = std::move(keys), entries = std::move(entries),
                        sizes = std::move(sizes), in_memory,
                        done = std::move(done)](const storage::status& st) {
    for (const auto& k : keys) schedule.in_flight.erase(k);
    const bool known = find_by_id(q->id()) == q;  // not dropped meanwhile
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const storage::entry_key& key = entries[i];
      if (deliver) q->release_hold(key);
      if (!st.ok() || !known) continue;
      schedule.count(q->id(), -1);
      if (!deliver) {
        ++schedule.deleted;
        continue;
      }
      ++schedule.delivered;
      q->counters.added(sizes[i]);
      q->push(queue_entry{key, 0, true, nullptr});
    }
    if (!known) return done(st, in_memory);
    // The queue's earliest due time, read again: what is left of its schedule.
    storage::status rs;
    std::optional<std::uint64_t> first = first_due(q->id(), rs);
    if (!rs.ok()) first = now_ms() + 1000;  // read again by the pass then
    schedule.set_due(q->id(), first);
    dispatch(q);
    arm_due_timer();
    done(st, st.ok() ? entries.size() + in_memory : in_memory);
  });
}

}  // namespace escrow::broker
