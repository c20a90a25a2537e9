// Purges and moves (`escrow purge`, `escrow move`; the ADMIN handlers in broker/admin check their
// arguments and start them through admin_core::start_sweep): a sweep over the queue's stored
// entries in key order, slice by slice. Each core turn reads at most kSweepSlice entries from the
// store with a cursor and submits one batch, and the next slice starts only once that batch is
// stored, so memory stays bounded and other connections are served between slices. A purge removes
// what is ready (and the non-persistent messages kept in memory); a move copies each message to its
// destination and removes it in the same batch (plan_copy, undelivered.cpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "core.h"
#include "escrow/broker/core/stored_entries.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {

namespace {

bool matches_origin(const storage::message_record& r, const std::string& filter) {
  for (const auto& [name, value] : r.headers)
    if (name == "_HQ_ORIG_ADDRESS") return value == filter || value == destination_named(filter);
  return false;
}

}  // namespace

// --- Sweeps: a purge or move over a queue, slice by slice -----------------------------------------

namespace {

// A slice of a purge or move looks at no more than this many stored entries: one core turn's work
// and one batch, so that other connections' frames are handled between slices and memory stays
// bounded however long the queue is.
constexpr std::size_t kSweepSlice = 1000;
// A slice of a move also ends once it has read this many bytes of stored values (the messages it
// copies), after at least one entry, so that large messages keep a slice small too.
constexpr std::size_t kSweepSliceBytes = 4 * 1024 * 1024;

bool is_purge(const queue_sweep& s) { return s.what == queue_sweep::kind::purge; }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Reads the next page of the sweep's stored entries, from s.next on, and moves s.next past it (or
// sets s.at_end). A page ends after kSweepSlice entries (or kSweepSliceBytes of a move's values),
// or at the first message sent after the sweep began: later ones of that priority are newer
// still, so the next page starts at the next lower priority.
storage::status read_sweep_page(const storage::store& st, queue_sweep& s, std::vector<sweep_page_entry>& page) {
  const std::string prefix = storage::queue_prefix(s.from->id());
  const bool with_values = !is_purge(s);
  std::size_t looked = 0;
  std::size_t bytes = 0;
  std::optional<std::string> next;  // where the next page starts; nullopt: this page reached the end
  storage::status status = st.scan(storage::table::entries, s.next.empty() ? prefix : s.next, prefix,
                                   [&](std::string_view k, std::string_view v) {
    storage::entry_key key;
    bool decoded = storage::entry_key::decode(k, key);  // a key that is not one is passed over
    if (decoded && key.message_id >= s.id_limit) {
      if (key.priority > 0)
        next = storage::entry_key{key.queue_id, static_cast<std::uint8_t>(key.priority - 1), 0}.encode();
      return false;
    }
    if (decoded) {
      // A purge reads no values, but the stored size of what it removes counts in the queue's bytes:
      // the value past its delivery count when the message is inline, else looked up below.
      std::uint64_t size = v.size() > 4 ? v.size() - 4 : 0;
      page.push_back({key, storage::decode_delivery_count(v), with_values ? std::string(v) : std::string(), size});
      bytes += v.size();
    }
    if (++looked == kSweepSlice || (with_values && bytes >= kSweepSliceBytes)) {
      next = std::string(k) + '\0';  // the smallest key after this one
      return false;
    }
    return true;
  });
  if (!status.ok()) return status;
  if (!with_values)
    for (auto& p : page) {
      if (p.size != 0) continue;
      std::string record;  // a message several entries share (a topic's): stored once, in messages
      if (st.get(storage::table::messages, storage::message_key(p.key.message_id), record).ok()) p.size = record.size();
    }
  if (next) s.next = std::move(*next);
  else s.at_end = true;
  return status;
}

// What the sweep has done so far, and how it ended (`how`).
sweep_report report(const queue_sweep& s, sweep_report::ending how, std::string store_message = {}) {
  sweep_report r;
  r.purge = is_purge(s);
  r.queue = s.from->name();
  r.destination = s.destination;
  r.handled = s.handled;
  r.held = s.held;
  r.slices = s.slices;
  r.depth_at_start = s.depth_at_start;
  r.seconds = seconds_since(s.started);
  r.complete = s.at_end;
  r.how = how;
  r.store_message = std::move(store_message);
  return r;
}

}  // namespace

std::optional<sweep_report> broker::impl::sweep_running(std::uint32_t queue_id) const {
  auto it = sweeps.find(queue_id);
  if (it == sweeps.end()) return std::nullopt;
  return report(*it->second, sweep_report::ending::running);
}

void broker::impl::start_sweep(sweep_ptr s) {
  // Messages sent from now on (a higher id) are left alone: the sweep ends even while producers
  // keep the queue full, and a move into a topic the source subscribes to does not chase its copies.
  s->id_limit = next_message_id;
  s->depth_at_start = s->from->counters.depth > 0 ? static_cast<std::uint64_t>(s->from->counters.depth) : 0;
  sweeps[s->from->id()] = s;
  if (is_purge(*s))
    spdlog::warn("operator purges queue {}: {} messages, in slices of {}", s->from->name(), s->depth_at_start,
                 kSweepSlice);
  else
    spdlog::warn("operator moves messages from {} to {}{}, in slices of {}", s->from->name(), s->destination,
                 s->filter ? " (_HQ_ORIG_ADDRESS " + *s->filter + ")" : std::string(), kSweepSlice);
  sweep_slice(s);
}

void broker::impl::sweep_slice(const sweep_ptr& s) {
  auto it = topology.queues_by_id.find(s->from->id());
  if (it == topology.queues_by_id.end() || it->second != s->from || s->from->dropping)
    return end_sweep(s, sweep_report::ending::queue_deleted);
  ++s->slices;
  std::vector<sweep_page_entry> page;
  if (storage::status st = read_sweep_page(store, *s, page); !st.ok())
    return end_sweep(s, sweep_report::ending::unreadable, st.message());
  if (is_purge(*s)) purge_slice(s, std::move(page));
  else move_slice(s, std::move(page));
}

void broker::impl::purge_slice(const sweep_ptr& s, std::vector<sweep_page_entry> page) {
  const queue_ptr& q = s->from;
  // The non-persistent messages, kept only in memory, go with the first slice.
  std::vector<queue_entry> taken;
  if (s->slices == 1) taken = q->take_unstored_ready();
  // Only what is ready goes: an entry that is held (in flight, in a transaction branch, waiting
  // out a redelivery delay, being written) stays, and is delivered again if it comes back.
  std::size_t held = 0;
  storage::batch b;
  std::vector<std::uint64_t> sizes;  // of `taken`, for the queue's bytes
  for (const auto& e : taken) sizes.push_back(stored_size(e));
  for (const auto& p : page) {
    std::optional<queue_entry> t = q->take(p.key);
    if (!t) {
      ++held;
      continue;
    }
    sizes.push_back(t->msg ? stored_size(*t) : p.size);
    // An entry taken from storage alone has no count in memory: it keeps its stored one if it
    // comes back.
    t->delivery_count = std::max(t->delivery_count, p.delivery_count);
    storage::erase_entry(b, t->key);
    taken.push_back(std::move(*t));
  }
  if (taken.empty()) {
    s->held += held;
    return next_sweep_slice(s);
  }
  // Once stored the entries are gone; if the store refuses they go back, as storage still has them.
  // (A batch that only drops non-persistent messages is empty: a barrier, stored at once.)
  submit(std::move(b), [this, s, taken = std::move(taken), sizes = std::move(sizes), held](const storage::status& st) mutable {
    const queue_ptr& q = s->from;
    bool stored = st.ok();
    for (std::size_t i = 0; i < taken.size(); ++i) {
      queue_entry& e = taken[i];
      q->release_hold(e.key);
      if (stored) q->counters.left(sizes[i]);
      else q->push(std::move(e));
    }
    if (!stored) {
      dispatch(q);
      return end_sweep(s, sweep_report::ending::store_refused, st.message());
    }
    s->handled += taken.size();
    s->held += held;
    next_sweep_slice(s);
  });
}

void broker::impl::move_slice(const sweep_ptr& s, std::vector<sweep_page_entry> page) {
  const queue_ptr& from = s->from;
  storage::batch b;
  std::vector<queue_ptr> targets;
  // Valid when the move began (admin_move); resolved again for the subscriptions a topic has now.
  (void)resolve_destination(s->destination, b, targets);
  if (targets.empty())
    return end_sweep(s, sweep_report::ending::nothing_listening);
  // Each message leaves `from` and lands in `to` in the same batch (plan_copy): never lost, never
  // in both places. A held message (in flight, in a branch) is skipped and counted.
  std::vector<move_plan> plans;
  std::size_t held = 0;
  for (auto& p : page) {
    storage::message_record record;
    bool readable = read_record(store, p.key, p.value, record);
    if (s->filter && (!readable || !matches_origin(record, *s->filter))) continue;
    std::optional<queue_entry> t = from->take(p.key);
    if (!t) {
      ++held;
      continue;
    }
    t->delivery_count = std::max(t->delivery_count, p.delivery_count);  // if it comes back
    if (!t->msg && readable) {
      auto m = std::make_shared<message>();
      m->id = p.key.message_id;
      m->record = std::move(record);
      t->msg = std::move(m);
    }
    if (!load_message(*t)) {  // unreadable: it stays where it is, held (logged)
      ++held;
      continue;
    }
    // In bulk: each message is logged at debug level only, the move logs its totals (end_sweep).
    plan_copy(from, std::move(*t), move_reason::moved_by_operator, targets, s->destination, b, plans, true);
  }
  std::size_t moved = plans.size();
  submit_moves(std::move(b), std::move(plans), [this, s, moved, held](const storage::status& st) {
    if (!st.ok()) return end_sweep(s, sweep_report::ending::store_refused, st.message());
    s->handled += moved;
    s->held += held;
    next_sweep_slice(s);
  });
}

void broker::impl::next_sweep_slice(const sweep_ptr& s) {
  if (s->at_end) return end_sweep(s, sweep_report::ending::done);
  // Posted, not called: the frames of other connections that came in meanwhile go first, and
  // the stack does not grow with the number of slices.
  post([this, s] {
    sweep_slice(s);
    flush();
  });
}

void broker::impl::end_sweep(const sweep_ptr& s, sweep_report::ending how, std::string store_message) {
  auto it = sweeps.find(s->from->id());
  if (it != sweeps.end() && it->second == s) sweeps.erase(it);
  auto done = std::move(s->done);
  done(report(*s, how, std::move(store_message)));  // it logs the totals (broker/admin)
}

}  // namespace escrow::broker
