// SUBSCRIBE and UNSUBSCRIBE: consumers on queues, non-durable topic subscriptions (an in-memory
// queue per subscription) and durable topic subscriptions (a stored queue per client-id and
// subscription name, kept while the consumer is away and across restarts).
#include <spdlog/spdlog.h>

#include <charconv>

#include "core.h"
#include "escrow/broker/selector/selector.h"
#include "escrow/broker/security/names.h"
#include "durable_name.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {
namespace {

// The names Artemis, ActiveMQ and older clients use for a durable subscription's name.
const std::string* durable_name(const frame& f) {
  for (const char* h : {"durable-subscription-name", "activemq.subscriptionName", "durable-subscriber-name"})
    if (const std::string* v = f.find(h)) return v;
  return nullptr;
}

}  // namespace

// A client-id names one client at a time, as in ActiveMQ: a CONNECT with the client-id of another
// live connection of the same user is refused (docs/stomp.md, "client-id"). Other users' client-ids
// are their own (durable_name.h), so nobody can keep another user out by taking theirs. A
// connection that sent DISCONNECT no longer counts; one that is gone without a word counts until
// the broker notices (at once for a closed socket, at the heart-beat timeout for a silent one).
bool broker::impl::client_id_free(connection& c) {
  if (c.info.client_id.empty()) return true;
  for (const auto& [id, other] : clients.connections) {
    if (other.get() == &c || !other->admitted || other->input_closed) continue;
    if (other->info.client_id != c.info.client_id || other->info.user != c.info.user) continue;
    error(c, "client-id '" + c.info.client_id + "' is in use by connection " + std::to_string(id) + " from " +
                 other->info.peer + " of " + who(c) +
                 ": a client-id names one client at a time; close that connection first, or give another client-id");
    return false;
  }
  return true;
}

queue_ptr broker::impl::find_durable(const connection& c, const std::string& name) {
  if (name_problem(name)) return nullptr;  // no such name is ever created (a NUL would reach other keys)
  auto it = topology.queues.find(durable_key({c.info.client_id, name, c.info.user}));
  if (it != topology.queues.end()) return it->second;
  if (c.info.user.empty()) return nullptr;
  // Stored before subscriptions had owners: whoever may consume its topic may resume or end it.
  it = topology.queues.find(durable_key({c.info.client_id, name, ""}));
  if (it != topology.queues.end() && holds_on(c, permission::consume, it->second->topic())) return it->second;
  return nullptr;
}

std::unique_ptr<subscription> broker::impl::new_subscription(const connection_ptr& c, const frame& f,
                                                             const std::string& id) {
  auto sub = std::make_unique<subscription>();
  sub->id = id;
  sub->owner = c.get();
  std::string_view ack = f.get("ack", "auto");
  if (ack == "auto") {
    sub->mode = ack_mode::auto_ack;
  } else if (ack == "client") {
    sub->mode = ack_mode::client;
  } else if (ack == "client-individual") {
    sub->mode = ack_mode::client_individual;
  } else {
    error(*c, "invalid ack header '" + std::string(ack) + "': use auto, client or client-individual", &f);
    return nullptr;
  }
  sub->window = config.consumer_window;
  for (const char* h : {"prefetch-count", "activemq.prefetchSize"}) {
    const std::string* w = f.find(h);
    if (!w) continue;
    std::uint32_t n = 0;
    auto [end, ec] = std::from_chars(w->data(), w->data() + w->size(), n);
    if (ec != std::errc() || end != w->data() + w->size() || n == 0) {
      error(*c, std::string("invalid ") + h + " header '" + *w + "': use a positive integer", &f);
      return nullptr;
    }
    if (n > config.max_consumer_window) {
      error(*c, std::string(h) + " " + *w + " is above the broker's limit of " +
                    std::to_string(config.max_consumer_window) +
                    " unacknowledged messages per consumer (limits.max-consumer-window)", &f);
      return nullptr;
    }
    sub->window = n;
    break;
  }
  // Consumer priority: ActiveMQ's and RabbitMQ's header names; any 32-bit integer, 0 by default.
  for (const char* h : {"activemq.priority", "x-priority"}) {
    const std::string* p = f.find(h);
    if (!p) continue;
    std::int32_t n = 0;
    auto [end, ec] = std::from_chars(p->data(), p->data() + p->size(), n);
    if (ec != std::errc() || end != p->data() + p->size()) {
      error(*c, std::string("invalid ") + h + " header '" + *p + "': use an integer (higher is served first)", &f);
      return nullptr;
    }
    sub->priority = n;
    break;
  }
  if (const std::string* x = f.find("activemq.exclusive")) {
    if (*x != "true" && *x != "false") {
      error(*c, "invalid activemq.exclusive header '" + *x + "': use true or false", &f);
      return nullptr;
    }
    sub->exclusive = *x == "true";
  }
  return sub;
}

queue_ptr broker::impl::durable_source(const connection_ptr& c, const frame& f, const std::string& topic_name,
                                       const std::string& name, const std::shared_ptr<const selector>& filter,
                                       storage::batch& b, queue_ptr& created) {
  if (c->info.client_id.empty())
    return error(*c, "a durable subscription needs a client-id header on CONNECT", &f), nullptr;
  if (queue_ptr existing = find_durable(*c, name)) {
    std::string which = "durable subscription '" + name + "' of client '" + c->info.client_id + "'";
    if (existing->dropping)
      return error(*c, which + " is being ended; subscribe again once its UNSUBSCRIBE is answered", &f), nullptr;
    if (existing->topic() != topic_name)
      return error(*c, which + " listens to /topic/" + existing->topic() + "; unsubscribe it before reusing its name",
                   &f),
             nullptr;
    // Its selector decided what it kept: another one would not match what it holds (JMS makes that
    // a new subscription; here the client ends the old one first, knowing its messages go).
    const std::string kept = existing->filter ? existing->filter->text() : std::string();
    const std::string asked = filter ? filter->text() : std::string();
    if (kept != asked)
      return error(*c, which + " was made with " + (kept.empty() ? "no selector" : "selector '" + loggable(kept) + "'") +
                           ", not " + (asked.empty() ? "none" : "'" + loggable(asked) + "'") +
                           "; UNSUBSCRIBE it (its messages are dropped) before subscribing with another",
                   &f),
             nullptr;
    if (!existing->consumers().empty()) return error(*c, which + " already has an active consumer", &f), nullptr;
    return existing;
  }
  if (!permitted(*c, permission::create_durable_subscription, topic_name, &f)) return nullptr;
  durable_id d{c->info.client_id, name, c->info.user};
  if (!may_create_queue(*c, durable_key(d), &f)) return nullptr;
  auto q = std::make_shared<queue>(topology.next_queue_id++, durable_display_name(d), queue::kind::durable_subscription,
                                   topic_name, &store, config.queue_memory_window,
                                   config.queue_memory_bytes);
  q->storage_key = durable_key(d);
  q->creator = c->info.user;
  q->filter = filter;  // stored in its record
  add_queue(q);
  persist_queue_record(q, b);
  return created = q;
}

queue_ptr broker::impl::subscription_source(const connection_ptr& c, const frame& f, const std::string& id,
                                            const std::shared_ptr<const selector>& filter, storage::batch& b,
                                            queue_ptr& created) {
  std::string_view dest = f.get("destination");
  bool is_queue = dest.rfind("/queue/", 0) == 0 && dest.size() > 7;
  bool is_topic = dest.rfind("/topic/", 0) == 0 && dest.size() > 7;
  if (!is_queue && !is_topic)
    return error(*c, "invalid destination '" + std::string(dest) + "': use /queue/NAME or /topic/NAME", &f), nullptr;
  std::string name(dest.substr(7));
  if (auto problem = name_problem(name))
    return error(*c, "invalid destination '" + loggable(dest) + "': " + *problem, &f), nullptr;
  if (is_queue)
    if (auto problem = queue_name_problem(name))
      return error(*c, "invalid destination '" + loggable(dest) + "': " + *problem, &f), nullptr;
  const std::string* durable = durable_name(f);
  if (durable)
    if (auto problem = name_problem(*durable))
      return error(*c, "invalid durable subscription name '" + loggable(*durable) + "': " + *problem, &f), nullptr;
  if (!permitted(*c, permission::consume, name, &f)) return nullptr;
  if (is_queue) {
    if (!may_create_queue(*c, "q/" + name, &f)) return nullptr;
    return find_or_create_queue(name, b, c->info.user);
  }
  if (durable) return durable_source(c, f, name, *durable, filter, b, created);
  // A non-durable subscription: an in-memory queue of its own, for as long as its consumer stays.
  auto q = std::make_shared<queue>(topology.next_queue_id++, "subscription-" + std::to_string(c->id) + "-" + id,
                                   queue::kind::subscription, name, &store, config.queue_memory_window,
                                   config.queue_memory_bytes);
  add_queue(q);
  topology.topics[name].subscriptions.push_back(q);
  return q;
}

void broker::impl::handle_subscribe(const connection_ptr& c, const frame& f) {
  const std::string* destination = f.find("destination");
  if (!destination) return error(*c, "SUBSCRIBE frame has no destination header", &f);
  const std::string* id_header = f.find("id");
  if (!id_header && c->info.version == stomp_version::v1_2)
    return error(*c, "SUBSCRIBE frame has no id header (required in STOMP 1.2)", &f);
  std::string id = id_header ? *id_header : *destination;
  if (c->subscriptions.count(id))
    return error(*c, "subscription id '" + id + "' is already in use on this connection", &f);
  if (c->subscriptions.size() >= config.max_subscriptions_per_connection)
    return error(*c, "too many subscriptions on this connection: " + std::to_string(c->subscriptions.size()) +
                         " (limits.max-subscriptions-per-connection)", &f);
  if (!may_subscribe(*c, f)) return;
  auto sub = new_subscription(c, f, id);
  if (!sub) return;
  storage::batch b;
  queue_ptr created;  // a new durable subscription: it joins its topic once its record is stored
  // A selector (docs/stomp.md, "Selectors"): parsed here; so far applied to non-durable topic
  // subscriptions only, at routing. Anywhere else it is refused rather than ignored.
  std::shared_ptr<const selector> filter;
  if (const std::string* text = f.find("selector")) {
    auto parsed = selector::parse(*text);
    if (auto* problem = std::get_if<selector_error>(&parsed)) return error(*c, "invalid selector: " + problem->message, &f);
    auto& compiled = std::get<selector>(parsed);
    if (!compiled.empty()) filter = std::make_shared<const selector>(std::move(compiled));
  }
  sub->source = subscription_source(c, f, id, filter, b, created);
  if (!sub->source) return;
  // On a queue the consumer takes only what its selector picks (the others' messages stay);
  // a topic subscription's queue gets only those (at routing; a durable one's is in its record).
  if (filter && sub->source->type() == queue::kind::queue) {
    sub->selective = &sub->source->attach_selector(std::move(filter));
  } else if (filter && sub->source->type() == queue::kind::subscription) {
    sub->source->filter = std::move(filter);
  }

  queue_ptr source = sub->source;
  // Highest priority first; after those of its own priority already there.
  auto& consumers = source->consumers();
  consumers.insert(std::find_if(consumers.begin(), consumers.end(),
                                [p = sub->priority](const subscription* s) { return s->priority < p; }),
                   sub.get());
  source->exclusive_consumers += sub->exclusive;
  c->subscriptions.emplace(id, std::move(sub));
  count_subscriptions(*c, 1);
  if (!created) {
    receipt_after(c, f, std::move(b));
    return dispatch(source);
  }
  // A new durable subscription takes the topic's messages from when its record is durable; if the
  // store refuses it, it never existed (the ERROR closes the connection, which detaches its
  // consumer): DESIGN.md invariant 8.
  receipt_after(c, f, std::move(b), "durable subscription", [this, created](bool stored) {
    auto it = topology.queues.find(created->storage_key);
    // Ended meanwhile (its UNSUBSCRIBE came before this answer): it does not join its topic.
    if (it == topology.queues.end() || it->second != created || created->dropping) return;
    if (stored) {
      topology.topics[created->topic()].subscriptions.push_back(created);
    } else {
      remove_queue(created);
    }
  });
}

void broker::impl::detach(subscription& s, storage::batch& b) {
  // An exclusive queue's or a group's messages come back to the queue at once, before the next
  // owner or holder gets anything newer: order is what they are for.
  const bool exclusive = exclusive_queue(*s.source);
  for (auto& [tag, d] : s.unacked) {
    s.owner->tag_owner.erase(tag);
    const bool at_once = exclusive || (d.entry.msg && group_of(*d.entry.msg));
    requeue(std::move(d), b, at_once);
  }
  s.clear_unacked();
  if (s.selective) s.source->detach_selector(*s.selective);
  s.selective = nullptr;
  auto& consumers = s.source->consumers();
  std::erase(consumers, &s);
  s.source->exclusive_consumers -= s.exclusive;
  if (s.source->exclusive_owner == &s) s.source->exclusive_owner = nullptr;  // the next one takes over
  forget_groups(*s.source, s);  // its groups go to whoever gets their next message
  if (s.source->type() == queue::kind::subscription) {
    // A non-durable subscription's queue lives and dies with its only consumer.
    auto t = topology.topics.find(s.source->topic());
    if (t != topology.topics.end()) {
      std::erase(t->second.subscriptions, s.source);
      if (t->second.subscriptions.empty()) topology.topics.erase(t);  // topics without subscribers hold nothing
    }
    topology.queues_by_id.erase(s.source->id());
    forget_schedule(s.source);
  }
}

void broker::impl::drop_durable_queue(const queue_ptr& q, storage::batch& b) {
  auto t = topology.topics.find(q->topic());
  if (t != topology.topics.end()) {
    std::erase(t->second.subscriptions, q);
    if (t->second.subscriptions.empty()) topology.topics.erase(t);
  }
  q->dropping = true;
  b.erase(storage::table::queues, q->storage_key);
  storage::status s = store.scan(storage::table::entries, storage::queue_prefix(q->id()), storage::queue_prefix(q->id()),
                                 [&](std::string_view k, std::string_view) {
                                   storage::entry_key key;
                                   if (storage::entry_key::decode(k, key)) storage::erase_entry(b, key);
                                   return true;
                                 });
  if (!s.ok()) spdlog::error("dropping {}: {}; some of its entries stay in storage", q->name(), s.message());
  // Its scheduled messages too (a promotion under way lands in the queue's held entries, below).
  s = store.scan(storage::table::scheduled, storage::queue_prefix(q->id()), storage::queue_prefix(q->id()),
                 [&](std::string_view k, std::string_view) {
                   b.remove_scheduled(k);
                   return true;
                 });
  if (!s.ok()) spdlog::error("dropping {}: {}; some of its scheduled messages stay in storage", q->name(), s.message());
  // Entries on their way to the store (a SEND or commit batch submitted before this one, held in
  // the queue until it completes) are not in the scan: they go too, after that batch stores them.
  // An entry the scan found as well is removed once (removing a missing entry does nothing).
  for (const auto& key : q->held()) storage::erase_entry(b, key);
}

void broker::impl::finish_drop(const queue_ptr& q, bool stored) {
  q->dropping = false;
  auto it = topology.queues.find(q->storage_key);
  bool known = it != topology.queues.end() && it->second == q;
  if (!stored) {
    // Back in its topic as it was, unless it never joined it (refused before it was stored).
    if (!known || !q->record_durable) return;
    auto& subs = topology.topics[q->topic()].subscriptions;
    if (std::find(subs.begin(), subs.end(), q) == subs.end()) subs.push_back(q);
    reload_schedule(q);  // the due pass left it alone while it was being dropped
    return;
  }
  remove_queue(q);
  forget_schedule(q);
  auto t = topology.topics.find(q->topic());
  if (t != topology.topics.end()) {
    std::erase(t->second.subscriptions, q);
    if (t->second.subscriptions.empty()) topology.topics.erase(t);
  }
}

void broker::impl::handle_unsubscribe(const connection_ptr& c, const frame& f) {
  const std::string* id_header = f.find("id");
  const std::string* name = durable_name(f);
  if (!id_header && c->info.version == stomp_version::v1_2 && !name)
    return error(*c, "UNSUBSCRIBE frame has no id header (required in STOMP 1.2)", &f);
  if (name)
    if (auto problem = name_problem(*name))
      return error(*c, "invalid durable subscription name '" + loggable(*name) + "': " + *problem, &f);
  std::string id = id_header ? *id_header : std::string(f.get("destination"));
  storage::batch b;
  auto it = c->subscriptions.find(id);
  queue_ptr source;
  if (it != c->subscriptions.end()) {
    source = it->second->source;
    detach(*it->second, b);
    c->subscriptions.erase(it);
    count_subscriptions(*c, -1);
  } else if (!name) {
    return error(*c, "UNSUBSCRIBE names subscription id '" + id + "', which this connection does not have", &f);
  }
  // UNSUBSCRIBE that names a durable subscription ends it for good, as Artemis and ActiveMQ do.
  // Only the user's own subscriptions: another user's client-id and name are a different one.
  if (name && !c->info.client_id.empty()) {
    queue_ptr q = find_durable(*c, *name);
    if (q && q->dropping)  // an UNSUBSCRIBE of it is being stored already
      return receipt_after(c, f, std::move(b));
    if (q && q->consumers().empty()) {
      queue_ptr doomed = q;
      drop_durable_queue(doomed, b);
      source.reset();
      return receipt_after(c, f, std::move(b), "unsubscribe", [this, doomed](bool stored) { finish_drop(doomed, stored); });
    }
  }
  receipt_after(c, f, std::move(b));
  if (source) dispatch(source);
}

}  // namespace escrow::broker
