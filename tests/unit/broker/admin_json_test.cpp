// broker/admin_json.cpp: the JSON writer of the ADMIN answers (commas, escapes, UTF-8).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "admin_json.h"

using escrow::broker::is_utf8;
using escrow::broker::json_writer;

TEST_CASE("objects and arrays get their commas") {
  json_writer j;
  j.begin_object().field("a", 1).key("list").begin_array().value(1).value("x").begin_object().end_object().end_array();
  j.field("ok", true).key("none").null().field("big", std::uint64_t{18446744073709551615u}).end_object();
  CHECK(j.str() == R"({"a":1,"list":[1,"x",{}],"ok":true,"none":null,"big":18446744073709551615})");
}

TEST_CASE("strings are escaped and bytes that are not UTF-8 are replaced") {
  json_writer j;
  j.begin_array().value("q\"b\\n\nt\t\x01").value("caf\xc3\xa9").value("bad\xff").end_array();
  CHECK(j.str() == "[\"q\\\"b\\\\n\\nt\\t\\u0001\",\"caf\xc3\xa9\",\"bad\\ufffd\"]");
  CHECK(is_utf8("caf\xc3\xa9"));
  CHECK_FALSE(is_utf8("bad\xff"));
  CHECK_FALSE(is_utf8("\xc0\x80"));  // overlong
  CHECK_FALSE(is_utf8("\xe2\x82"));  // cut short
}

TEST_CASE("cursors are printable ASCII and come back byte for byte") {
  using escrow::broker::cursor_escape;
  using escrow::broker::cursor_unescape;
  std::string key("d/client\0sub\0us:er", 18);
  std::string c = cursor_escape(key);
  CHECK(c == "d/client%00sub%00us:er");
  CHECK(cursor_escape(key, ":") == "d/client%00sub%00us%3Aer");
  CHECK(cursor_escape("a b%\"\\\xc3\xa9") == "a%20b%25%22%5C%C3%A9");
  CHECK(cursor_unescape(c) == key);
  CHECK(cursor_unescape(cursor_escape("a b%\"\\\xc3\xa9")) == "a b%\"\\\xc3\xa9");
  CHECK(cursor_unescape("q/plain") == "q/plain");
  CHECK(cursor_unescape("%4a%4A") == "JJ");
  CHECK_FALSE(cursor_unescape("bad%"));
  CHECK_FALSE(cursor_unescape("bad%4"));
  CHECK_FALSE(cursor_unescape("bad%zz"));
}

TEST_CASE("a page takes entries up to its limit and says what comes next") {
  using escrow::broker::json_page;
  json_page empty({"queues"}, 2, 1024);
  CHECK(empty.finish(false) == R"({"queues":[],"more":false})");

  json_page p({"queues"}, 2, 1024);
  CHECK(p.add(0, "1", "a"));
  CHECK_FALSE(p.full());
  CHECK(p.add(0, "2", "b"));
  CHECK(p.full());
  CHECK_FALSE(p.add(0, "3", "c"));
  CHECK(p.finish(true) == R"({"queues":[1,2],"more":true,"next":"b"})");
  CHECK(p.finish(false) == R"({"queues":[1,2],"more":false})");

  json_page two({"subscriptions", "durable"}, 10, 1024);
  CHECK(two.add(0, "1", "c:1:x"));
  CHECK(two.add(1, "2", "d:k"));
  CHECK(two.add(1, "3", "d:l"));
  CHECK(two.finish(true) == R"({"subscriptions":[1],"durable":[2,3],"more":true,"next":"d:l"})");
}

TEST_CASE("a page stops before the entry that would take it past max_bytes, never before the first") {
  using escrow::broker::json_page;
  // A limit of exactly the bytes of {"q":[E,E],"more":true,"next":"c"}: both entries fit, one more byte does not.
  std::string e(10, '7');
  std::string full = std::string(R"({"q":[)") + e + "," + e + R"(],"more":true,"next":"c"})";
  json_page fits({"q"}, 100, full.size());
  CHECK(fits.add(0, e, "c"));
  CHECK(fits.add(0, e, "c"));
  CHECK(fits.finish(true) == full);
  CHECK_FALSE(fits.add(0, "1", "c"));  // one byte more
  CHECK(fits.full());

  json_page tight({"q"}, 100, full.size() - 1);
  CHECK(tight.add(0, e, "c"));
  CHECK_FALSE(tight.add(0, e, "c"));
  CHECK(tight.size() == 1);

  json_page tiny({"q"}, 100, 4);
  CHECK(tiny.add(0, std::string(100, '1'), "c"));  // the first entry always goes
  CHECK_FALSE(tiny.add(0, "1", "c"));
}
