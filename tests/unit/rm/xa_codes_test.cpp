// What the broker may answer per XA verb, against the XA specification's per-call lists
// (/work/shared/XA.md): every code rm::decide() gives over every combination of branch state,
// association, flags, other associations and work, plus the codes the resource manager and the
// broker's frame handling give around it (listed below with where they come from). The switch
// passes a broker's answer through only when the call may return it (tests/unit/xa/
// switch_codes_test.cpp); this test shows that Escrow's own broker never needs that filter.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include "escrow/rm/state_machine.h"
#include "escrow/xa.h"
#include "escrow/xid.h"

using namespace escrow::rm;

namespace {

bool rb(int c) { return c >= XA_RBBASE && c <= XA_RBEND; }
bool heur(int c) { return c == XA_HEURHAZ || c == XA_HEURCOM || c == XA_HEURRB || c == XA_HEURMIX; }

// XA.md, "What each call may return".
bool spec_allows(xa_verb v, int c, long flags) {
  switch (v) {
    case xa_verb::start:
      return c == XA_OK || rb(c) || c == XA_RETRY || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
             c == XAER_DUPID || c == XAER_OUTSIDE || c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
    case xa_verb::end:
      return c == XA_OK || c == XA_NOMIGRATE || rb(c) || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
             c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
    case xa_verb::prepare:
      return c == XA_OK || c == XA_RDONLY || rb(c) || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
             c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
    case xa_verb::commit:
      return c == XA_OK || heur(c) || c == XA_RETRY || (rb(c) && (flags & TMONEPHASE)) || c == XAER_ASYNC ||
             c == XAER_RMERR || c == XAER_RMFAIL || c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
    case xa_verb::rollback:
      return c == XA_OK || heur(c) || rb(c) || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
             c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
    case xa_verb::forget:
      return c == XA_OK || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL || c == XAER_NOTA ||
             c == XAER_INVAL || c == XAER_PROTO;
  }
  return false;
}

constexpr branch_state kStates[] = {branch_state::none,          branch_state::active,
                                    branch_state::idle,          branch_state::prepared,
                                    branch_state::rollback_only, branch_state::heuristic_committed,
                                    branch_state::heuristic_rolled_back, branch_state::heuristic_mixed,
                                    branch_state::rolled_back};
constexpr association kCallers[] = {association::none, association::here, association::suspended_here,
                                    association::elsewhere};
constexpr xa_verb kVerbs[] = {xa_verb::start,  xa_verb::end,      xa_verb::prepare,
                              xa_verb::commit, xa_verb::rollback, xa_verb::forget};

}  // namespace

TEST_SUITE("rm/xa codes") {
  TEST_CASE("every code the broker answers per verb is in the specification's list") {
    // Every flag set of up to two call flags (and none): the frame's `flags` header can carry any.
    const long single[] = {TMASYNC,  TMONEPHASE,   TMFAIL,     TMNOWAIT,   TMRESUME, TMSUCCESS,
                           TMSUSPEND, TMSTARTRSCAN, TMENDRSCAN, TMMULTIPLE, TMJOIN,   TMMIGRATE};
    std::set<long> flag_sets{TMNOFLAGS};
    for (long a : single)
      for (long b : single) flag_sets.insert(a | b);

    std::map<xa_verb, std::set<int>> seen;
    for (auto verb : kVerbs)
      for (long flags : flag_sets)
        for (auto state : kStates)
          for (auto caller : kCallers)
            for (bool others : {false, true})
              for (bool work : {false, true})
                for (int rolled_back : {XA_RBTIMEOUT, XA_RBROLLBACK, XA_RBDEADLOCK}) {
                  call_context c{verb, flags, state, caller};
                  c.others_associated = others;
                  c.has_work = work;
                  c.rolled_back_code = rolled_back;
                  int code = decide(c).code;
                  INFO(to_string(verb) << " flags " << escrow::xa_flags_name(flags) << " state " << to_string(state)
                                       << " -> " << escrow::xa_result_name(code));
                  CHECK(spec_allows(verb, code, flags));
                  seen[verb].insert(code);
                }

    // Around decide(), with the flags a frame of that verb may carry (any: the codes below do not
    // depend on them, except XA_RB* from commit, which decide() gives only with TMONEPHASE):
    //   XAER_INVAL   every verb: a bad flags, xid or formatID header (broker/core/transactions.cpp
    //                handle_xa), unsupported flags (decide);
    //   XAER_PROTO   every verb: a branch whose write is in flight (resource_manager::call);
    //   XAER_RMFAIL  prepare, commit, rollback, forget: the store refused the write
    //                (resource_manager::finish);
    //   XAER_RMERR   prepare: max-prepared-branches-per-user (handle_xa, prepare_refusal); commit,
    //                rollback, forget under an admin login: an xid of several users' prepared
    //                branches (resource_manager::lookup).
    // An ERROR frame (too many open transactions at XA-START, a frame without a receipt) is no XA
    // answer: the switch makes it XAER_RMERR, which every call may return.
    std::map<xa_verb, std::set<int>> around{
        {xa_verb::start, {XAER_INVAL, XAER_PROTO}},
        {xa_verb::end, {XAER_INVAL, XAER_PROTO}},
        {xa_verb::prepare, {XAER_INVAL, XAER_PROTO, XAER_RMFAIL, XAER_RMERR}},
        {xa_verb::commit, {XAER_INVAL, XAER_PROTO, XAER_RMFAIL, XAER_RMERR}},
        {xa_verb::rollback, {XAER_INVAL, XAER_PROTO, XAER_RMFAIL, XAER_RMERR}},
        {xa_verb::forget, {XAER_INVAL, XAER_PROTO, XAER_RMFAIL, XAER_RMERR}},
    };
    for (auto& [verb, codes] : around)
      for (int code : codes) {
        INFO(to_string(verb) << " " << escrow::xa_result_name(code));
        CHECK(spec_allows(verb, code, TMNOFLAGS));
        seen[verb].insert(code);
      }

    // XA-RECOVER (resource_manager::recover, handle_xa) answers XA_OK with the list, XAER_INVAL
    // (flags, count) or XAER_PROTO (a continuation without an open scan): resource_manager_test
    // walks those; xa_recover may return both errors.

    // Never XA_RETRY, never XAER_ASYNC: the broker does not block and has no asynchronous mode.
    for (auto& [verb, codes] : seen) {
      CHECK_FALSE(codes.count(XA_RETRY));
      CHECK_FALSE(codes.count(XAER_ASYNC));
    }
  }
}
