// Last-value queues (address setting last-value-key, or last-value = true for _AMQ_LVQ_NAME;
// docs/configuration.md, "Last-value queues", and docs/stomp.md): a new message whose key value a
// ready message of the queue has replaces that message, in the batch that stores the new one, so
// that the replacement is atomic and survives a crash with the message (no table of its own: the
// index in memory is rebuilt from the queue's messages). A message handed to a consumer, in a
// transaction or waiting out a redelivery delay is not taken from it: the new one queues behind.
// Writes of one key under way at once chain (last_values_part.h): each removes, in its own batch,
// every entry the writes before it remove and those writes' entries, and an entry is not offered
// until the outcome of every write removing it is known.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core.h"
#include "escrow/broker/core/stored_entries.h"
#include "escrow/storage/schema.h"
#include "escrow/xa.h"

namespace escrow::broker {
namespace {

// A message's key in a queue keyed on `key`: its header of that name, else its _AMQ_LVQ_NAME
// (Artemis reads both). Scheduled messages take no part (they are not ready before their time).
const std::string* key_value(const storage::message_record& r, const std::string& key) {
  if (r.deliver_at != 0) return nullptr;
  if (const std::string* v = r.find_header(key)) return v;
  return key == kLastValueHeader ? nullptr : r.find_header(kLastValueHeader);
}

constexpr std::size_t kIndexPage = 1024;

// A member leaves the chain: its queue's limits count it again, or not at all once it is gone.
void uncount_dropping(queue& q, last_value_member& m) {
  if (m.dropping_bytes < 0) return;
  q.room.dropping -= 1;
  q.room.dropping_bytes -= m.dropping_bytes;
  m.dropping_bytes = -1;
}

}  // namespace

const std::string* broker::impl::last_value_of(const queue_ptr& q, const message& m) {
  const std::string& key = settings_for(q->address()).last_value_key;
  // A new key takes effect once no write of the old one is under way.
  if (key != q->last_values.key && q->last_values.chains.empty()) index_last_values(*q, key);
  if (!q->last_values.active()) return nullptr;
  return key_value(m.record, q->last_values.key);
}

void broker::impl::index_last_values(queue& q, const std::string& key) {
  last_value_index& idx = q.last_values;
  idx = last_value_index{};
  idx.key = key;
  if (key.empty()) return;
  // Newest by message id (arrival), whatever the priority. Stored ones page by page, then those
  // kept only in memory.
  auto note = [&idx, &key](const storage::entry_key& k, const storage::message_record& r) {
    const std::string* v = key_value(r, key);
    if (!v) return;
    auto [it, inserted] = idx.newest.emplace(*v, k);
    if (!inserted && it->second.message_id < k.message_id) it->second = k;
  };
  std::size_t read = 0;
  if (q.durable()) {
    std::optional<storage::entry_key> after;
    for (;;) {
      std::vector<stored_entry> page;
      storage::status s = read_stored_entries(store, q.id(), kIndexPage, true, page, after);
      if (!s.ok()) {
        spdlog::error("{} '{}': its messages could not be read for its last values ({}); those already stored are "
                      "not replaced",
                      queue::kind_name(q.type()), q.name(), s.message());
        break;
      }
      for (const auto& e : page)
        if (e.readable) note(e.key, e.record);
      read += page.size();
      if (page.size() < kIndexPage) break;
      after = page.back().key;
    }
  }
  q.for_each_unstored_ready([&](const queue_entry& e) {
    if (e.msg) note(e.key, e.msg->record);
  });
  spdlog::debug("{} '{}': last values keyed on '{}' indexed: {} value(s) over {} stored message(s)",
                queue::kind_name(q.type()), q.name(), key, idx.newest.size(), read);
}

void broker::impl::plan_last_value(const queue_ptr& q, const queue_entry& e, storage::batch& b,
                                   last_value_plan& plan) {
  if (!e.msg) return;
  const std::string* found = last_value_of(q, *e.msg);
  if (!found) return;
  const std::string value = *found;
  last_value_index& idx = q->last_values;
  auto& chain = idx.chains[value];
  // The value's newest, when it is ready (in memory or only in storage), joins the chain. A held
  // one (in flight, in a transaction, being moved) stays with whoever holds it: the new one
  // comes after it.
  std::optional<storage::entry_key> previous;
  if (auto it = idx.newest.find(value); it != idx.newest.end()) {
    previous = it->second;
    const storage::entry_key old = it->second;
    if (!chain.count(old) && !q->is_held(old) && q->has(old))
      if (std::optional<queue_entry> taken = q->take(old)) {
        // (One whose message cannot be read stays held, as dispatch leaves it: docs/storage.md.)
        if (load_message(*taken)) {
          last_value_member m;
          m.now = last_value_member::state::taken;
          m.serial = idx.next_serial++;
          m.entry = std::move(*taken);
          chain.emplace(old, std::move(m));
          idx.value_of.emplace(old, value);
        }
      }
  }
  // This write removes every member: what a refused write before it would have removed, too.
  last_value_plan::write w{q, value, e.key, idx.next_serial++, previous, {}};
  for (auto& [key, m] : chain) {
    ++m.removers;
    w.removes.emplace_back(key, m.serial);
    if (m.dropping_bytes < 0) {
      m.dropping_bytes = static_cast<std::int64_t>(stored_size(m.entry));
      q->room.dropping += 1;
      q->room.dropping_bytes += m.dropping_bytes;
    }
    if (m.entry.stored) {
      storage::erase_entry(b, key);
      plan.removes_stored = true;
    }
  }
  if (!w.removes.empty()) plan.replacing_in.push_back(q->id());
  last_value_member self;
  self.serial = w.serial;
  self.entry = queue_entry{e.key, 0, e.stored, e.msg};
  chain.insert_or_assign(e.key, std::move(self));
  idx.value_of.emplace(e.key, value);
  idx.newest[value] = e.key;
  plan.writes.push_back(std::move(w));
  prune_last_values(*q);
}

void broker::impl::plan_last_values(std::vector<std::pair<queue_ptr, queue_entry>>& entries, storage::batch& b,
                                    last_value_plan& plan) {
  for (auto& [q, e] : entries) plan_last_value(q, e, b, plan);
}

bool broker::impl::hold_back_superseded(const queue_ptr& q, const queue_entry& e) {
  last_value_index& idx = q->last_values;
  auto v = idx.value_of.find(e.key);
  if (v == idx.value_of.end()) return false;
  auto& chain = idx.chains[v->second];
  auto it = chain.find(e.key);
  if (it == chain.end() || it->second.now != last_value_member::state::writing) return false;
  last_value_member& m = it->second;
  if (m.removed) {
    // A write that removes it was done before its own (one kept in memory only): it never shows.
    uncount_dropping(*q, m);
    ++q->counters.replaced;
  } else if (m.removers > 0) {
    m.now = last_value_member::state::arrived;
    m.entry = e;
    if (e.stored) q->hold(e.key);  // still stored until a later write is
    q->counters.added(stored_size(e));
    return true;
  } else {
    uncount_dropping(*q, m);
    idx.newest[v->second] = e.key;  // it settles: offered by the caller
  }
  const bool dropped = m.removed;
  const std::string value = v->second;
  chain.erase(it);
  idx.value_of.erase(v);
  if (chain.empty()) idx.chains.erase(value);
  return dropped;
}

void broker::impl::settle_member(const queue_ptr& q, const std::string& value, storage::entry_key key,
                                 std::uint64_t serial, std::vector<queue_ptr>& touched) {
  last_value_index& idx = q->last_values;
  auto c = idx.chains.find(value);
  if (c == idx.chains.end()) return;
  auto it = c->second.find(key);
  if (it == c->second.end() || it->second.serial != serial) return;
  last_value_member& m = it->second;
  if (m.now == last_value_member::state::writing) return;  // its own write decides first
  if (!m.removed && m.removers > 0) return;                 // writes that remove it are under way
  uncount_dropping(*q, m);
  if (m.entry.stored) q->release_hold(key);
  if (m.removed) {
    q->counters.removed(q->counters.replaced, stored_size(m.entry));
  } else {
    // Every write that removed it was refused: it is its value's newest again, offered as before.
    idx.newest[value] = key;
    q->push(std::move(m.entry));
    touched.push_back(q);
  }
  c->second.erase(it);
  idx.value_of.erase(key);
  if (c->second.empty()) idx.chains.erase(c);
}

void broker::impl::finish_last_values(last_value_plan& plan, bool stored) {
  std::vector<queue_ptr> touched;
  for (const auto& w : plan.writes) {
    last_value_index& idx = w.q->last_values;
    auto c = idx.chains.find(w.value);
    if (c == idx.chains.end()) continue;
    // Its own entry: refused, it never was; stored and not published (its queue went away), it
    // is not this index's any more. (Published, it has left the chain or is held back in it.)
    if (auto self = c->second.find(w.key); self != c->second.end() && self->second.serial == w.serial &&
                                           self->second.now == last_value_member::state::writing) {
      uncount_dropping(*w.q, self->second);
      c->second.erase(self);
      idx.value_of.erase(w.key);
    }
    for (const auto& [key, serial] : w.removes) {
      auto it = c->second.find(key);
      if (it == c->second.end() || it->second.serial != serial) continue;
      --it->second.removers;
      if (stored) it->second.removed = true;
    }
    for (const auto& [key, serial] : w.removes) settle_member(w.q, w.value, key, serial, touched);
    if (auto again = idx.chains.find(w.value); again != idx.chains.end() && again->second.empty())
      idx.chains.erase(again);
    // Refused: the value's newest is what it was before, unless a member given back took its place.
    if (!stored)
      if (auto n = idx.newest.find(w.value); n != idx.newest.end() && n->second == w.key) {
        if (w.previous) n->second = *w.previous;
        else idx.newest.erase(n);
      }
  }
  plan = last_value_plan{};
  for (auto& q : touched) dispatch(q);
}

void broker::impl::prune_last_values(queue& q) {
  // Values whose newest message is gone stay until the index is twice what the queue holds; then
  // they go in one pass, so memory stays proportional to the queue's depth.
  last_value_index& idx = q.last_values;
  const std::size_t depth = q.counters.depth > 0 ? static_cast<std::size_t>(q.counters.depth) : 0;
  if (idx.newest.size() <= 2 * depth + 1024) return;
  std::erase_if(idx.newest, [&](const auto& v) { return !idx.chains.count(v.first) && !q.has(v.second); });
}

std::int64_t broker::impl::last_values_replacing(const queue_ptr& q, const rm::branch_work& work) {
  std::int64_t n = 0;
  std::vector<std::string> seen;  // values of this transaction's earlier messages
  for (const auto& s : work.sends)
    for (const auto& t : s.targets) {
      if (t.key.queue_id != q->id() || !s.msg) continue;
      const std::string* v = last_value_of(q, *s.msg);
      if (!v) continue;
      const last_value_index& idx = q->last_values;
      bool frees = std::find(seen.begin(), seen.end(), *v) != seen.end();
      if (auto c = idx.chains.find(*v); !frees && c != idx.chains.end()) frees = !c->second.empty();
      if (auto it = idx.newest.find(*v); !frees && it != idx.newest.end())
        frees = !q->is_held(it->second) && q->has(it->second);
      if (!frees) seen.push_back(*v);
      n += frees;
    }
  return n;
}

void broker::impl::gate_last_values(rm::resource_manager::reply& r, std::function<void(int)>& done) {
  using rm::action;
  if (!r.target || r.code != XA_OK) return;
  const bool one_phase = r.act == action::commit_one_phase;
  const bool commits_prepared = r.had_record && (r.act == action::commit_prepared || r.act == action::heuristic_commit);
  if (!one_phase && !commits_prepared) return;
  auto plan = std::make_shared<last_value_plan>();
  // In the order the transaction sent them: a later message of a key replaces an earlier one of
  // the same transaction in the commit's own batch.
  for (const auto& s : r.work.sends)
    for (const auto& t : s.targets)
      if (queue_ptr q = find_by_id(t.key.queue_id); q && !q->dropping)
        plan_last_value(q, queue_entry{t.key, 0, t.stored, s.msg}, r.write, *plan);
  if (plan->writes.empty()) return;
  done = [this, plan, one_phase, done = std::move(done)](int code) {
    finish_last_values(*plan, one_phase ? code == XA_OK : code != XAER_RMFAIL);
    done(code);
  };
}

}  // namespace escrow::broker
