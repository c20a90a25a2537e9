// The resource manager: every transaction branch keyed by xid, which connection is associated with
// which branch, the XA calls (start, end, prepare, commit, rollback, forget, recover), local
// transactions (a branch committed in one phase), timeouts, heuristic decisions by an operator,
// and the rebuilding of prepared branches from storage at start.
//
// It decides and records; it does not touch queues. A call answers a reply: the XA code, and when
// the call changes what is durable, a storage batch. The broker submits that batch and, once it is
// durable, calls finish() for the final code and applies the reply's work to its queues (commit:
// sends become visible, consumed entries are removed; rollback: consumed entries return). So every
// commit, one-phase, two-phase, local or heuristic, is one storage batch (durability point 4).
//
// Branches belong to the user that started them (docs/security.md, "Tenants"): a branch is named
// by its owner and xid, so to any other user the xid is unknown (XAER_NOTA, or a new branch of
// their own), except that an operator (admin) may commit, roll back or forget another user's
// prepared or heuristically completed branch, as a transaction manager's recovery does.
//
// Thread: the core strand only; no locks.
#pragma once

#include <array>
#include <chrono>
#include <initializer_list>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "escrow/rm/branch.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/status.h"

namespace escrow::storage {
class store;
}

namespace escrow::rm {

// Who makes a call: the user logged in on the connection ("" when the broker has no users file),
// and whether that user may decide other users' prepared branches (the admin permission).
struct caller {
  std::string user;
  bool admin = false;
  // The owner an admin names for commit, rollback or forget (the XA frame's user header): then
  // only that user's branch of the xid, and only once prepared or heuristically completed, even
  // when several users have one. Ignored for anyone else.
  std::optional<std::string> owner = std::nullopt;
};

// A branch's name: its owner and its xid.
using branch_id = std::pair<std::string, xid>;

class resource_manager {
 public:
  // XA branches not prepared within `branch_timeout`, and local transactions open longer than
  // `local_timeout`, are rolled back by expire().
  explicit resource_manager(std::chrono::milliseconds branch_timeout,
                            std::chrono::milliseconds local_timeout = std::chrono::hours(24 * 365));

  // Rebuilds prepared and heuristically completed branches from the `branches` table. Their
  // consumed entries must then be held by the broker's queues, their sends stay invisible.
  storage::status load(const storage::store& store);

  struct reply {
    int code = 0;
    action act = action::nothing;
    branch_ptr target;
    storage::batch write;  // submit it when not empty; in every case call finish() with the outcome
    branch_work work;      // for commit and rollback actions: what to apply once durable
    bool had_record = false;  // the branch was prepared (or heuristic): its record is in the store
    std::string problem;      // for an operator or a client: why the code is an error, when it says more
  };

  // An XA call from connection `connection`, made by `who`. XAER_PROTO for a branch with a write in
  // flight. An admin's commit, rollback or forget of an xid it has no branch of reaches the one
  // prepared or heuristically completed branch of that xid another user owns (XAER_RMERR when
  // several users have one).
  reply call(xa_verb verb, std::uint64_t connection, const xid& x, long flags, const caller& who = {});

  // After a reply's write completed: the final code. On failure the branch is as before the call
  // (its work given back) and the code is XAER_RMFAIL: the manager may try again later.
  int finish(reply& r, const storage::status& outcome);

  // XA_RECOVER: writes up to `count` xids of prepared and heuristically completed branches: those
  // `who` owns, or every user's for an admin (an xid two users have appears once). Returns how
  // many, or an XAER code. TMSTARTRSCAN opens a scan per connection, TMNOFLAGS continues it,
  // TMENDRSCAN closes it (both at once: one whole scan).
  int recover(std::uint64_t connection, long count, long flags, std::vector<xid>& out, const caller& who = {});

  // An operator decides the prepared branch `x` of user `owner`. XAER_NOTA if unknown, XAER_PROTO
  // if not prepared.
  reply heuristic(const xid& x, bool commit, const std::string& owner = {});

  // Every user's branch with xid `x` (what an operator may mean by it), in owner order.
  std::vector<branch_ptr> find_all(const xid& x) const;

  // The branch `connection` is associated with (T1), or null.
  branch_ptr associated_branch(std::uint64_t connection) const;

  // A STOMP local transaction of user `owner`: a new idle branch with a broker-made xid, never
  // associated.
  branch_ptr begin_local(std::uint64_t connection, const std::string& owner = {});

  // The broker refuses the branch's work (a SEND in it met a full queue, broker/core/
  // address_limits.cpp): an active branch or an open local transaction becomes rollback-only; its
  // end, prepare or commit then answers XA_RBROLLBACK and rolls it back. Other states: unchanged.
  void mark_rollback_only(branch& b);

  // Builds the write of a prepare or one-phase commit reply again from what its branch now sends
  // (r.target's work for a prepare, r.work for a commit), after the broker took some targets out of
  // it (a full queue under address-full-policy DROP takes no copy). Other replies: unchanged.
  void rewrite(reply& r) const;

  // The connection is gone: branches it was associated with (or had suspended) become
  // rollback-only; idle and prepared branches are untouched.
  void connection_closed(std::uint64_t connection);

  // Branches not prepared by their deadline, and local transactions open past theirs, are rolled
  // back: one reply each (act time_out), to be submitted and finished like any other. Remembered rolled-back branches that nobody asked
  // about for another timeout are dropped.
  std::vector<reply> expire(std::chrono::steady_clock::time_point now);

  // Which queues still exist: a commit stores no entry for a queue that went away after the send
  // was staged (a durable subscription ended meanwhile), so nothing is orphaned and the message's
  // references count only what is stored. Unset: every queue exists.
  void set_queue_exists(std::function<bool(std::uint32_t queue_id)> exists) { queue_exists_ = std::move(exists); }

  const std::map<branch_id, branch_ptr>& branches() const { return branches_; }
  // How many branches of `owner` are in one of `states` (the per-user limits).
  std::size_t count(const std::string& owner, std::initializer_list<branch_state> states) const;
  // How many of owner's prepares are being written (prepared once finished, if stored).
  std::size_t preparing(const std::string& owner) const;
  // The largest message id a recovered branch staged (the broker's ids must stay above it).
  std::uint64_t max_staged_message_id() const;

 private:
  association association_of(std::uint64_t connection, const branch& b) const;
  void dissociate(std::uint64_t connection, branch& b);
  void remove(const branch_ptr& b);
  storage::batch commit_batch(const branch& b, const branch_work& work, bool has_record, bool keep_record) const;
  storage::batch rollback_batch(const branch& b, bool has_record, bool keep_record) const;
  void close_record(storage::batch& out, const branch& b, branch_state outcome) const;

  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds local_timeout_;
  // The branch `who` names by `x` for `verb`, or null; sets r.code and r.problem when an admin's
  // xid is ambiguous.
  branch_ptr lookup(xa_verb verb, const xid& x, const caller& who, reply& r) const;

  // call()'s steps: how the call stands towards the branch (for decide()), then what the decision
  // does to the branch (r.act), filling r.write and r.work.
  call_context context_of(xa_verb verb, long flags, std::uint64_t connection, const branch* b) const;
  void apply_decision(reply& r, std::uint64_t connection, const xid& x, const caller& who);
  void set_state(branch& b, branch_state s);  // every change of a listed branch's state
  void tally(const branch& b, int delta);     // counts b in (+1) or out (-1) of tallies_

  std::map<branch_id, branch_ptr> branches_;
  // Branches by owner and state, for count(); an owner with none has no entry.
  std::unordered_map<std::string, std::array<std::size_t, 9>> tallies_;
  std::unordered_map<std::string, std::size_t> preparing_;  // prepares in flight, by owner
  std::unordered_map<std::uint64_t, branch_id> active_;  // connection -> branch it is associated with
  struct scan {
    std::vector<xid> xids;
    std::size_t next = 0;
  };
  std::unordered_map<std::uint64_t, scan> scans_;
  std::uint64_t local_counter_ = 0;
  std::function<bool(std::uint32_t)> queue_exists_;
};

// The formatID of the xids the broker makes for local transactions ("ESCR").
inline constexpr std::int64_t kLocalFormatId = 0x45534352;

}  // namespace escrow::rm
