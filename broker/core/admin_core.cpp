// ADMIN frames on the core's side (admin_core.h): the entry point, which checks the receipt header
// and the permissions, hands the frame to the handler broker/admin installed and writes its answer
// as a RECEIPT; and admin_core, the view of the core's state and the operations it lets the
// handlers use. Everything here runs on the core strand.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core.h"
#include "durable_name.h"
#include "escrow/broker/security/names.h"
#include "escrow/xa.h"

namespace escrow::broker {

namespace {

const char* ack_name(ack_mode m) {
  switch (m) {
    case ack_mode::auto_ack: return "auto";
    case ack_mode::client: return "client";
    case ack_mode::client_individual: return "client-individual";
  }
  return "auto";
}

// Messages in flight (delivered, not acknowledged), by the queue they came from.
std::unordered_map<const queue*, std::uint64_t> in_flight_by_queue(
    const std::unordered_map<std::uint64_t, connection_ptr>& connections) {
  std::unordered_map<const queue*, std::uint64_t> out;
  for (const auto& [cid, c] : connections)
    for (const auto& [sid, sub] : c->subscriptions) out[sub->source.get()] += sub->unacked.size();
  return out;
}

// `key`: its key in `queues`.
queue_view view_of(const std::string& key, const queue& q, std::uint64_t in_flight, const schedule_part& sched) {
  queue_view v;
  v.key = key;
  v.id = q.id();
  v.name = q.name();
  v.kind = queue::kind_name(q.type());
  v.topic = q.topic();
  v.address = q.address();
  v.dropping = q.dropping;
  v.consumers = q.consumers().size();
  v.in_flight = in_flight;
  static_cast<message_counts&>(v) = q.counters;
  v.depth = q.counters.depth;
  if (auto it = sched.counts.find(q.id()); it != sched.counts.end()) v.scheduled = it->second;
  v.bytes = q.counters.bytes;
  if (q.type() == queue::kind::durable_subscription)
    if (auto d = parse_durable_key(key)) {
      v.client_id = d->client_id;
      v.subscription = d->name;
      v.owner = d->owner;
    }
  return v;
}

// The connections in the order they came (by id), for stable listings: those with an id of at
// least `from`.
std::vector<std::pair<std::uint64_t, const connection*>> by_id(
    const std::unordered_map<std::uint64_t, connection_ptr>& connections, std::uint64_t from) {
  std::vector<std::pair<std::uint64_t, const connection*>> out;
  for (const auto& [id, c] : connections)
    if (id >= from) out.emplace_back(id, c.get());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

namespace {
// A group slot (groups.cpp) as operators read it: the group id, "(bucket N)", or for a long id its
// first 64 bytes and "...".
std::string group_label(const std::string& slot) {
  if (slot.empty()) return slot;
  if (slot[0] == 'b') return "(bucket " + slot.substr(1) + ")";
  if (slot[0] == 'h') return slot.substr(slot.find(':') + 1) + "...";
  return slot.substr(1);
}
}  // namespace

class broker::impl::core_admin final : public admin_core {
 public:
  explicit core_admin(broker::impl& m) : m_(m) {}

  const broker_config& config() const override { return m_.config; }
  const storage::store& store() const override { return m_.store; }
  const rm::resource_manager& branches() const override { return m_.transactions.rm; }
  std::vector<coordinated_view> coordinated(std::string_view after, std::size_t limit) const override {
    std::vector<coordinated_view> out;
    for (const auto& [gid, l] : m_.coordination.live)
      if (gid > after) out.push_back({gid, l.database, l.owner, l.committing ? "committing" : "live", l.begun_ms});
    for (const auto& [gid, d] : m_.coordination.decisions)
      if (gid > after)
        out.push_back({gid, d.record.database, d.record.owner, d.finishing ? "finishing" : "decided", d.record.decided_ms});
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.gid < b.gid; });
    if (out.size() > limit) out.resize(limit);
    return out;
  }

  metrics_snapshot snapshot() const override { return m_.snapshot(); }
  double uptime_seconds() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_.started).count();
  }
  std::vector<std::string> listeners() const override { return m_.listeners; }

  void for_each_queue(std::string_view from, bool after,
                      const std::function<bool(const queue_view&)>& each) const override {
    auto in_flight = in_flight_by_queue(m_.clients.connections);
    std::string key(from);
    const auto& queues = m_.topology.queues;
    for (auto it = after ? queues.upper_bound(key) : queues.lower_bound(key); it != queues.end(); ++it) {
      auto fl = in_flight.find(it->second.get());
      if (!each(view_of(it->first, *it->second, fl == in_flight.end() ? 0 : fl->second, m_.schedule))) return;
    }
  }

  std::optional<queue_view> find_queue(std::string_view name) const override {
    queue_ptr q = m_.find_by_name(name);
    if (!q) return std::nullopt;
    auto in_flight = in_flight_by_queue(m_.clients.connections);
    auto it = in_flight.find(q.get());
    return view_of(q->storage_key, *q, it == in_flight.end() ? 0 : it->second, m_.schedule);
  }

  std::optional<std::string> queue_name(std::uint32_t id) const override {
    queue_ptr q = m_.find_by_id(id);
    if (!q) return std::nullopt;
    return q->name();
  }

  std::vector<consumer_view> consumers(std::uint32_t queue_id) const override {
    std::vector<consumer_view> out;
    queue_ptr q = m_.find_by_id(queue_id);
    if (!q) return out;
    const bool exclusive = m_.exclusive_queue(*q);
    for (const subscription* sub : q->consumers())
      out.push_back({sub->owner ? sub->owner->id : 0, sub->id, ack_name(sub->mode), sub->unacked.size(),
                     sub->priority, sub->exclusive, !exclusive || m_.exclusive_owner_of(*q) == sub, 0, {}});
    for (const auto& [group, holder] : q->groups.owner)
      for (std::size_t i = 0; i < out.size(); ++i)
        if (q->consumers()[i] == holder) {
          consumer_view& v = out[i];
          if (v.groups++ < consumer_view::kMaxGroupsShown)
            v.group_ids.push_back(group_label(group));
        }
    return out;
  }

  std::optional<std::size_t> reset_groups(std::uint32_t queue_id, const std::optional<std::string>& group) override {
    queue_ptr q = m_.find_by_id(queue_id);
    if (!q) return std::nullopt;
    std::size_t n = m_.reset_groups(*q, group);
    m_.dispatch(q);
    return n;
  }

  bool is_held(std::uint32_t queue_id, const storage::entry_key& key) const override {
    queue_ptr q = m_.find_by_id(queue_id);
    return q && q->is_held(key);
  }

  const address_settings& settings_for(const std::string& address) override { return m_.settings_for(address); }

  std::vector<queue_view> durable_subscriptions(const std::string& client, const std::string& name,
                                                const std::string* user) const override {
    std::vector<queue_ptr> found;
    if (user) {
      auto it = m_.topology.queues.find(durable_key({client, name, *user}));
      if (it != m_.topology.queues.end()) found.push_back(it->second);
    } else {
      std::string prefix = durable_key({client, name, ""});
      for (auto it = m_.topology.queues.lower_bound(prefix);
           it != m_.topology.queues.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        if (it->first.size() == prefix.size() || it->first[prefix.size()] == '\0') found.push_back(it->second);
    }
    std::vector<queue_view> out;
    if (found.empty()) return out;
    auto in_flight = in_flight_by_queue(m_.clients.connections);
    for (const auto& q : found) {
      auto it = in_flight.find(q.get());
      out.push_back(view_of(q->storage_key, *q, it == in_flight.end() ? 0 : it->second, m_.schedule));
    }
    return out;
  }

  void for_each_connection(std::uint64_t from_id,
                           const std::function<bool(const connection_view&)>& each) const override {
    for (const auto& [id, c] : by_id(m_.clients.connections, from_id)) {
      connection_view v;
      v.id = id;
      v.peer = c->info.peer;
      v.user = c->info.user;
      v.login = c->info.login;
      v.client_id = c->info.client_id;
      v.version = to_string(c->info.version);
      v.subscriptions = c->subscriptions.size();
      for (const auto& [sid, sub] : c->subscriptions) v.in_flight += sub->unacked.size();
      v.transactions = c->transactions.size();
      if (rm::branch_ptr xa = m_.transactions.rm.associated_branch(id)) v.xa_branch = xa->id.to_string();
      if (c->parked)
        if (queue_ptr q = m_.find_by_id(c->parked->queue_id)) v.blocked_on = q->name();
      if (!each(v)) return;
    }
  }

  void for_each_subscription(std::uint64_t from_connection, const std::optional<std::string>& after,
                             const std::function<bool(const subscription_view&)>& each) const override {
    for (const auto& [id, c] : by_id(m_.clients.connections, from_connection)) {
      auto sit = c->subscriptions.begin();
      if (after && id == from_connection) sit = c->subscriptions.upper_bound(*after);
      for (; sit != c->subscriptions.end(); ++sit) {
        const auto& [sid, sub] = *sit;
        subscription_view v;
        v.connection = id;
        v.id = sid;
        v.ack = ack_name(sub->mode);
        v.in_flight = sub->unacked.size();
        v.source = view_of(sub->source->storage_key, *sub->source, 0, m_.schedule);
        if (!each(v)) return;
      }
    }
  }

  void start_sweep(std::uint32_t queue_id, std::string destination, std::optional<std::string> filter,
                   std::function<void(const sweep_report&)> done) override {
    auto s = std::make_shared<queue_sweep>();
    s->what = destination.empty() ? queue_sweep::kind::purge : queue_sweep::kind::move;
    s->from = m_.find_by_id(queue_id);
    s->destination = std::move(destination);
    s->filter = std::move(filter);
    s->done = std::move(done);
    m_.start_sweep(std::move(s));
  }

  std::optional<sweep_report> sweep_running(std::uint32_t queue_id) const override {
    return m_.sweep_running(queue_id);
  }

  std::optional<std::size_t> resolve_move_destination(const std::string& destination) override {
    // A queue it creates goes into the first slice's batch (resolve_destination carries its record
    // again while it is not durable).
    storage::batch records;
    std::vector<queue_ptr> targets;
    if (!m_.resolve_destination(destination, records, targets)) return std::nullopt;
    return targets.size();
  }

  void end_durable_subscription(const std::string& key, std::function<void(const storage::status&)> done) override {
    auto it = m_.topology.queues.find(key);
    if (it == m_.topology.queues.end()) return done(storage::status{});
    queue_ptr q = it->second;
    storage::batch b;
    m_.drop_durable_queue(q, b);
    m_.submit(std::move(b), [this, q, done = std::move(done)](const storage::status& s) {
      m_.finish_drop(q, s.ok());
      done(s);
    });
  }

  std::vector<scheduled_view> scheduled(std::uint32_t queue_id, std::optional<scheduled_cursor> after,
                                        std::size_t limit) override {
    return m_.list_scheduled(queue_id, after, limit);
  }
  void end_schedule(std::uint32_t queue_id, bool deliver, std::vector<std::uint64_t> ids, std::size_t limit,
                    std::function<void(const storage::status&, std::size_t)> done) override {
    m_.end_schedule(queue_id, deliver, ids, limit, std::move(done));
  }

  operator_target owner_for_operator(const xid& x, const std::string* user) const override {
    return m_.owner_for_operator(x, user);
  }

  void xa_forget(std::uint64_t connection_id, const xid& x, const std::string& user,
                 std::function<void(int)> done) override {
    m_.carry_out(m_.transactions.rm.call(rm::xa_verb::forget, connection_id, x, TMNOFLAGS, rm::caller{user}),
                 std::move(done));
  }

  void xa_heuristic(const xid& x, bool commit, const std::string& user, std::function<void(int)> done) override {
    m_.carry_out(m_.transactions.rm.heuristic(x, commit, user), std::move(done));
  }

  bool backup_running() const override { return m_.backup_running; }

  void run_backup(std::function<std::function<void()>()> work) override {
    if (m_.backup_worker.joinable()) m_.backup_worker.join();  // the last one, finished
    m_.backup_running = true;
    m_.backup_worker = std::thread([this, work = std::move(work)] {
      std::function<void()> then = work();
      m_.post([this, then = std::move(then)] {
        m_.backup_running = false;
        then();
        m_.flush();
      });
    });
  }

 private:
  broker::impl& m_;
};

std::unique_ptr<admin_core> broker::impl::make_admin_view() { return std::make_unique<core_admin>(*this); }

void broker::use_admin(admin_handler h) { impl_->admin = std::move(h); }

// Permissions (docs/security.md), before anything is looked up: browsing a queue needs browse on
// its address (or admin); every other command admin on the broker. False after the ERROR.
bool broker::impl::admin_permitted(connection& c, const frame& f) {
  // Looking at a queue's messages (scheduled ones too) takes the browse permission on it.
  if (f.get("admin-command") == "browse" || (f.get("admin-command") == "scheduled" && f.get("action", "list") == "list"))
    return may_browse(c, f);
  return permitted_globally(c, permission::admin, &f);
}

void broker::impl::handle_admin(const connection_ptr& c, const frame& f) {
  const std::string* receipt_id = f.find("receipt");
  if (!receipt_id)
    return error(*c, "ADMIN frame has no receipt header: its answer comes back in a RECEIPT", &f);
  std::string command(f.get("admin-command"));
  if (!admin_permitted(*c, f)) return;
  admin_done done = [this, c, id = *receipt_id, command](admin_outcome o) {
    // The message may hold what the client sent (a path, a queue's name): escaped for the log.
    if (o.status != "ok")
      spdlog::info("connection {}: admin {}: {}: {}", c->id, loggable(command), o.status, loggable(o.message));
    frame r{"RECEIPT", {{"receipt-id", id}, {"admin-status", o.status}}, {}};
    if (!o.message.empty()) r.add("message", o.message);
    if (!o.json.empty()) {
      r.body = std::move(o.json);
      r.add("content-type", "application/json");
      r.add("content-length", std::to_string(r.body.size()));
    }
    write(*c, r);
  };
  spdlog::debug("connection {}: admin {}", c->id, loggable(command));
  if (!admin) return done({"invalid", "this broker answers no ADMIN frames", {}});
  admin(*admin_view, c->id, f, std::move(done));
}

namespace {

// Where an ADMIN command asked over HTTP writes: nowhere but a denial, whose ERROR frame it reads.
class http_admin_outbound final : public outbound {
 public:
  explicit http_admin_outbound(std::function<void(std::string)> denied) : denied_(std::move(denied)) {}
  void send(std::string) override {}
  void send_and_close(std::string bytes, closing) override {
    frame_parser parser;
    std::vector<frame> frames;
    parser.feed(bytes, frames);
    if (denied_) std::exchange(denied_, nullptr)(frames.empty() ? "permission denied" : std::string(frames[0].get("message")));
  }
  std::size_t pending_bytes() const override { return 0; }

 private:
  std::function<void(std::string)> denied_;
};

}  // namespace

void broker::holds_admin(std::vector<std::string> roles, std::function<void(bool)> done) {
  impl_->post([m = impl_.get(), roles = std::move(roles), done = std::move(done)] {
    connection c;  // holds_globally reads only the roles
    c.info.roles = roles;
    done(m->holds_globally(c, permission::admin));
  });
}

void broker::run_admin(std::string user, std::vector<std::string> roles, frame f,
                       std::function<void(http_admin_answer)> done) {
  std::uint64_t id = new_connection_id();
  impl_->post([m = impl_.get(), id, user = std::move(user), roles = std::move(roles), f = std::move(f),
               done = std::move(done)]() mutable {
    // A connection of its own, known to nobody else: the permission checks and the handlers see a
    // user as they would on a STOMP connection; it is never registered, so nothing is delivered to it.
    auto c = std::make_shared<connection>();
    c->id = id;
    c->info.user = std::move(user);
    c->info.roles = std::move(roles);
    c->info.peer = "the web console";
    c->out = std::make_shared<http_admin_outbound>([done](std::string message) { done({true, std::move(message), {}}); });
    std::string command(f.get("admin-command"));
    if (!m->admin_permitted(*c, f)) return;
    spdlog::debug("console ({}): admin {}", c->info.user.empty() ? "anonymous" : loggable(c->info.user), loggable(command));
    admin_done answer = [done, c, command](admin_outcome o) {
      if (o.status != "ok")
        spdlog::info("console ({}): admin {}: {}: {}", c->info.user.empty() ? "anonymous" : loggable(c->info.user),
                     loggable(command), o.status, loggable(o.message));
      done({false, {}, std::move(o)});
    };
    if (!m->admin) return answer({"invalid", "this broker answers no ADMIN frames", {}});
    m->admin(*m->admin_view, c->id, f, std::move(answer));
    m->flush();  // what the command made other connections' (an XA commit's deliveries)
  });
}

// Browsing a queue needs browse on its address. A durable subscription's messages are its
// owner's: browse on its topic, and the owner's login (docs/security.md, "Tenants"); another
// user's, or a name with '@' that is none of the caller's, reads as a denial on that name whether
// or not it exists. An operator (admin) browses everything.
bool broker::impl::may_browse(connection& c, const frame& f) {
  if (holds_globally(c, permission::admin)) return true;
  std::string_view name = f.get("name");
  queue_ptr q = find_by_name(name);
  if (q && q->type() == queue::kind::durable_subscription) {
    auto d = parse_durable_key(q->storage_key);
    if (d && (d->owner.empty() || d->owner == c.info.user)) return permitted(c, permission::browse, q->topic(), &f);
  } else if (q || name.find('@') == std::string_view::npos) {
    return permitted(c, permission::browse, name, &f);
  }
  error(c, "permission denied: " + who(c) + " lacks the browse permission on '" + std::string(name) +
               "': a durable subscription is browsed by its owner (with browse on its topic) and by operators",
        &f);
  return false;
}

// A name with '@' is a durable subscription's (CLIENT-ID.NAME@USER) before it is a queue's (only
// an older version let a queue's name hold '@'), so no queue stands in front of a subscription.
queue_ptr broker::impl::find_by_name(std::string_view name) const {
  bool subscription_first = name.find('@') != std::string_view::npos;
  if (subscription_first)
    for (const auto& [key, q] : topology.queues)
      if (q->type() == queue::kind::durable_subscription && q->name() == name) return q;
  auto it = topology.queues.find("q/" + std::string(name));
  if (it != topology.queues.end()) return it->second;
  for (const auto& [key, q] : topology.queues)
    if (q->name() == name) return q;
  return nullptr;
}

}  // namespace escrow::broker
