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
