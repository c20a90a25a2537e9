// Admin commands over a queue's messages: browse (peek, changing nothing), purge (remove what is
// ready) and move (e.g. dead letters back to work, atomically per message, with the copy-and-remove
// of undelivered.cpp). They see stored messages (persistent ones, the ones an operator cares
// about after a failure); purge also drops the non-persistent messages kept in memory.
#include <spdlog/spdlog.h>

#include <charconv>

#include "admin_json.h"
#include "admin_store.h"
#include "core.h"
#include "escrow/storage/store.h"

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
  json_writer j;
  j.begin_object().field("queue", q->name()).key("messages").begin_array();
  for (const auto& e : entries) {
    j.begin_object()
        .field("message_id", e.key.message_id)
        .field("priority", static_cast<unsigned>(e.key.priority))
        .field("delivery_count", e.delivery_count)
        // held: in flight, in a transaction branch, waiting out a redelivery delay or being moved
        .field("state", q->is_held(e.key) ? "held" : "ready")
        .field("readable", e.readable);
    if (e.readable) {
      const storage::message_record& r = e.record;
      j.field("destination", r.destination)
          .field("timestamp", r.timestamp)
          .field("expires", r.expires)
          .field("persistent", r.persistent);
      j.key("headers").begin_object();
      std::vector<std::string_view> seen;
      for (const auto& [hn, hv] : r.headers) {
        if (std::find(seen.begin(), seen.end(), hn) != seen.end()) continue;  // the first one counts
        seen.push_back(hn);
        j.field(hn, hv);
      }
      j.end_object().field("body_bytes", r.body.size()).field("body_utf8", is_utf8(r.body)).field("body", r.body);
    }
    j.end_object();
  }
  j.end_array().end_object();
  return {"ok", {}, j.str()};
}

void broker::impl::admin_purge(const frame& f, admin_done done) {
  std::string name(f.get("name"));
  queue_ptr q = find_by_name(name);
  if (!q) return done(not_found(name));
  std::vector<stored_entry> stored;
  if (storage::status s = read_stored_entries(store, q->id(), 0, false, stored); !s.ok())
    return done({"refused", "cannot read queue " + name + ": " + s.message(), {}});
  // Only what is ready goes: an entry that is held (in flight, in a transaction branch, waiting
  // out a redelivery delay) stays, and is delivered again if it comes back.
  std::vector<queue_entry> taken = q->take_unstored_ready();
  std::size_t left = 0;
  storage::batch b;
  for (const auto& e : stored) {
    std::optional<queue_entry> t = q->take(e.key);
    if (!t) {
      ++left;
      continue;
    }
    storage::erase_entry(b, t->key);
    taken.push_back(std::move(*t));
  }
  spdlog::warn("operator purges queue {}: {} messages ({} held messages stay)", q->name(), taken.size(), left);
  auto finish = [this, q, taken = std::move(taken), left, done = std::move(done)](const storage::status& s) mutable {
    for (auto& e : taken) {
      q->release_hold(e.key);
      if (s.ok()) --q->counters.depth;
      else q->push(std::move(e));
    }
    if (!s.ok()) {
      dispatch(q);
      return done({"refused", "purging " + q->name() + " was not stored: " + s.message() + "; nothing was removed", {}});
    }
    json_writer j;
    j.begin_object().field("queue", q->name()).field("purged", taken.size()).field("held_left", left).end_object();
    done({"ok", {}, j.str()});
  };
  if (b.empty()) {
    finish(storage::status{});
    return;
  }
  submit(std::move(b), std::move(finish));
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
  std::vector<stored_entry> stored;
  if (storage::status s = read_stored_entries(store, from->id(), 0, true, stored); !s.ok())
    return done({"refused", "cannot read queue " + from_name + ": " + s.message(), {}});

  storage::batch b;
  std::vector<queue_ptr> targets;
  if (!resolve_destination(destination, b, targets))
    return done({"invalid", "'" + to_name + "' is not a destination: use NAME, /queue/NAME or /topic/NAME", {}});
  if (targets.empty())
    return done({"refused", "nothing subscribes to " + destination + ": the messages would be dropped", {}});
  // Each message leaves `from` and lands in `to` in the same batch (plan_copy): never lost, never
  // in both places. A held message (in flight, in a branch) is skipped and counted.
  std::vector<move_plan> plans;
  std::size_t skipped = 0;
  for (auto& e : stored) {
    if (filter && (!e.readable || !matches_origin(e.record, *filter))) continue;
    std::optional<queue_entry> t = from->take(e.key);
    if (!t) {
      ++skipped;
      continue;
    }
    if (!load_message(*t)) {  // unreadable: it stays where it is (logged)
      ++skipped;
      continue;
    }
    plan_copy(from, std::move(*t), move_reason::moved_by_operator, targets, destination, b, plans, false);
  }
  std::size_t moved = plans.size();
  spdlog::warn("operator moves {} messages from {} to {}{}", moved, from->name(), destination,
               filter ? " (_HQ_ORIG_ADDRESS " + *filter + ")" : std::string());
  submit_moves(std::move(b), std::move(plans),
               [done = std::move(done), moved, skipped, from = from->name(), destination](bool stored) {
                 if (!stored)
                   return done({"refused", "moving messages from " + from + " was not stored; nothing moved", {}});
                 json_writer j;
                 j.begin_object()
                     .field("from", from)
                     .field("to", destination)
                     .field("moved", moved)
                     .field("held_skipped", skipped)
                     .end_object();
                 done({"ok", {}, j.str()});
               });
}

}  // namespace escrow::broker
