// The xid's text form (what XA frames carry and operators type), its C struct and storage key forms,
// and the names of XA flags and result codes as they travel in headers.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "escrow/xa.h"
#include "escrow/xid.h"

using escrow::xid;

namespace {

xid parse_ok(std::string_view text) {
  std::string error;
  auto x = xid::parse(text, &error);
  INFO(text, ": ", error);
  REQUIRE(x.has_value());
  return *x;
}

// Returns the error message; fails the test if the text parsed.
std::string parse_error(std::string_view text) {
  std::string error;
  auto x = xid::parse(text, &error);
  INFO(text);
  CHECK_FALSE(x.has_value());
  CHECK_FALSE(error.empty());  // the caller answers XAER_INVAL and says why
  return error;
}

std::string hex_bytes(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += "a5";
  return out;
}

}  // namespace

TEST_SUITE("xa/xid") {
  TEST_CASE("parse and to_string round trip") {
    xid x = parse_ok("1:0a0b0c:ff00");
    CHECK(x.format_id() == 1);
    CHECK(x.gtrid() == std::string("\x0a\x0b\x0c", 3));
    CHECK(x.bqual() == std::string("\xff\x00", 2));
    CHECK(x.to_string() == "1:0a0b0c:ff00");
    CHECK(parse_ok(x.to_string()) == x);

    // Upper and mixed case hex parse to the same bytes; to_string writes lower case.
    CHECK(parse_ok("1:0A0B0C:FF00") == x);
    CHECK(parse_ok("1:0a0B0c:Ff00") == x);
    CHECK(parse_ok("1:0A0B0C:FF00").to_string() == "1:0a0b0c:ff00");

    // An empty bqual is allowed.
    xid no_bqual = parse_ok("4660:6869:");
    CHECK(no_bqual.gtrid() == "hi");
    CHECK(no_bqual.bqual().empty());
    CHECK(no_bqual.to_string() == "4660:6869:");

    // formatID in decimal, including 0, negatives other than -1, and the 32-bit limits.
    for (std::int64_t f : std::vector<std::int64_t>{0, 4660, -2, -12345, INT32_MIN, INT32_MAX}) {
      xid y(f, "g", "b");
      CAPTURE(f);
      CHECK(y.to_string().substr(0, y.to_string().find(':')) == std::to_string(f));
      CHECK(parse_ok(y.to_string()) == y);
    }

    // Every byte value survives, and the longest gtrid and bqual.
    std::string all(64, '\0'), all2(64, '\0');
    for (int i = 0; i < 64; ++i) {
      all[static_cast<std::size_t>(i)] = static_cast<char>(i * 4);
      all2[static_cast<std::size_t>(i)] = static_cast<char>(i * 4 + 3);
    }
    xid longest(7, all, all2);
    CHECK(parse_ok(longest.to_string()) == longest);
  }

  TEST_CASE("parse errors") {
    // Missing parts and extra colons.
    parse_error("");
    parse_error("1");
    parse_error("1:ab");
    parse_error("1:ab:cd:ef");
    parse_error("1:ab:cd:");
    parse_error("::");
    // formatID: empty, not decimal, -1 (the null XID), out of 32-bit range.
    parse_error(":ab:cd");
    parse_error("x:ab:cd");
    parse_error("1x:ab:cd");
    parse_error(" 1:ab:cd");
    parse_error("0x10:ab:cd");
    CHECK(parse_error("-1:ab:cd").find("null") != std::string::npos);
    parse_error("2147483648:ab:cd");
    parse_error("-2147483649:ab:cd");
    parse_error("99999999999999999999999:ab:cd");
    // Hex: odd length, non-hex digits.
    parse_error("1:abc:");
    parse_error("1:ab:c");
    parse_error("1:zz:");
    parse_error("1:ab:0g");
    parse_error("1:a b:");
    // gtrid empty or longer than 64 bytes; bqual longer than 64 bytes.
    parse_error("1::ab");
    parse_ok("1:" + hex_bytes(64) + ":");
    parse_error("1:" + hex_bytes(65) + ":");
    parse_ok("1:ab:" + hex_bytes(64));
    parse_error("1:ab:" + hex_bytes(65));
    // The error pointer is optional.
    CHECK_FALSE(xid::parse("nonsense").has_value());
  }

  TEST_CASE("from_c and to_c round trip") {
    xid x(0x1234, std::string("gt\0rid", 6), "bq");
    XID c = x.to_c();
    CHECK(c.formatID == 0x1234);
    CHECK(c.gtrid_length == 6);
    CHECK(c.bqual_length == 2);
    // The gtrid first in data, the bqual right after it.
    CHECK(std::memcmp(c.data, "gt\0ridbq", 8) == 0);
    auto back = xid::from_c(c);
    REQUIRE(back);
    CHECK(*back == x);

    xid longest(-7, std::string(64, 'g'), std::string(64, 'b'));
    auto back2 = xid::from_c(longest.to_c());
    REQUIRE(back2);
    CHECK(*back2 == longest);
  }

  TEST_CASE("from_c rejects the null XID and bad lengths") {
    XID c = xid(1, "g", "b").to_c();
    REQUIRE(xid::from_c(c));
    XID null_xid = c;
    null_xid.formatID = -1;
    CHECK_FALSE(xid::from_c(null_xid));
    for (long gl : {0L, -1L, 65L, 200L}) {
      XID bad = c;
      bad.gtrid_length = gl;
      CAPTURE(gl);
      CHECK_FALSE(xid::from_c(bad));
    }
    for (long bl : {-1L, 65L}) {
      XID bad = c;
      bad.bqual_length = bl;
      CAPTURE(bl);
      CHECK_FALSE(xid::from_c(bad));
    }
  }

  TEST_CASE("encode and decode round trip") {
    for (auto& x : {xid(0, "g", ""), xid(-2, "gtrid", "bqual"), xid(INT32_MIN, std::string(64, '\xff'), std::string(64, '\0')),
                    xid(INT32_MAX, std::string("\0", 1), std::string("\0\0", 2))}) {
      auto back = xid::decode(x.encode());
      REQUIRE(back);
      CHECK(*back == x);
    }
  }

  TEST_CASE("encoded keys sort by formatID numerically, then gtrid") {
    // The store scans branches in key order; negative formatIDs sort before positive ones.
    std::vector<std::int64_t> formats{INT32_MIN, -5, -2, 0, 1, 7, 256, INT32_MAX};
    for (std::size_t i = 1; i < formats.size(); ++i) {
      CAPTURE(formats[i]);
      CHECK(xid(formats[i - 1], "zz", "zz").encode() < xid(formats[i], "aa", "").encode());
    }
    // Same formatID and gtrid length: byte order of the gtrid, then of the bqual.
    CHECK(xid(1, "ab", "z").encode() < xid(1, "ac", "a").encode());
    CHECK(xid(1, "ab", "a").encode() < xid(1, "ab", "b").encode());
  }

  TEST_CASE("decode rejects malformed keys") {
    std::string good = xid(1, "gtrid", "bq").encode();
    REQUIRE(xid::decode(good));
    CHECK_FALSE(xid::decode(""));
    CHECK_FALSE(xid::decode(good.substr(0, 4)));  // no length byte
    // The gtrid length byte: 0, more than 64, longer than what follows.
    std::string bad = good;
    bad[4] = 0;
    CHECK_FALSE(xid::decode(bad));
    bad[4] = 65;
    CHECK_FALSE(xid::decode(bad));
    bad[4] = 8;  // 7 bytes follow
    CHECK_FALSE(xid::decode(bad));
    // A bqual longer than 64 bytes.
    CHECK_FALSE(xid::decode(xid(1, "g", "").encode() + std::string(65, 'b')));
    CHECK(xid::decode(xid(1, "g", "").encode() + std::string(64, 'b')));
  }

  TEST_CASE("parse_xa_flags") {
    CHECK(escrow::parse_xa_flags("TMJOIN|TMSUCCESS") == (TMJOIN | TMSUCCESS));
    CHECK(escrow::parse_xa_flags("") == TMNOFLAGS);
    CHECK(escrow::parse_xa_flags("TMNOFLAGS") == TMNOFLAGS);
    CHECK(escrow::parse_xa_flags("TMSTARTRSCAN|TMENDRSCAN") == (TMSTARTRSCAN | TMENDRSCAN));
    CHECK(escrow::parse_xa_flags("TMONEPHASE") == TMONEPHASE);

    std::string error;
    CHECK_FALSE(escrow::parse_xa_flags("TMBOGUS", &error));
    CHECK(error.find("TMBOGUS") != std::string::npos);
    error.clear();
    CHECK_FALSE(escrow::parse_xa_flags("TMJOIN|TMWHATEVER", &error));
    CHECK(error.find("TMWHATEVER") != std::string::npos);
    // Empty names between bars, and lower case, are not flags.
    CHECK_FALSE(escrow::parse_xa_flags("TMJOIN|"));
    CHECK_FALSE(escrow::parse_xa_flags("|TMJOIN"));
    CHECK_FALSE(escrow::parse_xa_flags("TMJOIN||TMSUCCESS"));
    CHECK_FALSE(escrow::parse_xa_flags("tmjoin"));
    CHECK_FALSE(escrow::parse_xa_flags("TMJOIN TMSUCCESS"));
  }

  TEST_CASE("xa_flags_name") {
    CHECK(escrow::xa_flags_name(TMNOFLAGS) == "TMNOFLAGS");
    const std::pair<long, const char*> each[] = {
        {TMASYNC, "TMASYNC"},     {TMONEPHASE, "TMONEPHASE"},     {TMFAIL, "TMFAIL"},
        {TMNOWAIT, "TMNOWAIT"},   {TMRESUME, "TMRESUME"},         {TMSUCCESS, "TMSUCCESS"},
        {TMSUSPEND, "TMSUSPEND"}, {TMSTARTRSCAN, "TMSTARTRSCAN"}, {TMENDRSCAN, "TMENDRSCAN"},
        {TMMULTIPLE, "TMMULTIPLE"}, {TMJOIN, "TMJOIN"},           {TMMIGRATE, "TMMIGRATE"},
    };
    long all = 0;
    for (auto& [flag, name] : each) {
      CHECK(escrow::xa_flags_name(flag) == name);
      CHECK(escrow::parse_xa_flags(name) == flag);
      all |= flag;
    }
    // Several flags: joined by '|', and parsed back to the same value.
    std::string two = escrow::xa_flags_name(TMJOIN | TMSUCCESS);
    CHECK((two == "TMJOIN|TMSUCCESS" || two == "TMSUCCESS|TMJOIN"));
    CHECK(escrow::parse_xa_flags(escrow::xa_flags_name(all)) == all);
    CHECK(escrow::parse_xa_flags(escrow::xa_flags_name(TMONEPHASE | TMNOWAIT)) == (TMONEPHASE | TMNOWAIT));
  }

  TEST_CASE("xa_result_name and xa_result_from_name for every code in xa.h") {
    const std::pair<int, const char*> codes[] = {
        {XA_RBROLLBACK, "XA_RBROLLBACK"},   {XA_RBCOMMFAIL, "XA_RBCOMMFAIL"}, {XA_RBDEADLOCK, "XA_RBDEADLOCK"},
        {XA_RBINTEGRITY, "XA_RBINTEGRITY"}, {XA_RBOTHER, "XA_RBOTHER"},       {XA_RBPROTO, "XA_RBPROTO"},
        {XA_RBTIMEOUT, "XA_RBTIMEOUT"},     {XA_RBTRANSIENT, "XA_RBTRANSIENT"}, {XA_NOMIGRATE, "XA_NOMIGRATE"},
        {XA_HEURHAZ, "XA_HEURHAZ"},         {XA_HEURCOM, "XA_HEURCOM"},       {XA_HEURRB, "XA_HEURRB"},
        {XA_HEURMIX, "XA_HEURMIX"},         {XA_RETRY, "XA_RETRY"},           {XA_RDONLY, "XA_RDONLY"},
        {XA_OK, "XA_OK"},                   {XAER_ASYNC, "XAER_ASYNC"},       {XAER_RMERR, "XAER_RMERR"},
        {XAER_NOTA, "XAER_NOTA"},           {XAER_INVAL, "XAER_INVAL"},       {XAER_PROTO, "XAER_PROTO"},
        {XAER_RMFAIL, "XAER_RMFAIL"},       {XAER_DUPID, "XAER_DUPID"},       {XAER_OUTSIDE, "XAER_OUTSIDE"},
    };
    for (auto& [code, name] : codes) {
      CAPTURE(name);
      CHECK(escrow::xa_result_name(code) == name);
      CHECK(escrow::xa_result_from_name(name) == code);
    }
    // The aliases: the range bounds name the same codes as their first and last members.
    CHECK(escrow::xa_result_from_name("XA_RBBASE") == XA_RBBASE);
    CHECK(escrow::xa_result_from_name("XA_RBEND") == XA_RBEND);
    CHECK(XA_RBBASE == XA_RBROLLBACK);
    CHECK(XA_RBEND == XA_RBTRANSIENT);
    // The values of XA.md, so a manager built against another xa.h agrees.
    CHECK(XA_RBTIMEOUT == 106);
    CHECK(XA_HEURMIX == 5);
    CHECK(XAER_NOTA == -4);
    CHECK(XAER_OUTSIDE == -9);
    CHECK(TMONEPHASE == 0x40000000L);
    CHECK(TMJOIN == 0x00200000L);
    // Unknown codes and names.
    CHECK(escrow::xa_result_name(42) == "XA_UNKNOWN(42)");
    CHECK(escrow::xa_result_name(-100) == "XA_UNKNOWN(-100)");
    CHECK_FALSE(escrow::xa_result_from_name("XA_NOPE"));
    CHECK_FALSE(escrow::xa_result_from_name(""));
    CHECK_FALSE(escrow::xa_result_from_name("xa_ok"));
  }
}
