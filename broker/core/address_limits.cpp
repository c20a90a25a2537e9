// Queue limits (docs/configuration.md, "Queue limits"; docs/stomp.md, "Full queues"): how much one
// queue may hold (max-size-messages, max-size-bytes; a /queue/NAME's queue, and each subscription of
// a /topic/NAME on its own) and what a message that does not fit meets: address-full-policy FAIL
// (an ERROR), DROP (not taken, the RECEIPT still comes), DROP-HEAD (the oldest ready message goes,
// in the batch that stores the new one) or BLOCK (the SEND and everything its connection sends after
// it wait for room); ring-size (the oldest ready message goes beyond it); dead-letter-on-drop.
//
// What a queue holds is its depth and bytes (queue_counters: ready, in flight, held, waiting out a
// redelivery delay) plus what is on its way in (queue_room::reserved: SENDs being stored, the sends
// of transactions being prepared, prepared or being committed) less the oldest messages whose
// removal is being stored (queue_room::dropping). All of it is the core strand's, so a check and the
// reservation that follows are one step: of producers racing for the last place, one gets it. A SEND
// in a transaction is checked when sent and again at prepare or one-phase commit against what
// other transactions hold, so transactions that commit together never pass a limit.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>

#include "core.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "escrow/xa.h"

namespace escrow::broker {
namespace {

std::int64_t held_messages(const queue& q) { return q.counters.depth + q.room.reserved - q.room.dropping; }
std::int64_t held_bytes(const queue& q) { return q.counters.bytes + q.room.reserved_bytes - q.room.dropping_bytes; }

std::int64_t size_of(const message& m) { return static_cast<std::int64_t>(m.record.encoded_size()); }

// The queue as an error names it.
std::string describe(const queue& q) {
  switch (q.type()) {
    case queue::kind::queue: return "queue '" + q.name() + "'";
    case queue::kind::durable_subscription:
      return "durable subscription '" + q.name() + "' of topic '" + q.topic() + "'";
    case queue::kind::subscription: return "subscription '" + q.name() + "' of topic '" + q.topic() + "'";
  }
  return "queue '" + q.name() + "'";
}

bool has_max_size(const address_settings& s) { return s.max_size_messages >= 0 || s.max_size_bytes >= 0; }
bool drops_head(const address_settings& s) {
  return s.address_full_policy == full_policy::drop_head && has_max_size(s);
}

// Why `messages` more messages of `bytes` stored bytes do not fit in q, or "" when they do.
std::string over_limit(const queue& q, const address_settings& s, std::int64_t messages, std::int64_t bytes) {
  if (s.max_size_messages >= 0 && held_messages(q) + messages > s.max_size_messages)
    return fmt::format("max-size-messages {} reached", s.max_size_messages);
  if (s.max_size_bytes >= 0 && held_bytes(q) + bytes > s.max_size_bytes)
    return fmt::format("max-size-bytes {} reached (it holds {} bytes, {} more do not fit)", s.max_size_bytes,
                       std::max<std::int64_t>(held_bytes(q), 0), bytes);
  return "";
}

// Why they would not fit even in the empty queue, or "".
std::string never_fits(const address_settings& s, std::int64_t messages, std::int64_t bytes) {
  if (s.max_size_messages >= 0 && messages > s.max_size_messages)
    return fmt::format("max-size-messages is {}", s.max_size_messages);
  if (s.max_size_bytes >= 0 && bytes > s.max_size_bytes)
    return fmt::format("its {} bytes are more than max-size-bytes {}", bytes, s.max_size_bytes);
  return "";
}

// The place a ring queue frees for one new message itself (its oldest ready message goes): 1 or 0.
std::int64_t ring_frees(queue& q, const address_settings& s) {
  return s.ring_size >= 0 && held_messages(q) + 1 > s.ring_size && q.has_ready() ? 1 : 0;
}

std::string policy_of(const address_settings& s) {
  return std::string("address-full-policy ") + to_string(s.address_full_policy);
}

// The ERROR of a SEND that does not fit (FAIL).
std::string full_text(const queue& q, const address_settings& s, const std::string& why) {
  return describe(q) + " is full: " + why + " (" + policy_of(s) + "); consume messages or raise the limit";
}

// A queue that does not know its depth yet takes nothing it could not count.
std::string uncounted_text(const queue& q) {
  return describe(q) + " is still counting the messages it had stored at start; its limits apply once they are "
                       "counted: send again in a moment";
}

// At most one line per queue every few seconds, with the count since the last one.
void log_drop(queue& q, const address_settings& s, const std::string& what) {
  std::uint64_t held_back = 0;
  if (!q.room.drop_log.due(held_back)) return;
  std::string limits;
  if (s.max_size_messages >= 0) limits += fmt::format("max-size-messages {}, ", s.max_size_messages);
  if (s.max_size_bytes >= 0) limits += fmt::format("max-size-bytes {}, ", s.max_size_bytes);
  if (s.ring_size >= 0) limits += fmt::format("ring-size {}, ", s.ring_size);
  spdlog::warn("{} is full: {} ({} drop(s) since the last such line; {}{})", describe(q), what, held_back + 1, limits,
               policy_of(s));
}

// The messages and stored bytes `work` sends to each queue that exists (and is not being ended).
std::vector<room_held> needs_of(const topology_part& t, const rm::branch_work& work) {
  std::vector<room_held> out;
  for (const auto& send : work.sends) {
    if (send.msg->record.deliver_at != 0) continue;  // counts once due (docs/configuration.md)
    const std::int64_t size = size_of(*send.msg);
    for (const auto& target : send.targets) {
      auto q = t.queues_by_id.find(target.key.queue_id);
      if (q == t.queues_by_id.end() || q->second->dropping) continue;
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const room_held& h) { return h.queue_id == target.key.queue_id; });
      if (it == out.end()) it = out.insert(out.end(), room_held{target.key.queue_id, 0, 0});
      ++it->messages;
      it->bytes += size;
    }
  }
  return out;
}

// An address setting names a queue ("DLQ"), or a destination ("/queue/DLQ", "/topic/audit").
std::string destination_of(const std::string& address) {
  if (address.rfind("/queue/", 0) == 0 || address.rfind("/topic/", 0) == 0) return address;
  return "/queue/" + address;
}

}  // namespace

// --- Room: what is reserved and what is being dropped --------------------------------------------

void broker::impl::reserve_room(queue& q, std::int64_t messages, std::int64_t bytes) {
  q.room.reserved += messages;
  q.room.reserved_bytes += bytes;
}

void broker::impl::reserve_room(const std::vector<room_held>& held, int sign) {
  for (const auto& h : held)
    if (queue_ptr q = find_by_id(h.queue_id)) reserve_room(*q, sign * h.messages, sign * h.bytes);
}

storage::status broker::impl::count_limited_queues() {
  std::size_t queues = 0;
  std::int64_t messages = 0;
  for (auto& [id, q] : topology.queues_by_id) {
    if (!settings_for(q->address()).limited()) continue;
    std::int64_t n = 0, bytes = 0;
    std::vector<std::uint64_t> shared;  // messages stored once for several entries (a topic's)
    const std::string prefix = storage::queue_prefix(q->id());
    storage::status s = store.scan(storage::table::entries, prefix, prefix, [&](std::string_view k, std::string_view v) {
      storage::entry_key key;
      if (!storage::entry_key::decode(k, key)) return true;
      ++n;
      if (v.size() > 4) bytes += static_cast<std::int64_t>(v.size() - 4);  // the message, inline
      else shared.push_back(key.message_id);
      return true;
    });
    if (!s.ok()) return s;
    std::string record;
    for (std::uint64_t m : shared)
      if (store.get(storage::table::messages, storage::message_key(m), record).ok())
        bytes += static_cast<std::int64_t>(record.size());
    q->counters.depth = n;
    q->counters.bytes = bytes;
    q->room.counted = true;
    ++queues;
    messages += n;
  }
  if (queues > 0)
    spdlog::info("counted the {} stored messages of the {} queues with limits (address settings)", messages, queues);
  return {};
}

void broker::impl::hold_prepared_room(const rm::branch& b) {
  if (b.state != rm::branch_state::prepared) return;
  std::vector<room_held> need = needs_of(topology, b.work);
  reserve_room(need, 1);
  limits.prepared[&b] = std::move(need);
}

// --- SEND outside a transaction --------------------------------------------------------------------

// The settings of a routed SEND's queues: one address for all of them (a queue's name, or the
// topic every subscription takes its settings from), the destination without its prefix.
const address_settings& broker::impl::settings_of(const routed_message& routed) {
  return settings_for(routed.msg->record.destination.substr(std::string_view("/queue/").size()));
}

broker::impl::admission broker::impl::admit_send(const connection_ptr& c, const frame& f, routed_message& routed,
                                                 std::uint32_t& wait_on) {
  const address_settings& s = settings_of(routed);
  if (!s.limited() || routed.entries.empty()) return admission::admitted;  // most SENDs
  // A scheduled message counts from when it is due, when it joins its queue as a move does.
  if (routed.msg->record.deliver_at != 0) return admission::admitted;
  const std::int64_t size = size_of(*routed.msg);
  // FAIL and BLOCK first: a SEND refused or waiting changes nothing anywhere.
  for (auto& [q, e] : routed.entries) {
    const bool blocks = s.address_full_policy == full_policy::block;
    if (!q->room.counted) {
      if (blocks) return wait_on = q->id(), admission::parked;
      error(*c, uncounted_text(*q), &f);
      return admission::refused;
    }
    if (!has_max_size(s) || (s.address_full_policy != full_policy::fail && !blocks)) continue;
    // One that can never fit is refused under BLOCK too: it would wait for ever.
    if (std::string why = never_fits(s, 1, size); !why.empty()) {
      error(*c, describe(*q) + " cannot take this message: " + why + " (" + policy_of(s) +
                    "); send a smaller message or raise the limit", &f);
      return admission::refused;
    }
    // Others wait already: this one waits behind them (first come, first served), unless it is the
    // one being taken up.
    if (blocks && !q->room.blocked.empty() && limits.resuming != q->id()) return wait_on = q->id(), admission::parked;
    std::string why = over_limit(*q, s, 1 - ring_frees(*q, s), size);
    if (why.empty()) continue;
    if (blocks) return wait_on = q->id(), admission::parked;
    error(*c, full_text(*q, s, why), &f);
    return admission::refused;
  }
  // DROP: a full queue does not get the message; the others do, and the RECEIPT comes.
  if (!has_max_size(s)) return admission::admitted;
  std::erase_if(routed.entries, [&](const auto& entry) {
    queue& q = *entry.first;
    bool dropped = false;
    if (s.address_full_policy == full_policy::drop) dropped = !over_limit(q, s, 1 - ring_frees(q, s), size).empty();
    if (s.address_full_policy == full_policy::drop_head) dropped = !never_fits(s, 1, size).empty();
    if (!dropped) return false;
    ++q.room.dropped_full;
    log_drop(q, s, "a new message was dropped");
    return true;
  });
  return admission::admitted;
}

void broker::impl::make_room_for_send(routed_message& routed, storage::batch& b, room_plan& drops) {
  const address_settings& s = settings_of(routed);
  if (s.ring_size < 0 && !drops_head(s)) return;
  if (routed.msg->record.deliver_at != 0) return;  // nothing makes room for it before it is due
  const std::int64_t size = size_of(*routed.msg);
  for (auto& [q, e] : routed.entries) drop_oldest(q, s, 1, size, false, b, drops);
}

void broker::impl::drop_oldest(const queue_ptr& q, const address_settings& s, std::int64_t messages,
                               std::int64_t bytes, bool reserved, storage::batch& b, room_plan& drops) {
  // `reserved`: the incoming messages hold their room already (a commit's); else they come on top.
  const std::int64_t add = reserved ? 0 : messages, add_bytes = reserved ? 0 : bytes;
  auto over_ring = [&] { return s.ring_size >= 0 && held_messages(*q) + add > s.ring_size; };
  auto over_max = [&] { return drops_head(s) && !over_limit(*q, s, add, add_bytes).empty(); };
  // A queue over its limits before these messages came (a limit lowered by a reload) loses one
  // message per new one, never more: a lower limit deletes nothing by itself.
  const std::int64_t before = held_messages(*q) - (reserved ? messages : 0);
  const std::int64_t before_bytes = held_bytes(*q) - (reserved ? bytes : 0);
  const bool over_before = (s.ring_size >= 0 && before > s.ring_size) ||
                           (drops_head(s) && ((s.max_size_messages >= 0 && before > s.max_size_messages) ||
                                              (s.max_size_bytes >= 0 && before_bytes > s.max_size_bytes)));
  std::int64_t allowed = over_before ? messages : INT64_MAX;
  while ((over_ring() || over_max()) && allowed-- > 0) {
    const bool by_ring = over_ring();
    std::optional<queue_entry> e;
    // One whose message cannot be read stays held and is never served (as dispatch leaves it).
    while ((e = q->pop()) && !load_message(*e)) {
    }
    // None ready: every message is in flight (or held by a transaction, or waiting out a
    // redelivery delay) and none is taken from its consumer; the queue holds more until they go.
    if (!e) break;
    const std::int64_t size = static_cast<std::int64_t>(stored_size(*e));
    q->room.dropping += 1;
    q->room.dropping_bytes += size;
    std::vector<queue_ptr> targets;
    std::string destination;
    if (s.dead_letter_on_drop && !s.dead_letter_address.empty()) {
      destination = destination_of(s.dead_letter_address);
      if (!resolve_destination(destination, b, targets))
        spdlog::error("address settings of '{}': dead-letter-address '{}' is not a valid destination", q->address(),
                      s.dead_letter_address);
      std::erase(targets, q);  // never into itself
    }
    if (targets.empty()) {
      if (e->stored) storage::erase_entry(b, e->key);
      drops.drops.push_back(move_plan{move_reason::address_full, false, q, std::move(*e), {}});
    } else {
      plan_copy(q, std::move(*e), move_reason::address_full, targets, destination, b, drops.drops, false);
    }
    drops.by_ring.push_back(by_ring);
  }
}

void broker::impl::finish_room_plan(room_plan& drops, bool stored) {
  std::vector<queue_ptr> touched;
  for (std::size_t i = 0; i < drops.drops.size(); ++i) {
    move_plan& p = drops.drops[i];
    queue& q = *p.from;
    const std::int64_t size = static_cast<std::int64_t>(stored_size(p.old));
    q.room.dropping -= 1;
    q.room.dropping_bytes -= size;
    q.release_hold(p.old.key);
    if (stored) {
      q.counters.left(static_cast<std::uint64_t>(size));
      ++(drops.by_ring[i] ? q.room.dropped_ring : q.room.dropped_head);
      std::string what = fmt::format("its oldest message {} was {} ({})", p.old.key.message_id,
                                     p.to.empty() ? std::string("deleted")
                                                  : "moved to " + p.to.front().second.msg->record.destination,
                                     drops.by_ring[i] ? "ring-size" : "DROP-HEAD");
      log_drop(q, settings_for(q.address()), what);
      if (!p.to.empty()) publish(p.to);
      continue;
    }
    // The store refused: it stays where it was, as it still is in storage.
    for (auto& [t, e] : p.to)
      if (e.stored) t->release_hold(e.key);
    q.push(std::move(p.old));
    touched.push_back(p.from);
  }
  drops.drops.clear();
  drops.by_ring.clear();
  for (auto& q : touched) dispatch(q);
}

// --- SEND inside a transaction, and its commit -----------------------------------------------------

bool broker::impl::admit_staged(const rm::branch& b, routed_message& routed, std::string& refusal) {
  const address_settings& s = settings_of(routed);
  if (!has_max_size(s) || (s.address_full_policy != full_policy::fail && s.address_full_policy != full_policy::drop))
    return true;
  if (routed.msg->record.deliver_at != 0) return true;  // counts once due
  const std::int64_t size = size_of(*routed.msg);
  // What the transaction already sends to q (it counts towards q's limit once committed).
  auto staged_in = [&b](std::uint32_t queue_id) {
    room_held h{queue_id, 0, 0};
    for (const auto& send : b.work.sends)
      for (const auto& t : send.targets)
        if (send.msg->record.deliver_at == 0 && t.key.queue_id == queue_id) {
          ++h.messages;
          h.bytes += size_of(*send.msg);
        }
    return h;
  };
  for (auto& [q, e] : routed.entries) {
    // BLOCK does not wait inside a transaction (the check at commit answers as FAIL); DROP-HEAD and
    // the ring make room at commit; an uncounted queue is checked at commit.
    if (!has_max_size(s) || s.address_full_policy != full_policy::fail || !q->room.counted) continue;
    room_held h = staged_in(q->id());
    std::string why = over_limit(*q, s, h.messages + 1, h.bytes + size);
    if (why.empty()) continue;
    std::string with = h.messages > 0 ? fmt::format(" with the {} message(s) this transaction sends to it", h.messages) : "";
    refusal = describe(*q) + " is full: " + why + with + " (" + policy_of(s) + ")";
    return false;
  }
  std::erase_if(routed.entries, [&](const auto& entry) {
    queue& q = *entry.first;
    if (s.address_full_policy != full_policy::drop || !q.room.counted) return false;
    room_held h = staged_in(q.id());
    if (over_limit(q, s, h.messages + 1, h.bytes + size).empty()) return false;
    ++q.room.dropped_full;
    log_drop(q, s, "a new message sent in a transaction was dropped");
    return true;
  });
  return true;
}

void broker::impl::refuse_in_transaction(const connection_ptr& c, const frame& f, rm::branch& b,
                                         storage::batch records, const std::string& refusal) {
  transactions.rm.mark_rollback_only(b);
  b.refusal = refusal + ": the transaction is rollback-only; nothing of it takes effect";
  spdlog::info("connection {}: transaction {}: {}", c->id, b.id.to_string(), b.refusal);
  // New queues' records: nothing waits for them (the next write carries them again if refused).
  if (!records.empty())
    submit(std::move(records), [](const storage::status& s) {
      if (!s.ok()) spdlog::warn("a new queue's record was not stored: {}", s.message());
    });
  // The SEND itself is answered (an ERROR would close the connection, and the transaction with
  // it); the RECEIPT says why, and the transaction's end, prepare or commit is refused.
  if (const std::string* id = f.find("receipt"))
    write(*c, frame{"RECEIPT", {{"receipt-id", *id}, {"message", b.refusal}}, {}});
}

bool broker::impl::gate_limits(rm::resource_manager::reply& r, std::function<void(int)>& done) {
  using rm::action;
  if (!r.target) return true;
  const bool prepares = r.act == action::prepare;
  const bool one_phase = r.act == action::commit_one_phase;
  const bool commits_prepared = r.had_record && (r.act == action::commit_prepared || r.act == action::heuristic_commit);
  const bool rolls_back_prepared = r.had_record && (r.act == action::roll_back || r.act == action::heuristic_rollback);
  if (!prepares && !one_phase && !commits_prepared && !rolls_back_prepared) return true;
  const rm::branch* key = r.target.get();

  std::vector<room_held> need;
  if (commits_prepared || rolls_back_prepared) {
    // What it reserved at prepare (or at open, for a branch prepared before the restart).
    if (auto it = limits.prepared.find(key); it != limits.prepared.end()) {
      need = std::move(it->second);
      limits.prepared.erase(it);
    }
  } else {
    rm::branch_work& work = prepares ? r.target->work : r.work;
    need = needs_of(topology, work);
    // FAIL and BLOCK: refused as a whole when it does not fit beside what is there and what other
    // transactions hold (BLOCK too: a commit cannot wait for consumers that may be in this same
    // transaction, or behind it on its connection).
    for (const auto& n : need) {
      queue_ptr q = find_by_id(n.queue_id);
      const address_settings& s = settings_for(q->address());
      if (!s.limited()) continue;
      std::string problem;
      if (!q->room.counted) {
        problem = uncounted_text(*q);
      } else if (has_max_size(s) &&
                 (s.address_full_policy == full_policy::fail || s.address_full_policy == full_policy::block)) {
        std::string why = over_limit(*q, s, n.messages, n.bytes);
        if (!why.empty())
          problem = describe(*q) + " is full: " + why +
                    fmt::format(" for the {} message(s) the transaction sends to it", n.messages) + " (" +
                    policy_of(s) +
                    (s.address_full_policy == full_policy::block ? ", which a transaction's commit does not wait for"
                                                                 : "") +
                    ")";
      }
      if (problem.empty()) continue;
      // Refused as a whole: the branch is as before the call (its work given back), then rolled back.
      rm::branch_ptr b = r.target;
      b->refusal = problem + ": rolled back; nothing of the transaction took effect";
      spdlog::info("transaction {}: {}", b->id.to_string(), b->refusal);
      (void)transactions.rm.finish(r, storage::status{storage::status::code::failed, b->refusal});
      carry_out(transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, rm::caller{b->owner}),
                [done = std::move(done)](int) { done(XA_RBOTHER); });
      return false;
    }
    // DROP: a full queue takes what fits of the transaction's messages, in the order they were
    // sent; the rest is dropped for it (counted), and the write is made again without them.
    bool dropped = false;
    std::vector<room_held> taken;
    std::vector<rm::staged_send> before_drops = work.sends;  // put back if the write fails
    for (auto& send : work.sends) {
      const std::int64_t size = size_of(*send.msg);
      std::erase_if(send.targets, [&](const rm::send_target& t) {
        queue_ptr q = find_by_id(t.key.queue_id);
        if (!q || q->dropping) return false;
        const address_settings& s = settings_for(q->address());
        if (!has_max_size(s) || s.address_full_policy != full_policy::drop) return false;
        auto h = std::find_if(taken.begin(), taken.end(), [&](const room_held& x) { return x.queue_id == q->id(); });
        if (h == taken.end()) h = taken.insert(taken.end(), room_held{q->id(), 0, 0});
        if (over_limit(*q, s, h->messages + 1, h->bytes + size).empty()) {
          ++h->messages;
          h->bytes += size;
          return false;
        }
        ++q->room.dropped_full;
        log_drop(*q, s, "a new message of a committing transaction was dropped");
        dropped = true;
        return true;
      });
    }
    if (dropped) {
      transactions.rm.rewrite(r);
      need = needs_of(topology, work);
      // A refused write changes nothing: the branch keeps every message it sent, for a retry.
      done = [branch = r.target, before = std::move(before_drops), done = std::move(done)](int code) mutable {
        if (code == XAER_RMFAIL && branch) branch->work.sends = std::move(before);
        done(code);
      };
    }
    reserve_room(need, 1);
  }

  if (rolls_back_prepared) {
    done = [this, key, need = std::move(need), done = std::move(done)](int code) {
      if (code == XAER_RMFAIL) limits.prepared[key] = need;  // refused: still prepared, still holding
      else reserve_room(need, -1);
      done(code);
    };
    return true;
  }

  if (one_phase || commits_prepared) {
    // What a commit removes counts in its queues' bytes: messages a recovered branch consumed are
    // read now, while still stored.
    for (auto& consumed : r.work.consumed)
      if (consumed.stored && !consumed.negative && !consumed.msg) {
        queue_entry e{consumed.key, 0, true, nullptr};
        if (load_message(e)) consumed.msg = e.msg;
      }
  }
  // DROP-HEAD and ring-size: the oldest ready messages go in the commit's own batch.
  auto drops = std::make_shared<room_plan>();
  if (one_phase || commits_prepared)
    for (const auto& n : need)
      if (queue_ptr q = find_by_id(n.queue_id)) {
        const address_settings& s = settings_for(q->address());
        if (s.ring_size < 0 && !drops_head(s)) continue;
        // Messages that replace one of their key in a last-value queue (gate_last_values, next)
        // take its place: room is made only for the others.
        const std::int64_t replacing = last_values_replacing(q, r.work);
        q->room.dropping += replacing;
        drop_oldest(q, s, n.messages, n.bytes, true, r.write, *drops);
        q->room.dropping -= replacing;
      }
  done = [this, key, prepares, one_phase, need = std::move(need), drops, done = std::move(done)](int code) {
    if (prepares) {
      if (code == XA_OK) limits.prepared[key] = need;  // held until the branch is decided
      else reserve_room(need, -1);
    } else if (one_phase) {
      reserve_room(need, -1);  // the committed messages are in their queues' depth now
      finish_room_plan(*drops, code == XA_OK);
    } else {
      bool stored = code != XAER_RMFAIL;
      if (stored) reserve_room(need, -1);
      else limits.prepared[key] = need;  // refused: still prepared, still holding
      finish_room_plan(*drops, stored);
    }
    done(code);
  };
  return true;
}

// --- BLOCK: SENDs waiting for room -------------------------------------------------------------------

std::string broker::impl::waits_for_itself(const connection& c, std::uint32_t queue_id) const {
  std::size_t held = 0;
  for (const auto& [id, s] : c.subscriptions)
    if (s->source && s->source->id() == queue_id) held += s->unacked.size();
  for (const auto& [name, b] : c.transactions)
    for (const auto& consumed : b->work.consumed) held += consumed.key.queue_id == queue_id;
  for (const auto& weak : c.started_branches)
    if (auto b = weak.lock())
      for (const auto& consumed : b->work.consumed) held += consumed.key.queue_id == queue_id;
  if (held == 0) return {};
  queue_ptr q = find_by_id(queue_id);
  return (q ? describe(*q) : std::string("the queue")) + " is full (address-full-policy BLOCK) and this connection holds " +
         std::to_string(held) +
         " of its messages unacknowledged or in a transaction: the SEND would wait for room only this "
         "connection's ACK or COMMIT, which would wait behind it, can make. Acknowledge or commit first, or "
         "send on another connection";
}

void broker::impl::park(const connection_ptr& c, std::uint32_t queue_id, std::int64_t bytes, std::uint64_t held,
                        std::function<void()> resume) {
  auto p = std::make_unique<parked_send>();
  p->queue_id = queue_id;
  p->bytes = bytes;
  p->resume = std::move(resume);
  p->held_bytes = held;
  c->parked = std::move(p);
  // What waits counts as frames not yet handled, so that back-pressure sees it, and the session
  // stops reading the connection.
  inbound_bytes.fetch_add(held, std::memory_order_relaxed);
  unstored.add(c->id, held);
  unstored.set_blocked(c->id, true);
  if (queue_ptr q = find_by_id(queue_id)) {
    // One taken up again and still not fitting keeps its place at the head of the line.
    if (limits.resuming == queue_id) q->room.blocked.push_front(c->id);
    else q->room.blocked.push_back(c->id);
    if (limits.resuming != queue_id)
      spdlog::debug("connection {}: a SEND waits for room in {} (address-full-policy BLOCK)", c->id, describe(*q));
  }
  if (std::find(limits.waited_on.begin(), limits.waited_on.end(), queue_id) == limits.waited_on.end())
    limits.waited_on.push_back(queue_id);
}

void broker::impl::park_behind(connection& c, frame f) {
  std::uint64_t bytes = f.body.size() + 64;  // as on_frames counts a frame
  c.parked->behind.push_back(std::move(f));
  c.parked->held_bytes += bytes;
  inbound_bytes.fetch_add(bytes, std::memory_order_relaxed);
  unstored.add(c.id, bytes);
}

void broker::impl::forget_parked(connection& c) {
  if (!c.parked) return;
  inbound_bytes.fetch_sub(c.parked->held_bytes, std::memory_order_relaxed);
  unstored.remove(c.id, c.parked->held_bytes);
  unstored.set_blocked(c.id, false);
  if (queue_ptr q = find_by_id(c.parked->queue_id)) std::erase(q->room.blocked, c.id);
  c.parked.reset();  // its SEND (and the connection its resume holds) goes
}

void broker::impl::resume_parked(const connection_ptr& c) {
  std::unique_ptr<parked_send> p = std::move(c->parked);
  inbound_bytes.fetch_sub(p->held_bytes, std::memory_order_relaxed);
  unstored.remove(c->id, p->held_bytes);
  unstored.set_blocked(c->id, false);
  if (c->input_closed) return;
  limits.resuming = p->queue_id;
  p->resume();  // may wait again (then c->parked is set again)
  limits.resuming.reset();
  for (auto& f : p->behind) {
    if (c->input_closed) break;
    if (c->parked) {
      park_behind(*c, std::move(f));
      continue;
    }
    handle_frame(c, f);
  }
}

void broker::impl::wake_blocked() {
  limits.waking = true;
  const std::vector<std::uint32_t> ids = limits.waited_on;
  for (std::uint32_t id : ids) {
    queue_ptr q = find_by_id(id);
    for (;;) {
      connection_ptr c;
      if (q && !q->dropping) {
        if (q->room.blocked.empty()) break;
        auto it = clients.connections.find(q->room.blocked.front());
        if (it == clients.connections.end() || !it->second->parked || it->second->parked->queue_id != id) {
          q->room.blocked.pop_front();  // gone, or waiting elsewhere now
          continue;
        }
        c = it->second;
        // It waits while its queue is full under BLOCK; a limit raised or a policy changed by a
        // reload lets it go on to meet what is in force.
        const address_settings& s = settings_for(q->address());
        if (s.limited() && s.address_full_policy == full_policy::block) {
          if (!q->room.counted) break;
          if (has_max_size(s) && !over_limit(*q, s, 1 - ring_frees(*q, s), c->parked->bytes).empty()) break;
        }
        q->room.blocked.pop_front();
      } else {
        // Its queue went away (a durable subscription ended): what waited for it goes on.
        for (auto& [cid, other] : clients.connections)
          if (other->parked && other->parked->queue_id == id) {
            c = other;
            break;
          }
        if (!c) break;
      }
      resume_parked(c);
      if (c->parked && c->parked->queue_id == id) break;  // it waits here again: nothing more fits
    }
  }
  std::erase_if(limits.waited_on, [this](std::uint32_t id) {
    queue_ptr q = find_by_id(id);
    if (q && !q->dropping) return q->room.blocked.empty();
    return std::none_of(clients.connections.begin(), clients.connections.end(), [id](const auto& c) {
      return c.second->parked && c.second->parked->queue_id == id;
    });
  });
  limits.waking = false;
}

// --- Metrics ----------------------------------------------------------------------------------------

void broker::impl::collect_drops(metrics_snapshot& s) const {
  for (const auto& [id, q] : topology.queues_by_id) {
    const queue_room& r = q->room;
    for (auto [reason, n] : {std::pair<const char*, std::uint64_t>{"address-full", r.dropped_full},
                             {"drop-head", r.dropped_head},
                             {"ring", r.dropped_ring}})
      if (n > 0) s.dropped.push_back(dropped_series{q->name(), queue::kind_name(q->type()), reason, n});
  }
  // Bounded like the per-queue series (http.max-queue-metrics): the largest counts.
  if (s.dropped.size() > config.max_queue_metrics) {
    std::sort(s.dropped.begin(), s.dropped.end(),
              [](const dropped_series& a, const dropped_series& b) { return a.count > b.count; });
    s.dropped.resize(config.max_queue_metrics);
  }
  std::sort(s.dropped.begin(), s.dropped.end(), [](const dropped_series& a, const dropped_series& b) {
    return std::tie(a.queue, a.reason) < std::tie(b.queue, b.reason);
  });
}

}  // namespace escrow::broker
