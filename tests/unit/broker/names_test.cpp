// Names clients choose and client text in logs (broker/security/names.h).
#include <doctest/doctest.h>

#include "escrow/broker/security/names.h"

using namespace escrow::broker;

TEST_SUITE("broker/names") {
  TEST_CASE("ordinary names, in any script, are names") {
    for (const char* n : {"orders", "orders.eu.*", "a b", "Bestellungen-\xc3\xbc", "\xe6\xb3\xa8\xe6\x96\x87", "emoji-\xf0\x9f\x93\xa6",
                          "back\\slash", "#"})
      CHECK_MESSAGE(!name_problem(n), n);
  }

  TEST_CASE("names that show differently from what they are are refused, saying where") {
    CHECK(name_problem("a\nb") == std::optional<std::string>("it contains U+000A, a control character, at byte 1"));
    CHECK(name_problem(std::string("a\0b", 3)).has_value());
    CHECK(name_problem("\x7f").has_value());
    CHECK(name_problem("\xc2\x85").has_value());  // NEL, a C1 control
    CHECK(name_problem("ord\xe2\x80\x8b" "ers") ==  // U+200B zero-width space
          std::optional<std::string>("it contains U+200B, a zero-width or direction-changing character, at byte 3"));
    CHECK(name_problem("\xe2\x80\xae" "evil").has_value());  // U+202E right-to-left override
    CHECK(name_problem("\xef\xbb\xbf" "bom").has_value());   // U+FEFF
    CHECK(name_problem("\xe2\x81\xa0").has_value());      // U+2060 word joiner
    CHECK(name_problem("\xff") == std::optional<std::string>("it is not UTF-8 (byte 0)"));
    CHECK(name_problem("\xc0\xaf").has_value());          // overlong '/'
    CHECK(name_problem("\xed\xa0\x80").has_value());      // a surrogate
    CHECK(name_problem("\xf4\x90\x80\x80").has_value());  // above U+10FFFF
    CHECK(name_problem("\xe2\x82").has_value());          // cut short
  }

  TEST_CASE("loggable text cannot start a line of its own") {
    CHECK(loggable("plain") == "plain");
    CHECK(loggable("a\n[error] forged") == "a\\n[error] forged");
    CHECK(loggable("tab\there\r") == "tab\\there\\r");
    CHECK(loggable("back\\n") == "back\\\\n");  // a literal backslash-n stays tellable apart
    CHECK(loggable("\xff\x01") == "\\xff\\x01");
    CHECK(loggable("z\xe2\x80\x8bw") == "z\\u{200b}w");
    CHECK(loggable("\xc3\xbc") == "\xc3\xbc");
  }
}
