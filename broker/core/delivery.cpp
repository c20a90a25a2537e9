// Delivery: handing ready entries to consumers round robin within their windows, the MESSAGE
// frame, and what ACK and NACK do to what was handed out. A message is with at most one consumer
// at a time (it leaves the queue's ready set when delivered); an acknowledgement that asked for a
// receipt is durable before the receipt (durability point 2).
#include <spdlog/spdlog.h>

#include <charconv>

#include "core.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::broker {

bool broker::impl::load_message(queue_entry& e) {
  if (e.msg) return true;
  // A queue message is stored inline in its entry (a value longer than its 4-byte delivery count);
  // a topic message once, in `messages`. A record that does not decode is never delivered: the
  // entry stays in the store, held by the caller until escrowd restarts, and the rest of the queue
  // flows on (docs/storage.md, "A corrupted store").
  std::string value;
  auto m = std::make_shared<message>();
  m->id = e.key.message_id;
  const std::string key = e.key.encode();
  auto refuse = [&](const storage::status& why) {
    spdlog::error("message {} of queue id {} is not delivered and stays stored: {}", e.key.message_id,
                  e.key.queue_id, why.message());
    return false;
  };
  storage::status s = store.get(storage::table::entries, key, value);
  if (s.which() == storage::status::code::not_found) {
    spdlog::warn("message {} of queue id {} is no longer stored; not delivered", e.key.message_id, e.key.queue_id);
    return false;
  }
  if (!s.ok()) return refuse(s);
  if (value.size() < 4)
    return refuse(storage::corrupt_record(storage::table::entries, key,
                                          "an entry starts with a u32 delivery count, this one is " +
                                              std::to_string(value.size()) + " bytes"));
  // An entry taken straight from storage (queue::take beyond the window) brings its stored count.
  e.delivery_count = std::max(e.delivery_count, storage::decode_delivery_count(value));
  if (value.size() > 4) {
    if (!storage::decode_inline_message(value, m->record))
      return refuse(storage::corrupt_record(storage::table::entries, key, "the message stored in it does not decode"));
  } else {
    const std::string message_key = storage::message_key(e.key.message_id);
    s = store.get(storage::table::messages, message_key, value);
    if (s.which() == storage::status::code::not_found)
      return refuse(storage::corrupt_record(storage::table::entries, key, "its message is missing from the messages table"));
    if (!s.ok()) return refuse(s);
    if (!storage::message_record::decode(value, m->record))
      return refuse(storage::corrupt_record(storage::table::messages, message_key, "the message record does not decode"));
  }
  e.msg = std::move(m);
  return true;
}

void broker::impl::requeue(delivery d, storage::batch& b, bool at_once) {
  requeue(d.source, std::move(d.entry), b, at_once);
}

void broker::impl::requeue(const queue_ptr& q, queue_entry e, storage::batch& b, bool at_once) {
  ++e.delivery_count;
  if (e.stored) b.set_delivery_count(e.key.encode(), e.delivery_count);
  offer_again(q, std::move(e), at_once);
}

// The MESSAGE frame, written straight into the connection's outbox (the body is copied once).
void broker::impl::write_message(connection& c, const subscription& s, std::uint64_t tag, const queue_entry& e) {
  if (c.output_closed) return;
  const message& m = *e.msg;
  std::size_t size = m.record.body.size() + m.record.destination.size() + s.id.size() + 160;
  for (const auto& [name, value] : m.record.headers) size += name.size() + value.size() + 2;
  frame_writer w(outbox_for(c, size), "MESSAGE", c.info.version, size);
  w.header("subscription", s.id);
  w.header("message-id", std::to_string(m.id));
  w.header("destination", m.record.destination);
  if (s.mode != ack_mode::auto_ack) w.header("ack", std::to_string(tag));
  w.header("redelivered", e.delivery_count > 0 ? "true" : "false");
  w.header("delivery-count", std::to_string(e.delivery_count + 1));
  for (const auto& [name, value] : m.record.headers) w.header(name, value);
  w.header("content-length", std::to_string(m.record.body.size()));
  w.finish(m.record.body);
}

namespace {
// Room in the connection's unsent bytes, and in the subscription's window: fewer unacknowledged
// messages than its window and, unless it has none, fewer bytes of them than
// limits.max-consumer-window-bytes.
bool has_room(const subscription& s, std::size_t max_pending, std::uint64_t max_window_bytes) {
  const connection& c = *s.owner;
  if (c.output_closed || c.out->pending_bytes() + c.outbox.size() >= max_pending) return false;
  if (s.mode == ack_mode::auto_ack) return true;
  return s.unacked.size() < s.window && (s.unacked.empty() || s.unacked_bytes < max_window_bytes);
}
}  // namespace

bool broker::impl::has_room_for(const subscription& s) const {
  return has_room(s, config.max_pending_bytes, config.max_consumer_window_bytes);
}

bool broker::impl::exclusive_queue(queue& q) {
  return q.exclusive_consumers != 0 || settings_for(q.address()).exclusive;
}

subscription* broker::impl::exclusive_owner_of(queue& q) {
  if (q.exclusive_owner) return q.exclusive_owner;
  // The first in consumer order (highest priority, then the earliest) of those that may own it:
  // any consumer of a queue exclusive by its settings, else those that asked for it. It becomes
  // the owner when it is handed a message (dispatch), not before.
  const bool any = q.exclusive_consumers == 0;
  for (subscription* s : q.consumers())
    if (any || s->exclusive) return s;
  return nullptr;
}

subscription* broker::impl::consumer_with_room(queue& q, bool& exclusive, const std::vector<subscription*>& idle) {
  auto& consumers = q.consumers();
  const std::size_t n = consumers.size();
  auto room = [this, &idle](const subscription& s) {
    return has_room_for(s) && std::find(idle.begin(), idle.end(), &s) == idle.end();
  };
  exclusive = exclusive_queue(q);
  if (exclusive) {
    // One consumer receives; the others wait for it to leave, even when it has no room.
    subscription* owner = exclusive_owner_of(q);
    return owner && room(*owner) ? owner : nullptr;
  }
  // By priority, highest first; within one priority the one with room served longest ago (round
  // robin, whatever consumers come and go, and each priority on its own).
  for (std::size_t first = 0; first < n;) {
    std::size_t end = first, best = n;
    for (; end < n && consumers[end]->priority == consumers[first]->priority; ++end)
      if ((best == n || consumers[end]->served < consumers[best]->served) && room(*consumers[end])) best = end;
    if (best != n) return consumers[best];
    first = end;
  }
  return nullptr;
}

bool broker::impl::accepts(const subscription& s, const queue_entry& e) {
  return !s.selective || (e.msg && selects(*s.selective->sel, e.msg->record, e.key.message_id, e.delivery_count));
}

void broker::impl::hand_out(const queue_ptr& q, subscription& chosen, queue_entry e, dispatch_writes& w) {
  connection& c = *chosen.owner;
  std::uint64_t tag = c.next_tag++;
  ++q->counters.delivered;
  if (chosen.mode == ack_mode::auto_ack) {
    q->counters.removed(q->counters.acknowledged, stored_size(e));
    // auto: the message counts as acknowledged once it is written to the consumer; a stored
    // entry goes for good once the batch of the pass is durable.
    write_message(c, chosen, tag, e);
    if (!e.stored) {
      q->release_hold(e.key);
    } else {
      storage::erase_entry(w.auto_acks, e.key);
      w.auto_acked.push_back(e.key);
    }
    return;
  }
  if (config.persist_delivery_count_before_delivery && e.stored) {
    // The count this delivery will have if it fails is durable before the consumer sees it.
    w.counts.set_delivery_count(e.key.encode(), e.delivery_count + 1);
    w.after_counts.emplace_back(c.id, tag);
    chosen.awaiting_count.insert(tag);
    chosen.unwritten.push_back(tag);
  } else if (!chosen.unwritten.empty()) {
    // Behind deliveries whose counts are being stored: written after them, in order (a client's
    // cumulative ACK covers only what it was sent).
    chosen.unwritten.push_back(tag);
  } else {
    write_message(c, chosen, tag, e);
  }
  c.tag_owner.emplace(tag, &chosen);
  chosen.add_unacked(tag, delivery{q, std::move(e)});
}

void broker::impl::dispatch(const queue_ptr& q) {
  dispatch_writes w;
  std::uint64_t now = now_ms();
  // Messages of groups whose consumer is full (groups.cpp): put back in their place after the pass.
  std::vector<queue_entry> aside;
  // Selective consumers with nothing to take in this pass (none of theirs is ready, or the scan's
  // budget for the pass is spent: then a later pass is posted).
  std::vector<subscription*> idle;
  std::size_t scan_budget = kSelectorScanPerPass;
  while (!q->consumers().empty()) {
    bool exclusive = false;
    subscription* chosen = consumer_with_room(*q, exclusive, idle);
    if (!chosen) break;
    // A consumer with a selector takes the first message it picks, wherever it is; the others the
    // queue's head. Either way what is passed over keeps its place.
    std::optional<queue_entry> next = chosen->selective ? q->take_match(*chosen->selective, scan_budget) : q->pop();
    if (!next) {
      if (!chosen->selective) break;
      idle.push_back(chosen);
      continue;
    }
    queue_entry e = std::move(*next);
    if (!load_message(e)) continue;  // stays held: never handed out again until a restart
    // A message past its expiry is never delivered, whether or not the reaper got to it. One that
    // used up its delivery attempts (its count came back from storage after a crash) is a dead
    // letter.
    if (expired(e, now)) {
      plan_move(q, std::move(e), move_reason::expired, w.moves, w.plans);
      continue;
    }
    if (dead_letter_due(q, e)) {
      plan_move(q, std::move(e), move_reason::max_delivery_attempts, w.moves, w.plans);
      continue;
    }
    // A grouped message goes to its group's consumer (an exclusive queue's owner takes them all).
    const std::string* group = exclusive ? nullptr : group_of(*e.msg);
    bool held = false;
    if (group) {
      subscription* target = group_target(*q, *group, *chosen, e, held);
      if (!target) {
        if (chosen->selective) {
          // Its first match waits for its group's holder: back in its place, and this consumer
          // waits for the next pass.
          q->release_hold(e.key);
          q->push(std::move(e));
          idle.push_back(chosen);
          continue;
        }
        aside.push_back(std::move(e));
        if (aside.size() >= kGroupLookahead) break;
        continue;
      }
      chosen = target;
      after_group_message(*q, *group, *e.msg);
    }
    // The turn passes only when a message was handed out, so round robin is fair to consumers
    // that were skipped when the queue ran dry; a held group's message does not take a turn, so
    // new groups spread evenly whatever the old ones carry.
    if (!held) chosen->served = ++q->served_turns;
    if (exclusive) q->exclusive_owner = chosen;  // it receives alone until it leaves
    hand_out(q, *chosen, std::move(e), w);
  }
  for (auto& e : aside) {
    q->release_hold(e.key);
    q->push(std::move(e));
  }
  if (scan_budget == 0) continue_scan(q);
  if (!w.auto_acks.empty()) submit_auto_acks(q, std::move(w.auto_acks), std::move(w.auto_acked));
  if (!w.counts.empty()) submit_delivery_counts(std::move(w.counts), std::move(w.after_counts));
  submit_moves(std::move(w.moves), std::move(w.plans));
}

void broker::impl::continue_scan(const queue_ptr& q) {
  if (q->scan_posted) return;
  q->scan_posted = true;
  post([this, q] {
    q->scan_posted = false;
    dispatch(q);
  });
}

void broker::impl::submit_auto_acks(const queue_ptr& q, storage::batch b, std::vector<storage::entry_key> keys) {
  submit(std::move(b), [q, keys = std::move(keys)](const storage::status& s) {
    if (!s.ok()) {
      // Delivered (auto: acknowledged when written) but still stored: they stay held, out of
      // delivery, and come back once, redelivered, after a restart (docs/storage.md).
      spdlog::warn("{} auto-acknowledged messages of {} not removed from the store: {}", keys.size(), q->name(),
                   s.message());
      return;
    }
    for (auto& k : keys) q->release_hold(k);
  });
}

void broker::impl::submit_delivery_counts(storage::batch b,
                                          std::vector<std::pair<std::uint64_t, std::uint64_t>> deliveries) {
  submit(std::move(b), [this, deliveries = std::move(deliveries)](const storage::status& s) {
    bool stored = s.ok();
    // Each delivery still unacknowledged is written now (one acknowledged or returned meanwhile,
    // or whose consumer left, is not). If the raised counts were refused, the deliveries stop:
    // the messages go back to their queue with their old counts, offered again after a second.
    for (auto [connection_id, tag] : deliveries) {
      auto c = clients.connections.find(connection_id);
      if (c == clients.connections.end()) continue;
      auto owner = c->second->tag_owner.find(tag);
      if (owner == c->second->tag_owner.end()) continue;
      subscription& sub = *owner->second;
      sub.awaiting_count.erase(tag);
      auto d = sub.unacked.find(tag);
      if (d != sub.unacked.end() && !stored) {
        delivery back = std::move(d->second);
        sub.erase_unacked(d, std::next(d));
        c->second->tag_owner.erase(owner);
        --back.source->counters.delivered;
        delay_redelivery(back.source, std::move(back.entry), kRefusedCountRetryMs);
      }
      write_unwritten(*c->second, sub);
    }
    if (!stored) spdlog::warn("deliveries stopped: their raised delivery counts were not stored: {}", s.message());
  });
}

void broker::impl::write_unwritten(connection& c, subscription& s) {
  while (!s.unwritten.empty() && !s.awaiting_count.count(s.unwritten.front())) {
    std::uint64_t tag = s.unwritten.front();
    s.unwritten.pop_front();
    // (One returned or acknowledged meanwhile is not written.)
    if (auto d = s.unacked.find(tag); d != s.unacked.end()) write_message(c, s, tag, d->second.entry);
  }
}

subscription* broker::impl::acked_subscription(const connection_ptr& c, const frame& f, std::uint64_t& tag) {
  const std::string& verb = f.command;
  if (c->info.version == stomp_version::v1_2) {
    const std::string* id = f.find("id");
    if (!id) return error(*c, verb + " frame has no id header (required in STOMP 1.2)", &f), nullptr;
    auto [end, ec] = std::from_chars(id->data(), id->data() + id->size(), tag);
    auto owner = c->tag_owner.end();
    if (ec == std::errc() && end == id->data() + id->size()) owner = c->tag_owner.find(tag);
    if (owner == c->tag_owner.end())
      return error(*c, verb + " names id '" + *id + "', which is not an unacknowledged message of this connection",
                   &f),
             nullptr;
    return owner->second;
  }
  // STOMP 1.0 and 1.1 name the message by message-id (and, in 1.1, the subscription).
  const std::string* mid = f.find("message-id");
  if (!mid) return error(*c, verb + " frame has no message-id header", &f), nullptr;
  const std::string* sid = f.find("subscription");
  for (auto& [id, s] : c->subscriptions) {
    if (sid && id != *sid) continue;
    for (auto& [t, d] : s->unacked) {
      if (std::to_string(d.entry.key.message_id) != *mid) continue;
      tag = t;
      return s.get();
    }
  }
  return error(*c, verb + " names message-id '" + *mid + "', which is not an unacknowledged message of this connection",
               &f),
         nullptr;
}

void broker::impl::finish_acks(std::vector<delivery>& removed, bool stored) {
  std::vector<queue_ptr> touched;
  for (auto& d : removed) {
    if (stored) {
      d.source->release_hold(d.entry.key);
      continue;
    }
    --d.source->counters.acknowledged;
    d.source->counters.added(stored_size(d.entry));
    ++d.entry.delivery_count;
    offer_again(d.source, std::move(d.entry));
    touched.push_back(d.source);
  }
  for (auto& q : touched) dispatch(q);
}

void broker::impl::handle_ack(const connection_ptr& c, const frame& f, bool positive) {
  std::uint64_t tag = 0;
  subscription* sub = acked_subscription(c, f, tag);
  if (!sub) return;
  rm::branch_ptr branch;
  if (!branch_for(c, f, branch)) return;

  // client: cumulative, every message of the subscription up to this one; client-individual: one.
  auto first = sub->mode == ack_mode::client ? sub->unacked.begin() : sub->unacked.find(tag);
  auto last = std::next(sub->unacked.find(tag));
  storage::batch b;
  std::vector<delivery> removed;  // stored entries this ACK removes: put back if the store refuses
  for (auto it = first; it != last; ++it) {
    c->tag_owner.erase(it->first);
    delivery& d = it->second;
    if (branch && takes_work(*branch)) {
      // Inside a transaction: the branch holds the entry (no consumer gets it) until commit
      // removes it (ACK) or returns it (NACK), or a rollback returns it.
      branch->work.consumed.push_back(
          rm::consumed_entry{d.entry.key, d.entry.delivery_count, d.entry.stored, !positive, d.entry.msg});
    } else if (!positive || branch) {
      requeue(std::move(d), b);  // NACK, or an ACK in a branch already rolled back
    } else if (d.entry.stored) {
      d.source->counters.removed(d.source->counters.acknowledged, stored_size(d.entry));
      storage::erase_entry(b, d.entry.key);
      removed.push_back(std::move(d));  // the map entry is erased just below
    } else {
      d.source->counters.removed(d.source->counters.acknowledged, stored_size(d.entry));
      d.source->release_hold(d.entry.key);
    }
  }
  sub->erase_unacked(first, last);
  queue_ptr source = sub->source;

  // Once stored, the entries are gone for good; if refused, they are unacknowledged again: back in
  // their queue as a delivery that ended without an acknowledgement (the connection gets an ERROR
  // and closes), never hidden until a restart.
  auto release = [this, removed = std::move(removed)](bool stored) mutable { finish_acks(removed, stored); };
  // Removals only (an ACK outside a transaction) and no receipt asked for: nothing waits on them.
  if (positive && !branch && !b.empty() && !f.find("receipt")) {
    defer_ack(std::move(b), [this, c, release = std::move(release)](const storage::status& s) mutable {
      if (!s.ok()) error(*c, "acknowledgement not stored: " + s.message());  // first: see receipt_after
      release(s.ok());
    });
  } else {
    receipt_after(c, f, std::move(b), "acknowledgement", std::move(release));
  }
  dispatch(source);
}

}  // namespace escrow::broker
