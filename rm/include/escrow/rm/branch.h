// A transaction branch: what it did (its sends and the entries it consumed), kept in memory until
// prepare or commit, and where it stands in the XA state machine. One type serves XA branches and
// STOMP local transactions (a local transaction is a branch with a broker-made xid, committed in
// one phase). Owned by the resource manager on the core strand; shared by pointer with pending
// storage completions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "escrow/rm/state_machine.h"
#include "escrow/storage/message.h"
#include "escrow/storage/schema.h"
#include "escrow/xid.h"

namespace escrow::rm {

// One queue a staged message goes to at commit.
struct send_target {
  storage::entry_key key;
  bool stored = false;  // persistent message on a durable queue: written at commit
};

struct staged_send {
  storage::message_ptr msg;
  std::vector<send_target> targets;
};

// An entry the branch consumed (ACK) or gave back (NACK) inside the transaction. While the branch
// holds it, no consumer gets it.
struct consumed_entry {
  storage::entry_key key;
  std::uint32_t delivery_count = 0;  // as delivered
  bool stored = false;
  bool negative = false;  // NACK: at commit it returns to its queue instead of being removed
  storage::message_ptr msg;  // may be null for a stored entry (read again when needed)
};

struct branch_work {
  std::vector<staged_send> sends;
  std::vector<consumed_entry> consumed;
  bool empty() const { return sends.empty() && consumed.empty(); }
};

struct branch {
  xid id;
  // The user that started it ("" when the broker has no users file, or for a record stored before
  // branches had owners). A branch exists only for its owner: to anyone else its xid is unknown.
  std::string owner;
  branch_state state = branch_state::active;
  bool local = false;                 // a STOMP BEGIN/COMMIT transaction
  // A local transaction the broker coordinates with a database transaction (BEGIN with
  // coordinate): its global id there; "" for every other branch.
  std::string coordinated_gid;
  std::set<std::uint64_t> associated; // connections associated with it (XA's T1)
  std::set<std::uint64_t> suspended;  // connections whose association is suspended (T2)
  branch_work work;
  std::chrono::steady_clock::time_point deadline;  // rolled back if not prepared by then
  std::uint64_t created_ms = 0;                    // wall clock, for operators
  int rolled_back_code = 0;  // state rolled_back: the XA_RB* code the next call answers
  // Why the broker rolled it back instead of preparing or committing it (a duplicate _AMQ_DUPL_ID,
  // broker/core/duplicates.cpp), for the answer; "" otherwise.
  std::string refusal;
  bool busy = false;         // a storage write for it is in flight
  std::uint64_t staged_bytes = 0;  // what its staged SENDs hold (broker limits), counted by the broker
};
using branch_ptr = std::shared_ptr<branch>;

}  // namespace escrow::rm
