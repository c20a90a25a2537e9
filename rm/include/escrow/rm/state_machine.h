// The X/Open XA state tables as one pure function: given a call, its flags, the state of the branch
// it names and how the calling connection is associated, decide the XA code and what to do next.
// The resource manager (resource_manager.h) carries the decision out; the unit tests walk every
// (branch state, association, call, flags) combination through this function alone.
//
// Branch states (XA's S0..S5): none (non-existent), active, idle, prepared, rollback_only,
// heuristic (committed, rolled back or mixed), plus rolled_back: a branch the broker rolled back on
// its own (timeout) that is remembered only to answer the manager's next call with its XA_RB* code.
#pragma once

#include <cstdint>

namespace escrow::rm {

enum class branch_state : std::uint8_t {
  none,
  active,
  idle,
  prepared,
  rollback_only,
  heuristic_committed,
  heuristic_rolled_back,
  heuristic_mixed,
  rolled_back,
};
const char* to_string(branch_state s);
bool is_heuristic(branch_state s);

enum class xa_verb : std::uint8_t { start, end, prepare, commit, rollback, forget };
const char* to_string(xa_verb v);

// How the calling connection stands (XA's T0..T2), seen from the branch the call names.
enum class association : std::uint8_t {
  none,               // T0: associated with no branch
  here,               // T1 with this branch
  suspended_here,     // T2: its association with this branch is suspended
  elsewhere,          // T1 or T2 with another branch
};

// What the resource manager does once the code is known.
enum class action : std::uint8_t {
  nothing,           // answer the code, change nothing
  create,            // start: new branch, active, caller associated
  join,              // start TMJOIN: caller associated with the existing branch
  resume,            // start TMRESUME: the caller's suspended association becomes active again
  suspend,           // end TMSUSPEND
  end_success,       // end TMSUCCESS: caller dissociated; idle when nobody else is associated
  end_fail,          // end TMFAIL: caller dissociated, branch rollback-only
  end_rolled_back,   // end on a branch already rolled back by the broker: caller dissociated
  prepare,           // write the prepared record (XA_OK once durable)
  read_only,         // prepare of a branch that did nothing: forget it, answer XA_RDONLY
  commit_one_phase,  // apply the work without a prepared record
  commit_prepared,   // apply the work and delete the prepared record
  roll_back,         // undo the work (and delete a prepared record)
  forget,            // remove a heuristically completed branch's record
  discard,           // forget a rolled-back branch remembered for its code
  // Not XA decisions: what an operator or the broker itself does to a branch.
  heuristic_commit,    // an operator commits a prepared branch; the outcome is recorded
  heuristic_rollback,  // an operator rolls a prepared branch back; the outcome is recorded
  time_out,            // the broker rolls back a branch not prepared in time
};

struct decision {
  int code;
  action next;
};

struct call_context {
  xa_verb verb;
  long flags;
  branch_state state;  // branch_state::none when the xid is unknown
  association caller;
  bool others_associated = false;  // other connections are associated (or suspended) with it
  bool has_work = false;           // the branch sent or consumed something
  int rolled_back_code = 0;        // for rolled_back: the XA_RB* code to answer
};

// The XA decision for one call. Pure.
decision decide(const call_context& c);

}  // namespace escrow::rm
