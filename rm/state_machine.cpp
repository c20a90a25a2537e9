// The XA state tables (see state_machine.h and ../shared/XA.md). Each verb first checks its flags
// (XAER_INVAL), then that the xid is known (XAER_NOTA; start only with TMJOIN/TMRESUME), then the
// caller's association (XAER_PROTO), then the branch state.
#include "escrow/rm/state_machine.h"

#include "escrow/xa.h"

namespace escrow::rm {

const char* to_string(branch_state s) {
  switch (s) {
    case branch_state::none: return "non-existent";
    case branch_state::active: return "active";
    case branch_state::idle: return "idle";
    case branch_state::prepared: return "prepared";
    case branch_state::rollback_only: return "rollback-only";
    case branch_state::heuristic_committed: return "heuristically committed";
    case branch_state::heuristic_rolled_back: return "heuristically rolled back";
    case branch_state::heuristic_mixed: return "heuristically mixed";
    case branch_state::rolled_back: return "rolled back";
  }
  return "unknown";
}

bool is_heuristic(branch_state s) {
  return s == branch_state::heuristic_committed || s == branch_state::heuristic_rolled_back ||
         s == branch_state::heuristic_mixed;
}

const char* to_string(xa_verb v) {
  switch (v) {
    case xa_verb::start: return "start";
    case xa_verb::end: return "end";
    case xa_verb::prepare: return "prepare";
    case xa_verb::commit: return "commit";
    case xa_verb::rollback: return "rollback";
    case xa_verb::forget: return "forget";
  }
  return "unknown";
}

namespace {

constexpr decision answer(int code) { return {code, action::nothing}; }

int heuristic_code(branch_state s) {
  switch (s) {
    case branch_state::heuristic_committed: return XA_HEURCOM;
    case branch_state::heuristic_rolled_back: return XA_HEURRB;
    default: return XA_HEURMIX;
  }
}

bool only(long flags, long allowed) { return (flags & ~allowed) == 0; }

// A branch the broker rolled back answers its XA_RB* code; it is forgotten only once no connection
// is associated with it any more (their frames must keep landing in a dead branch, not outside).
decision rolled_back(const call_context& c) {
  return {c.rolled_back_code, c.others_associated ? action::nothing : action::discard};
}

decision start(const call_context& c) {
  const long f = c.flags;
  if (!only(f, TMJOIN | TMRESUME | TMNOWAIT) || ((f & TMJOIN) && (f & TMRESUME))) return answer(XAER_INVAL);
  // TMJOIN and TMRESUME name an existing branch: an unknown one is XAER_NOTA whatever the caller's
  // association, as for every other verb.
  if ((f & (TMJOIN | TMRESUME)) && c.state == branch_state::none) return answer(XAER_NOTA);
  if (f & TMRESUME) {
    if (c.caller != association::suspended_here) return answer(XAER_PROTO);
    if (c.state == branch_state::rolled_back) return {c.rolled_back_code, action::end_rolled_back};
    if (c.state == branch_state::rollback_only) return {XA_RBROLLBACK, action::resume};
    if (c.state != branch_state::active) return answer(XAER_PROTO);
    return {XA_OK, action::resume};
  }
  if (c.caller != association::none) return answer(XAER_PROTO);
  if (f & TMJOIN) {
    switch (c.state) {
      case branch_state::active:
      case branch_state::idle: return {XA_OK, action::join};
      case branch_state::rollback_only: return answer(XA_RBROLLBACK);
      case branch_state::rolled_back: return answer(c.rolled_back_code);
      default: return answer(XAER_PROTO);
    }
  }
  if (c.state != branch_state::none) return answer(XAER_DUPID);
  return {XA_OK, action::create};
}

decision end(const call_context& c) {
  const long f = c.flags;
  const long kind = f & (TMSUCCESS | TMFAIL | TMSUSPEND);
  if (!only(f, TMSUCCESS | TMFAIL | TMSUSPEND) || (kind != TMSUCCESS && kind != TMFAIL && kind != TMSUSPEND))
    return answer(XAER_INVAL);
  if (c.state == branch_state::none) return answer(XAER_NOTA);
  if (c.caller != association::here && c.caller != association::suspended_here) return answer(XAER_PROTO);
  if (kind == TMSUSPEND && c.caller != association::here) return answer(XAER_PROTO);
  switch (c.state) {
    case branch_state::rolled_back: return {c.rolled_back_code, action::end_rolled_back};
    case branch_state::active:
      if (kind == TMSUSPEND) return {XA_OK, action::suspend};
      return {XA_OK, kind == TMFAIL ? action::end_fail : action::end_success};
    case branch_state::rollback_only:
      if (kind == TMSUSPEND) return {XA_RBROLLBACK, action::suspend};
      return {XA_RBROLLBACK, action::end_fail};
    default: return answer(XAER_PROTO);
  }
}

decision prepare(const call_context& c) {
  if (c.flags != TMNOFLAGS) return answer(XAER_INVAL);
  if (c.state == branch_state::none) return answer(XAER_NOTA);
  if (c.caller == association::here || c.caller == association::suspended_here) return answer(XAER_PROTO);
  switch (c.state) {
    case branch_state::idle: return c.has_work ? decision{XA_OK, action::prepare} : decision{XA_RDONLY, action::read_only};
    case branch_state::rollback_only:
      if (c.others_associated) return answer(XAER_PROTO);
      return {XA_RBROLLBACK, action::roll_back};
    case branch_state::rolled_back: return rolled_back(c);
    default: return answer(XAER_PROTO);
  }
}

decision commit(const call_context& c) {
  if (!only(c.flags, TMONEPHASE | TMNOWAIT)) return answer(XAER_INVAL);
  if (c.state == branch_state::none) return answer(XAER_NOTA);
  if (c.caller == association::here || c.caller == association::suspended_here) return answer(XAER_PROTO);
  if (c.flags & TMONEPHASE) {
    if (c.state == branch_state::rolled_back) return rolled_back(c);
    if (c.state == branch_state::idle) return {XA_OK, action::commit_one_phase};
    if (c.state == branch_state::rollback_only && !c.others_associated) return {XA_RBROLLBACK, action::roll_back};
    return answer(XAER_PROTO);
  }
  if (c.state == branch_state::prepared) return {XA_OK, action::commit_prepared};
  if (is_heuristic(c.state)) return answer(heuristic_code(c.state));
  // Includes a branch the broker rolled back: XA_RB* is a valid answer only with TMONEPHASE, and a
  // branch that was never prepared cannot be committed in two phases. It stays remembered for the
  // manager's rollback.
  return answer(XAER_PROTO);
}

decision rollback(const call_context& c) {
  if (c.flags != TMNOFLAGS) return answer(XAER_INVAL);
  if (c.state == branch_state::none) return answer(XAER_NOTA);
  if (c.caller == association::here || c.caller == association::suspended_here) return answer(XAER_PROTO);
  switch (c.state) {
    case branch_state::idle:
    case branch_state::prepared: return {XA_OK, action::roll_back};
    case branch_state::rollback_only:
      // Another connection still works on it: rolling back now would leave that connection's
      // next SEND outside any branch.
      if (c.others_associated) return answer(XAER_PROTO);
      return {XA_OK, action::roll_back};
    case branch_state::rolled_back: return rolled_back(c);
    case branch_state::active: return answer(XAER_PROTO);
    default: return answer(heuristic_code(c.state));
  }
}

decision forget(const call_context& c) {
  if (c.flags != TMNOFLAGS) return answer(XAER_INVAL);
  if (is_heuristic(c.state)) return {XA_OK, action::forget};
  return answer(XAER_NOTA);
}

}  // namespace

decision decide(const call_context& c) {
  switch (c.verb) {
    case xa_verb::start: return start(c);
    case xa_verb::end: return end(c);
    case xa_verb::prepare: return prepare(c);
    case xa_verb::commit: return commit(c);
    case xa_verb::rollback: return rollback(c);
    case xa_verb::forget: return forget(c);
  }
  return answer(XAER_INVAL);
}

}  // namespace escrow::rm
