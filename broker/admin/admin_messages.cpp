// Admin commands over a queue's messages: browse (peek, changing nothing), purge (remove what is
// ready) and move (e.g. dead letters back to work, atomically per message, with the copy-and-remove
// of undelivered.cpp). They see stored messages (persistent ones, the ones an operator cares
// about after a failure); purge also drops the non-persistent messages kept in memory. This file
// checks their arguments and answers; the core runs a purge or move over the queue slice by slice
// (a sweep, core/sweeps.cpp) and reports what it did.
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "admin_commands.h"
#include "escrow/broker/core/stored_entries.h"
#include "escrow/broker/security/names.h"
#include "json.h"

namespace escrow::broker {

namespace {

constexpr std::size_t kDefaultBrowse = 20;
constexpr std::size_t kMaxBrowse = 10000;

admin_outcome not_found(const std::string& name) {
  return {"not-found", "no queue or durable subscription named '" + name + "' (escrow queues lists them)", {}};
}

const char* verb(const sweep_report& s) { return s.purge ? "purge" : "move"; }
const char* past(const sweep_report& s) { return s.purge ? "purged" : "moved"; }

// The JSON answer: what the sweep did (so far, when it was cut short).
std::string sweep_json(const sweep_report& s) {
  json::object j;
  if (s.purge) j = {{"queue", s.queue}, {"purged", s.handled}, {"held_left", s.held}};
  else j = {{"from", s.queue}, {"to", s.destination}, {"moved", s.handled}, {"held_skipped", s.held}};
  j["depth_at_start"] = s.depth_at_start;
  j["slices"] = s.slices;
  j["seconds"] = json_seconds(s.seconds);
  j["complete"] = s.complete;
  return to_json(std::move(j));
}

// "purged 3000 of the 20000 messages in orders when the purge began". (Just after a start the
// depth may not be counted yet: then it is left out.)
std::string progress(const sweep_report& s) {
  std::string did = std::string(past(s)) + " " + std::to_string(s.handled);
  if (s.depth_at_start < s.handled) return did + " messages of " + s.queue;
  return did + " of the " + std::to_string(s.depth_at_start) + " messages in " + s.queue + " when the " + verb(s) +
         " began";
}

// The operator's answer to a sweep that is over.
admin_outcome sweep_outcome(const sweep_report& s) {
  switch (s.how) {
    case sweep_report::ending::running:
    case sweep_report::ending::done: break;
    case sweep_report::ending::queue_deleted:
      return {"refused", s.queue + " was deleted while the " + verb(s) + " ran; " + progress(s) + " before that",
              sweep_json(s)};
    case sweep_report::ending::unreadable:
      return {"refused",
              "cannot read queue " + s.queue + ": " + s.store_message + "; " + progress(s) + ", the rest stays: " +
                  verb(s) + " again",
              sweep_json(s)};
    case sweep_report::ending::store_refused:
      // What was done before the refused slice, and that the rest stays.
      return {"refused",
              progress(s) + "; the store refused the rest: " + s.store_message + ". Nothing of the refused slice was " +
                  past(s) + ": the rest stays in " + s.queue + "; " + verb(s) +
                  " again once the store takes writes (escrow status shows whether it does)",
              sweep_json(s)};
    case sweep_report::ending::nothing_listening:
      return {"refused",
              "nothing subscribes to " + s.destination + " any more: " + progress(s) + "; the rest stays there",
              sweep_json(s)};
  }
  return {"ok", {}, sweep_json(s)};
}

// Logs the sweep's totals and answers the operator.
std::function<void(const sweep_report&)> answer_sweep(admin_done done) {
  return [done = std::move(done)](const sweep_report& s) {
    admin_outcome o = sweep_outcome(s);
    spdlog::log(o.status == "ok" ? spdlog::level::info : spdlog::level::warn,
                "operator {} of {}{}: {} {} messages, {} held left alone, {} slices, {:.1f} s{}", verb(s), s.queue,
                s.purge ? std::string() : " to " + s.destination, past(s), s.handled, s.held, s.slices, s.seconds,
                o.status == "ok" ? std::string() : "; stopped: " + o.message);
    done(std::move(o));
  };
}

// The refusal for a second purge or move of `queue` while one runs; nullopt when none runs.
std::optional<admin_outcome> sweep_running(const admin_core& core, const queue_view& q) {
  auto s = core.sweep_running(q.id);
  if (!s) return std::nullopt;
  return admin_outcome{"refused",
                       "a " + std::string(verb(*s)) + " of " + q.name + " is already running (" +
                           std::to_string(s->handled) + " messages " + past(*s) + " so far, started " +
                           fmt::format("{:.1f}", s->seconds) + " s ago): wait for its answer, then try again",
                       {}};
}

}  // namespace

namespace {

// A browse cursor, "PRIORITY:MESSAGE-ID" (the `next` of a page); nullopt when malformed.
std::optional<storage::entry_key> parse_browse_cursor(std::string_view text, std::uint32_t queue_id) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  unsigned priority = 10;
  std::uint64_t id = 0;
  std::string_view p = text.substr(0, colon), m = text.substr(colon + 1);
  auto pr = std::from_chars(p.data(), p.data() + p.size(), priority);
  auto mr = std::from_chars(m.data(), m.data() + m.size(), id);
  if (p.empty() || m.empty() || pr.ec != std::errc() || pr.ptr != p.data() + p.size() || priority > 9 ||
      mr.ec != std::errc() || mr.ptr != m.data() + m.size())
    return std::nullopt;
  return storage::entry_key{queue_id, static_cast<std::uint8_t>(priority), id};
}

}  // namespace

void add_record_json(json::object& m, const storage::message_record& r) {
  json::object headers;
  for (const auto& [hn, hv] : r.headers) headers.emplace(hn, hv);  // the first one counts
  m["destination"] = r.destination;
  m["timestamp"] = r.timestamp;
  m["expires"] = r.expires;
  if (r.deliver_at != 0) m["deliver_at"] = r.deliver_at;
  m["persistent"] = r.persistent;
  m["headers"] = std::move(headers);
  m["body_bytes"] = r.body.size();
  m["body_utf8"] = is_utf8(r.body);
  m["body"] = r.body;
}

admin_outcome admin_browse(admin_core& core, const frame& f) {
  std::string name(f.get("name"));
  std::optional<queue_view> q = core.find_queue(name);
  if (!q) return not_found(name);
  std::size_t count = kDefaultBrowse;
  if (std::string_view text = f.get("count"); !text.empty()) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (ec != std::errc() || end != text.data() + text.size() || count == 0 || count > kMaxBrowse)
      return {"invalid", "invalid count '" + std::string(text) + "': use 1 to " + std::to_string(kMaxBrowse), {}};
  }
  // `after`: the `next` of the page before, "PRIORITY:MESSAGE-ID" of its last message.
  std::optional<storage::entry_key> after;
  if (const std::string* text = f.find("after")) {
    auto k = parse_browse_cursor(*text, q->id);
    if (!k)
      return {"invalid", "invalid after '" + loggable(*text) + "': give the next of the page before (PRIORITY:MESSAGE-ID)",
              {}};
    after = k;
  }
  std::vector<stored_entry> entries;
  // One more than asked: whether another page follows.
  if (storage::status s = read_stored_entries(core.store(), q->id, count + 1, true, entries, after); !s.ok())
    return {"refused", "cannot read queue " + name + ": " + s.message(), {}};
  bool more = entries.size() > count;
  if (more) entries.resize(count);
  json::array messages;
  for (const auto& e : entries) {
    json::object m{{"message_id", e.key.message_id},
                   {"priority", static_cast<unsigned>(e.key.priority)},
                   {"delivery_count", e.delivery_count},
                   // held: in flight, in a transaction branch, waiting out a redelivery delay or being moved
                   {"state", core.is_held(q->id, e.key) ? "held" : "ready"},
                   {"readable", e.readable}};
    if (e.readable) add_record_json(m, e.record);
    messages.push_back(std::move(m));
  }
  json::object answer{{"queue", q->name}, {"messages", std::move(messages)}, {"more", more}};
  // The first page also shows what is scheduled (escrow scheduled pages through all of it).
  if (!after) {
    json::array scheduled;
    for (const auto& s : core.scheduled(q->id, std::nullopt, count)) scheduled.push_back(scheduled_json(s));
    answer["scheduled"] = std::move(scheduled);
  }
  if (more)
    answer["next"] = std::to_string(entries.back().key.priority) + ":" + std::to_string(entries.back().key.message_id);
  return {"ok", {}, to_json(std::move(answer))};
}

void admin_purge(admin_core& core, const frame& f, admin_done done) {
  std::string name(f.get("name"));
  std::optional<queue_view> q = core.find_queue(name);
  if (!q) return done(not_found(name));
  if (auto busy = sweep_running(core, *q)) return done(std::move(*busy));
  core.start_sweep(q->id, {}, std::nullopt, answer_sweep(std::move(done)));
}

void admin_move(admin_core& core, const frame& f, admin_done done) {
  std::string from_name(f.get("from"));
  std::string to_name(f.get("to"));
  const std::string* filter = f.find("filter");
  if (from_name.empty() || to_name.empty()) return done({"invalid", "move needs the from and to headers", {}});
  std::optional<queue_view> from = core.find_queue(from_name);
  if (!from) return done(not_found(from_name));
  std::string destination = destination_named(to_name);
  if (destination.rfind("/queue/", 0) == 0)  // a move may create its target
    if (auto problem = queue_name_problem(std::string_view(destination).substr(7)))
      return done({"invalid", "cannot move to '" + loggable(to_name) + "': " + *problem, {}});
  if (destination == "/queue/" + from->name)
    return done({"invalid", "move from " + from_name + " to itself: name another queue", {}});
  if (auto busy = sweep_running(core, *from)) return done(std::move(*busy));
  // Checked now so that a mistyped destination is answered at once; each slice resolves it again
  // (a topic's subscriptions may change while a long move runs).
  std::optional<std::size_t> targets = core.resolve_move_destination(destination);
  if (!targets)
    return done({"invalid", "'" + to_name + "' is not a destination: use NAME, /queue/NAME or /topic/NAME", {}});
  if (*targets == 0)
    return done({"refused", "nothing subscribes to " + destination + ": the messages would be dropped", {}});
  core.start_sweep(from->id, destination, filter ? std::optional<std::string>(*filter) : std::nullopt,
                   answer_sweep(std::move(done)));
}

}  // namespace escrow::broker
