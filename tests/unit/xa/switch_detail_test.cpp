// The pure parts of the XA switch (xa/xa_switch_internal.h): the open string's resource= and
// branch=, the default resource name, the identity trailer and the rmid trailer of earlier
// switches, and the per-call table may_return() against XA.md's lists.
#include <doctest/doctest.h>

#include <string>

#include "escrow/xa.h"
#include "escrow/xid.h"
#include "xa_switch_internal.h"

namespace d = escrow::xa_switch_detail;

namespace {

d::open_options parse(const std::string& text) {
  std::string why;
  auto o = d::parse_open_string(text, &why);
  INFO(text << ": " << why);
  REQUIRE(o);
  return *o;
}

XID c_xid(const std::string& gtrid, const std::string& bqual) { return escrow::xid(7, gtrid, bqual).to_c(); }

}  // namespace

TEST_SUITE("xa/switch detail") {
  TEST_CASE("resource= and branch= in the open string") {
    auto o = parse("host=broker.example port=61613 login=tm resource=orders branch=2");
    CHECK(o.resource == "orders");
    CHECK(o.branch == "2");
    CHECK(d::resource_name(o) == "orders");
    std::string why;
    for (const std::string bad : {"resource=", "branch=", "resource=x resource=y"}) {
      CHECK_FALSE(d::parse_open_string(bad, &why));
      CHECK(!why.empty());
    }
    CHECK_FALSE(d::parse_open_string("resource=" + std::string(65, 'r'), &why));
    CHECK(d::parse_open_string("resource=" + std::string(64, 'r'), &why));
    CHECK_FALSE(d::parse_open_string("hots=1", &why));
    CHECK(why.find("resource") != std::string::npos);  // the list of keys names the new ones
  }

  TEST_CASE("the default resource is the login, never the rmid, the host or the port") {
    CHECK(d::resource_name(parse("")) == "default");
    CHECK(d::resource_name(parse("host=mq.example port=7000")) == "default");
    CHECK(d::resource_name(parse("login=tm passcode=secret timeout=5")) == "tm");
    // Neither the address, the passcode nor the timeout changes the identity.
    CHECK(d::identity_trailer(parse("login=tm passcode=a timeout=5")) ==
          d::identity_trailer(parse("host=10.0.0.7 port=7000 login=tm passcode=b timeout=9000")));
    CHECK(d::identity_trailer(parse("login=tm")) != d::identity_trailer(parse("login=admin")));
    // An explicit resource names the same branches as the default it spells out.
    CHECK(d::identity_trailer(parse("login=tm resource=tm")) == d::identity_trailer(parse("login=tm")));
    CHECK(d::identity_trailer(parse("resource=default")) == d::identity_trailer(parse("")));
    // branch= makes another identity.
    CHECK(d::identity_trailer(parse("branch=a")) != d::identity_trailer(parse("")));
    CHECK(d::identity_trailer(parse("branch=a")) != d::identity_trailer(parse("branch=b")));
  }

  TEST_CASE("the identity hash is FNV-1a over resource, NUL, branch (docs/xa.md's formula)") {
    CHECK(d::identity_hash("", "") == 0x050c5d1fu);
    CHECK(d::identity_hash("a", "") == 0x2b24d044u);
    CHECK(d::identity_hash("default", "") == 0xa4719e7au);
    CHECK(d::identity_hash("tm", "") == 0xc315857eu);
    CHECK(d::identity_hash("orders", "") == 0x36e79584u);
    CHECK(d::identity_hash("orders", "2") == 0x2490ad82u);
    // The separator keeps ("ab", "") and ("a", "b") apart.
    CHECK(d::identity_hash("ab", "") != d::identity_hash("a", "b"));
    CHECK(d::trailer_hex(d::identity_trailer(parse(""))) == "e6a4719e7a");
    CHECK(d::trailer_hex(d::legacy_trailer(1)) == "e500000001");
  }

  TEST_CASE("broker xids: the identity trailer, the rmid trailer, round trips") {
    XID x = c_xid("gtrid", "bq");
    auto t = d::identity_trailer(parse("resource=orders"));
    auto bx = d::to_broker_xid(x, t, nullptr);
    REQUIRE(bx);
    CHECK(bx->to_string() == "7:6774726964:6271e636e79584");
    auto back = d::from_broker_xid(*bx, t);
    REQUIRE(back);
    CHECK(escrow::xid::from_c(*back) == escrow::xid::from_c(x));
    // Not under another resource, nor under the rmid trailer.
    CHECK_FALSE(d::from_broker_xid(*bx, d::identity_trailer(parse("resource=invoices"))));
    CHECK_FALSE(d::from_broker_xid(*bx, d::legacy_trailer(0)));
    // What earlier switches made (0xE5 + rmid) is read under that rmid only.
    auto old = d::to_broker_xid(x, d::legacy_trailer(3), nullptr);
    CHECK(old->to_string() == "7:6774726964:6271e500000003");
    CHECK(d::from_broker_xid(*old, d::legacy_trailer(3)));
    CHECK_FALSE(d::from_broker_xid(*old, d::legacy_trailer(1)));
    CHECK_FALSE(d::from_broker_xid(*old, t));
    // A branch of a plain STOMP client, without a trailer, is nobody's.
    CHECK_FALSE(d::from_broker_xid(escrow::xid(7, "g", "b"), t));
    CHECK_FALSE(d::from_broker_xid(escrow::xid(7, "g", ""), t));
    // The bqual limit stays 59 bytes: the trailer is 5 bytes, as before.
    std::string why;
    CHECK(d::to_broker_xid(c_xid("g", std::string(59, 'q')), t, &why));
    CHECK_FALSE(d::to_broker_xid(c_xid("g", std::string(60, 'q')), t, &why));
    CHECK(why.find("59") != std::string::npos);
    XID null_xid{};
    null_xid.formatID = -1;
    CHECK_FALSE(d::to_broker_xid(null_xid, t, &why));
  }

  TEST_CASE("may_return is within XA.md's lists, and stricter only where documented") {
    // XA.md, "What each call may return", for the codes the switch's table leaves out.
    using e = d::entry;
    for (e call : {e::open, e::close, e::start, e::end, e::rollback, e::prepare, e::commit, e::recover, e::forget})
      CHECK_FALSE(d::may_return(call, XAER_ASYNC, TMNOFLAGS));  // never asynchronous
    CHECK_FALSE(d::may_return(e::open, XAER_RMFAIL, TMNOFLAGS));
    CHECK_FALSE(d::may_return(e::close, XAER_RMFAIL, TMNOFLAGS));
    CHECK_FALSE(d::may_return(e::commit, XA_RBROLLBACK, TMNOFLAGS));
    CHECK(d::may_return(e::commit, XA_RBROLLBACK, TMONEPHASE));
    CHECK_FALSE(d::may_return(e::end, XAER_DUPID, TMSUCCESS));
    CHECK_FALSE(d::may_return(e::rollback, XA_RETRY, TMNOFLAGS));
    CHECK_FALSE(d::may_return(e::prepare, XA_HEURCOM, TMNOFLAGS));
    CHECK_FALSE(d::may_return(e::forget, XA_RDONLY, TMNOFLAGS));
    CHECK(d::may_return(e::recover, 17, TMSTARTRSCAN));
    CHECK_FALSE(d::may_return(e::recover, XAER_NOTA, TMSTARTRSCAN));
    CHECK_FALSE(d::may_return(e::complete, XAER_RMERR, TMNOFLAGS));
  }
}
