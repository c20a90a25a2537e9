// escrow_xa_switch: the ten XA entry points, each a translation of one XA call into one XA frame
// (or a short series, for xa_recover, and for a decision of a branch prepared before the identity
// trailer) on the calling thread's connection for the rmid. The XA state machine lives in the
// broker; the switch only checks arguments, keeps the connection, the association bookkeeping
// xa_close needs, and maps answers to codes, never one the call may not return (docs/xa.md).
//
// State is thread-local, so no lock is ever held, let alone across a network round trip.
#include "escrow/xa_switch.h"

#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/client.h"
#include "escrow/xa.h"
#include "escrow/xid.h"
#include "xa_switch_internal.h"

namespace escrow::xa_switch_detail {
namespace {

// One rmid opened by this thread: xa_open made it, xa_close ends it.
struct rm_state {
  open_options options;
  trailer identity;  // of resource_name(options) and options.branch: every new branch's trailer
  std::unique_ptr<client::connection> connection;  // null once the connection dropped
  std::set<xid> associated;                        // broker xids started (or suspended) and not ended
};

thread_local std::map<int, rm_state> t_rms;
thread_local std::string t_last_error;

int fail(int code, std::string why) {
  t_last_error = std::move(why);
  return code;
}

std::string where(const rm_state& rm) {
  return rm.options.host + ":" + std::to_string(rm.options.port);
}

// The connection has gone (or can no longer be trusted, after a timeout): forget it. The broker
// marks any branch this connection was associated with rollback-only.
void drop(rm_state& rm) {
  if (rm.connection) {
    auto c = std::move(rm.connection);
    c->close();  // never throws; quick when the connection is already lost
  }
  rm.associated.clear();
}

// The rmid's state, or a code and t_last_error when the call cannot go to the broker.
rm_state* usable(int rmid, const char* call, int& code) {
  auto it = t_rms.find(rmid);
  if (it == t_rms.end()) {
    code = fail(XAER_PROTO, std::string(call) + ": rmid " + std::to_string(rmid) +
                                " is not open on this thread: call xa_open first (once per thread)");
    return nullptr;
  }
  rm_state& rm = it->second;
  if (!rm.connection || !rm.connection->is_open()) {
    drop(rm);
    code = fail(XAER_RMFAIL, std::string(call) + ": the connection of rmid " + std::to_string(rmid) + " to " +
                                 where(rm) + " is lost: call xa_open to reopen it once the broker is back");
    return nullptr;
  }
  return &rm;
}

// Whether `flags` has only bits from `allowed`; else XAER_INVAL with a reason.
bool flags_ok(long flags, long allowed, const char* call, int& code) {
  if ((flags & ~allowed) == 0) return true;
  long extra = flags & ~allowed;
  std::string names = xa_flags_name(extra);
  if (names == "TMNOFLAGS") names = "unknown bits";
  code = fail(XAER_INVAL, std::string(call) + " does not take " + names +
                              ((extra & TMASYNC) ? " (the switch has no asynchronous mode: TMUSEASYNC is not set)" : ""));
  return false;
}

// An answer the switch cannot take at its word (unreadable, or a code the call may not return):
// nothing is known of the branch, so the connection is closed and the call answers XAER_RMFAIL,
// "unavailable, try again", which every call that reaches the broker may return.
int untrusted(rm_state& rm, const char* call, const std::string& what) {
  drop(rm);
  return fail(XAER_RMFAIL, std::string(call) + ": " + what +
                               "; the switch closed the connection: call xa_open, then try again (is the broker at " +
                               where(rm) + " an Escrow broker of this version?)");
}

// Sends one XA frame for entry point `e` (called with `flags`) and returns the broker's code, or
// XAER_RMFAIL for an answer the call may not return; on failure drops the connection as needed.
// `reply` (optional) receives the RECEIPT.
int send_xa(rm_state& rm, entry e, long flags, frame request, frame* reply) {
  const char* call = entry_name(e);
  try {
    frame r = rm.connection->call(std::move(request), rm.options.timeout);
    const std::string* result = r.find("xa-result");
    if (!result) return untrusted(rm, call, "the broker answered without an xa-result header");
    auto code = xa_result_from_name(*result);
    if (!code) return untrusted(rm, call, "the broker answered the unknown XA result '" + result->substr(0, 60) + "'");
    // XA-RECOVER answers XA_OK with the page; a count is never the broker's code.
    bool allowed = e == entry::recover ? *code == XA_OK || (*code < 0 && may_return(e, *code, flags))
                                       : may_return(e, *code, flags);
    if (!allowed)
      return untrusted(rm, call, "the broker answered " + *result + ", which " + call +
                                     (e == entry::commit && !(flags & TMONEPHASE) ? " without TMONEPHASE" : "") +
                                     " may not return");
    if (*code != XA_OK) {
      std::string message(r.get("message"));
      t_last_error = std::string(call) + ": " + *result + (message.empty() ? "" : ": " + message);
    }
    if (reply) *reply = std::move(r);
    return *code;
  } catch (const client::error& e) {
    switch (e.which()) {
      case client::error::kind::connection_lost:
        drop(rm);
        return fail(XAER_RMFAIL, std::string(call) + ": connection to " + where(rm) + " lost (" + e.what() +
                                     "): call xa_open to reopen it once the broker is back");
      case client::error::kind::timeout:
        drop(rm);
        return fail(XAER_RMFAIL, std::string(call) + ": no answer from " + where(rm) + " within " +
                                     std::to_string(rm.options.timeout.count()) +
                                     " ms; the connection was closed: call xa_open to reopen it "
                                     "(raise timeout= in the open string if the broker is just slow)");
      case client::error::kind::broker_error:
        drop(rm);
        return fail(XAER_RMERR, std::string(call) + ": the broker refused the frame with ERROR: " + e.what() +
                                    (e.detail().empty() ? "" : " (" + e.detail() + ")") +
                                    "; it closed the connection: call xa_open to reopen it");
      case client::error::kind::invalid_argument:
        return fail(XAER_INVAL, std::string(call) + ": " + e.what());
    }
    return fail(XAER_RMERR, std::string(call) + ": " + e.what());
  }
}

frame xa_frame(const char* command, const xid* x, long flags) {
  frame f{command, {}, {}};
  if (x) f.add("xid", x->to_string());
  if (flags != TMNOFLAGS) f.add("flags", xa_flags_name(flags));
  return f;
}

// The shared shape of xa_start, xa_end, xa_prepare, xa_commit, xa_rollback and xa_forget.
int branch_call(entry e, const char* command, XID* x, int rmid, long flags, long allowed,
                long strip = TMNOFLAGS) {
  const char* call = entry_name(e);
  t_last_error.clear();
  int code = XA_OK;
  if (!flags_ok(flags, allowed, call, code)) return code;
  if (!x) return fail(XAER_INVAL, std::string(call) + ": the XID pointer is NULL");
  std::string why;
  if (!to_broker_xid(*x, trailer{}, &why)) return fail(XAER_INVAL, std::string(call) + ": " + why);
  rm_state* rm = usable(rmid, call, code);
  if (!rm) return code;
  auto bx = to_broker_xid(*x, rm->identity, &why);
  code = send_xa(*rm, e, flags, xa_frame(command, &*bx, flags & ~strip), nullptr);
  // A decision for a branch this switch does not know under the resource's trailer: it may have
  // been prepared by a switch before the identity trailer, whose trailer was the rmid. Ask again
  // under that one (one more round trip, only after XAER_NOTA).
  bool decides = e == entry::rollback || e == entry::forget || (e == entry::commit && !(flags & TMONEPHASE));
  if (decides && code == XAER_NOTA && rm->connection) {
    std::string first = t_last_error;
    auto legacy = to_broker_xid(*x, legacy_trailer(rmid), &why);
    code = send_xa(*rm, e, flags, xa_frame(command, &*legacy, flags & ~strip), nullptr);
    if (code == XAER_NOTA)
      t_last_error = first + " (not under the rmid trailer of earlier switches either, " + legacy->to_string() +
                     ": the branch is finished, or belongs to another resource or user; escrow xa list shows what "
                     "the broker holds)";
  }
  if (rm->connection) {
    // The association bookkeeping xa_close needs (the broker keeps the real state).
    if (std::strcmp(command, "XA-START") == 0 && code == XA_OK) rm->associated.insert(*bx);
    if (std::strcmp(command, "XA-END") == 0 &&
        (code == XAER_NOTA || (code >= XA_RBBASE && code <= XA_RBEND) || (code == XA_OK && !(flags & TMSUSPEND))))
      rm->associated.erase(*bx);
  }
  return code;
}

// Records why a call failed without ever throwing (used where an exception was already caught).
int note_failure(const char* call, const char* what) noexcept {
  try {
    t_last_error = std::string(call) + ": " + what;
  } catch (...) {
    t_last_error.clear();
  }
  return XAER_RMERR;
}

// Runs an entry point's body; no exception crosses the C boundary, and no code the entry point may
// not return (may_return; the unit tests show the body never produces one, this is the last guard).
template <typename F>
int guarded(entry e, long flags, F&& body) noexcept {
  const char* call = entry_name(e);
  int code;
  try {
    code = body();
  } catch (const std::exception& ex) {
    code = note_failure(call, ex.what());
  } catch (...) {
    code = note_failure(call, "unexpected failure inside the switch");
  }
  if (may_return(e, code, flags)) return code;
  note_failure(call, "the switch was about to return a code this call may not return (a bug: please report it)");
  return e == entry::complete ? XAER_PROTO : XAER_RMERR;
}

int open_rm(char* info, int rmid, long flags) {
  t_last_error.clear();
  int code = XA_OK;
  if (!flags_ok(flags, TMNOFLAGS, "xa_open", code)) return code;
  std::string why;
  auto options = parse_open_string(info ? std::string_view(info) : std::string_view(), &why);
  if (!options) return fail(XAER_INVAL, "xa_open: " + why);
  auto it = t_rms.find(rmid);
  if (it != t_rms.end() && it->second.connection && it->second.connection->is_open())
    return XA_OK;  // already open on this thread: xa_open may be called again
  // Two rmids of this thread that would give one XID the same broker xid: one branch for two
  // resource managers. Refused, because telling them apart by rmid would make the identity depend
  // on the rmid again (and on which rmids a thread opened).
  trailer identity = identity_trailer(*options);
  for (const auto& [other, state] : t_rms) {
    if (other == rmid || state.identity != identity || state.options.host != options->host ||
        state.options.port != options->port || state.options.login != options->login)
      continue;
    std::string mine = resource_name(*options), theirs = resource_name(state.options);
    auto named = [](const std::string& resource, const std::string& branch) {
      return "resource '" + resource + "'" + (branch.empty() ? "" : " branch '" + branch + "'");
    };
    return fail(XAER_INVAL,
                "xa_open: rmid " + std::to_string(rmid) + " and rmid " + std::to_string(other) +
                    " of this thread name the same broker (" + where(state) + ", login '" + options->login + "') " +
                    (mine == theirs && options->branch == state.options.branch
                         ? "and the same " + named(mine, options->branch)
                         : "and " + named(mine, options->branch) + " and " + named(theirs, state.options.branch) +
                               " have the same trailer " + trailer_hex(identity)) +
                    ": one XID would be one branch for both. Give each its own branch=NAME (or resource=NAME) in "
                    "its open string");
  }
  if (it != t_rms.end()) drop(it->second);

  client::connect_options c;
  c.host = options->host;
  c.port = options->port;
  c.login = options->login;
  c.passcode = options->passcode;
  c.timeout = options->timeout;
  std::unique_ptr<client::connection> connection;
  try {
    connection = client::connection::open(c);
  } catch (const client::error& e) {
    // xa_open may answer only XA_OK, XAER_ASYNC, XAER_RMERR, XAER_INVAL or XAER_PROTO (XA.md):
    // "cannot open the resource manager" is XAER_RMERR, whatever the reason; the last error says
    // which, and a transaction manager retries xa_open later.
    bool unavailable = e.which() == client::error::kind::connection_lost || e.which() == client::error::kind::timeout;
    return fail(XAER_RMERR,
                "xa_open: cannot open a connection to " + options->host + ":" + std::to_string(options->port) + ": " +
                    e.what() + (unavailable ? " (is escrowd running there? try again later)" : ""));
  }
  const frame& connected = connection->connected();
  if (connected.get("xa").find("XA-START") == std::string_view::npos) {
    std::string headers;
    for (const auto& [name, value] : connected.headers) headers += " " + name + ":" + value;
    return fail(XAER_RMERR, "xa_open: the server at " + options->host + ":" + std::to_string(options->port) +
                                " does not offer XA frames in its CONNECTED frame (" + connected.command + headers +
                                "): it is not an Escrow broker");
  }
  rm_state& rm = t_rms[rmid];
  rm.options = *options;
  rm.identity = identity;
  rm.connection = std::move(connection);
  rm.associated.clear();
  return XA_OK;
}

int close_rm(int rmid, long flags) {
  t_last_error.clear();
  int code = XA_OK;
  if (!flags_ok(flags, TMNOFLAGS, "xa_close", code)) return code;
  auto it = t_rms.find(rmid);
  if (it == t_rms.end()) return XA_OK;  // not open: nothing to do
  rm_state& rm = it->second;
  if (rm.connection && rm.connection->is_open() && !rm.associated.empty())
    return fail(XAER_PROTO, "xa_close: this thread still has " + std::to_string(rm.associated.size()) +
                                " branch(es) associated or suspended on rmid " + std::to_string(rmid) +
                                " (first " + rm.associated.begin()->to_string() + "): call xa_end first");
  drop(rm);
  t_rms.erase(it);
  return XA_OK;
}

// One XA-RECOVER page from the broker: appends the TM's XIDs of the branches this rmid's resource
// made (its identity trailer), and of those an earlier switch made under this rmid (the rmid
// trailer), to `out`; `page` = all the broker listed.
int recover_page(rm_state& rm, long flags, long count, int rmid, std::vector<XID>& out, long& page) {
  frame request = xa_frame("XA-RECOVER", nullptr, flags);
  request.add("count", std::to_string(count));
  frame reply;
  int code = send_xa(rm, entry::recover, flags, std::move(request), &reply);
  if (code != XA_OK) return code;
  page = 0;
  std::string_view body = reply.body;
  while (!body.empty()) {
    auto nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::string why;
    auto x = xid::parse(line, &why);
    if (!x) return fail(XAER_RMERR, "xa_recover: the broker listed an unreadable xid: " + why);
    ++page;
    if (auto mine = from_broker_xid(*x, rm.identity)) out.push_back(*mine);
    else if (auto earlier = from_broker_xid(*x, legacy_trailer(rmid))) out.push_back(*earlier);
  }
  return XA_OK;
}

int recover(XID* xids, long count, int rmid, long flags) {
  t_last_error.clear();
  int code = XA_OK;
  if (!flags_ok(flags, TMSTARTRSCAN | TMENDRSCAN, "xa_recover", code)) return code;
  if (count < 0) return fail(XAER_INVAL, "xa_recover: negative count " + std::to_string(count));
  if (count > 0 && !xids) return fail(XAER_INVAL, "xa_recover: the XID array is NULL but count is " + std::to_string(count));
  rm_state* rm = usable(rmid, "xa_recover", code);
  if (!rm) return code;
  std::vector<XID> found;
  long page = 0;
  if (count == 0) {
    code = recover_page(*rm, flags, 0, rmid, found, page);
    return code == XA_OK ? 0 : code;
  }
  // The broker lists the branches of every rmid (and of other clients); keep asking until this
  // rmid has `count` or the broker's scan is done, so that a short answer still means "done".
  long next_flags = flags & TMSTARTRSCAN;
  for (;;) {
    long want = count - static_cast<long>(found.size());
    code = recover_page(*rm, next_flags, want, rmid, found, page);
    if (code != XA_OK) return code;
    if (page < want || static_cast<long>(found.size()) >= count) break;
    next_flags = TMNOFLAGS;
  }
  if (flags & TMENDRSCAN) {
    std::vector<XID> none;
    code = recover_page(*rm, TMENDRSCAN, 0, rmid, none, page);
    if (code != XA_OK) return code;
  }
  for (std::size_t i = 0; i < found.size(); ++i) xids[i] = found[i];
  return static_cast<int>(found.size());
}

}  // namespace
}  // namespace escrow::xa_switch_detail

using namespace escrow::xa_switch_detail;

extern "C" {

static int escrow_xa_open(char* info, int rmid, long flags) {
  return guarded(entry::open, flags, [&] { return open_rm(info, rmid, flags); });
}
static int escrow_xa_close(char*, int rmid, long flags) {
  return guarded(entry::close, flags, [&] { return close_rm(rmid, flags); });
}
static int escrow_xa_start(XID* x, int rmid, long flags) {
  return guarded(entry::start, flags, [&] {
    return branch_call(entry::start, "XA-START", x, rmid, flags, TMJOIN | TMRESUME | TMNOWAIT, TMNOWAIT);
  });
}
static int escrow_xa_end(XID* x, int rmid, long flags) {
  return guarded(entry::end, flags, [&] {
    return branch_call(entry::end, "XA-END", x, rmid, flags, TMSUCCESS | TMFAIL | TMSUSPEND);
  });
}
static int escrow_xa_rollback(XID* x, int rmid, long flags) {
  return guarded(entry::rollback, flags,
                 [&] { return branch_call(entry::rollback, "XA-ROLLBACK", x, rmid, flags, TMNOFLAGS); });
}
static int escrow_xa_prepare(XID* x, int rmid, long flags) {
  return guarded(entry::prepare, flags,
                 [&] { return branch_call(entry::prepare, "XA-PREPARE", x, rmid, flags, TMNOFLAGS); });
}
static int escrow_xa_commit(XID* x, int rmid, long flags) {
  return guarded(entry::commit, flags, [&] {
    return branch_call(entry::commit, "XA-COMMIT", x, rmid, flags, TMONEPHASE | TMNOWAIT, TMNOWAIT);
  });
}
static int escrow_xa_recover(XID* xids, long count, int rmid, long flags) {
  return guarded(entry::recover, flags, [&] { return recover(xids, count, rmid, flags); });
}
static int escrow_xa_forget(XID* x, int rmid, long flags) {
  return guarded(entry::forget, flags,
                 [&] { return branch_call(entry::forget, "XA-FORGET", x, rmid, flags, TMNOFLAGS); });
}
static int escrow_xa_complete(int* handle, int*, int, long flags) {
  return guarded(entry::complete, flags, [&] {
    return fail(handle ? XAER_PROTO : XAER_INVAL,
                "xa_complete: the switch never runs a call asynchronously, so there is nothing to complete");
  });
}

struct xa_switch_t escrow_xa_switch = {
    "escrow",    TMNOMIGRATE,        0,
    escrow_xa_open,   escrow_xa_close,   escrow_xa_start,   escrow_xa_end,    escrow_xa_rollback,
    escrow_xa_prepare, escrow_xa_commit, escrow_xa_recover, escrow_xa_forget, escrow_xa_complete,
};

const char* escrow_xa_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"

escrow::client::connection* escrow_xa_connection_for(const char* resource) {
  try {
    escrow::client::connection* found = nullptr;
    int matches = 0;
    for (const auto& [rmid, rm] : t_rms) {
      if (resource && *resource && resource_name(rm.options) != resource) continue;
      ++matches;
      if (rm.connection && rm.connection->is_open()) found = rm.connection.get();
    }
    return matches == 1 ? found : nullptr;
  } catch (...) {
    return nullptr;
  }
}

escrow::client::connection* escrow_xa_connection(int rmid) {
  try {
    auto it = t_rms.find(rmid);
    if (it == t_rms.end() || !it->second.connection || !it->second.connection->is_open()) return nullptr;
    return it->second.connection.get();
  } catch (...) {
    return nullptr;
  }
}
