// The XA state tables (rm::decide) against a table derived independently from the specification
// (/work/shared/XA.md, "Rules the tables give", and DESIGN.md "The XA state machine"). expected()
// below is written from those rules alone and never calls decide(); every combination of branch
// state, caller association, verb, flags, other associations and work is compared with it, then a
// few global properties are asserted over all combinations and single rules are spot-checked.
//
// Where XA.md is silent and two readings are defensible, expected() accepts both and says so; the
// comment "XA.md silent" marks each such place.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "escrow/rm/state_machine.h"
#include "escrow/xa.h"
#include "escrow/xid.h"

using namespace escrow::rm;

namespace {

// ---------------------------------------------------------------------------------------------
// The independent table.

// Stands for "any XA_RB* code" where the specification names the range and not a member.
constexpr int kAnyRollback = 1000;

struct outcome {
  int code;
  action next;
};

struct expectation {
  std::vector<outcome> accepted;  // decide() must match one of these
  const char* rule;               // the XA.md rule that gives the answer (for failure messages)
};

expectation one(int code, action next, const char* rule) { return {{{code, next}}, rule}; }
expectation either(outcome a, outcome b, const char* rule) { return {{a, b}, rule}; }

bool is_rollback_code(int code) { return code >= XA_RBBASE && code <= XA_RBEND; }

bool matches(const decision& d, const outcome& o) {
  bool code_ok = o.code == kAnyRollback ? is_rollback_code(d.code) : d.code == o.code;
  return code_ok && d.next == o.next;
}

bool has(long flags, long flag) { return (flags & flag) == flag; }
bool subset(long flags, long allowed) { return (flags & ~allowed) == 0; }

// The call flags each verb supports (XA.md "Flags" and the verb rules). TMASYNC is not supported
// (the switch does not declare TMUSEASYNC) and neither is TMMIGRATE.
bool supported(xa_verb verb, long flags) {
  switch (verb) {
    case xa_verb::start:
      // TMNOFLAGS, TMJOIN or TMRESUME (never both), optionally TMNOWAIT.
      return subset(flags, TMJOIN | TMRESUME | TMNOWAIT) && !(has(flags, TMJOIN) && has(flags, TMRESUME));
    case xa_verb::end:
      // Exactly one of TMSUCCESS, TMFAIL, TMSUSPEND.
      return flags == TMSUCCESS || flags == TMFAIL || flags == TMSUSPEND;
    case xa_verb::commit:
      // TMONEPHASE and TMNOWAIT (the broker never blocks, so TMNOWAIT changes nothing).
      return subset(flags, TMONEPHASE | TMNOWAIT);
    case xa_verb::prepare:
    case xa_verb::rollback:
    case xa_verb::forget: return flags == TMNOFLAGS;
  }
  return false;
}

bool heuristic(branch_state s) {
  return s == branch_state::heuristic_committed || s == branch_state::heuristic_rolled_back ||
         s == branch_state::heuristic_mixed;
}

int heuristic_code(branch_state s) {
  if (s == branch_state::heuristic_committed) return XA_HEURCOM;
  if (s == branch_state::heuristic_rolled_back) return XA_HEURRB;
  return XA_HEURMIX;
}

struct combo {
  xa_verb verb;
  long flags;
  branch_state state;
  association caller;
  bool others;
  bool work;
  int rb_code;  // the code a rolled_back branch answers
};

expectation expected_start(const combo& c) {
  const bool join = has(c.flags, TMJOIN), resume = has(c.flags, TMRESUME);
  if (!join && !resume) {
    if (c.caller != association::none) return one(XAER_PROTO, action::nothing, "xa_start needs T0");
    if (c.state == branch_state::none) return one(XA_OK, action::create, "xa_start S0 -> S1, T1");
    return one(XAER_DUPID, action::nothing, "a known Xid without TMJOIN/TMRESUME: XAER_DUPID");
  }
  if (c.state == branch_state::none)
    return one(XAER_NOTA, action::nothing, "start TMJOIN/TMRESUME of an unknown xid: XAER_NOTA");
  if (resume) {
    // TMRESUME resumes the caller's own suspended association (T2 -> T1); the branch stays S1
    // while suspended (xa_end from T2 "needs S1").
    if (c.caller != association::suspended_here)
      return one(XAER_PROTO, action::nothing, "TMRESUME only after this caller's TMSUSPEND");
    switch (c.state) {
      case branch_state::active: return one(XA_OK, action::resume, "TMRESUME -> T1, S1");
      case branch_state::rollback_only:
        // XA.md silent: XA_RB* from xa_start; resumed or left suspended (to be ended) both work.
        return either({kAnyRollback, action::nothing}, {kAnyRollback, action::resume},
                      "resume of a rollback-only branch answers XA_RB*");
      case branch_state::rolled_back:
        // XA.md silent: XA_RB*; the association is either left suspended or dropped.
        return either({c.rb_code, action::nothing}, {c.rb_code, action::end_rolled_back},
                      "resume of a branch the broker rolled back answers its XA_RB*");
      default: return one(XAER_PROTO, action::nothing, "TMRESUME needs a suspended (S1) branch");
    }
  }
  if (c.caller != association::none) return one(XAER_PROTO, action::nothing, "xa_start needs T0");
  switch (c.state) {
    case branch_state::idle:    // S2: XA.md's TMJOIN case
    case branch_state::active:  // another connection associated: tightly coupled join
      return one(XA_OK, action::join, "TMJOIN joins an existing branch -> T1, S1");
    case branch_state::rollback_only:
      return one(kAnyRollback, action::nothing, "joining a rollback-only branch answers XA_RB*, not associated");
    case branch_state::rolled_back:
      return one(c.rb_code, action::nothing, "joining a branch the broker rolled back answers its XA_RB*");
    default: return one(XAER_PROTO, action::nothing, "TMJOIN needs S1/S2; prepared or heuristic: XAER_PROTO");
  }
}

expectation expected_end(const combo& c) {
  if (c.state == branch_state::none) return one(XAER_NOTA, action::nothing, "end of an unknown xid: XAER_NOTA");
  if (c.caller == association::none || c.caller == association::elsewhere)
    return one(XAER_PROTO, action::nothing, "xa_end of an Xid that is not the associated one: XAER_PROTO");
  if (c.flags == TMSUSPEND && c.caller == association::suspended_here)
    return one(XAER_PROTO, action::nothing, "TMSUSPEND needs T1; the caller is already suspended (T2)");
  switch (c.state) {
    case branch_state::active:
      if (c.flags == TMSUSPEND) return one(XA_OK, action::suspend, "TMSUSPEND -> T2");
      if (c.flags == TMSUCCESS) return one(XA_OK, action::end_success, "TMSUCCESS -> S2, T0");
      return either({XA_OK, action::end_fail}, {kAnyRollback, action::end_fail},
                    "TMFAIL -> S4, T0 (may answer XA_RB*)");
    case branch_state::rollback_only:
      if (c.flags == TMSUSPEND)
        // XA.md silent: XA_RB*, and either dissociated (as XA_RB* from TMFAIL) or suspended.
        return either({kAnyRollback, action::end_fail}, {kAnyRollback, action::suspend},
                      "end TMSUSPEND of a rollback-only branch answers XA_RB*");
      return one(kAnyRollback, action::end_fail, "end of a rollback-only branch answers XA_RB*, T0, stays S4");
    case branch_state::rolled_back:
      if (c.flags == TMSUSPEND)
        return either({c.rb_code, action::end_rolled_back}, {c.rb_code, action::suspend},
                      "end TMSUSPEND of a branch the broker rolled back answers its XA_RB*");
      return one(c.rb_code, action::end_rolled_back, "end of a branch the broker rolled back: its XA_RB*, T0");
    default: return one(XAER_PROTO, action::nothing, "xa_end needs S1");
  }
}

// A branch the broker rolled back answers its XA_RB* code, and is forgotten only when no other
// connection is still associated with it (their frames must keep landing in the dead branch).
expectation rolled_back_answer(const combo& c, const char* rule) {
  return one(c.rb_code, c.others ? action::nothing : action::discard, rule);
}

expectation expected_prepare(const combo& c) {
  if (c.state == branch_state::none) return one(XAER_NOTA, action::nothing, "prepare of an unknown Xid: XAER_NOTA");
  if (c.caller == association::here || c.caller == association::suspended_here)
    return one(XAER_PROTO, action::nothing, "xa_prepare needs T0");
  switch (c.state) {
    case branch_state::idle:
      if (c.work) return one(XA_OK, action::prepare, "xa_prepare S2 -> S3");
      return one(XA_RDONLY, action::read_only, "XA_RDONLY: the branch did nothing, forgotten (S0)");
    case branch_state::rollback_only:
      // Other connections still associated have not ended: the branch is not finished.
      if (c.others) return one(XAER_PROTO, action::nothing, "prepare while others are still associated");
      return one(kAnyRollback, action::roll_back, "XA_RB*: already rolled back (S0)");
    case branch_state::rolled_back: return rolled_back_answer(c, "XA_RB*: already rolled back (S0)");
    default: return one(XAER_PROTO, action::nothing, "xa_prepare needs S2");
  }
}

expectation expected_commit(const combo& c) {
  if (c.state == branch_state::none) return one(XAER_NOTA, action::nothing, "commit of an unknown Xid: XAER_NOTA");
  if (c.caller == association::here || c.caller == association::suspended_here)
    return one(XAER_PROTO, action::nothing, "commit while the caller is still associated");
  if (has(c.flags, TMONEPHASE)) {
    switch (c.state) {
      case branch_state::idle: return one(XA_OK, action::commit_one_phase, "TMONEPHASE needs S2");
      case branch_state::rollback_only:
        if (c.others) return one(XAER_PROTO, action::nothing, "commit while others are still associated");
        return one(kAnyRollback, action::roll_back, "XA_RB* is a valid answer with TMONEPHASE");
      case branch_state::rolled_back: return rolled_back_answer(c, "XA_RB* is a valid answer with TMONEPHASE");
      case branch_state::prepared:
        return one(XAER_PROTO, action::nothing, "TMONEPHASE on a prepared branch: XAER_PROTO");
      default: return one(XAER_PROTO, action::nothing, "with TMONEPHASE commit needs S2");
    }
  }
  if (c.state == branch_state::prepared) return one(XA_OK, action::commit_prepared, "commit S3 -> S0");
  if (heuristic(c.state))
    return one(heuristic_code(c.state), action::nothing, "S5: commit answers XA_HEUR*, forget needed");
  // Includes rolled_back: "XA_RB* is a valid answer only with TMONEPHASE".
  return one(XAER_PROTO, action::nothing, "without TMONEPHASE commit needs S3; XA_RB* only with TMONEPHASE");
}

expectation expected_rollback(const combo& c) {
  if (c.state == branch_state::none) return one(XAER_NOTA, action::nothing, "rollback of an unknown Xid: XAER_NOTA");
  if (c.caller == association::here || c.caller == association::suspended_here)
    return one(XAER_PROTO, action::nothing, "rollback while the caller is still associated");
  switch (c.state) {
    case branch_state::idle:
    case branch_state::prepared: return one(XA_OK, action::roll_back, "xa_rollback from S2, S3 -> S0");
    case branch_state::rollback_only:
      // Other connections still associated have not ended: rolling back under them would leave
      // their next SEND outside any branch.
      if (c.others) return one(XAER_PROTO, action::nothing, "rollback while others are still associated");
      // XA: a rollback of a rollback-only branch may report why it was marked (XA_RB*).
      return either({XA_OK, action::roll_back}, {kAnyRollback, action::roll_back}, "xa_rollback from S4 -> S0");
    case branch_state::rolled_back:
      return rolled_back_answer(c, "rollback of a branch the broker rolled back: its XA_RB*");
    case branch_state::active: return one(XAER_PROTO, action::nothing, "xa_rollback needs S2, S3 or S4");
    default: return one(heuristic_code(c.state), action::nothing, "S5: rollback answers XA_HEUR*, forget needed");
  }
}

expectation expected_forget(const combo& c) {
  if (heuristic(c.state)) return one(XA_OK, action::forget, "xa_forget S5 -> S0");
  return one(XAER_NOTA, action::nothing, "forget of anything but S5: XAER_NOTA");
}

expectation expected(const combo& c) {
  if (!supported(c.verb, c.flags)) return one(XAER_INVAL, action::nothing, "unsupported flags: XAER_INVAL");
  switch (c.verb) {
    case xa_verb::start: return expected_start(c);
    case xa_verb::end: return expected_end(c);
    case xa_verb::prepare: return expected_prepare(c);
    case xa_verb::commit: return expected_commit(c);
    case xa_verb::rollback: return expected_rollback(c);
    case xa_verb::forget: return expected_forget(c);
  }
  return one(XAER_INVAL, action::nothing, "unknown verb");
}

// ---------------------------------------------------------------------------------------------
// The combinations.

const branch_state kStates[] = {
    branch_state::none,          branch_state::active,
    branch_state::idle,          branch_state::prepared,
    branch_state::rollback_only, branch_state::heuristic_committed,
    branch_state::heuristic_rolled_back, branch_state::heuristic_mixed,
    branch_state::rolled_back,
};
const association kAssociations[] = {association::none, association::here, association::suspended_here,
                                     association::elsewhere};
const xa_verb kVerbs[] = {xa_verb::start,  xa_verb::end,      xa_verb::prepare,
                          xa_verb::commit, xa_verb::rollback, xa_verb::forget};
// TMNOFLAGS, every call flag alone, the meaningful pairs, and a bit that is no XA flag at all.
const long kFlagSets[] = {
    TMNOFLAGS,  TMASYNC,    TMONEPHASE,   TMFAIL,     TMNOWAIT,   TMRESUME,
    TMSUCCESS,  TMSUSPEND,  TMSTARTRSCAN, TMENDRSCAN, TMMULTIPLE, TMJOIN,
    TMMIGRATE,
    TMJOIN | TMRESUME,        TMSUCCESS | TMFAIL,       TMONEPHASE | TMNOWAIT,
    TMJOIN | TMNOWAIT,        TMRESUME | TMNOWAIT,      TMSUSPEND | TMMIGRATE,
    TMSUCCESS | TMSUSPEND,    TMFAIL | TMSUSPEND,       TMSTARTRSCAN | TMENDRSCAN,
    TMONEPHASE | TMASYNC,     TMSUCCESS | TMASYNC,      TMJOIN | TMSUCCESS,
    0x00000800L,
};

const char* to_string(association a) {
  switch (a) {
    case association::none: return "none";
    case association::here: return "here";
    case association::suspended_here: return "suspended_here";
    case association::elsewhere: return "elsewhere";
  }
  return "?";
}

std::string describe(const combo& c) {
  // The hex value too: xa_flags_name drops bits that are no XA flag.
  char hex[16];
  std::snprintf(hex, sizeof hex, "%#lx", static_cast<unsigned long>(c.flags));
  return std::string(to_string(c.verb)) + " flags=" + escrow::xa_flags_name(c.flags) + " (" + hex + ") state=" +
         to_string(c.state) + " caller=" + to_string(c.caller) + " others=" + (c.others ? "1" : "0") +
         " work=" + (c.work ? "1" : "0");
}

decision run(const combo& c) {
  call_context ctx{c.verb, c.flags, c.state, c.caller};
  ctx.others_associated = c.others;
  ctx.has_work = c.work;
  ctx.rolled_back_code = c.rb_code;
  return decide(ctx);
}

template <typename F>
void for_each_combo(int rb_code, F f) {
  for (auto state : kStates)
    for (auto caller : kAssociations)
      for (auto verb : kVerbs)
        for (long flags : kFlagSets)
          for (bool others : {false, true})
            for (bool work : {false, true}) f(combo{verb, flags, state, caller, others, work, rb_code});
}

const char* action_name(action a) {
  switch (a) {
    case action::nothing: return "nothing";
    case action::create: return "create";
    case action::join: return "join";
    case action::resume: return "resume";
    case action::suspend: return "suspend";
    case action::end_success: return "end_success";
    case action::end_fail: return "end_fail";
    case action::end_rolled_back: return "end_rolled_back";
    case action::prepare: return "prepare";
    case action::read_only: return "read_only";
    case action::commit_one_phase: return "commit_one_phase";
    case action::commit_prepared: return "commit_prepared";
    case action::roll_back: return "roll_back";
    case action::forget: return "forget";
    case action::discard: return "discard";
    case action::heuristic_commit: return "heuristic_commit";
    case action::heuristic_rollback: return "heuristic_rollback";
    case action::time_out: return "time_out";
  }
  return "?";
}

std::string show(int code, action a) {
  return (code == kAnyRollback ? std::string("XA_RB*") : escrow::xa_result_name(code)) + "/" + action_name(a);
}

// The actions after which the branch no longer exists.
bool removes(action a) {
  return a == action::read_only || a == action::commit_one_phase || a == action::commit_prepared ||
         a == action::roll_back || a == action::forget || a == action::discard;
}

}  // namespace

TEST_SUITE("rm/state_machine") {
  TEST_CASE("every combination agrees with the table derived from XA.md") {
    // Two rolled-back codes, so a decide() that always answered XA_RBTIMEOUT would be caught.
    for (int rb_code : {XA_RBTIMEOUT, XA_RBDEADLOCK}) {
      std::size_t combos = 0, disagreements = 0;
      for_each_combo(rb_code, [&](const combo& c) {
        ++combos;
        decision d = run(c);
        expectation e = expected(c);
        bool ok = false;
        for (const auto& o : e.accepted) ok = ok || matches(d, o);
        if (ok) return;
        ++disagreements;
        std::string want;
        for (const auto& o : e.accepted) want += (want.empty() ? "" : " or ") + show(o.code, o.next);
        // Each disagreement is its own failure, with the combination and the rule.
        FAIL_CHECK(describe(c) << ": decide=" << show(d.code, d.next) << " expected=" << want << " ("
                                   << std::string(e.rule) << ")");
      });
      CHECK(combos == 9 * 4 * 6 * std::size(kFlagSets) * 2 * 2);
      CHECK(disagreements == 0);
    }
  }

  TEST_CASE("global properties over all combinations") {
    for_each_combo(XA_RBTIMEOUT, [&](const combo& c) {
      decision d = run(c);
      INFO(describe(c), " -> ", show(d.code, d.next));
      const bool valid = supported(c.verb, c.flags);

      // The broker never blocks: no call answers XA_RETRY, rollback least of all.
      CHECK(d.code != XA_RETRY);

      // Unsupported flags are XAER_INVAL whatever the state; supported ones never are.
      CHECK((d.code == XAER_INVAL) == !valid);
      if (!valid) CHECK(d.next == action::nothing);

      // An unknown xid: XAER_NOTA for everything but start, and for start with TMJOIN/TMRESUME.
      if (valid && c.state == branch_state::none) {
        bool names_existing = c.verb != xa_verb::start || (c.flags & (TMJOIN | TMRESUME)) != 0;
        if (names_existing) CHECK(d.code == XAER_NOTA);
        else CHECK(d.code != XAER_NOTA);
      }

      // A heuristically completed branch: commit (two-phase) and rollback answer its XA_HEUR* code.
      // Only callers not associated with it are walked: a heuristic branch was prepared, and
      // prepare needs every association ended.
      bool unassociated = c.caller == association::none || c.caller == association::elsewhere;
      if (valid && heuristic(c.state) && unassociated &&
          ((c.verb == xa_verb::commit && !(c.flags & TMONEPHASE)) || c.verb == xa_verb::rollback))
        CHECK(d.code == heuristic_code(c.state));
      // ... and only forget removes it.
      if (heuristic(c.state) && removes(d.next)) CHECK((c.verb == xa_verb::forget && d.next == action::forget));

      // XA_HEUR* codes come only from heuristic branches.
      if (d.code == XA_HEURCOM || d.code == XA_HEURRB || d.code == XA_HEURMIX || d.code == XA_HEURHAZ)
        CHECK(heuristic(c.state));

      // Prepare of an idle branch without work: XA_RDONLY and the branch is forgotten.
      if (valid && c.verb == xa_verb::prepare && c.state == branch_state::idle && unassociated) {
        if (!c.work) CHECK((d.code == XA_RDONLY && d.next == action::read_only));
        else CHECK((d.code == XA_OK && d.next == action::prepare));
      }
      // XA_RDONLY only from prepare.
      if (d.code == XA_RDONLY) CHECK(c.verb == xa_verb::prepare);

      // Two-phase commit never answers XA_RB* (XA.md: valid only with TMONEPHASE).
      if (c.verb == xa_verb::commit && !(c.flags & TMONEPHASE)) CHECK_FALSE(is_rollback_code(d.code));

      // An error code changes nothing.
      if (d.code < 0) CHECK(d.next == action::nothing);

      // decide() never answers the operator's or the broker's own actions.
      CHECK(d.next != action::heuristic_commit);
      CHECK(d.next != action::heuristic_rollback);
      CHECK(d.next != action::time_out);
    });
  }

  TEST_CASE("spot checks, one rule each") {
    auto d = [](xa_verb v, long flags, branch_state s, association a, bool others = false, bool work = false,
                int rb = XA_RBTIMEOUT) {
      call_context c{v, flags, s, a};
      c.others_associated = others;
      c.has_work = work;
      c.rolled_back_code = rb;
      return decide(c);
    };
    using bs = branch_state;
    using as = association;

    // xa_start S0, T0, TMNOFLAGS: a new active branch, caller associated.
    CHECK(d(xa_verb::start, TMNOFLAGS, bs::none, as::none).code == XA_OK);
    CHECK(d(xa_verb::start, TMNOFLAGS, bs::none, as::none).next == action::create);
    // "A known Xid without TMJOIN/TMRESUME: XAER_DUPID."
    CHECK(d(xa_verb::start, TMNOFLAGS, bs::idle, as::none).code == XAER_DUPID);
    CHECK(d(xa_verb::start, TMNOFLAGS, bs::prepared, as::none).code == XAER_DUPID);
    // xa_start needs T0: a connection associated with another branch may not start one.
    CHECK(d(xa_verb::start, TMNOFLAGS, bs::none, as::elsewhere).code == XAER_PROTO);
    // TMJOIN of an idle branch (S2) joins it; of an unknown one is XAER_NOTA.
    CHECK(d(xa_verb::start, TMJOIN, bs::idle, as::none).next == action::join);
    CHECK(d(xa_verb::start, TMJOIN, bs::none, as::none).code == XAER_NOTA);
    CHECK(d(xa_verb::start, TMRESUME, bs::none, as::none).code == XAER_NOTA);
    // TMJOIN of a prepared branch: it is past S2.
    CHECK(d(xa_verb::start, TMJOIN, bs::prepared, as::none).code == XAER_PROTO);
    // TMRESUME after TMSUSPEND resumes; without a suspension it is a protocol error.
    CHECK(d(xa_verb::start, TMRESUME, bs::active, as::suspended_here).next == action::resume);
    CHECK(d(xa_verb::start, TMRESUME, bs::active, as::none, true).code == XAER_PROTO);
    // "Unsupported flags: XAER_INVAL": TMJOIN and TMRESUME together, and TMASYNC.
    CHECK(d(xa_verb::start, TMJOIN | TMRESUME, bs::idle, as::none).code == XAER_INVAL);
    CHECK(d(xa_verb::start, TMASYNC, bs::none, as::none).code == XAER_INVAL);

    // xa_end TMSUCCESS -> S2, TMFAIL -> S4, TMSUSPEND -> T2.
    CHECK(d(xa_verb::end, TMSUCCESS, bs::active, as::here).next == action::end_success);
    CHECK(d(xa_verb::end, TMFAIL, bs::active, as::here).next == action::end_fail);
    CHECK(d(xa_verb::end, TMSUSPEND, bs::active, as::here).next == action::suspend);
    // xa_end of a suspended association (T2) with TMSUCCESS ends it.
    CHECK(d(xa_verb::end, TMSUCCESS, bs::active, as::suspended_here).next == action::end_success);
    // "An Xid that is not the associated one: XAER_PROTO."
    CHECK(d(xa_verb::end, TMSUCCESS, bs::active, as::elsewhere, true).code == XAER_PROTO);
    CHECK(d(xa_verb::end, TMSUCCESS, bs::active, as::none, true).code == XAER_PROTO);
    // xa_end needs one of TMSUCCESS, TMFAIL, TMSUSPEND.
    CHECK(d(xa_verb::end, TMNOFLAGS, bs::active, as::here).code == XAER_INVAL);
    CHECK(d(xa_verb::end, TMSUCCESS | TMFAIL, bs::active, as::here).code == XAER_INVAL);
    // Unknown xid: XAER_NOTA even for a caller associated elsewhere.
    CHECK(d(xa_verb::end, TMSUCCESS, bs::none, as::elsewhere).code == XAER_NOTA);

    // xa_prepare S2 with work -> S3; without work XA_RDONLY and forgotten.
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::idle, as::none, false, true).next == action::prepare);
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::idle, as::none, false, false).code == XA_RDONLY);
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::idle, as::none, false, false).next == action::read_only);
    // xa_prepare of a rollback-only branch: XA_RB*, rolled back.
    auto p = d(xa_verb::prepare, TMNOFLAGS, bs::rollback_only, as::none);
    CHECK(is_rollback_code(p.code));
    CHECK(p.next == action::roll_back);
    // xa_prepare needs S2: an active branch or a prepared one is a protocol error.
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::active, as::none, true, true).code == XAER_PROTO);
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::prepared, as::none).code == XAER_PROTO);
    // xa_prepare needs T0.
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::active, as::here, false, true).code == XAER_PROTO);
    // The code a branch rolled back by the broker remembers is the one answered.
    CHECK(d(xa_verb::prepare, TMNOFLAGS, bs::rolled_back, as::none, false, false, XA_RBDEADLOCK).code ==
          XA_RBDEADLOCK);

    // xa_commit two-phase needs S3; TMONEPHASE needs S2.
    CHECK(d(xa_verb::commit, TMNOFLAGS, bs::prepared, as::none).next == action::commit_prepared);
    CHECK(d(xa_verb::commit, TMONEPHASE, bs::idle, as::none, false, true).next == action::commit_one_phase);
    CHECK(d(xa_verb::commit, TMNOFLAGS, bs::idle, as::none, false, true).code == XAER_PROTO);
    // "TMONEPHASE on a prepared branch: XAER_PROTO."
    CHECK(d(xa_verb::commit, TMONEPHASE, bs::prepared, as::none).code == XAER_PROTO);
    // TMONEPHASE|TMNOWAIT is accepted: the broker never blocks.
    CHECK(d(xa_verb::commit, TMONEPHASE | TMNOWAIT, bs::idle, as::none, false, true).code == XA_OK);
    // "XA_RB* is a valid answer only with TMONEPHASE."
    CHECK(is_rollback_code(d(xa_verb::commit, TMONEPHASE, bs::rollback_only, as::none).code));
    CHECK(is_rollback_code(d(xa_verb::commit, TMONEPHASE, bs::rolled_back, as::none).code));
    CHECK_FALSE(is_rollback_code(d(xa_verb::commit, TMNOFLAGS, bs::rolled_back, as::none).code));
    CHECK_FALSE(is_rollback_code(d(xa_verb::commit, TMNOFLAGS, bs::rollback_only, as::none).code));
    // S5: commit and rollback answer the heuristic outcome and change nothing.
    CHECK(d(xa_verb::commit, TMNOFLAGS, bs::heuristic_committed, as::none).code == XA_HEURCOM);
    CHECK(d(xa_verb::commit, TMNOFLAGS, bs::heuristic_rolled_back, as::none).code == XA_HEURRB);
    CHECK(d(xa_verb::commit, TMNOFLAGS, bs::heuristic_mixed, as::none).code == XA_HEURMIX);
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::heuristic_committed, as::none).next == action::nothing);
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::heuristic_rolled_back, as::none).code == XA_HEURRB);

    // xa_rollback from S2, S3, S4; an active branch is a protocol error.
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::idle, as::none).next == action::roll_back);
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::prepared, as::none).next == action::roll_back);
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::rollback_only, as::none, false).next == action::roll_back);
    // ... but not under another connection still associated with it.
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::rollback_only, as::none, true).code == XAER_PROTO);
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::active, as::none, true).code == XAER_PROTO);
    CHECK(d(xa_verb::rollback, TMNOFLAGS, bs::none, as::none).code == XAER_NOTA);

    // xa_forget: S5 -> S0, anything else XAER_NOTA.
    CHECK(d(xa_verb::forget, TMNOFLAGS, bs::heuristic_mixed, as::none).next == action::forget);
    CHECK(d(xa_verb::forget, TMNOFLAGS, bs::prepared, as::none).code == XAER_NOTA);
    CHECK(d(xa_verb::forget, TMNOFLAGS, bs::rolled_back, as::none).code == XAER_NOTA);
    CHECK(d(xa_verb::forget, TMNOFLAGS, bs::none, as::none).code == XAER_NOTA);
  }

  TEST_CASE("names of states and verbs") {
    // Operators read these in the admin command; each state has its own.
    CHECK(std::string(to_string(branch_state::prepared)) == "prepared");
    CHECK(std::string(to_string(branch_state::none)) != std::string(to_string(branch_state::rolled_back)));
    CHECK(std::string(to_string(xa_verb::commit)) == "commit");
    CHECK(is_heuristic(branch_state::heuristic_mixed));
    CHECK_FALSE(is_heuristic(branch_state::prepared));
    CHECK_FALSE(is_heuristic(branch_state::rolled_back));
  }
}
