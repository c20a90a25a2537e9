// The `scheduled` admin command (docs/operations.md, "Scheduled messages"): a queue's scheduled
// messages in due order (`action: list`, paged with `count` and `after`, DUE:PRIORITY:ID), and delivering them now
// or deleting them (`action: deliver` or `delete`, by `id` or every one with `all: true`, at most
// kMaxPerCommand per frame: the answer says whether more are left). The core keeps the schedule
// (core/schedule.cpp); this file checks the arguments and writes the answers.
#include <charconv>
#include <optional>

#include "admin_commands.h"
#include "escrow/broker/security/names.h"
#include "json.h"

namespace escrow::broker {
namespace {

constexpr std::size_t kDefaultList = 100;
constexpr std::size_t kMaxList = 10000;
constexpr std::size_t kMaxPerCommand = 10000;

template <typename T>
bool parse_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// A list cursor, "DUE:PRIORITY:MESSAGE-ID" (the `next` of a page).
std::optional<scheduled_cursor> parse_cursor(std::string_view text) {
  auto first = text.find(':');
  auto second = first == std::string_view::npos ? first : text.find(':', first + 1);
  scheduled_cursor c;
  unsigned priority = 10;
  if (second == std::string_view::npos || !parse_number(text.substr(0, first), c.due) ||
      !parse_number(text.substr(first + 1, second - first - 1), priority) || priority > 9 ||
      !parse_number(text.substr(second + 1), c.message_id))
    return std::nullopt;
  c.priority = static_cast<std::uint8_t>(priority);
  return c;
}

// "1,2,3" into ids; false when one is not a number.
bool parse_ids(std::string_view text, std::vector<std::uint64_t>& out) {
  while (!text.empty()) {
    auto comma = text.find(',');
    std::uint64_t id = 0;
    if (!parse_number(text.substr(0, comma), id)) return false;
    out.push_back(id);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return false;
  }
  return !out.empty();
}

}  // namespace

json::object scheduled_json(const scheduled_view& s) {
  json::object m{{"message_id", s.message_id},
                 {"deliver_at", s.record.deliver_at},
                 {"due", s.due},
                 // due before deliver_at: it expires first and then goes to the expiry address
                 {"expires_first", s.record.expires != 0 && s.due < s.record.deliver_at},
                 {"stored", s.stored},
                 {"priority", static_cast<unsigned>(s.record.priority)}};
  add_record_json(m, s.record);
  return m;
}

void admin_scheduled(admin_core& core, const frame& f, admin_done done) {
  std::string name(f.get("name"));
  std::optional<queue_view> q = core.find_queue(name);
  if (!q)
    return done({"not-found", "no queue or durable subscription named '" + loggable(name) + "' (escrow queues lists them)",
                 {}});
  std::string action(f.get("action", "list"));
  if (action == "list") {
    std::size_t count = kDefaultList;
    if (const std::string* text = f.find("count"); text && (!parse_number(*text, count) || count == 0 || count > kMaxList))
      return done({"invalid", "invalid count '" + loggable(*text) + "': use 1 to " + std::to_string(kMaxList), {}});
    std::optional<scheduled_cursor> after;
    if (const std::string* text = f.find("after")) {
      after = parse_cursor(*text);
      if (!after)
        return done({"invalid",
                     "invalid after '" + loggable(*text) + "': give the next of the page before (DUE:PRIORITY:MESSAGE-ID)",
                     {}});
    }
    std::vector<scheduled_view> page = core.scheduled(q->id, after, count + 1);
    bool more = page.size() > count;
    if (more) page.resize(count);
    json::array messages;
    for (const auto& s : page) messages.push_back(scheduled_json(s));
    json::object answer{{"queue", q->name}, {"scheduled", q->scheduled > 0 ? q->scheduled : 0},
                        {"messages", std::move(messages)}, {"more", more}};
    if (more)
      answer["next"] = std::to_string(page.back().due) + ":" + std::to_string(page.back().record.priority) + ":" +
                       std::to_string(page.back().message_id);
    return done({"ok", {}, to_json(std::move(answer))});
  }
  if (action != "deliver" && action != "delete")
    return done({"invalid", "invalid action '" + loggable(action) + "': use list, deliver or delete", {}});
  if (q->dropping)
    return done({"refused", q->name + " is being deleted: its scheduled messages go with it", {}});
  std::vector<std::uint64_t> ids;
  const std::string* id_text = f.find("id");
  bool all = f.get("all") == "true";
  if (id_text && !parse_ids(*id_text, ids))
    return done({"invalid", "invalid id '" + loggable(*id_text) + "': give message ids, separated by commas", {}});
  if (!id_text && !all)
    return done({"invalid", action + " needs the id header (message ids, separated by commas) or all: true", {}});
  if (id_text && all) return done({"invalid", "give the id header or all: true, not both", {}});
  if (ids.size() > kMaxPerCommand)
    return done({"invalid", "at most " + std::to_string(kMaxPerCommand) + " ids per command", {}});
  core.end_schedule(q->id, action == "deliver", ids, kMaxPerCommand,
                    [&core, done = std::move(done), action, queue = q->name, id = q->id](const storage::status& s,
                                                                                        std::size_t handled) {
    if (!s.ok())
      return done({"refused",
                   "the store refused to " + action + " the scheduled messages of " + queue + ": " + s.message() +
                       "; nothing of that batch changed (" + std::to_string(handled) +
                       " not stored were handled): try again once the store takes writes",
                   {}});
    bool more = !core.scheduled(id, std::nullopt, 1).empty();
    json::object answer{{"queue", queue},
                        {action == "deliver" ? "delivered" : "deleted", handled},
                        {"more", more}};
    done({"ok", {}, to_json(std::move(answer))});
  });
}

}  // namespace escrow::broker
