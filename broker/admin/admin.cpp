// ADMIN frames: the one way the `escrow` command talks to a running broker (docs/operations.md).
// A frame names its command in `admin-command`, its arguments in further headers, and asks for a
// `receipt`; the answer is a RECEIPT with `admin-status` (ok, not-found, refused, invalid) and a
// JSON body, or a `message` saying what went wrong. An admin failure is an answer, never ERROR
// (which closes the connection); ERROR is kept for a frame without a receipt header.
//
// This file: the entry point (after the core's receipt and permission checks, core/admin_core.cpp)
// and the read-only views of queues, connections and subscriptions. admin_messages.cpp has browse,
// purge and move; admin_xa.cpp the in-doubt branches; admin_backup.cpp the hot copy of the store;
// admin_config.cpp the configuration in force.
// All of it runs on the core strand, and sees the core through admin_core.h only.
#include "escrow/broker/admin/admin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "admin_commands.h"
#include "escrow/broker/core/stored_entries.h"
#include "json.h"

namespace escrow::broker {

namespace {

constexpr std::string_view kVersion = "0.1.0";  // as the CONNECTED frame's server header says

admin_outcome ok(std::string json) { return admin_outcome{"ok", {}, std::move(json)}; }

// A decimal id (a connection's), as a cursor holds it.
std::optional<std::uint64_t> parse_id(std::string_view text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

admin_outcome bad_cursor(std::string_view command, std::string_view after) {
  return {"invalid",
          "after '" + std::string(after) + "' is not a cursor of " + std::string(command) +
              ": pass the next field of the previous page as it came",
          {}};
}

json::object queue_json(const queue_view& q, std::uint64_t oldest_ms, std::uint64_t now) {
  json::object j{{"name", q.name},
                 {"kind", q.kind},
                 {"depth", q.depth > 0 ? static_cast<std::uint64_t>(q.depth) : 0},
                 {"scheduled", q.scheduled > 0 ? static_cast<std::uint64_t>(q.scheduled) : 0},
                 {"in_flight", q.in_flight},
                 {"consumers", q.consumers},
                 {"enqueued", q.enqueued},
                 {"delivered", q.delivered},
                 {"acknowledged", q.acknowledged},
                 {"expired", q.expired},
                 {"dead_lettered", q.dead_lettered},
                 {"redelivered", q.redelivered},
                 {"dropped", q.dropped},
                 {"replaced", q.replaced},
                 {"oldest_age_ms", nullptr}};
  if (oldest_ms != 0) j["oldest_age_ms"] = now > oldest_ms ? now - oldest_ms : 0;
  if (!q.topic.empty()) j["topic"] = q.topic;
  return j;
}

admin_outcome admin_status(const admin_core& core) {
  metrics_snapshot s = core.snapshot();
  s.version = std::string(kVersion);
  s.uptime_seconds = core.uptime_seconds();
  s.listeners = core.listeners();
  s.listeners_up = !s.listeners.empty();
  s.queues.clear();  // `escrow queues` lists them
  std::uint64_t queue_count = 0;
  for (const auto& [kind, n] : s.totals.queues_by_kind) queue_count += n;
  json::object branches;
  for (const auto& [state, n] : s.branches_by_state) branches[state] = n;
  return ok(to_json(json::object{
      {"version", s.version},
      {"uptime_seconds", json_seconds(s.uptime_seconds)},
      {"data_dir", core.config().data_dir},
      {"listeners", json::array(s.listeners.begin(), s.listeners.end())},
      {"connections", s.connections},
      {"store", {{"writable", s.store.writable}, {"commits", s.store.commits}, {"batches", s.store.batches},
                 {"map_size_bytes", s.store.map_size_bytes}, {"map_used_bytes", s.store.map_used_bytes},
                 {"file_bytes", s.store.file_bytes}, {"log_bytes", s.store.log_bytes}}},
      {"totals", {{"queues", queue_count}, {"depth", s.totals.depth}, {"enqueued", s.totals.enqueued},
                  {"acknowledged", s.totals.acknowledged}, {"expired", s.expired},
                  {"expired_dropped", s.expired_dropped}, {"dead_lettered", s.dead_lettered},
                  {"dead_letters_dropped", s.dead_letters_dropped}}},
      {"branches", std::move(branches)}}));
}

// Queues and durable subscriptions in the order of their storage keys (durable subscriptions,
// d/..., then queues, q/NAME); the cursor is the escaped key of the last one.
admin_outcome admin_queues(const admin_core& core, const frame& f) {
  page_request p;
  if (auto bad = page_asked(core, f, p)) return *bad;
  std::string from;
  if (p.after) {
    auto key = cursor_unescape(*p.after);
    if (!key) return bad_cursor("queues", *p.after);
    from = *key;
  }
  std::uint64_t now = now_ms();
  json_page page({"queues"}, p.limit, p.max_bytes);
  bool more = false;
  core.for_each_queue(from, p.after.has_value(), [&](const queue_view& q) {
    if (page.full() ||
        !page.add(0, queue_json(q, oldest_stored_timestamp(core.store(), q.id), now), cursor_escape(q.key))) {
      more = true;
      return false;
    }
    return true;
  });
  return ok(page.finish(more));
}

admin_outcome admin_queue_show(admin_core& core, const frame& f) {
  std::string name(f.get("name"));
  std::optional<queue_view> q = core.find_queue(name);
  if (!q) return {"not-found", "no queue or durable subscription named '" + name + "' (escrow queues lists them)", {}};
  json::object j = queue_json(*q, oldest_stored_timestamp(core.store(), q->id), now_ms());
  const address_settings& s = core.settings_for(q->address);
  j["settings"] = {{"address", q->address},
                   {"dead_letter_address", s.dead_letter_address},
                   {"expiry_address", s.expiry_address},
                   {"max_delivery_attempts", s.max_delivery_attempts},
                   {"expiry_delay_ms", s.expiry_delay_ms},
                   {"redelivery_delay_ms", s.redelivery_delay_ms},
                   {"max_size_messages", s.max_size_messages},
                   {"max_size_bytes", s.max_size_bytes},
                   {"address_full_policy", to_string(s.address_full_policy)},
                   {"dead_letter_on_drop", s.dead_letter_on_drop},
                   {"ring_size", s.ring_size}};
  j["bytes"] = q->bytes > 0 ? q->bytes : 0;  // what max-size-bytes counts
  json::array consumers;
  for (const consumer_view& c : core.consumers(q->id))
    consumers.push_back(json::object{{"connection", c.connection},
                                     {"subscription", c.subscription},
                                     {"ack", c.ack},
                                     {"in_flight", c.in_flight},
                                     {"priority", c.priority},
                                     {"exclusive", c.exclusive},
                                     {"receiving", c.receiving},
                                     {"groups", c.groups},
                                     {"group_ids", json::array(c.group_ids.begin(), c.group_ids.end())}});
  j["consumers_detail"] = std::move(consumers);
  return ok(to_json(std::move(j)));
}

// Connections by id; the cursor is the id of the last one.
admin_outcome admin_connections(const admin_core& core, const frame& f) {
  page_request p;
  if (auto bad = page_asked(core, f, p)) return *bad;
  std::uint64_t from = 0;
  if (p.after) {
    auto last = parse_id(*p.after);
    if (!last || *last == std::numeric_limits<std::uint64_t>::max()) return bad_cursor("connections", *p.after);
    from = *last + 1;
  }
  json_page page({"connections"}, p.limit, p.max_bytes);
  bool more = false;
  core.for_each_connection(from, [&](const connection_view& c) {
    if (page.full()) {
      more = true;
      return false;
    }
    json::object j{{"id", c.id},
                   {"peer", c.peer},
                   {"user", c.user},
                   {"login", c.login},
                   {"client_id", c.client_id},
                   {"version", c.version},
                   {"subscriptions", c.subscriptions},
                   {"in_flight", c.in_flight},
                   {"transactions", c.transactions},
                   {"xa_branch", c.xa_branch},
                   {"blocked_on", c.blocked_on}};
    if (!page.add(0, std::move(j), std::to_string(c.id))) {
      more = true;
      return false;
    }
    return true;
  });
  return ok(page.finish(more));
}

// Consumers' subscriptions by connection id and subscription id (cursor c:CONNECTION:ID), then
// durable subscriptions by storage key (cursor d:KEY); both lists share the page.
admin_outcome admin_subscriptions(const admin_core& core, const frame& f) {
  page_request p;
  if (auto bad = page_asked(core, f, p)) return *bad;
  // Where to start: after connection `from_connection`'s subscription `after_sub` (none: at the
  // start of that connection), or among the durable ones after `after_durable`.
  std::uint64_t from_connection = 0;
  std::optional<std::string> after_sub, after_durable;
  if (p.after) {
    std::string_view a = *p.after;
    if (a.starts_with("c:")) {
      auto colon = a.find(':', 2);
      auto id = colon == std::string_view::npos ? std::nullopt : parse_id(a.substr(2, colon - 2));
      after_sub = colon == std::string_view::npos ? std::nullopt : cursor_unescape(a.substr(colon + 1));
      if (!id || !after_sub) return bad_cursor("subscriptions", a);
      from_connection = *id;
    } else if (a.starts_with("d:")) {
      after_durable = cursor_unescape(a.substr(2));
      if (!after_durable) return bad_cursor("subscriptions", a);
    } else {
      return bad_cursor("subscriptions", a);
    }
  }
  json_page page({"subscriptions", "durable"}, p.limit, p.max_bytes);
  bool more = false;
  if (!after_durable) {
    bool page_ended = false;
    core.for_each_subscription(from_connection, after_sub, [&](const subscription_view& s) {
      const queue_view& q = s.source;
      if (page.full()) return !(page_ended = true);
      json::object j{{"connection", s.connection},
                     {"id", s.id},
                     {"kind", q.kind},
                     {"destination", q.kind == "queue" ? "/queue/" + q.name : "/topic/" + q.topic},
                     {"queue", q.name},
                     {"ack", s.ack},
                     {"in_flight", s.in_flight},
                     {"depth", q.depth > 0 ? q.depth : 0}};
      if (!page.add(0, std::move(j), "c:" + std::to_string(s.connection) + ":" + cursor_escape(s.id)))
        return !(page_ended = true);
      return true;
    });
    if (page_ended) return ok(page.finish(true));
  }
  core.for_each_queue(after_durable ? *after_durable : std::string("d/"), after_durable.has_value(),
                      [&](const queue_view& q) {
    if (!q.key.starts_with("d/")) return false;
    if (q.kind != "durable-subscription") return true;
    if (page.full()) {
      more = true;
      return false;
    }
    json::object j{{"name", q.name},
                   {"client_id", q.client_id},
                   {"subscription", q.subscription},
                   {"user", q.owner},
                   {"topic", q.topic},
                   {"active", q.consumers != 0},
                   {"depth", q.depth > 0 ? q.depth : 0},
                   {"scheduled", q.scheduled > 0 ? q.scheduled : 0}};
    if (!page.add(1, std::move(j), "d:" + cursor_escape(q.key))) {
      more = true;
      return false;
    }
    return true;
  });
  return ok(page.finish(more));
}

void admin_subscription_delete(admin_core& core, const frame& f, admin_done done) {
  std::string client(f.get("client-id"));
  std::string name(f.get("subscription"));
  if (client.empty() || name.empty())
    return done({"invalid", "subscription-delete needs the client-id and subscription headers", {}});
  // Each user has a client-id namespace: without a user header, the one subscription of that
  // client-id and name, whoever owns it.
  std::vector<queue_view> found = core.durable_subscriptions(client, name, f.find("user"));
  if (found.empty())
    return done({"not-found", "no durable subscription '" + name + "' of client '" + client +
                                  "' (escrow subscriptions lists them)", {}});
  if (found.size() > 1)
    return done({"invalid", std::to_string(found.size()) + " users have a durable subscription '" + name +
                                "' of client '" + client + "': name the user (escrow subscription delete --owner)", {}});
  const queue_view& q = found.front();
  if (q.dropping)
    return done({"refused", "durable subscription " + q.name + " is being ended already: wait for that answer", {}});
  if (q.consumers != 0)
    return done({"refused", "durable subscription " + q.name +
                                " has an active consumer: it must disconnect (or unsubscribe) first", {}});
  auto depth = q.depth;
  spdlog::warn("operator deleted durable subscription {} ({} messages)", q.name, depth);
  core.end_durable_subscription(q.key, [done = std::move(done), name = q.name, depth](const storage::status& s) {
    if (!s.ok()) return done({"refused", "deleting " + name + " was not stored: " + s.message(), {}});
    done(ok(to_json(json::object{{"deleted", name}, {"messages", depth > 0 ? depth : 0}})));
  });
}

}  // namespace

std::optional<admin_outcome> page_asked(const admin_core& core, const frame& f, page_request& out) {
  const broker_config& config = core.config();
  out.limit = config.admin_max_page_size;
  out.max_bytes = config.admin_max_page_bytes;
  if (const std::string* limit = f.find("limit")) {
    auto n = parse_id(*limit);
    if (!n || *n == 0)
      return admin_outcome{"invalid",
                           "limit '" + *limit + "' is not a count of entries from 1 to " +
                               std::to_string(config.admin_max_page_size) + " (admin.max-page-size)",
                           {}};
    out.limit = static_cast<std::size_t>(std::min<std::uint64_t>(*n, config.admin_max_page_size));
  }
  if (const std::string* after = f.find("after")) out.after = *after;
  return std::nullopt;
}

// group-reset name=QUEUE [group=ID]: releases its message groups (docs/operations.md).
admin_outcome admin_group_reset(admin_core& core, const frame& f) {
  std::string name(f.get("name"));
  std::optional<queue_view> q = core.find_queue(name);
  if (!q) return {"not-found", "no queue or durable subscription named '" + name + "' (escrow queues lists them)", {}};
  std::optional<std::string> group;
  if (const std::string* g = f.find("group")) group = *g;
  std::optional<std::size_t> n = core.reset_groups(q->id, group);
  if (!n) return {"not-found", "queue '" + name + "' went away meanwhile", {}};
  return ok(to_json(json::object{{"queue", q->name}, {"released", *n}}));
}

void handle_admin_command(admin_core& core, std::uint64_t connection_id, const frame& f, admin_done done) {
  std::string command(f.get("admin-command"));
  if (command == "status") return done(admin_status(core));
  if (command == "queues") return done(admin_queues(core, f));
  if (command == "queue-show") return done(admin_queue_show(core, f));
  if (command == "browse") return done(admin_browse(core, f));
  if (command == "purge") return admin_purge(core, f, std::move(done));
  if (command == "scheduled") return admin_scheduled(core, f, std::move(done));
  if (command == "move") return admin_move(core, f, std::move(done));
  if (command == "connections") return done(admin_connections(core, f));
  if (command == "subscriptions") return done(admin_subscriptions(core, f));
  if (command == "subscription-delete") return admin_subscription_delete(core, f, std::move(done));
  if (command == "xa-list") return done(admin_xa_list(core, f));
  if (command == "coordinator") return done(admin_coordinated(core, f));
  if (command == "xa-commit" || command == "xa-rollback" || command == "xa-forget")
    return admin_xa_decide(core, connection_id, f, std::move(done));
  if (command == "backup") return admin_backup(core, f, std::move(done));
  if (command == "config") return done(admin_config(core, f));
  if (command == "group-reset") return done(admin_group_reset(core, f));
  done(admin_outcome{"invalid",
                     (command.empty() ? std::string("ADMIN frame has no admin-command header")
                                      : "unknown admin-command '" + command + "'") +
                         ": use status, queues, queue-show, browse, purge, move, connections, subscriptions, "
                         "subscription-delete, scheduled, group-reset, xa-list, xa-commit, xa-rollback, xa-forget, coordinator, backup or config",
                     {}});
}

}  // namespace escrow::broker
