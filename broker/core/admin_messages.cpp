// Admin commands over a queue's messages: browse (peek, changing nothing), purge (remove what is
// ready) and move (e.g. dead letters back to work, atomically per message, with the copy-and-remove
// of undelivered.cpp). They see stored messages (persistent ones, the ones an operator cares
// about after a failure); purge also drops the non-persistent messages kept in memory. This file
// checks their arguments, then runs a purge or move over the queue slice by slice (a sweep): each
// core turn reads at most kSweepSlice entries from the store with a cursor and submits one batch,
// and the next slice starts only once that batch is stored.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "admin_store.h"
#include "core.h"
#include "escrow/storage/store.h"
#include "escrow/broker/core/json.h"
#include "escrow/broker/security/names.h"

namespace escrow::broker {

namespace {

constexpr std::size_t kDefaultBrowse = 20;
constexpr std::size_t kMaxBrowse = 10000;

admin_outcome not_found(const std::string& name) {
  return {"not-found", "no queue or durable subscription named '" + name + "' (escrow queues lists them)", {}};
}

// A destination from what an operator typed: "orders" is /queue/orders.
std::string destination_named(const std::string& name) {
  if (name.rfind("/queue/", 0) == 0 || name.rfind("/topic/", 0) == 0) return name;
  return "/queue/" + name;
}

bool matches_origin(const storage::message_record& r, const std::string& filter) {
  for (const auto& [name, value] : r.headers)
    if (name == "_HQ_ORIG_ADDRESS") return value == filter || value == destination_named(filter);
  return false;
}

}  // namespace

admin_outcome broker::impl::admin_browse(const frame& f) const {
  std::string name(f.get("name"));
  queue_ptr q = find_by_name(name);
  if (!q) return not_found(name);
  std::size_t count = kDefaultBrowse;
  if (std::string_view text = f.get("count"); !text.empty()) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (ec != std::errc() || end != text.data() + text.size() || count == 0 || count > kMaxBrowse)
      return {"invalid", "invalid count '" + std::string(text) + "': use 1 to " + std::to_string(kMaxBrowse), {}};
  }
  std::vector<stored_entry> entries;
  if (storage::status s = read_stored_entries(store, q->id(), count, true, entries); !s.ok())
    return {"refused", "cannot read queue " + name + ": " + s.message(), {}};
  json::array messages;
  for (const auto& e : entries) {
    json::object m{{"message_id", e.key.message_id},
                   {"priority", static_cast<unsigned>(e.key.priority)},
                   {"delivery_count", e.delivery_count},
                   // held: in flight, in a transaction branch, waiting out a redelivery delay or being moved
                   {"state", q->is_held(e.key) ? "held" : "ready"},
                   {"readable", e.readable}};
    if (e.readable) {
      const storage::message_record& r = e.record;
      json::object headers;
      for (const auto& [hn, hv] : r.headers) headers.emplace(hn, hv);  // the first one counts
      m["destination"] = r.destination;
      m["timestamp"] = r.timestamp;
      m["expires"] = r.expires;
      m["persistent"] = r.persistent;
      m["headers"] = std::move(headers);
      m["body_bytes"] = r.body.size();
      m["body_utf8"] = is_utf8(r.body);
      m["body"] = r.body;
    }
    messages.push_back(std::move(m));
  }
  return {"ok", {}, to_json(json::object{{"queue", q->name()}, {"messages", std::move(messages)}})};
}

void broker::impl::admin_purge(const frame& f, admin_done done) {
  std::string name(f.get("name"));
  queue_ptr q = find_by_name(name);
  if (!q) return done(not_found(name));
  if (auto busy = sweep_running(*q)) return done(std::move(*busy));
  auto s = std::make_shared<queue_sweep>();
  s->what = queue_sweep::kind::purge;
  s->from = q;
  s->done = std::move(done);
  start_sweep(std::move(s));
}

void broker::impl::admin_move(const frame& f, admin_done done) {
  std::string from_name(f.get("from"));
  std::string to_name(f.get("to"));
  const std::string* filter = f.find("filter");
  if (from_name.empty() || to_name.empty()) return done({"invalid", "move needs the from and to headers", {}});
  queue_ptr from = find_by_name(from_name);
  if (!from) return done(not_found(from_name));
  std::string destination = destination_named(to_name);
  if (destination == "/queue/" + from->name())
    return done({"invalid", "move from " + from_name + " to itself: name another queue", {}});
  if (auto busy = sweep_running(*from)) return done(std::move(*busy));
  // Checked now so that a mistyped destination is answered at once; each slice resolves it again
  // (a topic's subscriptions may change while a long move runs).
  storage::batch records;
  std::vector<queue_ptr> targets;
  if (!resolve_destination(destination, records, targets))
    return done({"invalid", "'" + to_name + "' is not a destination: use NAME, /queue/NAME or /topic/NAME", {}});
  if (targets.empty())
    return done({"refused", "nothing subscribes to " + destination + ": the messages would be dropped", {}});
  // A queue it created goes into the first slice's batch (resolve_destination carries its record
  // again while it is not durable).
  auto s = std::make_shared<queue_sweep>();
  s->what = queue_sweep::kind::move;
  s->from = from;
  s->destination = destination;
  if (filter) s->filter = *filter;
  s->done = std::move(done);
  start_sweep(std::move(s));
}

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
const char* verb(const queue_sweep& s) { return is_purge(s) ? "purge" : "move"; }
const char* past(const queue_sweep& s) { return is_purge(s) ? "purged" : "moved"; }

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
      page.push_back({key, storage::decode_delivery_count(v), with_values ? std::string(v) : std::string()});
      bytes += v.size();
    }
    if (++looked == kSweepSlice || (with_values && bytes >= kSweepSliceBytes)) {
      next = std::string(k) + '\0';  // the smallest key after this one
      return false;
    }
    return true;
  });
  if (!status.ok()) return status;
  if (next) s.next = std::move(*next);
  else s.at_end = true;
  return status;
}

// The JSON answer: what the sweep did (so far, when it was cut short).
std::string sweep_json(const queue_sweep& s) {
  json::object j;
  if (is_purge(s)) j = {{"queue", s.from->name()}, {"purged", s.handled}, {"held_left", s.held}};
  else j = {{"from", s.from->name()}, {"to", s.destination}, {"moved", s.handled}, {"held_skipped", s.held}};
  j["depth_at_start"] = s.depth_at_start;
  j["slices"] = s.slices;
  j["seconds"] = json_seconds(seconds_since(s.started));
  j["complete"] = s.at_end;
  return to_json(std::move(j));
}

// "purged 3000 of the 20000 messages in orders when the purge began". (Just after a start the
// depth may not be counted yet: then it is left out.)
std::string progress(const queue_sweep& s) {
  std::string did = std::string(past(s)) + " " + std::to_string(s.handled);
  if (s.depth_at_start < s.handled) return did + " messages of " + s.from->name();
  return did + " of the " + std::to_string(s.depth_at_start) + " messages in " + s.from->name() + " when the " +
         verb(s) + " began";
}

// The answer when the store refused a slice: what was done before it, and that the rest stays.
admin_outcome refused_by_store(const queue_sweep& s, const storage::status& st) {
  return {"refused",
          progress(s) + "; the store refused the rest: " + st.message() + ". Nothing of the refused slice was " +
              past(s) + ": the rest stays in " + s.from->name() + "; " + verb(s) +
              " again once the store takes writes (escrow status shows whether it does)",
          sweep_json(s)};
}

}  // namespace

std::optional<admin_outcome> broker::impl::sweep_running(const queue& q) const {
  auto it = sweeps.find(q.id());
  if (it == sweeps.end()) return std::nullopt;
  const queue_sweep& s = *it->second;
  return admin_outcome{"refused",
                       "a " + std::string(verb(s)) + " of " + q.name() + " is already running (" +
                           std::to_string(s.handled) + " messages " + past(s) + " so far, started " +
                           fmt::format("{:.1f}", seconds_since(s.started)) +
                           " s ago): wait for its answer, then try again",
                       {}};
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
  auto it = queues_by_id.find(s->from->id());
  if (it == queues_by_id.end() || it->second != s->from || s->from->dropping)
    return end_sweep(s, {"refused",
                         s->from->name() + " was deleted while the " + verb(*s) + " ran; " + progress(*s) +
                             " before that",
                         sweep_json(*s)});
  ++s->slices;
  std::vector<sweep_page_entry> page;
  if (storage::status st = read_sweep_page(store, *s, page); !st.ok())
    return end_sweep(s, {"refused",
                         "cannot read queue " + s->from->name() + ": " + st.message() + "; " + progress(*s) +
                             ", the rest stays: " + verb(*s) + " again",
                         sweep_json(*s)});
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
  for (const auto& p : page) {
    std::optional<queue_entry> t = q->take(p.key);
    if (!t) {
      ++held;
      continue;
    }
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
  submit(std::move(b), [this, s, taken = std::move(taken), held](const storage::status& st) mutable {
    const queue_ptr& q = s->from;
    bool stored = st.ok();
    for (auto& e : taken) {
      q->release_hold(e.key);
      if (stored) --q->counters.depth;
      else q->push(std::move(e));
    }
    if (!stored) {
      dispatch(q);
      return end_sweep(s, refused_by_store(*s, st));
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
    return end_sweep(s, {"refused",
                         "nothing subscribes to " + s->destination + " any more: " + progress(*s) +
                             "; the rest stays there",
                         sweep_json(*s)});
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
    if (!st.ok()) return end_sweep(s, refused_by_store(*s, st));
    s->handled += moved;
    s->held += held;
    next_sweep_slice(s);
  });
}

void broker::impl::next_sweep_slice(const sweep_ptr& s) {
  if (s->at_end) return end_sweep(s, {"ok", {}, sweep_json(*s)});
  // Posted, not called: the frames of other connections that came in meanwhile go first, and
  // the stack does not grow with the number of slices.
  post([this, s] {
    sweep_slice(s);
    flush();
  });
}

void broker::impl::end_sweep(const sweep_ptr& s, admin_outcome o) {
  auto it = sweeps.find(s->from->id());
  if (it != sweeps.end() && it->second == s) sweeps.erase(it);
  spdlog::log(o.status == "ok" ? spdlog::level::info : spdlog::level::warn,
              "operator {} of {}{}: {} {} messages, {} held left alone, {} slices, {:.1f} s{}", verb(*s),
              s->from->name(), is_purge(*s) ? std::string() : " to " + s->destination, past(*s), s->handled, s->held,
              s->slices, seconds_since(s->started), o.status == "ok" ? std::string() : "; stopped: " + o.message);
  admin_done done = std::move(s->done);
  done(std::move(o));
}

}  // namespace escrow::broker
