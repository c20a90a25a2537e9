// Transactions in the broker: STOMP local transactions (BEGIN, COMMIT, ABORT) and the XA frames,
// both carried out by the resource manager (rm/) on one path. The broker's part is what a branch
// means for queues: staging sends and consumed entries, making a commit visible, returning what a
// rollback gives back, and answering each frame.
#include <spdlog/spdlog.h>

#include <charconv>

#include "core.h"
#include "escrow/broker/security/names.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/xa.h"

namespace escrow::broker {
namespace {

// The XA frames and the verb each carries.
std::optional<rm::xa_verb> verb_of(std::string_view command) {
  if (command == "XA-START") return rm::xa_verb::start;
  if (command == "XA-END") return rm::xa_verb::end;
  if (command == "XA-PREPARE") return rm::xa_verb::prepare;
  if (command == "XA-COMMIT") return rm::xa_verb::commit;
  if (command == "XA-ROLLBACK") return rm::xa_verb::rollback;
  if (command == "XA-FORGET") return rm::xa_verb::forget;
  return std::nullopt;
}

}  // namespace

bool broker::impl::takes_work(const rm::branch& b) {
  return b.local ? b.state == rm::branch_state::idle && !b.busy : b.state == rm::branch_state::active;
}

bool broker::impl::branch_for(const connection_ptr& c, const frame& f, rm::branch_ptr& out) {
  rm::branch_ptr associated = transactions.rm.associated_branch(c->id);
  if (const std::string* name = f.find("transaction")) {
    if (associated)
      return error(*c, f.command + " names transaction '" + *name + "' while the connection is associated with XA branch " +
                           associated->id.to_string() + "; end the XA branch first", &f),
             false;
    auto it = c->transactions.find(*name);
    if (it == c->transactions.end())
      return error(*c, f.command + " names transaction '" + *name + "', which this connection has not begun", &f), false;
    out = it->second;
    return true;
  }
  out = associated;
  return true;
}

void broker::impl::apply_commit(const rm::branch_work& work) {
  std::vector<queue_ptr> touched;
  storage::batch none;
  for (const auto& s : work.sends) {
    for (const auto& t : s.targets) {
      queue_ptr q = find_by_id(t.key.queue_id);
      if (!q || q->dropping) continue;  // went away meanwhile, or is being ended (its entry was skipped)
      enqueue(q, queue_entry{t.key, 0, t.stored, s.msg});
      touched.push_back(q);
    }
  }
  for (const auto& c : work.consumed) {
    queue_ptr q = find_by_id(c.key.queue_id);
    if (!q) continue;
    if (c.negative) {
      // The delivery count was written by the commit batch; the entry comes back with it raised.
      offer_again(q, queue_entry{c.key, c.delivery_count + 1, c.stored, c.msg});
      touched.push_back(q);
    } else {
      q->counters.removed(q->counters.acknowledged, c.msg ? c.msg->record.encoded_size() : 0);
      q->release_hold(c.key);
    }
  }
  for (auto& q : touched) dispatch(q);
}

void broker::impl::apply_rollback(const rm::branch_work& work) {
  std::vector<queue_ptr> touched;
  for (const auto& c : work.consumed) {
    queue_ptr q = find_by_id(c.key.queue_id);
    if (!q) continue;
    // The rollback batch already wrote the raised delivery count.
    offer_again(q, queue_entry{c.key, c.delivery_count + 1, c.stored, c.msg});
    touched.push_back(q);
  }
  for (auto& q : touched) dispatch(q);
}

void broker::impl::carry_out(rm::resource_manager::reply r, std::function<void(int)> done, storage::batch decision) {
  // Queue limits (address_limits.cpp): a prepare or one-phase commit whose sends do not fit in a
  // full queue under FAIL or BLOCK is rolled back instead (XA_RBOTHER); room is reserved until the
  // branch is decided, and DROP-HEAD and ring queues lose their oldest messages in the commit's batch.
  if (!gate_limits(r, done)) return;
  // Duplicate detection (duplicates.cpp): a prepare or one-phase commit sending an _AMQ_DUPL_ID
  // already taken is rolled back instead (XA_RBINTEGRITY); a commit's ids go into its write.
  if (!gate_duplicate_ids(r, done)) return;
  // Last-value queues (last_values.cpp): a commit's messages replace the ready ones of their keys
  // in the commit's own batch.
  gate_last_values(r, done);
  bool commits = r.act == rm::action::commit_one_phase || r.act == rm::action::commit_prepared ||
                 r.act == rm::action::heuristic_commit;
  bool rolls_back = r.act == rm::action::roll_back || r.act == rm::action::heuristic_rollback ||
                    r.act == rm::action::time_out;
  // A coordinated transaction's decision is durable with its commit, in the same batch, or not at all.
  if (commits && r.code == XA_OK && !decision.empty()) r.write.append(decision);
  if (r.write.empty() && !r.target) return done(r.code);
  // A committed send stores its message under an id the broker handed out: the id counter goes
  // with it, or a restart would hand the id out again and a new entry would overwrite this one.
  if (commits && !r.work.sends.empty() && !r.write.empty()) {
    storage::put_next_message_id(r.write, next_message_id);
  }
  // A prepare or commit that stores entries for a queue whose record is not durable yet (its
  // first SEND's batch was refused) carries the record too.
  if ((commits || r.act == rm::action::prepare) && !r.write.empty()) {
    for (const auto& s : r.work.sends)
      for (const auto& t : s.targets)
        if (t.stored)
          if (queue_ptr q = find_by_id(t.key.queue_id)) persist_queue_record(q, r.write);
  }
  // Entries a commit writes are held until its completion pushes them, so that a refill reading
  // LMDB meanwhile cannot hand them out first.
  std::vector<std::pair<queue_ptr, storage::entry_key>> holds;
  if (commits) {
    for (const auto& s : r.work.sends)
      for (const auto& t : s.targets)
        if (t.stored)
          if (queue_ptr q = find_by_id(t.key.queue_id)) {
            q->hold(t.key);
            holds.emplace_back(q, t.key);
          }
  }
  // Latency for the metrics: from the frame's turn on the core to its answer.
  latency_histogram* latency = r.act == rm::action::prepare ? &transactions.prepare_latency
                               : (r.act == rm::action::commit_one_phase || r.act == rm::action::commit_prepared)
                                   ? &transactions.commit_latency
                                   : nullptr;
  auto started = std::chrono::steady_clock::now();
  auto complete = [this, commits, rolls_back, done = std::move(done), holds = std::move(holds), latency, started](
                      rm::resource_manager::reply& reply, const storage::status& s) {
    if (latency) latency->observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    for (auto& [q, k] : holds) q->release_hold(k);
    storage::status outcome = s;
    if (!s.ok()) {
      spdlog::error("branch {}: {}", reply.target ? reply.target->id.to_string() : "?", outcome.message());
      // Rolling back a branch that was never prepared needs nothing durable (its write only raises
      // delivery counts): it is rolled back in memory all the same, so that neither the branch nor
      // the messages it consumed are left behind when the store refuses (a local transaction's
      // connection is gone and nobody would retry it).
      if (rolls_back && reply.target && !reply.had_record) outcome = storage::status{};
    }
    int code = transactions.rm.finish(reply, outcome);
    if (outcome.ok() && (commits || rolls_back) && reply.target) release_staged(*reply.target);
    if (outcome.ok() && commits) apply_commit(reply.work);
    if (outcome.ok() && rolls_back) apply_rollback(reply.work);
    if (outcome.ok() && rolls_back && reply.target) end_coordinated(*reply.target);
    done(code);
  };
  if (r.write.empty()) {
    complete(r, storage::status{});
    return;
  }
  storage::batch write = std::move(r.write);
  auto shared = std::make_shared<rm::resource_manager::reply>(std::move(r));
  submit(std::move(write), [shared, complete = std::move(complete)](const storage::status& s) mutable {
    complete(*shared, s);
  });
}

operator_target broker::impl::owner_for_operator(const xid& x, const std::string* user) const {
  operator_target t;
  t.name = x.to_string();
  if (user) {
    t.user = *user;
    if (!user->empty()) t.name += " of user " + *user;
    return t;
  }
  auto all = transactions.rm.find_all(x);
  if (all.size() == 1) {
    t.user = all.front()->owner;
    if (!t.user.empty()) t.name += " of user " + t.user;
  } else if (all.size() > 1) {
    t.code = XAER_RMERR;
    t.problem = "xid " + x.to_string() + " names branches of " + std::to_string(all.size()) +
                " users (escrow xa list shows them): name the user";
  }
  return t;
}

// The user header of an XA frame: the owner of the branch an operator (admin) commits, rolls back
// or forgets, so that a transaction manager recovering under an operator's login decides a xid
// that several users have prepared (docs/security.md, "Tenants"). Anyone else naming another user,
// and any other verb, gets XAER_INVAL: the header decides nothing for them, and says so.
bool broker::impl::take_named_owner(const connection& c, const frame& f, rm::xa_verb verb, rm::caller& caller,
                                    const std::function<void(int, const std::string&)>& answer) const {
  const std::string* owner = f.find("user");
  if (!owner || *owner == c.info.user) return true;
  if (verb != rm::xa_verb::commit && verb != rm::xa_verb::rollback && verb != rm::xa_verb::forget)
    return answer(XAER_INVAL, "the user header names whose branch an operator commits, rolls back or forgets; " +
                                  f.command + " takes none"),
           false;
  if (!caller.admin)
    return answer(XAER_INVAL, "the user header is for operators (the admin permission on the broker): leave it "
                              "out to decide a branch of your own"),
           false;
  caller.owner = *owner;
  return true;
}

rm::caller broker::impl::caller_of(const connection& c) const {
  return rm::caller{c.info.user, holds_globally(c, permission::admin)};
}

void broker::impl::roll_back_locals(connection& c) {
  for (auto& [name, b] : c.transactions) {
    auto r = transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, rm::caller{b->owner});
    carry_out(std::move(r), [](int) {});
  }
  c.transactions.clear();
}

void broker::impl::expire_branches() {
  for (auto& r : transactions.rm.expire(std::chrono::steady_clock::now())) {
    if (r.target->local) {
      time_out_local(r.target);
    } else {
      spdlog::warn("branch {} was not prepared within {} ms: rolled back (XA_RBTIMEOUT)", r.target->id.to_string(),
                   config.branch_timeout_ms);
    }
    carry_out(std::move(r), [](int) {});
  }
}

void broker::impl::time_out_local(const rm::branch_ptr& b) {
  for (auto& [id, c] : clients.connections) {
    for (auto it = c->transactions.begin(); it != c->transactions.end(); ++it) {
      if (it->second != b) continue;
      std::string name = it->first;
      c->transactions.erase(it);
      spdlog::warn("connection {} ({}): transaction '{}' open for more than {} ms: rolled back", c->id, c->info.peer,
                   loggable(name), config.local_timeout_ms);
      // The client learns it at once: its next SEND, ACK or COMMIT in it would be refused anyway.
      return error(*c, "transaction '" + name + "' was open for more than " + std::to_string(config.local_timeout_ms) +
                           " ms (transactions.local-timeout-ms): rolled back; nothing of it took effect");
    }
  }
}

void broker::impl::handle_transaction(const connection_ptr& c, const frame& f) {
  const std::string* name = f.find("transaction");
  if (!name) return error(*c, f.command + " frame has no transaction header", &f);
  if (f.command == "BEGIN") {
    if (c->transactions.count(*name))
      return error(*c, "BEGIN of transaction '" + *name + "', which this connection has already begun", &f);
    if (f.has("coordinate")) return begin_coordinated(c, f, *name);
    if (!may_start_branch(*c, &f)) return;
    c->transactions.emplace(*name, transactions.rm.begin_local(c->id, c->info.user));
    return receipt(*c, f);
  }
  auto it = c->transactions.find(*name);
  if (it == c->transactions.end())
    return error(*c, f.command + " of transaction '" + *name + "', which this connection has not begun", &f);
  rm::branch_ptr b = it->second;
  c->transactions.erase(it);
  bool commit = f.command == "COMMIT";
  if (commit && !b->coordinated_gid.empty()) {
    const std::string* receipt_header = f.find("receipt");
    return commit_coordinated(c, b, receipt_header ? std::optional<std::string>(*receipt_header) : std::nullopt, *name);
  }
  // A local transaction is a branch committed in one phase: the same commit path as XA.
  rm::caller owner{b->owner};
  auto r = commit ? transactions.rm.call(rm::xa_verb::commit, 0, b->id, TMONEPHASE, owner)
                  : transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, owner);
  const std::string* receipt_header = f.find("receipt");
  std::optional<std::string> receipt_id = receipt_header ? std::optional<std::string>(*receipt_header) : std::nullopt;
  std::string command = f.command;
  carry_out(std::move(r), [this, c, b, receipt_id, command, name = *name](int code) {
    if (code != XA_OK) {
      // The commit was refused as a whole; the connection closes, so the work is rolled back.
      if (transactions.rm.branches().count(rm::branch_id{b->owner, b->id}))
        carry_out(transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, rm::caller{b->owner}), [](int) {});
      frame request{command, {}, {}};
      if (receipt_id) request.add("receipt", *receipt_id);
      if (!b->refusal.empty()) return error(*c, command + " of transaction '" + name + "' refused: " + b->refusal, &request);
      return error(*c, command + " of transaction '" + name + "' failed: " + xa_result_name(code) +
                           " (the store refused the write; nothing of the transaction took effect)", &request);
    }
    if (receipt_id) write_receipt(*c, *receipt_id);
  });
}

void broker::impl::handle_xa(const connection_ptr& c, const frame& f) {
  const std::string* receipt_id = f.find("receipt");
  if (!receipt_id)
    return error(*c, f.command + " frame has no receipt header: its XA result comes back in a RECEIPT", &f);
  auto answer = [this, c, id = *receipt_id](int code, const std::string& detail = {}, frame extra = {}) {
    frame r{"RECEIPT", {{"receipt-id", id}, {"xa-result", xa_result_name(code)}}, {}};
    if (!detail.empty()) r.add("message", detail);
    for (auto& h : extra.headers) r.headers.push_back(h);
    if (!extra.body.empty()) {
      r.body = std::move(extra.body);
      r.add("content-type", "text/plain");
      r.add("content-length", std::to_string(r.body.size()));
    }
    write(*c, r);
  };
  std::string flag_error;
  auto flags = parse_xa_flags(f.get("flags"), &flag_error);
  if (!flags) return answer(XAER_INVAL, flag_error);

  // XA-HEURISTIC is an operator's; XA-RECOVER lists a user's own branches, an admin's every user's.
  if (f.command == "XA-HEURISTIC" && !permitted_globally(*c, permission::admin, &f)) return;
  rm::caller caller = caller_of(*c);

  if (f.command == "XA-RECOVER") {
    long count = 0;
    std::string_view text = f.get("count", "0");
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (ec != std::errc() || end != text.data() + text.size() || count < 0)
      return answer(XAER_INVAL, "invalid count header '" + std::string(text) + "': use a non-negative integer");
    std::vector<xid> found;
    int n = transactions.rm.recover(c->id, count, *flags, found, caller);
    if (n < 0) return answer(n, "recover scan: " + xa_flags_name(*flags) + " without an open scan or with flags it does not take");
    frame extra;
    extra.add("xa-count", std::to_string(n));
    for (const auto& x : found) extra.body += x.to_string() + "\n";
    return answer(XA_OK, {}, std::move(extra));
  }

  std::string xid_error;
  auto x = xid::parse(f.get("xid"), &xid_error);
  if (!x) return answer(XAER_INVAL, f.has("xid") ? xid_error : f.command + " frame has no xid header");

  if (f.command == "XA-HEURISTIC") {
    std::string_view outcome = f.get("outcome");
    if (outcome != "commit" && outcome != "rollback")
      return answer(XAER_INVAL, "invalid outcome header '" + std::string(outcome) + "': use commit or rollback");
    auto owner = owner_for_operator(*x, f.find("user"));
    if (!owner.problem.empty()) return answer(owner.code, owner.problem);
    spdlog::warn("operator decision: heuristic {} of prepared branch {}", outcome, owner.name);
    return carry_out(transactions.rm.heuristic(*x, outcome == "commit", owner.user),
                     [answer](int code) { answer(code); });
  }
  auto verb = verb_of(f.command);
  if (!verb) return error(*c, "unknown XA frame " + f.command, &f);
  // The broker's own xids for local transactions are out of reach of XA frames: nobody may start,
  // end or decide another connection's local transaction.
  if (x->format_id() == rm::kLocalFormatId)
    return answer(XAER_INVAL, "formatID " + std::to_string(rm::kLocalFormatId) +
                                  " is reserved for the broker's local transactions");
  bool starts_branch = *verb == rm::xa_verb::start && !(*flags & (TMJOIN | TMRESUME));
  if (starts_branch && !may_start_branch(*c, &f)) return;
  // A user's own idle branch: refused (and left idle) at max-prepared-branches-per-user.
  if (*verb == rm::xa_verb::prepare) {
    auto own = transactions.rm.branches().find(rm::branch_id{caller.user, *x});
    if (own != transactions.rm.branches().end() && own->second->state == rm::branch_state::idle &&
        !own->second->work.empty())
      if (auto refusal = prepare_refusal(*c)) return answer(XAER_RMERR, *refusal);
  }
  if (!take_named_owner(*c, f, *verb, caller, answer)) return;
  auto r = transactions.rm.call(*verb, c->id, *x, *flags, caller);
  std::string problem = r.problem;
  rm::branch_ptr target = r.target;  // its refusal says why a prepare or commit was rolled back instead
  carry_out(std::move(r), [this, c, answer, starts_branch, id = rm::branch_id{caller.user, *x}, problem, target](int code) {
    if (starts_branch && code == XA_OK)
      if (auto b = transactions.rm.branches().find(id); b != transactions.rm.branches().end())
        c->started_branches.push_back(b->second);
    // Why the broker rolled the branch back (a duplicate id, a full queue), when it did.
    bool rolled_back = code >= XA_RBBASE && code <= XA_RBEND;
    answer(code, target && rolled_back && !target->refusal.empty() ? target->refusal : problem);
  });
}

}  // namespace escrow::broker
