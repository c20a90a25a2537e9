// xa-switch-check: drives escrow_xa_switch against a running escrowd the way a transaction
// manager does, one scenario per run, and checks every answer. Run by
// tests/integration/test_xa_switch.py, which starts the broker (and kills it for "drop").
//
//   xa-switch-check SCENARIO PORT [ARG...]
//
// Prints "ok SCENARIO" and exits 0, or prints "FAIL: ..." lines and exits 1. Scenarios that need
// the test's help print a line ("ready ...") and wait for a line on stdin.
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "escrow/client.h"
#include "escrow/xa.h"
#include "escrow/xa_switch.h"
#include "escrow/xid.h"

namespace {

using namespace std::chrono_literals;

int g_failures = 0;
std::string g_open;  // "host=127.0.0.1 port=PORT timeout=5000"
int g_port = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    std::fflush(stdout);
    ++g_failures;
  }
}

void expect(int got, int want, const std::string& what) {
  check(got == want, what + ": expected " + escrow::xa_result_name(want) + ", got " + escrow::xa_result_name(got) +
                         " (" + escrow_xa_last_error() + ")");
}

std::string unique(const std::string& prefix) {
  static std::atomic<int> n{0};
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

XID make_xid(const std::string& gtrid, const std::string& bqual = "b") {
  return escrow::xid(4242, gtrid, bqual).to_c();
}

xa_switch_t& sw() { return escrow_xa_switch; }
int open_rm(int rmid, const std::string& info = g_open) {
  return sw().xa_open_entry(const_cast<char*>(info.c_str()), rmid, TMNOFLAGS);
}
int close_rm(int rmid) { return sw().xa_close_entry(const_cast<char*>(""), rmid, TMNOFLAGS); }

// Sends `body` to `queue` on this thread's connection for rmid (inside its branch, if any).
void send_on(int rmid, const std::string& queue, const std::string& body) {
  escrow::client::connection* c = escrow_xa_connection(rmid);
  check(c != nullptr, "escrow_xa_connection(" + std::to_string(rmid) + ") is null after xa_open");
  if (!c) return;
  escrow::client::producer_options o;
  o.destination = queue;
  c->create_producer(o).send(body);
}

// What a fresh consumer finds in `queue` within `wait` (consumes it).
std::vector<std::string> drain(const std::string& queue, std::chrono::milliseconds wait = 1500ms) {
  escrow::client::connect_options o;
  o.port = static_cast<std::uint16_t>(g_port);
  auto c = escrow::client::connection::open(o);
  escrow::client::consumer_options co;
  co.destination = queue;
  auto consumer = c->create_consumer(co);
  std::vector<std::string> out;
  while (auto m = consumer->receive(out.empty() ? wait : 300ms)) out.push_back(m->body());
  return out;
}

std::string xid_text(const XID& x) { return escrow::xid::from_c(x)->to_string(); }

// ---------------------------------------------------------------------------------------------

void open_strings() {
  check(std::strcmp(sw().name, "escrow") == 0, "switch name is '" + std::string(sw().name) + "'");
  check(sw().flags == TMNOMIGRATE, "switch flags are " + std::to_string(sw().flags));
  check(sw().version == 0, "switch version is " + std::to_string(sw().version));

  const std::string too_long(MAXINFOSIZE, 'x');
  for (const std::string& bad : std::vector<std::string>{"hots=127.0.0.1", "port=0", "port=70000", "port=61613x", "port=", "timeout=0", "timeout=ten", "host",
        "=61613", "host=", "port=1 port=2", "login", std::string("host=a ") + too_long}) {
    expect(open_rm(1, bad), XAER_INVAL, "xa_open(\"" + bad.substr(0, 40) + "\")");
    check(std::strlen(escrow_xa_last_error()) > 0, "no explanation for bad open string " + bad.substr(0, 40));
  }
  std::string why = escrow_xa_last_error();
  check(why.find("open string") != std::string::npos, "explanation does not mention the open string: " + why);
  expect(sw().xa_open_entry(const_cast<char*>(g_open.c_str()), 1, TMASYNC), XAER_INVAL, "xa_open with TMASYNC");

  // Nothing works on an rmid this thread has not opened.
  XID x = make_xid(unique("g"));
  expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XAER_PROTO, "xa_start before xa_open");
  expect(sw().xa_recover_entry(&x, 1, 1, TMSTARTRSCAN | TMENDRSCAN), XAER_PROTO, "xa_recover before xa_open");
  check(escrow_xa_connection(1) == nullptr, "a connection before xa_open");
  expect(close_rm(1), XA_OK, "xa_close of an rmid never opened");

  // Port 1 is privileged and never has a broker on a test machine: the broker is unavailable.
  expect(open_rm(7, "host=127.0.0.1 port=1 timeout=2000"), XAER_RMERR, "xa_open to a port without a broker");
  check(escrow_xa_connection(7) == nullptr, "a connection after a failed xa_open");

  expect(open_rm(1), XA_OK, "xa_open(\"" + g_open + "\")");
  expect(open_rm(1), XA_OK, "a second xa_open of the same rmid");
  check(escrow_xa_connection(1) != nullptr, "no connection after xa_open");
  check(escrow_xa_connection(2) == nullptr, "a connection for rmid 2, never opened");
  expect(open_rm(1, "  host=127.0.0.1\tport=" + std::to_string(g_port) + "   timeout=5000  "), XA_OK,
         "xa_open with extra blanks");

  // Arguments the switch refuses before the broker sees them.
  expect(sw().xa_start_entry(nullptr, 1, TMNOFLAGS), XAER_INVAL, "xa_start(NULL)");
  XID null_xid{};
  null_xid.formatID = -1;
  expect(sw().xa_start_entry(&null_xid, 1, TMNOFLAGS), XAER_INVAL, "xa_start(null XID)");
  XID long_bqual = make_xid(unique("g"), std::string(60, 'q'));
  expect(sw().xa_start_entry(&long_bqual, 1, TMNOFLAGS), XAER_INVAL, "xa_start with a 60-byte bqual");
  XID ok_bqual = make_xid(unique("g"), std::string(59, 'q'));
  expect(sw().xa_start_entry(&ok_bqual, 1, TMNOFLAGS), XA_OK, "xa_start with a 59-byte bqual");
  expect(sw().xa_end_entry(&ok_bqual, 1, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_rollback_entry(&ok_bqual, 1, TMNOFLAGS), XA_OK, "xa_rollback");
  expect(sw().xa_start_entry(&x, 1, TMASYNC), XAER_INVAL, "xa_start with TMASYNC");
  expect(sw().xa_commit_entry(&x, 1, TMJOIN), XAER_INVAL, "xa_commit with TMJOIN");
  expect(sw().xa_recover_entry(&x, -1, 1, TMSTARTRSCAN), XAER_INVAL, "xa_recover with count -1");
  expect(sw().xa_recover_entry(nullptr, 5, 1, TMSTARTRSCAN), XAER_INVAL, "xa_recover(NULL, 5)");
  int handle = 0, retval = 0;
  expect(sw().xa_complete_entry(&handle, &retval, 1, TMNOFLAGS), XAER_PROTO, "xa_complete");

  expect(close_rm(1), XA_OK, "xa_close");
  check(escrow_xa_connection(1) == nullptr, "a connection after xa_close");
  expect(close_rm(1), XA_OK, "a second xa_close");
}

void branches(const std::string& queue) {
  expect(open_rm(1), XA_OK, "xa_open");

  // Two-phase commit: the message appears only after xa_commit.
  XID x = make_xid(unique("two-phase"));
  expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_start");
  expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XAER_PROTO, "a second xa_start while associated");
  send_on(1, queue, "two-phase");
  expect(close_rm(1), XAER_PROTO, "xa_close while associated");
  expect(sw().xa_end_entry(&x, 1, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_prepare_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_prepare");
  check(drain(queue, 500ms).empty(), "a prepared branch's message is visible");
  expect(sw().xa_commit_entry(&x, 1, TMONEPHASE), XAER_PROTO, "one-phase commit of a prepared branch");
  expect(sw().xa_commit_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_commit");
  auto got = drain(queue);
  check(got == std::vector<std::string>{"two-phase"}, "after commit the queue holds " + std::to_string(got.size()) + " messages");
  expect(sw().xa_commit_entry(&x, 1, TMNOFLAGS), XAER_NOTA, "xa_commit of a committed branch");

  // One-phase commit, as a manager does when only this resource did work.
  XID one = make_xid(unique("one-phase"));
  expect(sw().xa_start_entry(&one, 1, TMNOWAIT), XA_OK, "xa_start (TMNOWAIT)");
  send_on(1, queue, "one-phase");
  expect(sw().xa_end_entry(&one, 1, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_commit_entry(&one, 1, TMONEPHASE), XA_OK, "xa_commit(TMONEPHASE)");
  got = drain(queue);
  check(got == std::vector<std::string>{"one-phase"}, "after one-phase commit: " + std::to_string(got.size()) + " messages");

  // Rollback: the message never appears.
  XID rb = make_xid(unique("rollback"));
  expect(sw().xa_start_entry(&rb, 1, TMNOFLAGS), XA_OK, "xa_start");
  send_on(1, queue, "rolled back");
  int code = sw().xa_end_entry(&rb, 1, TMFAIL);
  check(code == XA_OK || (code >= XA_RBBASE && code <= XA_RBEND), "xa_end(TMFAIL) answered " + escrow::xa_result_name(code));
  code = sw().xa_rollback_entry(&rb, 1, TMNOFLAGS);
  check(code == XA_OK || code == XAER_NOTA || (code >= XA_RBBASE && code <= XA_RBEND),
        "xa_rollback after TMFAIL answered " + escrow::xa_result_name(code));
  check(drain(queue, 500ms).empty(), "a rolled-back message is visible");

  // A branch that did nothing: read-only, forgotten.
  XID ro = make_xid(unique("read-only"));
  expect(sw().xa_start_entry(&ro, 1, TMNOFLAGS), XA_OK, "xa_start");
  expect(sw().xa_end_entry(&ro, 1, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_prepare_entry(&ro, 1, TMNOFLAGS), XA_RDONLY, "xa_prepare of an empty branch");
  expect(sw().xa_commit_entry(&ro, 1, TMNOFLAGS), XAER_NOTA, "xa_commit after XA_RDONLY");

  // Suspend and resume on the same thread; xa_close refuses while suspended.
  XID su = make_xid(unique("suspend"));
  expect(sw().xa_start_entry(&su, 1, TMNOFLAGS), XA_OK, "xa_start");
  expect(sw().xa_end_entry(&su, 1, TMSUSPEND), XA_OK, "xa_end(TMSUSPEND)");
  expect(close_rm(1), XAER_PROTO, "xa_close while suspended");
  expect(sw().xa_start_entry(&su, 1, TMRESUME), XA_OK, "xa_start(TMRESUME)");
  expect(sw().xa_end_entry(&su, 1, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_rollback_entry(&su, 1, TMNOFLAGS), XA_OK, "xa_rollback of an idle branch");
  expect(close_rm(1), XA_OK, "xa_close");
}

void unknown_xid() {
  expect(open_rm(1), XA_OK, "xa_open");
  XID x = make_xid(unique("never-started"));
  expect(sw().xa_commit_entry(&x, 1, TMNOFLAGS), XAER_NOTA, "xa_commit of an unknown xid");
  expect(sw().xa_commit_entry(&x, 1, TMONEPHASE), XAER_NOTA, "xa_commit(TMONEPHASE) of an unknown xid");
  expect(sw().xa_rollback_entry(&x, 1, TMNOFLAGS), XAER_NOTA, "xa_rollback of an unknown xid");
  expect(sw().xa_prepare_entry(&x, 1, TMNOFLAGS), XAER_NOTA, "xa_prepare of an unknown xid");
  expect(sw().xa_forget_entry(&x, 1, TMNOFLAGS), XAER_NOTA, "xa_forget of an unknown xid");
  expect(close_rm(1), XA_OK, "xa_close");
}

// Prepares `n` branches on rmid 1, then pages through them `page` at a time.
void recover_paging() {
  expect(open_rm(1), XA_OK, "xa_open");
  std::set<std::string> prepared;
  for (int i = 0; i < 5; ++i) {
    XID x = make_xid(unique("recover"));
    expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_start");
    send_on(1, "/queue/" + unique("recover"), "m");
    expect(sw().xa_end_entry(&x, 1, TMSUCCESS), XA_OK, "xa_end");
    expect(sw().xa_prepare_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_prepare");
    prepared.insert(xid_text(x));
  }
  XID page[2];
  std::set<std::string> seen;
  int n = sw().xa_recover_entry(page, 2, 1, TMSTARTRSCAN);
  check(n == 2, "first page (TMSTARTRSCAN, count 2): " + std::to_string(n));
  for (int i = 0; i < n && i < 2; ++i) seen.insert(xid_text(page[i]));
  n = sw().xa_recover_entry(page, 2, 1, TMNOFLAGS);
  check(n == 2, "second page: " + std::to_string(n));
  for (int i = 0; i < n && i < 2; ++i) seen.insert(xid_text(page[i]));
  n = sw().xa_recover_entry(page, 2, 1, TMNOFLAGS);
  check(n == 1, "third page (short: the scan is done): " + std::to_string(n));
  for (int i = 0; i < n && i < 2; ++i) seen.insert(xid_text(page[i]));
  check(seen == prepared, "the pages do not list exactly the 5 prepared branches");
  // Closing the scan with a call of its own, count 0, as managers do.
  expect(sw().xa_recover_entry(nullptr, 0, 1, TMENDRSCAN), 0, "xa_recover(NULL, 0, TMENDRSCAN)");
  int code = sw().xa_recover_entry(page, 2, 1, TMNOFLAGS);
  check(code == XAER_PROTO || code == XAER_INVAL,
        "a continuation without an open scan answered " + escrow::xa_result_name(code));
  // A lone TMENDRSCAN with no scan open is accepted too.
  expect(sw().xa_recover_entry(nullptr, 0, 1, TMENDRSCAN), 0, "a second lone TMENDRSCAN");

  // One whole scan in one call; then finish everything.
  XID all[10];
  n = sw().xa_recover_entry(all, 10, 1, TMSTARTRSCAN | TMENDRSCAN);
  check(n == 5, "TMSTARTRSCAN|TMENDRSCAN listed " + std::to_string(n));
  for (int i = 0; i < n && i < 10; ++i) expect(sw().xa_rollback_entry(&all[i], 1, TMNOFLAGS), XA_OK, "xa_rollback");
  n = sw().xa_recover_entry(all, 10, 1, TMSTARTRSCAN | TMENDRSCAN);
  check(n == 0, "after rolling back, recover listed " + std::to_string(n));
  expect(close_rm(1), XA_OK, "xa_close");
}

// The same XID on two rmids of one broker: two independent branches, told apart by branch=.
// Without it, the second xa_open is refused: one XID would be one branch for both.
void same_xid(const std::string& queue) {
  expect(open_rm(1), XA_OK, "xa_open rmid 1");
  expect(open_rm(2), XAER_INVAL, "xa_open rmid 2 with rmid 1's open string");
  check(std::string(escrow_xa_last_error()).find("branch=") != std::string::npos,
        "the refusal does not say to give branch=: " + std::string(escrow_xa_last_error()));
  expect(close_rm(1), XA_OK, "xa_close rmid 1");
  expect(open_rm(1, g_open + " branch=a"), XA_OK, "xa_open rmid 1 branch=a");
  expect(open_rm(2, g_open + " branch=b"), XA_OK, "xa_open rmid 2 branch=b");
  check(escrow_xa_connection(1) != escrow_xa_connection(2), "rmids 1 and 2 share a connection");
  XID x = make_xid(unique("same"));
  for (int rmid : {1, 2}) {
    expect(sw().xa_start_entry(&x, rmid, TMNOFLAGS), XA_OK, "xa_start on rmid " + std::to_string(rmid));
    send_on(rmid, queue, "from rmid " + std::to_string(rmid));
    expect(sw().xa_end_entry(&x, rmid, TMSUCCESS), XA_OK, "xa_end on rmid " + std::to_string(rmid));
    expect(sw().xa_prepare_entry(&x, rmid, TMNOFLAGS), XA_OK, "xa_prepare on rmid " + std::to_string(rmid));
  }
  for (int rmid : {1, 2}) {
    XID found[4];
    int n = sw().xa_recover_entry(found, 4, rmid, TMSTARTRSCAN | TMENDRSCAN);
    check(n == 1 && xid_text(found[0]) == xid_text(x),
          "recover on rmid " + std::to_string(rmid) + " did not list exactly the TM's XID (" + std::to_string(n) + ")");
  }
  expect(sw().xa_commit_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_commit on rmid 1");
  expect(sw().xa_rollback_entry(&x, 2, TMNOFLAGS), XA_OK, "xa_rollback on rmid 2");
  auto got = drain(queue);
  check(got == std::vector<std::string>{"from rmid 1"}, "the queue holds " + std::to_string(got.size()) + " messages");
  expect(close_rm(1), XA_OK, "xa_close rmid 1");
  expect(close_rm(2), XA_OK, "xa_close rmid 2");
}

// Prepares a branch on `rmid`, writes its xid to `file` and ends the process without closing
// anything.
void prepare_and_die(const std::string& queue, const std::string& file, int rmid) {
  expect(open_rm(rmid), XA_OK, "xa_open");
  XID x = make_xid(unique("other-process"));
  expect(sw().xa_start_entry(&x, rmid, TMNOFLAGS), XA_OK, "xa_start");
  send_on(rmid, queue, "prepared by another process");
  expect(sw().xa_end_entry(&x, rmid, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_prepare_entry(&x, rmid, TMNOFLAGS), XA_OK, "xa_prepare");
  std::ofstream(file) << xid_text(x) << "\n";
  std::printf("%s\n", g_failures ? "FAIL: see above" : "ok prepare-and-die");
  std::fflush(stdout);
  ::_exit(g_failures ? 1 : 0);
}

// In a new process: finds the branch of prepare_and_die by recovery on `rmid` (any rmid: the
// identity is the open string's resource) and commits it. Another resource's rmid does not see it.
void recover_and_commit(const std::string& queue, const std::string& file, int rmid) {
  std::string wanted;
  std::getline(std::ifstream(file), wanted);
  expect(open_rm(rmid + 1, g_open + " resource=another"), XA_OK, "xa_open of another resource");
  XID found[8];
  int n = sw().xa_recover_entry(found, 8, rmid + 1, TMSTARTRSCAN | TMENDRSCAN);
  check(n == 0, "another resource's recover listed " + std::to_string(n) + " branches");
  expect(open_rm(rmid), XA_OK, "xa_open");
  n = sw().xa_recover_entry(found, 8, rmid, TMSTARTRSCAN | TMENDRSCAN);
  check(n == 1, "recover listed " + std::to_string(n) + " branches");
  if (n >= 1) {
    check(xid_text(found[0]) == wanted, "recover listed " + xid_text(found[0]) + ", expected " + wanted);
    expect(sw().xa_commit_entry(&found[0], rmid, TMNOFLAGS), XA_OK, "xa_commit from another process");
    expect(sw().xa_commit_entry(&found[0], rmid, TMNOFLAGS), XAER_NOTA, "a second xa_commit");
  }
  auto got = drain(queue);
  check(got == std::vector<std::string>{"prepared by another process"},
        "the queue holds " + std::to_string(got.size()) + " messages");
  expect(close_rm(rmid), XA_OK, "xa_close");
  expect(close_rm(rmid + 1), XA_OK, "xa_close");
}

// A branch an earlier switch prepared on rmid 5: its trailer was 0xE5 and the rmid. Made here with
// plain XA frames, as that switch sent them; then this switch, opened on rmid 5 as before the
// upgrade, lists it in recovery and commits it; rmid 6 (the same resource) does not list it.
void legacy_trailer(const std::string& queue) {
  escrow::client::connect_options o;
  o.port = static_cast<std::uint16_t>(g_port);
  auto c = escrow::client::connection::open(o);
  XID tm = make_xid(unique("before-upgrade"), "bq");
  std::string old = escrow::xid(tm.formatID, escrow::xid::from_c(tm)->gtrid(), std::string("bq\xE5\x00\x00\x00\x05", 7))
                        .to_string();
  auto xa = [&](const char* command, const char* flags) {
    escrow::frame f{command, {{"xid", old}}, {}};
    if (flags) f.add("flags", flags);
    return std::string(c->call(f, 10s).get("xa-result"));
  };
  check(xa("XA-START", nullptr) == "XA_OK", "XA-START of the old-style branch");
  escrow::client::producer_options po;
  po.destination = queue;
  c->create_producer(po).send("prepared before the upgrade");
  check(xa("XA-END", "TMSUCCESS") == "XA_OK", "XA-END of the old-style branch");
  check(xa("XA-PREPARE", nullptr) == "XA_OK", "XA-PREPARE of the old-style branch");
  c->close();

  expect(open_rm(6, g_open + " branch=six"), XA_OK, "xa_open rmid 6");
  XID found[8];
  int n = sw().xa_recover_entry(found, 8, 6, TMSTARTRSCAN | TMENDRSCAN);
  check(n == 0, "rmid 6 listed " + std::to_string(n) + " branches of rmid 5's old trailer");
  expect(open_rm(5), XA_OK, "xa_open rmid 5");
  n = sw().xa_recover_entry(found, 8, 5, TMSTARTRSCAN | TMENDRSCAN);
  check(n == 1 && xid_text(found[0]) == xid_text(tm),
        "rmid 5 recover did not list exactly the TM's XID of the old-style branch (" + std::to_string(n) + ")");
  expect(sw().xa_commit_entry(&tm, 5, TMNOFLAGS), XA_OK, "xa_commit of the old-style branch");
  expect(sw().xa_commit_entry(&tm, 5, TMNOFLAGS), XAER_NOTA, "a second xa_commit");
  auto got = drain(queue);
  check(got == std::vector<std::string>{"prepared before the upgrade"},
        "the queue holds " + std::to_string(got.size()) + " messages");
  expect(close_rm(5), XA_OK, "xa_close");
  expect(close_rm(6), XA_OK, "xa_close");
}

// xa_open against a broker that is not running yet: XAER_RMERR (never XAER_RMFAIL, which xa_open
// may not return), again and again; once the test has started it, XA_OK on the same thread, and a
// two-phase branch goes through.
void open_before_broker(const std::string& queue) {
  for (int i = 0; i < 3; ++i) expect(open_rm(1), XAER_RMERR, "xa_open while the broker is stopped");
  check(std::string(escrow_xa_last_error()).find("cannot open a connection") != std::string::npos,
        "xa_open's last error does not say why: " + std::string(escrow_xa_last_error()));
  check(escrow_xa_connection(1) == nullptr, "a connection after a failed xa_open");
  std::printf("ready-for-broker\n");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  int code = XAER_RMERR;
  for (int i = 0; i < 100 && code == XAER_RMERR; ++i) {  // as a TM retries it
    code = open_rm(1);
    if (code == XAER_RMERR) std::this_thread::sleep_for(100ms);
  }
  expect(code, XA_OK, "xa_open once the broker is back");
  XID x = make_xid(unique("after-start"));
  expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_start");
  send_on(1, queue, "after the broker started");
  expect(sw().xa_end_entry(&x, 1, TMSUCCESS), XA_OK, "xa_end");
  expect(sw().xa_prepare_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_prepare");
  expect(sw().xa_commit_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_commit");
  auto got = drain(queue);
  check(got == std::vector<std::string>{"after the broker started"}, "the queue holds " + std::to_string(got.size()));
  expect(close_rm(1), XA_OK, "xa_close");
}

std::string wait_line(const char* say) {
  std::printf("%s\n", say);
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  return line;
}

// The test kills escrowd at "ready-to-drop" and starts it again (same port) at "ready-to-reopen".
void drop() {
  expect(open_rm(1), XA_OK, "xa_open");
  XID before = make_xid(unique("before-drop"));
  expect(sw().xa_start_entry(&before, 1, TMNOFLAGS), XA_OK, "xa_start");
  wait_line("ready-to-drop");
  XID x = make_xid(unique("after-drop"));
  expect(sw().xa_end_entry(&before, 1, TMSUCCESS), XAER_RMFAIL, "xa_end on a dropped connection");
  expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XAER_RMFAIL, "xa_start on a dropped connection");
  check(escrow_xa_connection(1) == nullptr, "a connection after the drop");
  expect(open_rm(1), XAER_RMERR, "xa_open while the broker is down");
  wait_line("ready-to-reopen");
  expect(open_rm(1), XA_OK, "xa_open after the broker came back");
  check(escrow_xa_connection(1) != nullptr, "no connection after reopening");
  expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_start after reopening");
  expect(sw().xa_end_entry(&x, 1, TMSUCCESS), XA_OK, "xa_end after reopening");
  expect(sw().xa_rollback_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_rollback after reopening");
  expect(close_rm(1), XA_OK, "xa_close");
}

// Many threads open the switch and run a two-phase branch at the same moment.
void threads(int count, const std::string& queue) {
  std::barrier start(count);
  std::atomic<int> committed{0};
  std::vector<std::thread> pool;
  std::vector<escrow::client::connection*> connections(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      expect(open_rm(1), XA_OK, "xa_open on thread " + std::to_string(t));
      connections[static_cast<std::size_t>(t)] = escrow_xa_connection(1);
      XID x = make_xid(unique("thread"));
      start.arrive_and_wait();  // every xa_start at once
      expect(sw().xa_start_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_start on thread " + std::to_string(t));
      send_on(1, queue, "thread " + std::to_string(t));
      expect(sw().xa_end_entry(&x, 1, TMSUCCESS), XA_OK, "xa_end");
      expect(sw().xa_prepare_entry(&x, 1, TMNOFLAGS), XA_OK, "xa_prepare");
      if (sw().xa_commit_entry(&x, 1, TMNOFLAGS) == XA_OK) ++committed;
      expect(close_rm(1), XA_OK, "xa_close");
    });
  }
  for (auto& t : pool) t.join();
  check(committed == count, std::to_string(committed) + " of " + std::to_string(count) + " threads committed");
  std::set<escrow::client::connection*> distinct(connections.begin(), connections.end());
  check(distinct.size() == static_cast<std::size_t>(count) && !distinct.count(nullptr),
        "threads did not each get their own connection");
  auto got = drain(queue);
  check(got.size() == static_cast<std::size_t>(count), "the queue holds " + std::to_string(got.size()) + " messages");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: xa-switch-check SCENARIO PORT [ARG...]\n");
    return 2;
  }
  std::string scenario = argv[1];
  g_port = std::atoi(argv[2]);
  g_open = "host=127.0.0.1 port=" + std::to_string(g_port) + " timeout=10000";
  auto arg = [&](int i) { return std::string(i < argc ? argv[i] : ""); };
  try {
    if (scenario == "open-strings") open_strings();
    else if (scenario == "branches") branches(arg(3));
    else if (scenario == "unknown-xid") unknown_xid();
    else if (scenario == "recover-paging") recover_paging();
    else if (scenario == "same-xid") same_xid(arg(3));
    else if (scenario == "prepare-and-die") prepare_and_die(arg(3), arg(4), std::atoi(arg(5).c_str()));
    else if (scenario == "recover-and-commit") recover_and_commit(arg(3), arg(4), std::atoi(arg(5).c_str()));
    else if (scenario == "legacy-trailer") legacy_trailer(arg(3));
    else if (scenario == "open-before-broker") open_before_broker(arg(3));
    else if (scenario == "drop") drop();
    else if (scenario == "threads") threads(std::atoi(arg(3).c_str()), arg(4));
    else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  if (g_failures) return 1;
  std::printf("ok %s\n", scenario.c_str());
  return 0;
}
