// Carrying out the XA state machine's decisions (see resource_manager.h).
#include "escrow/rm/resource_manager.h"

#include <algorithm>
#include <set>

#include "escrow/rm/record.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "escrow/xa.h"

namespace escrow::rm {
namespace {

std::uint64_t wall_ms() {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

}  // namespace

resource_manager::resource_manager(std::chrono::milliseconds branch_timeout, std::chrono::milliseconds local_timeout)
    : timeout_(branch_timeout), local_timeout_(local_timeout) {}

storage::status resource_manager::load(const storage::store& store) {
  storage::status bad;
  storage::status s = store.scan(storage::table::branches, {}, {}, [&](std::string_view k, std::string_view v) {
    std::string owner;
    xid id;
    bool key_ok = decode_branch_key(k, owner, id);
    auto b = std::make_shared<branch>();
    if (!key_ok || !decode_record(v, *b)) {
      // A prepared branch is a promise to the transaction manager: never start without it.
      bad = storage::corrupt_record(storage::table::branches, k,
                                    !key_ok ? "the key is not a branch key (rm/record.h: [5 zero bytes, owner,] u32 "
                                              "formatID + 2^31, u8 gtrid length, gtrid, bqual)"
                                            : "the prepared branch record of xid " + id.to_string() + " does not decode");
      return false;
    }
    b->id = id;
    b->owner = owner;
    // What was not stored did not survive the restart: non-persistent messages, copies for
    // non-durable subscriptions (whose queue ids may since belong to another queue).
    for (auto& send : b->work.sends) std::erase_if(send.targets, [](const send_target& t) { return !t.stored; });
    std::erase_if(b->work.sends, [](const staged_send& send) { return send.targets.empty(); });
    std::erase_if(b->work.consumed, [](const consumed_entry& c) { return !c.stored; });
    if (!branches_.emplace(branch_id{owner, id}, b).second) {
      bad = storage::corrupt_record(storage::table::branches, k,
                                    "a second record of branch " + id.to_string() + " of user '" + owner + "'");
      return false;
    }
    tally(*b, 1);
    return true;
  });
  if (!s.ok()) return s;
  return bad;
}

std::uint64_t resource_manager::max_staged_message_id() const {
  std::uint64_t max_id = 0;
  for (const auto& [id, b] : branches_)
    for (const auto& s : b->work.sends) max_id = std::max(max_id, s.msg->id);
  return max_id;
}

association resource_manager::association_of(std::uint64_t connection, const branch& b) const {
  if (b.associated.count(connection)) return association::here;
  if (b.suspended.count(connection)) return association::suspended_here;
  return active_.count(connection) ? association::elsewhere : association::none;
}

void resource_manager::dissociate(std::uint64_t connection, branch& b) {
  b.associated.erase(connection);
  b.suspended.erase(connection);
  auto it = active_.find(connection);
  if (it != active_.end() && it->second == branch_id{b.owner, b.id}) active_.erase(it);
}

void resource_manager::remove(const branch_ptr& b) {
  for (auto c : std::vector<std::uint64_t>(b->associated.begin(), b->associated.end())) dissociate(c, *b);
  b->suspended.clear();
  auto it = branches_.find(branch_id{b->owner, b->id});
  if (it == branches_.end() || it->second != b) return;
  tally(*b, -1);
  branches_.erase(it);
}

void resource_manager::set_state(branch& b, branch_state s) {
  tally(b, -1);
  b.state = s;
  tally(b, 1);
}

void resource_manager::tally(const branch& b, int delta) {
  auto it = tallies_.try_emplace(b.owner).first;
  auto& n = it->second[static_cast<std::size_t>(b.state)];
  n = delta > 0 ? n + 1 : n - 1;
  if (delta < 0 && std::all_of(it->second.begin(), it->second.end(), [](std::size_t c) { return c == 0; }))
    tallies_.erase(it);
}

std::size_t resource_manager::preparing(const std::string& owner) const {
  auto it = preparing_.find(owner);
  return it == preparing_.end() ? 0 : it->second;
}

std::size_t resource_manager::count(const std::string& owner, std::initializer_list<branch_state> states) const {
  auto it = tallies_.find(owner);
  if (it == tallies_.end()) return 0;
  std::size_t n = 0;
  for (auto st : states) n += it->second[static_cast<std::size_t>(st)];
  return n;
}

storage::batch resource_manager::commit_batch(const branch& b, const branch_work& work, bool has_record,
                                              bool keep_record) const {
  storage::batch out;
  for (const auto& s : work.sends) {
    std::vector<storage::entry_key> stored;
    for (const auto& t : s.targets)
      if (t.stored && (!queue_exists_ || queue_exists_(t.key.queue_id))) stored.push_back(t.key);
    if (!stored.empty()) storage::put_message(out, s.msg->id, s.msg->record, stored);
  }
  for (const auto& c : work.consumed) {
    if (!c.stored) continue;
    if (c.negative) {
      out.set_delivery_count(c.key.encode(), c.delivery_count + 1);
    } else {
      storage::erase_entry(out, c.key);
    }
  }
  if (has_record) close_record(out, b, keep_record ? branch_state::heuristic_committed : branch_state::none);
  return out;
}

// A decided branch's record goes; after a heuristic decision it stays, with the outcome and no
// work (what it did is applied), until the manager forgets it.
void resource_manager::close_record(storage::batch& out, const branch& b, branch_state outcome) const {
  if (outcome == branch_state::none) return out.erase(storage::table::branches, branch_key(b.owner, b.id));
  branch record;
  record.state = outcome;
  record.created_ms = b.created_ms;
  out.put(storage::table::branches, branch_key(b.owner, b.id), encode_record(record));
}

storage::batch resource_manager::rollback_batch(const branch& b, bool has_record, bool keep_record) const {
  storage::batch out;
  for (const auto& c : b.work.consumed)
    if (c.stored) out.set_delivery_count(c.key.encode(), c.delivery_count + 1);
  if (has_record) close_record(out, b, keep_record ? branch_state::heuristic_rolled_back : branch_state::none);
  return out;
}

std::vector<branch_ptr> resource_manager::find_all(const xid& x) const {
  std::vector<branch_ptr> out;
  for (const auto& [id, b] : branches_)
    if (id.second == x) out.push_back(b);
  return out;
}

branch_ptr resource_manager::lookup(xa_verb verb, const xid& x, const caller& who, reply& r) const {
  bool decides = verb == xa_verb::commit || verb == xa_verb::rollback || verb == xa_verb::forget;
  if (who.owner && *who.owner != who.user) {
    // An operator names the owner: that user's branch alone, once the manager has decided it.
    if (!who.admin || !decides) return nullptr;
    auto named = branches_.find(branch_id{*who.owner, x});
    if (named == branches_.end()) return nullptr;
    const branch& b = *named->second;
    return b.state == branch_state::prepared || is_heuristic(b.state) ? named->second : nullptr;
  }
  auto it = branches_.find(branch_id{who.user, x});
  if (it != branches_.end()) return it->second;
  if (!who.admin || !decides) return nullptr;
  // Recovery under an operator's login: another user's branch, once the manager has decided it.
  std::vector<branch_ptr> decidable;
  for (auto& b : find_all(x))
    if (b->state == branch_state::prepared || is_heuristic(b->state)) decidable.push_back(b);
  if (decidable.size() <= 1) return decidable.empty() ? nullptr : decidable.front();
  r.code = XAER_RMERR;
  r.problem = "xid " + x.to_string() + " names prepared branches of " + std::to_string(decidable.size()) +
              " users; name the owner with the frame's user header (escrow xa list shows them), or decide "
              "each with escrow xa commit or rollback and its --owner";
  return nullptr;
}

resource_manager::reply resource_manager::call(xa_verb verb, std::uint64_t connection, const xid& x, long flags,
                                               const caller& who) {
  reply r;
  branch_ptr b = lookup(verb, x, who, r);
  if (r.code != 0) return r;
  if (b && b->busy) {
    r.code = XAER_PROTO;  // a prepare, commit or rollback of this branch is still being written
    return r;
  }
  decision d = decide(context_of(verb, flags, connection, b.get()));
  r.code = d.code;
  r.act = d.next;
  r.target = b;
  r.had_record = b && (b->state == branch_state::prepared || is_heuristic(b->state));
  apply_decision(r, connection, x, who);
  return r;
}

call_context resource_manager::context_of(xa_verb verb, long flags, std::uint64_t connection, const branch* b) const {
  call_context c{verb, flags, b ? b->state : branch_state::none, association::none};
  if (!b) {
    c.caller = active_.count(connection) ? association::elsewhere : association::none;
    return c;
  }
  c.caller = association_of(connection, *b);
  std::size_t others = b->associated.size() + b->suspended.size();
  if (c.caller == association::here || c.caller == association::suspended_here) --others;
  c.others_associated = others > 0;
  c.has_work = !b->work.empty();
  c.rolled_back_code = b->rolled_back_code;
  return c;
}

void resource_manager::apply_decision(reply& r, std::uint64_t connection, const xid& x, const caller& who) {
  branch_ptr b = r.target;
  bool has_record = r.had_record;
  switch (r.act) {
    case action::nothing: break;
    case action::create: {
      b = std::make_shared<branch>();
      b->id = x;
      b->owner = who.user;
      b->state = branch_state::active;
      b->associated.insert(connection);
      b->deadline = std::chrono::steady_clock::now() + timeout_;
      b->created_ms = wall_ms();
      branches_.emplace(branch_id{who.user, x}, b);
      tally(*b, 1);
      active_[connection] = branch_id{who.user, x};
      r.target = b;
      break;
    }
    case action::join:
      b->associated.insert(connection);
      set_state(*b, branch_state::active);
      active_[connection] = branch_id{b->owner, x};
      break;
    case action::resume:
      b->suspended.erase(connection);
      b->associated.insert(connection);
      active_[connection] = branch_id{b->owner, x};
      break;
    case action::suspend:
      b->associated.erase(connection);
      b->suspended.insert(connection);
      active_.erase(connection);
      break;
    case action::end_success:
      dissociate(connection, *b);
      if (b->state == branch_state::active && b->associated.empty() && b->suspended.empty())
        set_state(*b, branch_state::idle);
      break;
    case action::end_fail:
      dissociate(connection, *b);
      set_state(*b, branch_state::rollback_only);
      break;
    case action::end_rolled_back: dissociate(connection, *b); break;
    case action::prepare:
      b->busy = true;
      ++preparing_[b->owner];
      r.write.put(storage::table::branches, branch_key(b->owner, x), encode_record(*b));
      break;
    case action::read_only: remove(b); break;
    case action::commit_one_phase:
    case action::commit_prepared:
      b->busy = true;
      r.write = commit_batch(*b, b->work, has_record, false);
      r.work = std::move(b->work);
      break;
    case action::roll_back:
      b->busy = true;
      r.write = rollback_batch(*b, has_record, false);
      r.work = std::move(b->work);
      break;
    case action::forget:
      b->busy = true;
      r.write.erase(storage::table::branches, branch_key(b->owner, x));
      break;
    case action::discard: remove(b); break;
    case action::heuristic_commit:
    case action::heuristic_rollback:
    case action::time_out: break;  // not decisions of decide()
  }
}

int resource_manager::finish(reply& r, const storage::status& outcome) {
  branch_ptr b = r.target;
  if (!b) return r.code;
  b->busy = false;
  if (r.act == action::prepare)
    if (auto p = preparing_.find(b->owner); p != preparing_.end() && --p->second == 0) preparing_.erase(p);
  if (!outcome.ok()) {
    // Nothing of the write happened: give the work back and let the manager try again.
    if (!r.work.empty()) b->work = std::move(r.work);
    return XAER_RMFAIL;
  }
  switch (r.act) {
    case action::prepare: set_state(*b, branch_state::prepared); break;
    case action::commit_one_phase:
    case action::commit_prepared:
    case action::roll_back:
    case action::forget: remove(b); break;
    case action::heuristic_commit: set_state(*b, branch_state::heuristic_committed); break;
    case action::heuristic_rollback: set_state(*b, branch_state::heuristic_rolled_back); break;
    case action::time_out:
      set_state(*b, branch_state::rolled_back);
      b->rolled_back_code = XA_RBTIMEOUT;
      // Remembered this long for the manager's next call: another timeout, at least ten minutes.
      b->deadline = std::chrono::steady_clock::now() + std::max<std::chrono::milliseconds>(timeout_, std::chrono::minutes(10));
      break;
    default: break;
  }
  return r.code;
}

int resource_manager::recover(std::uint64_t connection, long count, long flags, std::vector<xid>& out,
                              const caller& who) {
  if ((flags & ~(TMSTARTRSCAN | TMENDRSCAN)) != 0 || count < 0) return XAER_INVAL;
  auto it = scans_.find(connection);
  if (flags & TMSTARTRSCAN) {
    scan s;
    std::set<xid> seen;
    for (const auto& [id, b] : branches_)
      if ((b->state == branch_state::prepared || is_heuristic(b->state)) && (who.admin || id.first == who.user) &&
          seen.insert(id.second).second)
        s.xids.push_back(id.second);
    it = scans_.insert_or_assign(connection, std::move(s)).first;
  } else if (it == scans_.end()) {
    if (flags == TMENDRSCAN && count == 0) return 0;  // managers close a scan that way
    return XAER_PROTO;
  }
  scan& s = it->second;
  int written = 0;
  while (written < count && s.next < s.xids.size()) {
    out.push_back(s.xids[s.next++]);
    ++written;
  }
  if (flags & TMENDRSCAN) scans_.erase(it);
  return written;
}

resource_manager::reply resource_manager::heuristic(const xid& x, bool commit, const std::string& owner) {
  reply r;
  auto it = branches_.find(branch_id{owner, x});
  if (it == branches_.end()) {
    r.code = XAER_NOTA;
    return r;
  }
  branch_ptr b = it->second;
  if (b->state != branch_state::prepared || b->busy) {
    r.code = XAER_PROTO;
    return r;
  }
  r.code = XA_OK;
  r.target = b;
  r.act = commit ? action::heuristic_commit : action::heuristic_rollback;
  r.had_record = true;
  b->busy = true;
  r.write = commit ? commit_batch(*b, b->work, true, true) : rollback_batch(*b, true, true);
  r.work = std::move(b->work);
  return r;
}

branch_ptr resource_manager::associated_branch(std::uint64_t connection) const {
  auto it = active_.find(connection);
  if (it == active_.end()) return nullptr;
  auto b = branches_.find(it->second);
  return b == branches_.end() ? nullptr : b->second;
}

branch_ptr resource_manager::begin_local(std::uint64_t connection, const std::string& owner) {
  auto b = std::make_shared<branch>();
  b->id = xid(kLocalFormatId, "local-" + std::to_string(connection) + "-" + std::to_string(++local_counter_), "");
  b->owner = owner;
  b->state = branch_state::idle;
  b->local = true;
  b->created_ms = wall_ms();
  b->deadline = std::chrono::steady_clock::now() + local_timeout_;
  branches_.emplace(branch_id{owner, b->id}, b);
  tally(*b, 1);
  return b;
}

void resource_manager::mark_rollback_only(branch& b) {
  if (b.state == branch_state::active || b.state == branch_state::idle) set_state(b, branch_state::rollback_only);
}

void resource_manager::rewrite(reply& r) const {
  if (!r.target) return;
  if (r.act == action::prepare) {
    r.write = storage::batch{};
    r.write.put(storage::table::branches, branch_key(r.target->owner, r.target->id), encode_record(*r.target));
  } else if (r.act == action::commit_one_phase) {
    r.write = commit_batch(*r.target, r.work, r.had_record, false);
  }
}

void resource_manager::connection_closed(std::uint64_t connection) {
  scans_.erase(connection);
  for (auto& [id, b] : branches_) {
    if (!b->associated.count(connection) && !b->suspended.count(connection)) continue;
    dissociate(connection, *b);
    if (b->state == branch_state::active) set_state(*b, branch_state::rollback_only);
  }
}

std::vector<resource_manager::reply> resource_manager::expire(std::chrono::steady_clock::time_point now) {
  std::vector<reply> out;
  std::vector<branch_ptr> forgotten;
  for (auto& [id, b] : branches_) {
    if (b->busy || b->deadline > now) continue;
    if (b->local) {
      // (Rollback-only: a SEND in it was refused; it times out all the same.)
      if (b->state != branch_state::idle && b->state != branch_state::rollback_only) continue;
      reply r;
      r.code = XA_RBTIMEOUT;
      r.act = action::roll_back;  // gone once rolled back: nobody asks a local transaction's code
      r.target = b;
      b->busy = true;
      r.write = rollback_batch(*b, false, false);
      r.work = std::move(b->work);
      out.push_back(std::move(r));
      continue;
    }
    if (b->state == branch_state::rolled_back) {
      // Forgotten once nobody asked for another timeout, unless a connection still works on it.
      if (b->associated.empty() && b->suspended.empty()) forgotten.push_back(b);
      continue;
    }
    if (b->state != branch_state::active && b->state != branch_state::idle && b->state != branch_state::rollback_only)
      continue;
    reply r;
    r.code = XA_RBTIMEOUT;
    r.act = action::time_out;
    r.target = b;
    b->busy = true;
    r.write = rollback_batch(*b, false, false);
    r.work = std::move(b->work);
    out.push_back(std::move(r));
  }
  for (auto& b : forgotten) remove(b);
  return out;
}

}  // namespace escrow::rm
