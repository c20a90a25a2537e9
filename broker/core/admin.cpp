// ADMIN frames: the one way the `escrow` command talks to a running broker (docs/operations.md).
// A frame names its command in `admin-command`, its arguments in further headers, and asks for a
// `receipt`; the answer is a RECEIPT with `admin-status` (ok, not-found, refused, invalid) and a
// JSON body, or a `message` saying what went wrong. An admin failure is an answer, never ERROR
// (which closes the connection); ERROR is kept for a frame without a receipt header.
//
// This file: the entry point and the read-only views of queues, connections and subscriptions.
// admin_messages.cpp has browse, purge and move; admin_xa.cpp the in-doubt branches;
// admin_backup.cpp the hot copy of the store. All of it runs on the core strand.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "admin_store.h"
#include "core.h"
#include "durable_name.h"
#include "escrow/storage/store.h"
#include "escrow/broker/core/json.h"

namespace escrow::broker {

namespace {

constexpr std::string_view kVersion = "0.1.0";  // as the CONNECTED frame's server header says

const char* ack_name(ack_mode m) {
  switch (m) {
    case ack_mode::auto_ack: return "auto";
    case ack_mode::client: return "client";
    case ack_mode::client_individual: return "client-individual";
  }
  return "auto";
}

admin_outcome ok(std::string json) { return admin_outcome{"ok", {}, std::move(json)}; }

// The connections in the order they came (by id), for stable listings: those with an id of at
// least `from`.
std::vector<std::pair<std::uint64_t, const connection*>> by_id(
    const std::unordered_map<std::uint64_t, connection_ptr>& connections, std::uint64_t from = 0) {
  std::vector<std::pair<std::uint64_t, const connection*>> out;
  for (const auto& [id, c] : connections)
    if (id >= from) out.emplace_back(id, c.get());
  std::sort(out.begin(), out.end());
  return out;
}

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

// Messages in flight (delivered, not acknowledged), by the queue they came from.
std::unordered_map<const queue*, std::uint64_t> in_flight_by_queue(
    const std::unordered_map<std::uint64_t, connection_ptr>& connections) {
  std::unordered_map<const queue*, std::uint64_t> out;
  for (const auto& [cid, c] : connections)
    for (const auto& [sid, sub] : c->subscriptions) out[sub->source.get()] += sub->unacked.size();
  return out;
}

json::object queue_json(const queue& q, std::uint64_t in_flight, std::uint64_t oldest_ms, std::uint64_t now) {
  const queue_counters& n = q.counters;
  json::object j{{"name", q.name()},
                 {"kind", queue::kind_name(q.type())},
                 {"depth", n.depth > 0 ? static_cast<std::uint64_t>(n.depth) : 0},
                 {"in_flight", in_flight},
                 {"consumers", q.consumers().size()},
                 {"enqueued", n.enqueued},
                 {"delivered", n.delivered},
                 {"acknowledged", n.acknowledged},
                 {"expired", n.expired},
                 {"dead_lettered", n.dead_lettered},
                 {"redelivered", n.redelivered},
                 {"oldest_age_ms", nullptr}};
  if (oldest_ms != 0) j["oldest_age_ms"] = now > oldest_ms ? now - oldest_ms : 0;
  if (!q.topic().empty()) j["topic"] = q.topic();
  return j;
}

}  // namespace

void broker::impl::handle_admin(const connection_ptr& c, const frame& f) {
  const std::string* receipt_id = f.find("receipt");
  if (!receipt_id)
    return error(*c, "ADMIN frame has no receipt header: its answer comes back in a RECEIPT", &f);
  std::string command(f.get("admin-command"));
  // Permissions (docs/security.md), before anything is looked up: browsing a queue needs browse on
  // its address (or admin); every other command admin on the broker.
  if (command == "browse") {
    if (!holds_globally(*c, permission::admin) && !permitted(*c, permission::browse, f.get("name"), &f)) return;
  } else if (!permitted_globally(*c, permission::admin, &f)) {
    return;
  }
  admin_done done = [this, c, id = *receipt_id, command](admin_outcome o) {
    if (o.status != "ok") spdlog::info("connection {}: admin {}: {}: {}", c->id, command, o.status, o.message);
    frame r{"RECEIPT", {{"receipt-id", id}, {"admin-status", o.status}}, {}};
    if (!o.message.empty()) r.add("message", o.message);
    if (!o.json.empty()) {
      r.body = std::move(o.json);
      r.add("content-type", "application/json");
      r.add("content-length", std::to_string(r.body.size()));
    }
    write(*c, r);
  };
  spdlog::debug("connection {}: admin {}", c->id, command);
  if (command == "status") return done(admin_status());
  if (command == "queues") return done(admin_queues(f));
  if (command == "queue-show") return done(admin_queue_show(f));
  if (command == "browse") return done(admin_browse(f));
  if (command == "purge") return admin_purge(f, std::move(done));
  if (command == "move") return admin_move(f, std::move(done));
  if (command == "connections") return done(admin_connections(f));
  if (command == "subscriptions") return done(admin_subscriptions(f));
  if (command == "subscription-delete") return admin_subscription_delete(f, std::move(done));
  if (command == "xa-list") return done(admin_xa_list(f));
  if (command == "xa-commit" || command == "xa-rollback" || command == "xa-forget")
    return admin_xa_decide(c, f, std::move(done));
  if (command == "backup") return admin_backup(f, std::move(done));
  done(admin_outcome{"invalid",
                     (command.empty() ? std::string("ADMIN frame has no admin-command header")
                                      : "unknown admin-command '" + command + "'") +
                         ": use status, queues, queue-show, browse, purge, move, connections, subscriptions, "
                         "subscription-delete, xa-list, xa-commit, xa-rollback, xa-forget or backup",
                     {}});
}

queue_ptr broker::impl::find_by_name(std::string_view name) const {
  auto it = queues.find("q/" + std::string(name));
  if (it != queues.end()) return it->second;
  for (const auto& [key, q] : queues)
    if (q->name() == name) return q;
  return nullptr;
}

admin_outcome broker::impl::admin_status() const {
  metrics_snapshot s = snapshot();
  s.version = std::string(kVersion);
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  s.listeners = listeners;
  s.listeners_up = !listeners.empty();
  s.queues.clear();  // `escrow queues` lists them
  std::uint64_t queue_count = 0;
  for (const auto& [kind, n] : s.totals.queues_by_kind) queue_count += n;
  json::object branches;
  for (const auto& [state, n] : s.branches_by_state) branches[state] = n;
  return ok(to_json(json::object{
      {"version", s.version},
      {"uptime_seconds", json_seconds(s.uptime_seconds)},
      {"data_dir", config.data_dir},
      {"listeners", json::array(s.listeners.begin(), s.listeners.end())},
      {"connections", s.connections},
      {"store", {{"writable", s.store.writable}, {"commits", s.store.commits}, {"batches", s.store.batches},
                 {"map_size_bytes", s.store.map_size_bytes}, {"map_used_bytes", s.store.map_used_bytes},
                 {"file_bytes", s.store.file_bytes}}},
      {"totals", {{"queues", queue_count}, {"depth", s.totals.depth}, {"enqueued", s.totals.enqueued},
                  {"acknowledged", s.totals.acknowledged}, {"expired", s.expired},
                  {"expired_dropped", s.expired_dropped}, {"dead_lettered", s.dead_lettered},
                  {"dead_letters_dropped", s.dead_letters_dropped}}},
      {"branches", std::move(branches)}}));
}

std::optional<admin_outcome> broker::impl::page_asked(const frame& f, page_request& out) const {
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

// Queues and durable subscriptions in the order of their storage keys (durable subscriptions,
// d/..., then queues, q/NAME); the cursor is the escaped key of the last one.
admin_outcome broker::impl::admin_queues(const frame& f) const {
  page_request p;
  if (auto bad = page_asked(f, p)) return *bad;
  auto it = queues.begin();
  if (p.after) {
    auto key = cursor_unescape(*p.after);
    if (!key) return bad_cursor("queues", *p.after);
    it = queues.upper_bound(*key);
  }
  auto in_flight = in_flight_by_queue(connections);
  std::uint64_t now = now_ms();
  json_page page({"queues"}, p.limit, p.max_bytes);
  bool more = false;
  for (; it != queues.end(); ++it) {
    const auto& [key, q] = *it;
    if (page.full()) {
      more = true;
      break;
    }
    auto fl = in_flight.find(q.get());
    if (!page.add(0, queue_json(*q, fl == in_flight.end() ? 0 : fl->second, oldest_stored_timestamp(store, q->id()), now),
                  cursor_escape(key))) {
      more = true;
      break;
    }
  }
  return ok(page.finish(more));
}

admin_outcome broker::impl::admin_queue_show(const frame& f) {
  std::string name(f.get("name"));
  queue_ptr q = find_by_name(name);
  if (!q) return {"not-found", "no queue or durable subscription named '" + name + "' (escrow queues lists them)", {}};
  auto in_flight = in_flight_by_queue(connections);
  auto it = in_flight.find(q.get());
  json::object j =
      queue_json(*q, it == in_flight.end() ? 0 : it->second, oldest_stored_timestamp(store, q->id()), now_ms());
  const address_settings& s = settings_for(q->address());
  j["settings"] = {{"address", q->address()},
                   {"dead_letter_address", s.dead_letter_address},
                   {"expiry_address", s.expiry_address},
                   {"max_delivery_attempts", s.max_delivery_attempts},
                   {"expiry_delay_ms", s.expiry_delay_ms},
                   {"redelivery_delay_ms", s.redelivery_delay_ms}};
  json::array consumers;
  for (const subscription* sub : q->consumers())
    consumers.push_back(json::object{{"connection", sub->owner ? sub->owner->id : 0},
                                     {"subscription", sub->id},
                                     {"ack", ack_name(sub->mode)},
                                     {"in_flight", sub->unacked.size()}});
  j["consumers_detail"] = std::move(consumers);
  return ok(to_json(std::move(j)));
}

// Connections by id; the cursor is the id of the last one.
admin_outcome broker::impl::admin_connections(const frame& f) const {
  page_request p;
  if (auto bad = page_asked(f, p)) return *bad;
  std::uint64_t from = 0;
  if (p.after) {
    auto last = parse_id(*p.after);
    if (!last || *last == std::numeric_limits<std::uint64_t>::max()) return bad_cursor("connections", *p.after);
    from = *last + 1;
  }
  json_page page({"connections"}, p.limit, p.max_bytes);
  bool more = false;
  for (const auto& [id, c] : by_id(connections, from)) {
    if (page.full()) {
      more = true;
      break;
    }
    std::size_t in_flight = 0;
    for (const auto& [sid, sub] : c->subscriptions) in_flight += sub->unacked.size();
    rm::branch_ptr xa = rm.associated_branch(id);
    json::object j{{"id", id},
                   {"peer", c->info.peer},
                   {"user", c->info.user},
                   {"login", c->info.login},
                   {"client_id", c->info.client_id},
                   {"version", to_string(c->info.version)},
                   {"subscriptions", c->subscriptions.size()},
                   {"in_flight", in_flight},
                   {"transactions", c->transactions.size()},
                   {"xa_branch", xa ? xa->id.to_string() : std::string()}};
    if (!page.add(0, std::move(j), std::to_string(id))) {
      more = true;
      break;
    }
  }
  return ok(page.finish(more));
}

// Consumers' subscriptions by connection id and subscription id (cursor c:CONNECTION:ID), then
// durable subscriptions by storage key (cursor d:KEY); both lists share the page.
admin_outcome broker::impl::admin_subscriptions(const frame& f) const {
  page_request p;
  if (auto bad = page_asked(f, p)) return *bad;
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
    for (const auto& [id, c] : by_id(connections, from_connection)) {
      auto sit = c->subscriptions.begin();
      if (after_sub && id == from_connection) sit = c->subscriptions.upper_bound(*after_sub);
      for (; sit != c->subscriptions.end(); ++sit) {
        const auto& [sid, sub] = *sit;
        if (page.full()) return ok(page.finish(true));
        const queue& q = *sub->source;
        json::object j{{"connection", id},
                       {"id", sid},
                       {"kind", queue::kind_name(q.type())},
                       {"destination", q.type() == queue::kind::queue ? "/queue/" + q.name() : "/topic/" + q.topic()},
                       {"queue", q.name()},
                       {"ack", ack_name(sub->mode)},
                       {"in_flight", sub->unacked.size()},
                       {"depth", q.counters.depth > 0 ? q.counters.depth : 0}};
        if (!page.add(0, std::move(j), "c:" + std::to_string(id) + ":" + cursor_escape(sid))) return ok(page.finish(true));
      }
    }
  }
  auto it = after_durable ? queues.upper_bound(*after_durable) : queues.lower_bound("d/");
  for (; it != queues.end() && it->first.starts_with("d/"); ++it) {
    const auto& [key, q] = *it;
    if (q->type() != queue::kind::durable_subscription) continue;
    if (page.full()) {
      more = true;
      break;
    }
    durable_id d = parse_durable_key(key).value_or(durable_id{});
    json::object j{{"name", q->name()},
                   {"client_id", d.client_id},
                   {"subscription", d.name},
                   {"user", d.owner},
                   {"topic", q->topic()},
                   {"active", !q->consumers().empty()},
                   {"depth", q->counters.depth > 0 ? q->counters.depth : 0}};
    if (!page.add(1, std::move(j), "d:" + cursor_escape(key))) {
      more = true;
      break;
    }
  }
  return ok(page.finish(more));
}

void broker::impl::admin_subscription_delete(const frame& f, admin_done done) {
  std::string client(f.get("client-id"));
  std::string name(f.get("subscription"));
  if (client.empty() || name.empty())
    return done({"invalid", "subscription-delete needs the client-id and subscription headers", {}});
  // Each user has a client-id namespace: without a user header, the one subscription of that
  // client-id and name, whoever owns it.
  std::vector<queue_ptr> found;
  if (const std::string* user = f.find("user")) {
    auto it = queues.find(durable_key({client, name, *user}));
    if (it != queues.end()) found.push_back(it->second);
  } else {
    std::string prefix = durable_key({client, name, ""});
    for (auto it = queues.lower_bound(prefix); it != queues.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      if (it->first.size() == prefix.size() || it->first[prefix.size()] == '\0') found.push_back(it->second);
  }
  if (found.empty())
    return done({"not-found", "no durable subscription '" + name + "' of client '" + client +
                                  "' (escrow subscriptions lists them)", {}});
  if (found.size() > 1)
    return done({"invalid", std::to_string(found.size()) + " users have a durable subscription '" + name +
                                "' of client '" + client + "': name the user (escrow subscription delete --owner)", {}});
  queue_ptr q = found.front();
  if (q->dropping)
    return done({"refused", "durable subscription " + q->name() + " is being ended already: wait for that answer", {}});
  if (!q->consumers().empty())
    return done({"refused", "durable subscription " + q->name() +
                                " has an active consumer: it must disconnect (or unsubscribe) first", {}});
  auto depth = q->counters.depth;
  storage::batch b;
  drop_durable_queue(q, b);
  spdlog::warn("operator deleted durable subscription {} ({} messages)", q->name(), depth);
  submit(std::move(b), [this, q, done = std::move(done), name = q->name(), depth](const storage::status& s) {
    finish_drop(q, s.ok());
    if (!s.ok()) return done({"refused", "deleting " + name + " was not stored: " + s.message(), {}});
    done(ok(to_json(json::object{{"deleted", name}, {"messages", depth > 0 ? depth : 0}})));
  });
}

}  // namespace escrow::broker
