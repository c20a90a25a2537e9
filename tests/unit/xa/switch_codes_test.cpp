// What each entry point of escrow_xa_switch can return, against the XA specification's per-call
// lists (/work/shared/XA.md, "What each call may return"), transcribed below into spec_allows()
// without looking at the switch's own table (xa_switch_detail::may_return).
//
// The test enumerates rather than samples. Every entry point is driven, on a fresh thread each time
// (the switch's state is thread-local), through:
//   - every path the switch decides by itself: the rmid not open, each call flag the call does not
//     take, NULL and null XIDs, bad lengths, bad open strings, no server, a server that is not an
//     Escrow broker, refuses the login, never answers or hangs up, two rmids of one identity,
//     xa_close while associated, recover's count and array checks;
//   - every answer a broker could give to the call's frame, from a scripted fake broker
//     (fake_xa_broker.h): each of the 26 XA result names, an unknown name, no xa-result header, an
//     ERROR frame, a close, silence past the timeout; for each flag set the call takes; and, for
//     the decisions (commit, rollback, forget), each of those again as the answer to the second
//     try under the rmid trailer of earlier switches after a first XAER_NOTA.
// Each code returned is checked against spec_allows(); every answer the call may return passes
// through unchanged, every other one becomes XAER_RMFAIL (with the reason in
// escrow_xa_last_error()). At the end, the set of codes seen per entry point is compared with the
// table in docs/xa.md ("What each entry point returns"), so that the table stays true.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "escrow/xa.h"
#include "escrow/xa_switch.h"
#include "escrow/xid.h"
#include "fake_xa_broker.h"
#include "xa_switch_internal.h"

namespace {

using escrow::test::connect_answer;
using escrow::test::fake_answer;
using escrow::test::fake_xa_broker;

// ---------------------------------------------------------------------------------------------
// The specification's lists (XA.md), written from XA.md alone.

bool rb(int c) { return c >= XA_RBBASE && c <= XA_RBEND; }
bool heur(int c) { return c == XA_HEURHAZ || c == XA_HEURCOM || c == XA_HEURRB || c == XA_HEURMIX; }

bool spec_allows(const std::string& call, int c, long flags) {
  if (call == "xa_open" || call == "xa_close")
    return c == XA_OK || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_start")
    return c == XA_OK || rb(c) || c == XA_RETRY || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
           c == XAER_DUPID || c == XAER_OUTSIDE || c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_end")
    return c == XA_OK || c == XA_NOMIGRATE || rb(c) || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
           c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_prepare")
    return c == XA_OK || c == XA_RDONLY || rb(c) || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
           c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_commit")
    return c == XA_OK || heur(c) || c == XA_RETRY || (rb(c) && (flags & TMONEPHASE)) || c == XAER_ASYNC ||
           c == XAER_RMERR || c == XAER_RMFAIL || c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_rollback")
    return c == XA_OK || heur(c) || rb(c) || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL ||
           c == XAER_NOTA || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_recover") return c >= 0 || c == XAER_RMERR || c == XAER_RMFAIL || c == XAER_INVAL || c == XAER_PROTO;
  if (call == "xa_forget")
    return c == XA_OK || c == XAER_ASYNC || c == XAER_RMERR || c == XAER_RMFAIL || c == XAER_NOTA || c == XAER_INVAL ||
           c == XAER_PROTO;
  // XA.md gives no list for xa_complete; the XA specification's is XA_OK, XA_RETRY, XAER_PROTO and
  // XAER_INVAL.
  if (call == "xa_complete") return c == XA_OK || c == XA_RETRY || c == XAER_PROTO || c == XAER_INVAL;
  FAIL("no list for " << call);
  return false;
}

// ---------------------------------------------------------------------------------------------
// Driving the switch.

xa_switch_t& sw() { return escrow_xa_switch; }

// Every code seen per entry point ("xa_recover" records counts as 0: "a count").
std::map<std::string, std::set<int>>& seen() {
  static std::map<std::string, std::set<int>> s;
  return s;
}

void note(const std::string& call, int code, long flags, const std::string& how) {
  INFO(call << " (" << how << ", flags " << escrow::xa_flags_name(flags) << ") returned "
            << escrow::xa_result_name(code) << ": " << escrow_xa_last_error());
  CHECK(spec_allows(call, code, flags));
  seen()[call].insert(call == "xa_recover" && code >= 0 ? 0 : code);
}

// Runs `body` on a thread of its own: the switch's state (and every connection) ends with it.
template <typename F>
void on_fresh_thread(F body) {
  std::thread t(body);
  t.join();
}

std::string open_string(std::uint16_t port, int timeout_ms = 5000, const std::string& more = "") {
  return "host=127.0.0.1 port=" + std::to_string(port) + " timeout=" + std::to_string(timeout_ms) +
         (more.empty() ? "" : " " + more);
}

int xa_open(const std::string& info, int rmid = 1, long flags = TMNOFLAGS) {
  return sw().xa_open_entry(const_cast<char*>(info.c_str()), rmid, flags);
}

XID test_xid(const std::string& gtrid = "g", const std::string& bqual = "b") {
  return escrow::xid(4242, gtrid, bqual).to_c();
}

// A port nothing listens on: bound, then closed.
std::uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct branch_entry {
  const char* call;
  const char* frame;
  int (*xa_switch_t::*fn)(XID*, int, long);
  std::vector<long> flag_sets;  // the flag sets the call takes (each is walked)
  long allowed;                 // every flag bit the call takes
};

const std::vector<branch_entry>& branch_entries() {
  static const std::vector<branch_entry> e{
      {"xa_start", "XA-START", &xa_switch_t::xa_start_entry, {TMNOFLAGS, TMJOIN, TMRESUME, TMNOWAIT},
       TMJOIN | TMRESUME | TMNOWAIT},
      {"xa_end", "XA-END", &xa_switch_t::xa_end_entry, {TMSUCCESS, TMFAIL, TMSUSPEND}, TMSUCCESS | TMFAIL | TMSUSPEND},
      {"xa_prepare", "XA-PREPARE", &xa_switch_t::xa_prepare_entry, {TMNOFLAGS}, TMNOFLAGS},
      {"xa_commit", "XA-COMMIT", &xa_switch_t::xa_commit_entry, {TMNOFLAGS, TMONEPHASE, TMNOWAIT, TMONEPHASE | TMNOWAIT},
       TMONEPHASE | TMNOWAIT},
      {"xa_rollback", "XA-ROLLBACK", &xa_switch_t::xa_rollback_entry, {TMNOFLAGS}, TMNOFLAGS},
      {"xa_forget", "XA-FORGET", &xa_switch_t::xa_forget_entry, {TMNOFLAGS}, TMNOFLAGS},
  };
  return e;
}

const long kAllCallFlags[] = {TMASYNC,  TMONEPHASE,   TMFAIL,     TMNOWAIT,   TMRESUME, TMSUCCESS, TMSUSPEND,
                              TMSTARTRSCAN, TMENDRSCAN, TMMULTIPLE, TMJOIN, TMMIGRATE, 0x1L /* no XA flag */};

// Every answer a broker could give to one XA frame, with a label.
std::vector<std::pair<std::string, fake_answer>> every_answer() {
  std::vector<std::pair<std::string, fake_answer>> out;
  for (int code = -12; code <= 110; ++code) {
    std::string name = escrow::xa_result_name(code);
    if (name.starts_with("XA_UNKNOWN")) continue;
    out.emplace_back(name, fake_answer::code(name));
  }
  out.emplace_back("XA_BOGUS", fake_answer::code("XA_BOGUS"));
  out.emplace_back("a number", fake_answer::code("3"));
  out.emplace_back("no xa-result", fake_answer::of(fake_answer::kind::no_result));
  out.emplace_back("ERROR", fake_answer::of(fake_answer::kind::error));
  out.emplace_back("close", fake_answer::of(fake_answer::kind::close));
  out.emplace_back("silence", fake_answer::of(fake_answer::kind::silence));
  return out;
}

bool is_code(const fake_answer& a, int& code) {
  if (a.what != fake_answer::kind::result) return false;
  auto c = escrow::xa_result_from_name(a.result);
  if (!c) return false;
  code = *c;
  return true;
}

// The checks for one answer `a` to a call that returned `got`: a code the call may return passes
// through unchanged; anything else becomes XAER_RMFAIL (ERROR frames XAER_RMERR).
void check_mapping(const std::string& call, long flags, const std::string& label, const fake_answer& a, int got,
                   const std::string& why) {
  INFO(call << " flags " << escrow::xa_flags_name(flags) << ", broker answer " << label << " -> "
            << escrow::xa_result_name(got) << " (" << why << ")");
  int code = 0;
  if (is_code(a, code)) {
    bool passes = spec_allows(call, code, flags) && code != XAER_ASYNC;  // the switch never runs asynchronously
    if (call == "xa_recover") passes = code == XA_OK || (code < 0 && passes);
    if (passes) {
      CHECK(got == (call == "xa_recover" && code == XA_OK ? 0 : code));
    } else {
      CHECK(got == XAER_RMFAIL);
      CHECK(why.find(a.result) != std::string::npos);
    }
  } else if (a.what == fake_answer::kind::error) {
    CHECK(got == XAER_RMERR);
  } else {
    CHECK(got == XAER_RMFAIL);
  }
}

}  // namespace

TEST_SUITE("xa/switch codes") {
  TEST_CASE("xa_open: every path") {
    fake_xa_broker broker;
    const std::string good = open_string(broker.port());
    on_fresh_thread([&] {
      const std::vector<std::string> bad_strings{"hots=1", "port=0", "port=70000", "port=x", "timeout=0",
                                                 "timeout=ten", "host", "=1", "host=", "port=1 port=2", "resource=",
                                                 "branch=", "resource=a\x01", "resource=" + std::string(65, 'r'),
                                                 std::string(MAXINFOSIZE, 'x')};
      for (const std::string& bad : bad_strings)
        note("xa_open", xa_open(bad), TMNOFLAGS, "bad open string " + bad.substr(0, 20));
      for (long f : kAllCallFlags) note("xa_open", xa_open(good, 1, f), f, "a flag");
      note("xa_open", xa_open(open_string(closed_port(), 2000)), TMNOFLAGS, "no server");
      note("xa_open", xa_open(good), TMNOFLAGS, "open");
      note("xa_open", xa_open(good), TMNOFLAGS, "open again");
      // Two rmids of one broker, login and resource, without a branch qualifier: refused.
      note("xa_open", xa_open(good, 2), TMNOFLAGS, "second rmid, same identity");
      CHECK(std::string(escrow_xa_last_error()).find("branch=") != std::string::npos);
      note("xa_open", xa_open(good + " branch=two", 2), TMNOFLAGS, "second rmid, branch=two");
    });
    for (connect_answer a : {connect_answer::no_xa, connect_answer::error, connect_answer::silence, connect_answer::close}) {
      broker.set_connect(a);
      on_fresh_thread([&] {
        int got = xa_open(open_string(broker.port(), 300));
        note("xa_open", got, TMNOFLAGS, "CONNECT answered " + std::to_string(static_cast<int>(a)));
        CHECK(got == XAER_RMERR);
      });
    }
    CHECK(seen()["xa_open"] == std::set<int>{XA_OK, XAER_RMERR, XAER_INVAL});
  }

  TEST_CASE("xa_close: every path") {
    fake_xa_broker broker;
    on_fresh_thread([&] {
      char empty[] = "";
      note("xa_close", sw().xa_close_entry(empty, 1, TMNOFLAGS), TMNOFLAGS, "never opened");
      REQUIRE(xa_open(open_string(broker.port())) == XA_OK);
      for (long f : kAllCallFlags) note("xa_close", sw().xa_close_entry(empty, 1, f), f, "a flag");
      XID x = test_xid();
      REQUIRE(sw().xa_start_entry(&x, 1, TMNOFLAGS) == XA_OK);
      note("xa_close", sw().xa_close_entry(empty, 1, TMNOFLAGS), TMNOFLAGS, "associated");
      REQUIRE(sw().xa_end_entry(&x, 1, TMSUSPEND) == XA_OK);
      note("xa_close", sw().xa_close_entry(empty, 1, TMNOFLAGS), TMNOFLAGS, "suspended");
      REQUIRE(sw().xa_start_entry(&x, 1, TMRESUME) == XA_OK);
      REQUIRE(sw().xa_end_entry(&x, 1, TMSUCCESS) == XA_OK);
      note("xa_close", sw().xa_close_entry(empty, 1, TMNOFLAGS), TMNOFLAGS, "open");
      note("xa_close", sw().xa_close_entry(empty, 1, TMNOFLAGS), TMNOFLAGS, "closed");
      // Associated when the connection drops: closing is allowed (the broker ended the branch).
      REQUIRE(xa_open(open_string(broker.port())) == XA_OK);
      REQUIRE(sw().xa_start_entry(&x, 1, TMNOFLAGS) == XA_OK);
      broker.set_script([](const escrow::frame&, int) { return fake_answer::of(fake_answer::kind::close); });
      REQUIRE(sw().xa_end_entry(&x, 1, TMSUCCESS) == XAER_RMFAIL);
      note("xa_close", sw().xa_close_entry(empty, 1, TMNOFLAGS), TMNOFLAGS, "dropped while associated");
    });
    CHECK(seen()["xa_close"] == std::set<int>{XA_OK, XAER_INVAL, XAER_PROTO});
  }

  TEST_CASE("branch calls: the switch's own paths") {
    fake_xa_broker broker;
    for (const auto& e : branch_entries()) {
      on_fresh_thread([&] {
        XID x = test_xid();
        note(e.call, (sw().*e.fn)(&x, 1, e.flag_sets.front()), e.flag_sets.front(), "not open");
        REQUIRE(xa_open(open_string(broker.port())) == XA_OK);
        for (long f : kAllCallFlags)
          if (f & ~e.allowed) note(e.call, (sw().*e.fn)(&x, 1, f), f, "a flag it does not take");
        long f = e.flag_sets.front();
        note(e.call, (sw().*e.fn)(nullptr, 1, f), f, "NULL XID");
        XID null_xid{};
        null_xid.formatID = -1;
        note(e.call, (sw().*e.fn)(&null_xid, 1, f), f, "null XID");
        XID bad = test_xid();
        bad.gtrid_length = 0;
        note(e.call, (sw().*e.fn)(&bad, 1, f), f, "gtrid_length 0");
        bad = test_xid();
        bad.bqual_length = 60;
        note(e.call, (sw().*e.fn)(&bad, 1, f), f, "bqual of 60 bytes");
        bad = test_xid();
        bad.gtrid_length = 65;
        note(e.call, (sw().*e.fn)(&bad, 1, f), f, "gtrid of 65 bytes");
        // The connection is gone: this call finds it lost, and so does the next one.
        broker.set_script([](const escrow::frame&, int) { return fake_answer::of(fake_answer::kind::close); });
        note(e.call, (sw().*e.fn)(&x, 1, f), f, "the broker hangs up");
        note(e.call, (sw().*e.fn)(&x, 1, f), f, "after the connection was lost");
        broker.set_script(nullptr);
      });
    }
  }

  TEST_CASE("branch calls: every broker answer, for every flag set") {
    fake_xa_broker broker;
    const auto answers = every_answer();
    for (const auto& e : branch_entries()) {
      for (long flags : e.flag_sets) {
        for (const auto& [label, answer] : answers) {
          on_fresh_thread([&] {
            const bool slow = answer.what == fake_answer::kind::silence;
            REQUIRE(xa_open(open_string(broker.port(), slow ? 500 : 5000)) == XA_OK);
            broker.set_script([&, a = answer](const escrow::frame& f, int) {
              return f.command == e.frame ? a : fake_answer::code("XA_OK");
            });
            XID x = test_xid();
            int got = (sw().*e.fn)(&x, 1, flags);
            std::string why = escrow_xa_last_error();
            note(e.call, got, flags, "broker answered " + label);
            // The decisions ask a second time, under the rmid trailer, after XAER_NOTA.
            bool decides = std::string(e.call) == "xa_rollback" || std::string(e.call) == "xa_forget" ||
                           (std::string(e.call) == "xa_commit" && !(flags & TMONEPHASE));
            if (!(decides && label == "XAER_NOTA")) check_mapping(e.call, flags, label, answer, got, why);
            else CHECK(got == XAER_NOTA);
            broker.set_script(nullptr);
          });
        }
      }
    }
  }

  TEST_CASE("decisions: every broker answer to the second try under the rmid trailer") {
    fake_xa_broker broker;
    const auto answers = every_answer();
    for (const auto& e : branch_entries()) {
      std::string call = e.call;
      if (call != "xa_commit" && call != "xa_rollback" && call != "xa_forget") continue;
      long flags = TMNOFLAGS;
      for (const auto& [label, answer] : answers) {
        on_fresh_thread([&] {
          const bool slow = answer.what == fake_answer::kind::silence;
          REQUIRE(xa_open(open_string(broker.port(), slow ? 500 : 5000), 7) == XA_OK);
          broker.clear_seen();
          broker.set_script([&, a = answer](const escrow::frame&, int nth) {
            return nth == 1 ? fake_answer::code("XAER_NOTA") : a;
          });
          XID x = test_xid("gtrid", "bq");
          int got = (sw().*e.fn)(&x, 7, flags);
          std::string why = escrow_xa_last_error();
          note(call, got, flags, "XAER_NOTA, then " + label);
          check_mapping(call, flags, label, answer, got, why);
          // The two tries: the identity trailer (e6...), then the rmid trailer e5 00000007.
          auto frames = broker.seen();
          REQUIRE(frames.size() == 2);
          CHECK(std::string(frames[0].get("xid")).find(":6271e6") != std::string::npos);
          CHECK(std::string(frames[1].get("xid")).ends_with(":6271e500000007"));
          broker.set_script(nullptr);
        });
      }
    }
    // One-phase commit is never a decision of an earlier switch's branch: no second try.
    on_fresh_thread([&] {
      REQUIRE(xa_open(open_string(broker.port())) == XA_OK);
      broker.clear_seen();
      broker.set_script([](const escrow::frame&, int) { return fake_answer::code("XAER_NOTA"); });
      XID x = test_xid();
      note("xa_commit", sw().xa_commit_entry(&x, 1, TMONEPHASE), TMONEPHASE, "one phase, XAER_NOTA");
      CHECK(broker.seen().size() == 1);
      broker.set_script(nullptr);
    });
  }

  TEST_CASE("xa_recover: every path and every broker answer") {
    fake_xa_broker broker;
    const long kScanFlags[] = {TMSTARTRSCAN | TMENDRSCAN, TMSTARTRSCAN, TMNOFLAGS, TMENDRSCAN};
    on_fresh_thread([&] {
      XID page[4];
      note("xa_recover", sw().xa_recover_entry(page, 4, 1, TMSTARTRSCAN), TMSTARTRSCAN, "not open");
      REQUIRE(xa_open(open_string(broker.port())) == XA_OK);
      for (long f : kAllCallFlags)
        if (f & ~(TMSTARTRSCAN | TMENDRSCAN)) note("xa_recover", sw().xa_recover_entry(page, 4, 1, f), f, "a flag");
      note("xa_recover", sw().xa_recover_entry(page, -1, 1, TMSTARTRSCAN), TMSTARTRSCAN, "count -1");
      note("xa_recover", sw().xa_recover_entry(nullptr, 4, 1, TMSTARTRSCAN), TMSTARTRSCAN, "NULL array");
      broker.set_script([](const escrow::frame&, int) { return fake_answer::code("XA_OK", "not-an-xid\n"); });
      note("xa_recover", sw().xa_recover_entry(page, 4, 1, TMSTARTRSCAN | TMENDRSCAN), TMSTARTRSCAN | TMENDRSCAN,
           "an unreadable xid listed");
      broker.set_script(nullptr);
    });
    for (long flags : kScanFlags) {
      for (long count : {0L, 4L}) {
        for (const auto& [label, answer] : every_answer()) {
          on_fresh_thread([&] {
            const bool slow = answer.what == fake_answer::kind::silence;
            REQUIRE(xa_open(open_string(broker.port(), slow ? 500 : 5000)) == XA_OK);
            broker.set_script([a = answer](const escrow::frame&, int) { return a; });
            XID page[4];
            int got = sw().xa_recover_entry(count ? page : nullptr, count, 1, flags);
            std::string why = escrow_xa_last_error();
            note("xa_recover", got, flags, "broker answered " + label + ", count " + std::to_string(count));
            check_mapping("xa_recover", flags, label, answer, got, why);
            broker.set_script(nullptr);
          });
        }
      }
    }
    CHECK(seen()["xa_recover"] == std::set<int>{0, XAER_RMERR, XAER_RMFAIL, XAER_INVAL, XAER_PROTO});
  }

  TEST_CASE("xa_recover lists the resource's branches, whatever the rmid, and the rmid's old ones") {
    fake_xa_broker broker;
    namespace d = escrow::xa_switch_detail;
    d::open_options o;
    o.port = broker.port();
    o.resource = "orders";
    XID mine = test_xid("mine", "b1");
    XID old = test_xid("old", "b2");
    XID other_rmid_old = test_xid("old-3", "b3");
    XID other_resource = test_xid("theirs", "b4");
    std::string body = d::to_broker_xid(mine, d::identity_trailer(o), nullptr)->to_string() + "\n" +
                       d::to_broker_xid(old, d::legacy_trailer(2), nullptr)->to_string() + "\n" +
                       d::to_broker_xid(other_rmid_old, d::legacy_trailer(3), nullptr)->to_string() + "\n";
    o.resource = "invoices";
    body += d::to_broker_xid(other_resource, d::identity_trailer(o), nullptr)->to_string() + "\n" +
            escrow::xid(1, "plain", "stomp").to_string() + "\n";
    broker.set_script([&](const escrow::frame& f, int) {
      return f.get("flags") == "TMENDRSCAN" ? fake_answer::code("XA_OK") : fake_answer::code("XA_OK", body);
    });
    for (int rmid : {0, 2, 9}) {
      on_fresh_thread([&] {
        REQUIRE(xa_open(open_string(broker.port(), 5000, "resource=orders"), rmid) == XA_OK);
        XID page[8];
        int n = sw().xa_recover_entry(page, 8, rmid, TMSTARTRSCAN | TMENDRSCAN);
        std::set<std::string> got;
        for (int i = 0; i < n; ++i) got.insert(escrow::xid::from_c(page[i])->to_string());
        std::set<std::string> want{escrow::xid::from_c(mine)->to_string()};
        if (rmid == 2) want.insert(escrow::xid::from_c(old)->to_string());
        INFO("rmid " << rmid);
        CHECK(got == want);
      });
    }
  }

  TEST_CASE("xa_complete: every path") {
    on_fresh_thread([&] {
      int handle = 0, retval = 0;
      for (long f : {TMNOFLAGS, TMMULTIPLE, TMNOWAIT, TMASYNC}) {
        note("xa_complete", sw().xa_complete_entry(&handle, &retval, 1, f), f, "a handle");
        note("xa_complete", sw().xa_complete_entry(nullptr, &retval, 1, f), f, "NULL handle");
      }
    });
    CHECK(seen()["xa_complete"] == std::set<int>{XAER_PROTO, XAER_INVAL});
  }

  TEST_CASE("the codes seen are the table of docs/xa.md") {
    // Runs after the cases above (doctest runs a file's cases in order). Each entry point's set of
    // codes, as docs/xa.md "What each entry point returns" lists it.
    std::vector<int> rb_all;
    for (int c = XA_RBBASE; c <= XA_RBEND; ++c) rb_all.push_back(c);
    auto with_rb = [&](std::set<int> s) {
      s.insert(rb_all.begin(), rb_all.end());
      return s;
    };
    std::map<std::string, std::set<int>> table{
        {"xa_open", {XA_OK, XAER_RMERR, XAER_INVAL}},
        {"xa_close", {XA_OK, XAER_INVAL, XAER_PROTO}},
        {"xa_start", with_rb({XA_OK, XA_RETRY, XAER_RMERR, XAER_RMFAIL, XAER_DUPID, XAER_OUTSIDE, XAER_NOTA, XAER_INVAL,
                              XAER_PROTO})},
        {"xa_end", with_rb({XA_OK, XA_NOMIGRATE, XAER_RMERR, XAER_RMFAIL, XAER_NOTA, XAER_INVAL, XAER_PROTO})},
        {"xa_prepare", with_rb({XA_OK, XA_RDONLY, XAER_RMERR, XAER_RMFAIL, XAER_NOTA, XAER_INVAL, XAER_PROTO})},
        {"xa_commit", with_rb({XA_OK, XA_HEURHAZ, XA_HEURCOM, XA_HEURRB, XA_HEURMIX, XA_RETRY, XAER_RMERR, XAER_RMFAIL,
                               XAER_NOTA, XAER_INVAL, XAER_PROTO})},
        {"xa_rollback", with_rb({XA_OK, XA_HEURHAZ, XA_HEURCOM, XA_HEURRB, XA_HEURMIX, XAER_RMERR, XAER_RMFAIL,
                                 XAER_NOTA, XAER_INVAL, XAER_PROTO})},
        {"xa_recover", {0, XAER_RMERR, XAER_RMFAIL, XAER_INVAL, XAER_PROTO}},
        {"xa_forget", {XA_OK, XAER_RMERR, XAER_RMFAIL, XAER_NOTA, XAER_INVAL, XAER_PROTO}},
        {"xa_complete", {XAER_PROTO, XAER_INVAL}},
    };
    if (seen().size() != table.size()) {
      MESSAGE("only some of the cases above ran: the table is not compared");
      return;
    }
    for (const auto& [call, codes] : table) {
      std::string got, want;
      for (int c : seen()[call]) got += escrow::xa_result_name(c) + " ";
      for (int c : codes) want += escrow::xa_result_name(c) + " ";
      INFO(call << ": seen " << got << "; docs/xa.md lists " << want);
      CHECK(seen()[call] == codes);
    }
  }
}
