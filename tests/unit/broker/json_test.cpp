// broker/admin/json.cpp: the broker's JSON (valid UTF-8 whatever the bytes), cursors and pages.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "json.h"
#include "escrow/broker/security/names.h"

using namespace escrow::broker;

TEST_CASE("to_json writes Boost.JSON values with numbers, booleans and null as themselves") {
  json::object o{{"a", 1}, {"list", {1, "x", json::object{}}}, {"ok", true}, {"none", nullptr},
                 {"big", std::uint64_t{18446744073709551615u}}};
  CHECK(to_json(o) == R"({"a":1,"list":[1,"x",{}],"ok":true,"none":null,"big":18446744073709551615})");
  // Fractions as people write them, never in exponent notation; a whole number of seconds stays a fraction.
  CHECK(to_json(json_seconds(1.23456)) == "1.235");
  CHECK(to_json(json_seconds(12.345)) == "12.345");
  CHECK(to_json(json::object{{"s", json_seconds(5.0)}, {"list", json::array{0.5, 86400.25}}}) ==
        R"({"s":5.0,"list":[0.5,86400.25]})");
}

TEST_CASE("strings and keys are escaped, and bytes that are not UTF-8 become U+FFFD") {
  CHECK(to_json(json::array{"q\"b\\n\nt\t\x01", "caf\xc3\xa9"}) == "[\"q\\\"b\\\\n\\nt\\t\\u0001\",\"caf\xc3\xa9\"]");
  // A stray byte, an overlong form, a surrogate, a sequence cut short: one U+FFFD per byte.
  CHECK(to_json("bad\xff") == "\"bad\xef\xbf\xbd\"");
  CHECK(to_json("\xc0\x80") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");
  CHECK(to_json("\xed\xa0\x80") == "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  CHECK(to_json("x\xe2\x82") == "\"x\xef\xbf\xbd\xef\xbf\xbd\"");
  // Nested values and keys too; the first of two keys that end up alike counts.
  json::object o{{"k\xff", "1"}, {"k\xfe", "2"}, {"in", {{"deep", json::array{"\xff"}}}}};
  CHECK(to_json(o) == "{\"k\xef\xbf\xbd\":\"1\",\"in\":{\"deep\":[\"\xef\xbf\xbd\"]}}");
  CHECK(is_utf8("caf\xc3\xa9"));
  CHECK_FALSE(is_utf8("bad\xff"));
  CHECK_FALSE(is_utf8("\xc0\x80"));  // overlong
  CHECK_FALSE(is_utf8("\xe2\x82"));  // cut short
}

TEST_CASE("cursors are printable ASCII and come back byte for byte") {
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
  json_page empty({"queues"}, 2, 1024);
  CHECK(empty.finish(false) == R"({"queues":[],"more":false})");

  json_page p({"queues"}, 2, 1024);
  CHECK(p.add(0, 1, "a"));
  CHECK_FALSE(p.full());
  CHECK(p.add(0, 2, "b"));
  CHECK(p.full());
  CHECK_FALSE(p.add(0, 3, "c"));
  CHECK(p.finish(true) == R"({"queues":[1,2],"more":true,"next":"b"})");
  CHECK(p.finish(false) == R"({"queues":[1,2],"more":false})");

  json_page two({"subscriptions", "durable"}, 10, 1024);
  CHECK(two.add(0, 1, "c:1:x"));
  CHECK(two.add(1, 2, "d:k"));
  CHECK(two.add(1, "\xff", "d:l"));
  CHECK(two.finish(true) == "{\"subscriptions\":[1],\"durable\":[2,\"\xef\xbf\xbd\"],\"more\":true,\"next\":\"d:l\"}");
}

TEST_CASE("a page stops before the entry that would take it past max_bytes, never before the first") {
  // A limit of exactly the bytes of {"q":[E,E],"more":true,"next":"c"}: both entries fit, one more byte does not.
  std::string e(8, '7');  // "77777777": 10 bytes of JSON
  std::string full = std::string(R"({"q":[")") + e + "\",\"" + e + R"("],"more":true,"next":"c"})";
  json_page fits({"q"}, 100, full.size());
  CHECK(fits.add(0, json::string(e), "c"));
  CHECK(fits.add(0, json::string(e), "c"));
  CHECK(fits.finish(true) == full);
  CHECK_FALSE(fits.add(0, 1, "c"));  // one byte more
  CHECK(fits.full());

  json_page tight({"q"}, 100, full.size() - 1);
  CHECK(tight.add(0, json::string(e), "c"));
  CHECK_FALSE(tight.add(0, json::string(e), "c"));
  CHECK(tight.size() == 1);

  json_page tiny({"q"}, 100, 4);
  CHECK(tiny.add(0, json::string(100, '1'), "c"));  // the first entry always goes
  CHECK_FALSE(tiny.add(0, 1, "c"));
}
