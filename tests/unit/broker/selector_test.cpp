// JMS message selectors (broker/selector/, escrow/broker/selector/selector.h), rule by rule as JMS
// 2.0 section 3.8.1.1 states them, then Escrow's decisions where JMS is silent or STOMP differs
// (docs/stomp.md, "Selectors"). Three-valued results are told apart through NOT: an expression is
// TRUE when it selects, FALSE when NOT (it) selects, UNKNOWN when neither does.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "escrow/broker/selector/selector.h"

using escrow::broker::kSelectorMaxBytes;
using escrow::broker::kSelectorMaxDepth;
using escrow::broker::selector;
using escrow::broker::selector_error;
using escrow::broker::selector_lookup;

namespace {

using headers = std::map<std::string, std::string, std::less<>>;

auto lookup_in(const headers& h) {
  return [&h](std::string_view name) -> std::optional<std::string_view> {
    auto it = h.find(name);
    if (it == h.end()) return std::nullopt;
    return std::string_view(it->second);
  };
}

selector parsed(std::string_view text) {
  auto r = selector::parse(text);
  if (auto* e = std::get_if<selector_error>(&r)) FAIL_CHECK("'" << text << "' refused: " << e->message);
  REQUIRE(std::holds_alternative<selector>(r));
  return std::get<selector>(r);
}

bool selects(std::string_view text, const headers& h = {}) { return parsed(text).matches(lookup_in(h)); }

// "TRUE", "FALSE" or "UNKNOWN".
std::string truth(std::string_view text, const headers& h = {}) {
  const bool yes = selects(text, h);
  const bool no = selects("NOT (" + std::string(text) + ")", h);
  REQUIRE_FALSE((yes && no));
  return yes ? "TRUE" : no ? "FALSE" : "UNKNOWN";
}

selector_error error_of(std::string_view text) {
  auto r = selector::parse(text);
  REQUIRE_MESSAGE(std::holds_alternative<selector_error>(r), "'" << text << "' was accepted");
  return std::get<selector_error>(r);
}


// LIKE by the book, for ASCII: dynamic programming over (pattern, text) prefixes.
bool like_reference(std::string_view pattern, std::string_view text) {
  std::vector<std::vector<char>> m(pattern.size() + 1, std::vector<char>(text.size() + 1, 0));
  m[0][0] = 1;
  for (std::size_t p = 1; p <= pattern.size(); ++p)
    for (std::size_t t = 0; t <= text.size(); ++t) {
      const char c = pattern[p - 1];
      if (c == '%') m[p][t] = m[p - 1][t] || (t > 0 && m[p][t - 1]);
      else if (t > 0) m[p][t] = m[p - 1][t - 1] && (c == '_' || c == text[t - 1]);
    }
  return m[pattern.size()][text.size()];
}

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_SUITE("broker/selector") {
  TEST_CASE("an empty selector is no selector: it selects every message") {
    CHECK(parsed("").empty());
    CHECK(parsed(" \t\r\n\f").empty());
    CHECK(selects(""));
    CHECK(selects("   ", {{"a", "b"}}));
    CHECK_FALSE(parsed("TRUE").empty());
    CHECK(parsed(" TRUE ").text() == " TRUE ");
  }

  TEST_CASE("string literals: in single quotes, a quote inside doubled") {
    CHECK(truth("s = 'it''s'", {{"s", "it's"}}) == "TRUE");
    CHECK(truth("s = ''''", {{"s", "'"}}) == "TRUE");
    CHECK(truth("s = ''", {{"s", ""}}) == "TRUE");
    CHECK(truth("s = 'x'", {{"s", ""}}) == "FALSE");
    CHECK(truth("'a' = 'a'") == "TRUE");
    CHECK(truth("'a' = 'A'") == "FALSE");  // bytes, no case folding
    CHECK(truth("s = 'Gr\xc3\xbc\xc3\x9f" "e'", {{"s", "Gr\xc3\xbc\xc3\x9f" "e"}}) == "TRUE");
    CHECK(truth("s = 'a \"b\" c'", {{"s", "a \"b\" c"}}) == "TRUE");  // double quotes are plain characters
  }

  TEST_CASE("exact numeric literals: Java's integer forms, long range") {
    CHECK(truth("57 = 57") == "TRUE");
    CHECK(truth("x = -957", {{"x", "-957"}}) == "TRUE");
    CHECK(truth("x = +62", {{"x", "62"}}) == "TRUE");
    CHECK(truth("0x1F = 31") == "TRUE");
    CHECK(truth("0X1f = 31") == "TRUE");
    CHECK(truth("017 = 15") == "TRUE");  // a leading 0 is octal, as in Java
    CHECK(truth("0 = 0") == "TRUE");
    CHECK(truth("5L = 5") == "TRUE");
    CHECK(truth("9223372036854775807 > 9223372036854775806") == "TRUE");
    CHECK(truth("-9223372036854775808 < -9223372036854775807") == "TRUE");
    CHECK(truth("x = -9223372036854775808", {{"x", "-9223372036854775808"}}) == "TRUE");
    CHECK(truth("- -5 = 5") == "TRUE");
    CHECK(truth("-(5) = -5") == "TRUE");
  }

  TEST_CASE("approximate numeric literals: Java's decimal floating-point forms, double range") {
    CHECK(truth("7. = 7") == "TRUE");
    CHECK(truth("6.22E3 = 6220") == "TRUE");
    CHECK(truth("1.5e-2 = 0.015") == "TRUE");
    CHECK(truth(".5 = 0.5") == "TRUE");
    CHECK(truth("-57.9E2 = -5790") == "TRUE");
    CHECK(truth("7E3 = 7000") == "TRUE");
    CHECK(truth("1.e1 = 10") == "TRUE");
    CHECK(truth("2f = 2") == "TRUE");
    CHECK(truth("2.5D = 2.5") == "TRUE");
    CHECK(truth("1.7976931348623157E308 > 1E308") == "TRUE");
  }

  TEST_CASE("boolean literals and every keyword, in any case") {
    CHECK(truth("TRUE") == "TRUE");
    CHECK(truth("FALSE") == "FALSE");
    CHECK(truth("true") == "TRUE");
    CHECK(truth("fAlSe") == "FALSE");
    const headers h{{"a", "1"}, {"s", "xy"}};
    CHECK(truth("a = 1 and not (a = 2) or false", h) == "TRUE");
    CHECK(truth("a between 0 and 2", h) == "TRUE");
    CHECK(truth("a Not Between 0 And 2", h) == "FALSE");
    CHECK(truth("s in ('xy') AND s like 'x%' escape '!'", h) == "TRUE");
    CHECK(truth("missing is null AND a Is Not Null", h) == "TRUE");
  }

  TEST_CASE("identifiers: Java's rules, case-sensitive, and never a keyword") {
    CHECK(truth("$price = 1 AND _q = 2 AND a1b2 = 3", {{"$price", "1"}, {"_q", "2"}, {"a1b2", "3"}}) == "TRUE");
    CHECK(truth("Color = 'red'", {{"color", "red"}}) == "UNKNOWN");  // Color is not color
    CHECK(truth("color = 'red'", {{"color", "red"}}) == "TRUE");
    CHECK(truth("gr\xc3\xb6\xc3\x9f" "e = 3", {{"gr\xc3\xb6\xc3\x9f" "e", "3"}}) == "TRUE");  // non-ASCII letters
    CHECK(truth("ANDY = 1 AND ORDER = 2 AND NULLS = 3", {{"ANDY", "1"}, {"ORDER", "2"}, {"NULLS", "3"}}) == "TRUE");
    // IS NULL takes only an identifier, and no keyword is one.
    for (std::string keyword : {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE", "null", "Escape"})
      CHECK_MESSAGE(!std::holds_alternative<selector>(selector::parse(keyword + " IS NULL")), keyword);
    // '-' and '.' are not identifier characters: content-type is content minus type.
    CHECK(truth("content-type = 0", {{"content", "3"}, {"type", "3"}}) == "TRUE");
    CHECK_FALSE(std::holds_alternative<selector>(selector::parse("a.b = 1")));
  }

  TEST_CASE("extension: any header name in double quotes, a quote inside doubled") {
    CHECK(truth("\"content-type\" = 'text/plain'", {{"content-type", "text/plain"}}) == "TRUE");
    CHECK(truth("\"correlation.key\" LIKE 'k%'", {{"correlation.key", "k1"}}) == "TRUE");
    CHECK(truth("\"a\"\"b\" = 1", {{"a\"b", "1"}}) == "TRUE");
    CHECK(truth("\"NULL\" IS NOT NULL AND \"and\" = 2", {{"NULL", "x"}, {"and", "2"}}) == "TRUE");
    CHECK(truth("\"has space\" = 'yes'", {{"has space", "yes"}}) == "TRUE");
    // A quoted name is the STOMP header as written: no JMS mapping.
    CHECK(truth("\"JMSPriority\" IS NULL", {{"priority", "9"}}) == "TRUE");
    CHECK(truth("\"color\" = color", {{"color", "red"}}) == "TRUE");
  }

  TEST_CASE("whitespace is Java's: space, tab, form feed, CR, LF; -- is not a comment") {
    CHECK(truth("\ta\f=\r\n1 ", {{"a", "1"}}) == "TRUE");
    CHECK(truth("a=1AND b=2", {{"a", "1"}, {"b", "2"}}) == "TRUE");  // the number 1, then AND, as Java's lexer reads it
    CHECK(truth("a = 1 -- b", {{"a", "3"}, {"b", "2"}}) == "TRUE");  // 1 - (-b)
  }

  TEST_CASE("precedence: OR < AND < NOT < comparison < + - < * / < unary sign; left to right within a level") {
    CHECK(truth("TRUE OR TRUE AND FALSE") == "TRUE");    // TRUE OR (TRUE AND FALSE)
    CHECK(truth("(TRUE OR TRUE) AND FALSE") == "FALSE");
    CHECK(truth("NOT FALSE AND FALSE") == "FALSE");     // (NOT FALSE) AND FALSE
    CHECK(truth("NOT (FALSE AND FALSE)") == "TRUE");
    CHECK(truth("NOT 1 = 2") == "TRUE");                // NOT (1 = 2)
    CHECK(truth("NOT NOT TRUE") == "TRUE");
    CHECK(truth("1 + 2 * 3 = 7") == "TRUE");
    CHECK(truth("(1 + 2) * 3 = 9") == "TRUE");
    CHECK(truth("10 - 4 - 3 = 3") == "TRUE");           // (10 - 4) - 3
    CHECK(truth("24 / 4 / 2 = 3") == "TRUE");           // (24 / 4) / 2
    CHECK(truth("-2 * -3 = 6") == "TRUE");
    CHECK(truth("- 2 - - 3 = 1") == "TRUE");
    CHECK(truth("1 + 1 BETWEEN 2 AND 1 + 1") == "TRUE");
    CHECK(truth("2 * 3 < 2 + 5 AND 1 = 1 OR FALSE") == "TRUE");
    CHECK(truth("TRUE = (1 = 1)") == "TRUE");
    CHECK(truth("(((a)) = 1)", {{"a", "1"}}) == "TRUE");
  }

  TEST_CASE("three-valued logic: AND, every cell of JMS's table") {
    // T: TRUE, F: FALSE, U: a missing header used as a condition (NULL, so UNKNOWN).
    const std::map<std::string, std::string> cells{
        {"TRUE AND TRUE", "TRUE"},   {"TRUE AND FALSE", "FALSE"}, {"TRUE AND u", "UNKNOWN"},
        {"FALSE AND TRUE", "FALSE"}, {"FALSE AND FALSE", "FALSE"}, {"FALSE AND u", "FALSE"},
        {"u AND TRUE", "UNKNOWN"},   {"u AND FALSE", "FALSE"},    {"u AND u", "UNKNOWN"},
    };
    for (const auto& [text, expected] : cells) CHECK_MESSAGE(truth(text) == expected, text);
  }

  TEST_CASE("three-valued logic: OR, every cell of JMS's table") {
    const std::map<std::string, std::string> cells{
        {"TRUE OR TRUE", "TRUE"},   {"TRUE OR FALSE", "TRUE"},   {"TRUE OR u", "TRUE"},
        {"FALSE OR TRUE", "TRUE"},  {"FALSE OR FALSE", "FALSE"}, {"FALSE OR u", "UNKNOWN"},
        {"u OR TRUE", "TRUE"},      {"u OR FALSE", "UNKNOWN"},   {"u OR u", "UNKNOWN"},
    };
    for (const auto& [text, expected] : cells) CHECK_MESSAGE(truth(text) == expected, text);
  }

  TEST_CASE("three-valued logic: NOT, every cell of JMS's table") {
    CHECK(truth("NOT TRUE") == "FALSE");
    CHECK(truth("NOT FALSE") == "TRUE");
    CHECK(truth("NOT u") == "UNKNOWN");
    // The same cells with comparisons for operands, and a selector is TRUE only when it is TRUE.
    CHECK(truth("NOT (u = 1)") == "UNKNOWN");
    CHECK_FALSE(selects("u = 1"));
    CHECK_FALSE(selects("NOT (u = 1)"));
    CHECK(truth("(u = 1) OR 1 = 1") == "TRUE");
    CHECK(truth("(u = 1) AND 1 = 2") == "FALSE");
  }

  TEST_CASE("NULL: a missing header is NULL; comparison and arithmetic with it are UNKNOWN; IS [NOT] NULL") {
    const headers h{{"present", "1"}, {"blank", ""}};
    CHECK(truth("missing = 1", h) == "UNKNOWN");
    CHECK(truth("missing <> 1", h) == "UNKNOWN");
    CHECK(truth("missing > 1", h) == "UNKNOWN");
    CHECK(truth("missing = 'x'", h) == "UNKNOWN");
    CHECK(truth("missing = TRUE", h) == "UNKNOWN");
    CHECK(truth("missing = missing", h) == "UNKNOWN");
    CHECK(truth("missing + 1 = 2", h) == "UNKNOWN");
    CHECK(truth("-missing = 0", h) == "UNKNOWN");
    CHECK(truth("present * missing > 0 OR present = 1", h) == "TRUE");
    CHECK(truth("missing IS NULL", h) == "TRUE");
    CHECK(truth("missing IS NOT NULL", h) == "FALSE");
    CHECK(truth("present IS NULL", h) == "FALSE");
    CHECK(truth("present IS NOT NULL", h) == "TRUE");
    CHECK(truth("blank IS NULL", h) == "FALSE");  // an empty header is a value, not NULL
    CHECK(truth("blank = ''", h) == "TRUE");
  }

  TEST_CASE("BETWEEN a AND b is a <= x AND x <= b; NOT BETWEEN its negation") {
    for (const auto& [age, expected] : std::vector<std::pair<const char*, const char*>>{
             {"15", "TRUE"}, {"17", "TRUE"}, {"19", "TRUE"}, {"14", "FALSE"}, {"20", "FALSE"}, {"19.5", "FALSE"}, {"15.0", "TRUE"}}) {
      CHECK_MESSAGE(truth("age BETWEEN 15 AND 19", {{"age", age}}) == expected, age);
      CHECK_MESSAGE(truth("age NOT BETWEEN 15 AND 19", {{"age", age}}) == (std::string(expected) == "TRUE" ? "FALSE" : "TRUE"), age);
    }
    CHECK(truth("age BETWEEN 19 AND 15", {{"age", "17"}}) == "FALSE");
    CHECK(truth("age BETWEEN 1.5 AND 2.5E0", {{"age", "2"}}) == "TRUE");
    CHECK(truth("age BETWEEN lo AND hi", {{"age", "2"}, {"lo", "1"}, {"hi", "3"}}) == "TRUE");
    // NULL anywhere: three-valued AND of the two comparisons.
    CHECK(truth("missing BETWEEN 1 AND 2") == "UNKNOWN");
    CHECK(truth("missing NOT BETWEEN 1 AND 2") == "UNKNOWN");
    CHECK(truth("5 BETWEEN missing AND 7") == "UNKNOWN");
    CHECK(truth("5 BETWEEN missing AND 3") == "FALSE");  // x <= 3 is FALSE, so the AND is
    CHECK(truth("5 NOT BETWEEN missing AND 3") == "TRUE");
  }

  TEST_CASE("IN: an identifier against string literals; NOT IN; NULL gives UNKNOWN") {
    const char* in = "Country IN ('UK', 'US', 'France')";
    const char* not_in = "Country NOT IN ('UK', 'US', 'France')";
    CHECK(truth(in, {{"Country", "UK"}}) == "TRUE");
    CHECK(truth(in, {{"Country", "France"}}) == "TRUE");
    CHECK(truth(in, {{"Country", "Peru"}}) == "FALSE");
    CHECK(truth(in, {{"Country", "uk"}}) == "FALSE");
    CHECK(truth(not_in, {{"Country", "UK"}}) == "FALSE");
    CHECK(truth(not_in, {{"Country", "Peru"}}) == "TRUE");
    CHECK(truth(in) == "UNKNOWN");
    CHECK(truth(not_in) == "UNKNOWN");
    CHECK(truth("c IN ('a')", {{"c", "a"}}) == "TRUE");
    CHECK(truth("c IN ('it''s', '')", {{"c", ""}}) == "TRUE");
    CHECK(truth("\"x-country\" IN ('UK')", {{"x-country", "UK"}}) == "TRUE");
    CHECK(truth("JMSType IN ('order', 'invoice')", {{"type", "invoice"}}) == "TRUE");
    CHECK(truth("n IN ('1')", {{"n", "1.0"}}) == "FALSE");  // text against text
  }

  TEST_CASE("LIKE: % any run, _ any one character, ESCAPE; NOT LIKE; NULL gives UNKNOWN") {
    CHECK(truth("phone LIKE '12%3'", {{"phone", "123"}}) == "TRUE");
    CHECK(truth("phone LIKE '12%3'", {{"phone", "12993"}}) == "TRUE");
    CHECK(truth("phone LIKE '12%3'", {{"phone", "1234"}}) == "FALSE");
    CHECK(truth("word LIKE 'l_se'", {{"word", "lose"}}) == "TRUE");
    CHECK(truth("word LIKE 'l_se'", {{"word", "loose"}}) == "FALSE");
    CHECK(truth("underscored LIKE '\\_%' ESCAPE '\\'", {{"underscored", "_foo"}}) == "TRUE");
    CHECK(truth("underscored LIKE '\\_%' ESCAPE '\\'", {{"underscored", "bar"}}) == "FALSE");
    CHECK(truth("phone NOT LIKE '12%3'", {{"phone", "123"}}) == "FALSE");
    CHECK(truth("phone NOT LIKE '12%3'", {{"phone", "1234"}}) == "TRUE");
    CHECK(truth("phone LIKE '12%3'") == "UNKNOWN");
    CHECK(truth("phone NOT LIKE '12%3'") == "UNKNOWN");
    // Without ESCAPE, '\' is an ordinary character.
    CHECK(truth("p LIKE 'a\\_'", {{"p", "a\\x"}}) == "TRUE");
    // '%' matches nothing as well; the pattern covers the whole value.
    CHECK(truth("p LIKE '%'", {{"p", ""}}) == "TRUE");
    CHECK(truth("p LIKE 'abc%'", {{"p", "abc"}}) == "TRUE");
    CHECK(truth("p LIKE 'b'", {{"p", "abc"}}) == "FALSE");
    CHECK(truth("p LIKE ''", {{"p", ""}}) == "TRUE");
    CHECK(truth("p LIKE '_'", {{"p", ""}}) == "FALSE");
    // Going back to the last '%' when a later part fails.
    CHECK(truth("p LIKE '%ab%ab'", {{"p", "abab"}}) == "TRUE");
    CHECK(truth("p LIKE '%ab%ab'", {{"p", "aXabYaab"}}) == "TRUE");
    CHECK(truth("p LIKE '%ab%ab'", {{"p", "abaXb"}}) == "FALSE");
    CHECK(truth("p LIKE '%a_c%%d'", {{"p", "xxabbabcd"}}) == "TRUE");
    CHECK(truth("p LIKE 'a%%%b'", {{"p", "ab"}}) == "TRUE");
    // '_' is one character, however many bytes it takes in UTF-8.
    CHECK(truth("p LIKE 'gr__e'", {{"p", "gr\xc3\xbc\xc3\x9f" "e"}}) == "TRUE");
    CHECK(truth("p LIKE '_'", {{"p", "\xe2\x82\xac"}}) == "TRUE");
    CHECK(truth("p LIKE '__'", {{"p", "\xe2\x82\xac"}}) == "FALSE");
    // Any one character may escape, itself included; escaped, % and _ stand for themselves.
    CHECK(truth("p LIKE '100!%' ESCAPE '!'", {{"p", "100%"}}) == "TRUE");
    CHECK(truth("p LIKE '100!%' ESCAPE '!'", {{"p", "1000"}}) == "FALSE");
    CHECK(truth("p LIKE 'a!!b' ESCAPE '!'", {{"p", "a!b"}}) == "TRUE");
    CHECK(truth("p LIKE 'a\xc2\xa7_b' ESCAPE '\xc2\xa7'", {{"p", "a_b"}}) == "TRUE");
    CHECK(truth("p LIKE 'a%b' ESCAPE '%'", {{"p", "a%b"}}) == "FALSE");  // '%b' is the literal "b"
    CHECK(truth("p LIKE 'a%b' ESCAPE '%'", {{"p", "ab"}}) == "TRUE");
    // Patterns longer than one machine word of states (64 characters).
    CHECK(truth("p LIKE '" + repeat("_", 100) + "b'", {{"p", repeat("a", 100) + "b"}}) == "TRUE");
    CHECK(truth("p LIKE '" + repeat("_", 100) + "b'", {{"p", repeat("a", 99) + "b"}}) == "FALSE");
    CHECK(truth("p LIKE '%" + repeat("ab", 70) + "%'", {{"p", "x" + repeat("ab", 70) + "y"}}) == "TRUE");
    CHECK(truth("p LIKE '%" + repeat("ab", 70) + "%'", {{"p", "x" + repeat("ab", 69) + "y"}}) == "FALSE");
    CHECK(truth("p LIKE '" + repeat("a%", 130) + "'", {{"p", repeat("a", 130)}}) == "TRUE");
    CHECK(truth("p LIKE '" + repeat("a%", 130) + "'", {{"p", repeat("a", 129)}}) == "FALSE");
    // A JMS name of type string takes LIKE too.
    CHECK(truth("JMSMessageID LIKE 'ID:%'", {{"message-id", "ID:7"}}) == "TRUE");
  }

  TEST_CASE("LIKE agrees with the definition on random patterns and texts") {
    std::uint32_t state = 12345;
    auto next = [&state](std::uint32_t bound) {
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      return state % bound;
    };
    const char pattern_alphabet[] = {'a', 'b', '%', '_'};
    int agreed = 0;
    for (int round = 0; round < 3000; ++round) {
      std::string pattern, text;
      const std::uint32_t pattern_length = next(round < 2000 ? 8 : 160), text_length = next(round < 2000 ? 10 : 200);
      for (std::uint32_t i = 0; i < pattern_length; ++i) pattern += pattern_alphabet[next(4)];
      for (std::uint32_t i = 0; i < text_length; ++i) text += static_cast<char>('a' + next(2));
      const bool expected = like_reference(pattern, text);
      const bool got = selects("p LIKE '" + pattern + "'", {{"p", text}});
      CHECK_MESSAGE(got == expected, "'" << text << "' LIKE '" << pattern << "'");
      agreed += got == expected;
    }
    CHECK(agreed == 3000);
  }

  TEST_CASE("arithmetic: exact stays exact, exact with approximate is approximate, no wrapping") {
    const headers h{{"a", "2"}, {"b", "3"}, {"f", "0.5"}};
    CHECK(truth("a + b = 5", h) == "TRUE");
    CHECK(truth("a - b = -1", h) == "TRUE");
    CHECK(truth("a * b = 6", h) == "TRUE");
    CHECK(truth("b / a = 1", h) == "TRUE");      // exact division truncates, as Java's
    CHECK(truth("-7 / 2 = -3", h) == "TRUE");
    CHECK(truth("b / 2.0 = 1.5", h) == "TRUE");
    CHECK(truth("a * f = 1", h) == "TRUE");
    CHECK(truth("-a = -2", h) == "TRUE");
    CHECK(truth("+a = 2", h) == "TRUE");
    // Division by zero: UNKNOWN, exact or approximate.
    CHECK(truth("a / 0 = 0", h) == "UNKNOWN");
    CHECK(truth("a / 0.0 > 0", h) == "UNKNOWN");
    CHECK(truth("a / (b - 3) = 0 OR TRUE", h) == "TRUE");
    // Past a long: the double result, never a wrapped one.
    CHECK(truth("9223372036854775807 + 1 > 0") == "TRUE");  // wrapped, it would be Long.MIN_VALUE
    CHECK(truth("9223372036854775807 + 1 = 9223372036854775808.0") == "TRUE");
    CHECK(truth("-9223372036854775808 - 1 < 0") == "TRUE");
    CHECK(truth("9223372036854775807 * 2 = 18446744073709551614.0") == "TRUE");
    CHECK(truth("-9223372036854775808 / -1 > 0") == "TRUE");
    CHECK(truth("-(-9223372036854775808) > 0") == "TRUE");
    CHECK(truth("x * x > 0", {{"x", "4294967296"}}) == "TRUE");
    // Overflowing doubles are infinities, which still compare; their NaNs are UNKNOWN.
    CHECK(truth("1E308 * 10 > 1E308") == "TRUE");
    CHECK(truth("1E308 * 10 - 1E308 * 10 = 0") == "UNKNOWN");
    // JMS promotes exact to approximate for comparison.
    CHECK(truth("1 = 1.0") == "TRUE");
    CHECK(truth("9007199254740993 = 9007199254740992.0") == "TRUE");  // as doubles they are equal
    CHECK(truth("9007199254740993 = 9007199254740992") == "FALSE");   // as longs they are not
  }

  TEST_CASE("types: a header's text is a number when it reads entirely as one") {
    const headers h{{"price", "12.5"}, {"qty", "7"}, {"neg", "-3"}, {"exp", "6.22E3"}, {"big", "99999999999999999999"},
                    {"word", "abc"}, {"spaced", " 7"}, {"hex", "0x10"}, {"half", ".5"}, {"plus", "+4"}};
    CHECK(truth("price > 12", h) == "TRUE");
    CHECK(truth("price = 12.5", h) == "TRUE");
    CHECK(truth("qty = 7.0", h) == "TRUE");
    CHECK(truth("qty BETWEEN 6 AND 8", h) == "TRUE");
    CHECK(truth("neg < 0", h) == "TRUE");
    CHECK(truth("exp = 6220", h) == "TRUE");
    CHECK(truth("half = 0.5", h) == "TRUE");
    CHECK(truth("plus = 4", h) == "TRUE");
    CHECK(truth("big > 9223372036854775807", h) == "TRUE");  // past a long: approximate
    CHECK(truth("qty + 1 = 8", h) == "TRUE");
    // Text that is not wholly a number takes no part in a numeric comparison: UNKNOWN, NOT too.
    CHECK(truth("word = 1", h) == "UNKNOWN");
    CHECK(truth("word <> 1", h) == "UNKNOWN");
    CHECK(truth("word > 1", h) == "UNKNOWN");
    CHECK(truth("word + 1 = 1", h) == "UNKNOWN");
    CHECK(truth("spaced = 7", h) == "UNKNOWN");
    CHECK(truth("hex = 16", h) == "UNKNOWN");  // Java's literal forms are for the selector's text only
    CHECK(truth("word IS NOT NULL", h) == "TRUE");
  }

  TEST_CASE("types: a header's text is a boolean against TRUE or FALSE, or as a condition") {
    const headers h{{"flag", "true"}, {"off", "FALSE"}, {"odd", "yes"}, {"one", "1"}};
    CHECK(truth("flag = TRUE", h) == "TRUE");
    CHECK(truth("flag <> FALSE", h) == "TRUE");
    CHECK(truth("off = FALSE", h) == "TRUE");  // any case
    CHECK(truth("odd = TRUE", h) == "UNKNOWN");
    CHECK(truth("one = TRUE", h) == "UNKNOWN");
    CHECK(truth("flag", h) == "TRUE");
    CHECK(truth("off", h) == "FALSE");
    CHECK(truth("odd", h) == "UNKNOWN");
    CHECK(truth("flag AND NOT off", h) == "TRUE");
    CHECK(truth("(qty = 1) = FALSE", {{"qty", "2"}}) == "TRUE");
  }

  TEST_CASE("types: a header against a string or another header compares as text") {
    const headers h{{"a", "1.0"}, {"b", "1"}, {"c", "1"}, {"s", "red"}};
    CHECK(truth("a = '1.0'", h) == "TRUE");
    CHECK(truth("a = '1'", h) == "FALSE");
    CHECK(truth("a = b", h) == "FALSE");  // text, although both read as 1
    CHECK(truth("b = c", h) == "TRUE");
    CHECK(truth("a <> b", h) == "TRUE");
    CHECK(truth("s <> 'red'", h) == "FALSE");
    // <, <=, >, >= and BETWEEN are numeric only: two headers are read as numbers there.
    CHECK(truth("b < a + 1", h) == "TRUE");
    CHECK(truth("b <= a", h) == "TRUE");
    CHECK(truth("s < b", h) == "UNKNOWN");
  }

  TEST_CASE("types: like types only; unlike literals compare FALSE, strings and booleans only with = and <>") {
    CHECK(truth("'1' = 1") == "FALSE");
    CHECK(truth("'1' <> 1") == "FALSE");  // JMS: unlike types give FALSE, whatever the operator
    CHECK(truth("TRUE = 1") == "FALSE");
    CHECK(truth("TRUE <> 'TRUE'") == "FALSE");
    CHECK(truth("TRUE = TRUE") == "TRUE");
    CHECK(truth("TRUE <> FALSE") == "TRUE");
    CHECK(truth("'a' <> 'b'") == "TRUE");
    for (const char* refused : {"'a' < 'b'", "s >= 'm'", "TRUE > FALSE", "(a = 1) < 2", "'a' BETWEEN 'a' AND 'c'",
                                "a BETWEEN 'a' AND 'c'", "'a' + 1 = 1", "-'a' = 1", "TRUE * 2 = 2", "1 AND TRUE", "NOT 'x'",
                                "a = 1 OR 2", "'x'", "5", "a + 1"})
      CHECK_MESSAGE(!std::holds_alternative<selector>(selector::parse(refused)), refused);
  }

  TEST_CASE("JMS header names read their STOMP headers, with JMS's types and defaults") {
    CHECK(truth("JMSMessageID = 'ID:42'", {{"message-id", "ID:42"}}) == "TRUE");
    CHECK(truth("JMSMessageID IS NULL") == "TRUE");
    CHECK(truth("JMSPriority = 4") == "TRUE");  // a message without priority has 4
    CHECK(truth("JMSPriority > 6", {{"priority", "9"}}) == "TRUE");
    CHECK(truth("JMSPriority BETWEEN 0 AND 3", {{"priority", "0"}}) == "TRUE");
    CHECK(truth("JMSPriority IS NULL", {{"priority", "high"}}) == "TRUE");  // unreadable: NULL
    CHECK(truth("JMSPriority = '9'", {{"priority", "9"}}) == "FALSE");     // a number, unlike a string
    CHECK(truth("JMSTimestamp > 1700000000000", {{"timestamp", "1700000000001"}}) == "TRUE");
    CHECK(truth("JMSTimestamp = 0") == "TRUE");
    CHECK(truth("JMSDeliveryMode = 'PERSISTENT'") == "TRUE");
    CHECK(truth("JMSDeliveryMode = 'PERSISTENT'", {{"persistent", "true"}}) == "TRUE");
    CHECK(truth("JMSDeliveryMode = 'NON_PERSISTENT'", {{"persistent", "false"}}) == "TRUE");
    CHECK(truth("JMSDeliveryMode = 'PERSISTENT'", {{"persistent", "false"}}) == "FALSE");
    CHECK(truth("JMSDeliveryMode IS NULL", {{"persistent", "maybe"}}) == "TRUE");
    CHECK(truth("JMSType = 'order'", {{"type", "order"}}) == "TRUE");
    CHECK(truth("JMSCorrelationID = 'c-1'", {{"correlation-id", "c-1"}}) == "TRUE");
    CHECK(truth("JMSCorrelationID IS NULL") == "TRUE");
    CHECK(truth("JMSExpiration = 0") == "TRUE");
    CHECK(truth("JMSExpiration > 5", {{"expires", "1700000000000"}}) == "TRUE");
    CHECK(truth("JMSRedelivered") == "FALSE");
    CHECK(truth("JMSRedelivered = TRUE", {{"redelivered", "true"}}) == "TRUE");
    CHECK(truth("NOT JMSRedelivered", {{"redelivered", "false"}}) == "TRUE");
    // Case matters; other JMS-looking names are plain headers of that name.
    CHECK(truth("jmspriority = 4") == "UNKNOWN");
    CHECK(truth("JMSXDeliveryCount = 2", {{"JMSXDeliveryCount", "2"}}) == "TRUE");
    CHECK(truth("JMSDestination IS NULL", {{"destination", "/queue/a"}}) == "TRUE");
    // What the lookup is asked for: the STOMP names.
    std::vector<std::string> asked;
    auto recording = [&asked](std::string_view name) -> std::optional<std::string_view> {
      asked.emplace_back(name);
      return std::nullopt;
    };
    parsed("JMSMessageID = 'x' OR JMSPriority = 1 OR JMSTimestamp = 1 OR JMSDeliveryMode = 'x' OR JMSType = 'x' OR "
           "JMSCorrelationID = 'x' OR JMSExpiration = 1 OR JMSRedelivered OR \"JMSType\" = 'x' OR plain = 1")
        .matches(recording);
    CHECK(asked == std::vector<std::string>{"message-id", "priority", "timestamp", "persistent", "type", "correlation-id",
                                            "expires", "redelivered", "JMSType", "plain"});
  }

  TEST_CASE("AND and OR stop as soon as the result is known") {
    std::vector<std::string> asked;
    auto recording = [&asked](std::string_view name) -> std::optional<std::string_view> {
      asked.emplace_back(name);
      return std::string_view("1");
    };
    CHECK_FALSE(parsed("a = 2 AND b = 1").matches(recording));
    CHECK(parsed("a = 1 OR b = 1").matches(recording));
    CHECK(asked == std::vector<std::string>{"a", "a"});
  }

  TEST_CASE("malformed selectors: the error names the column and what was expected") {
    struct bad {
      std::string text;
      std::size_t position;
      std::string message;
    };
    const std::vector<bad> cases{
        {"JMSPriority =", 13, "selector: at column 14: expected a value after '=', found end of input"},
        {"color = 'red", 8, "selector: at column 9: expected ' to close the string that starts here, found end of input"},
        {"\"content-type = 1", 0, "selector: at column 1: expected \" to close the quoted name that starts here, found end of input"},
        {"\"\" = 1", 0, "selector: at column 1: expected a header name between the double quotes, found \"\""},
        {"a = 1 b", 6, "selector: at column 7: expected an operator or end of input, found 'b'"},
        {"(a = 1", 6, "selector: at column 7: expected ')' to close the '(' at column 1, found end of input"},
        {"(a = 1 b)", 7, "selector: at column 8: expected ')' to close the '(' at column 1, found 'b'"},
        {"a = = 1", 4, "selector: at column 5: expected a value after '=', found '='"},
        {"a != 1", 2, "selector: at column 3: '!=' is not an operator of selectors: use <>"},
        {"a = 1 = 2", 6, "selector: at column 7: expected AND, OR or end of input, found '=' (comparisons do not chain)"},
        {"(a < 1 < 2)", 7, "selector: at column 8: expected AND, OR or ')', found '<' (comparisons do not chain)"},
        {"a BETWEEN 1 OR 2", 12, "selector: at column 13: expected AND after BETWEEN's lower bound, found 'OR'"},
        {"a IN 'x'", 5, "selector: at column 6: expected '(' after 'IN', found the string 'x'"},
        {"a IN ()", 6, "selector: at column 7: expected a string after '(', found ')'"},
        {"a IN ('x' 'y')", 10, "selector: at column 11: expected ',' or ')' after the string 'x', found the string 'y'"},
        {"a IN (1)", 6, "selector: at column 7: expected a string after '(', found '1'"},
        {"a LIKE b", 7, "selector: at column 8: expected a string (the pattern) after 'LIKE', found 'b'"},
        {"a LIKE 'x' ESCAPE 'ab'", 18, "selector: at column 19: expected one character after ESCAPE, found the string 'ab'"},
        {"a LIKE 'x' ESCAPE ''", 18, "selector: at column 19: expected one character after ESCAPE, found the string ''"},
        {"a LIKE 'x!' ESCAPE '!'", 7,
         "selector: at column 8: expected a character after the escape character, found the end of the LIKE pattern"},
        {"a IS 5", 5, "selector: at column 6: expected NULL or NOT NULL after 'IS', found '5'"},
        {"a IS NOT", 8, "selector: at column 9: expected NULL after 'NOT', found end of input"},
        {"a NOT = 1", 6, "selector: at column 7: expected BETWEEN, IN or LIKE after 'NOT', found '='"},
        {"a = NULL", 4, "selector: at column 5: expected a value after '=', found 'NULL' (a missing header is tested with IS NULL)"},
        {"x = 9223372036854775808", 4,
         "selector: at column 5: the number 9223372036854775808 is out of the range of long (only a minus sign before it makes it one)"},
        {"x = 99999999999999999999", 4, "selector: at column 5: the number 99999999999999999999 is out of the range of long"},
        {"x = 0x10000000000000000", 4, "selector: at column 5: the number 0x10000000000000000 is out of the range of long"},
        {"x = 1e999", 4, "selector: at column 5: the number 1e999 is out of the range of double"},
        {"x = 09", 4, "selector: at column 5: the number 09 is not octal, and a leading 0 makes it octal (as in Java)"},
        {"x = 0x", 4, "selector: at column 5: expected hex digits after '0x'"},
        {"x = 1e+", 4, "selector: at column 5: expected the digits of an exponent after '1e+'"},
        {"'a' < 'b'", 0,
         "selector: at column 1: expected a number before '<' (strings and booleans compare only with = and <>), found a string"},
        {"a >= 'm'", 5,
         "selector: at column 6: expected a number after '>=' (strings and booleans compare only with = and <>), found a string"},
        {"a + 'b' = 1", 4, "selector: at column 5: expected a number after '+', found a string"},
        {"-TRUE = 1", 1, "selector: at column 2: expected a number after '-', found a condition"},
        {"a BETWEEN 'x' AND 2", 10, "selector: at column 11: expected a number after BETWEEN, found a string"},
        {"a + 1", 0, "selector: at column 1: expected a condition (a comparison, TRUE, FALSE or a header), found a number"},
        {"'yes'", 0, "selector: at column 1: expected a condition (a comparison, TRUE, FALSE or a header), found a string"},
        {"1 AND a", 0, "selector: at column 1: expected a condition before AND, found a number"},
        {"a OR 'x'", 5, "selector: at column 6: expected a condition after OR, found a string"},
        {"NOT 'x'", 4, "selector: at column 5: expected a condition after NOT, found a string"},
        {"1 + 2 LIKE 'x'", 0, "selector: at column 1: expected an identifier before LIKE, found a number"},
        {"'a' IN ('a')", 0, "selector: at column 1: expected an identifier before IN, found a string"},
        {"JMSPriority IN ('4')", 0,
         "selector: at column 1: expected an identifier of type string before IN, found JMSPriority, a number"},
        {"1 IS NULL", 0, "selector: at column 1: expected an identifier before IS, found a number"},
        {"a # 1", 2, "selector: at column 3: unexpected character '#'"},
        {"a = 1 \x01", 6, "selector: at column 7: unexpected character '\\x01'"},
        {"and = 1", 0, "selector: at column 1: expected a value, found 'and'"},
        {")", 0, "selector: at column 1: expected a value, found ')'"},
        {"color = 'red' AND", 17, "selector: at column 18: expected a value after 'AND', found end of input"},
        {"-", 1, "selector: at column 2: expected a value after '-', found end of input"},
        {"a.b = 1", 1, "selector: at column 2: unexpected character '.'"},
        // Columns count characters: "größe" is 5 of them in 7 bytes.
        {"gr\xc3\xb6\xc3\x9f" "e =", 9, "selector: at column 8: expected a value after '=', found end of input"},
    };
    for (const bad& c : cases) {
      const selector_error e = error_of(c.text);
      CHECK_MESSAGE(e.message == c.message, c.text);
      CHECK_MESSAGE(e.position == c.position, c.text);
    }
  }

  TEST_CASE("limits: 4096 bytes of text, 64 levels of parentheses") {
    // A long selector of the largest size: "a = 1 OR a = 1 OR ...", padded with blanks.
    std::string text = "a = 2";
    while (text.size() + 9 <= kSelectorMaxBytes) text += " OR a = 1";
    text.resize(kSelectorMaxBytes, ' ');
    CHECK(selects(text, {{"a", "2"}}));
    CHECK_FALSE(selects(text, {{"a", "3"}}));
    const selector_error e = error_of(text + " ");
    CHECK(e.position == kSelectorMaxBytes);
    CHECK(e.message == "selector: at column 4097: the selector is 4097 bytes long, more than the limit of 4096");

    // 64 levels, each with a pending operand, so the evaluator's stack outgrows its inline part.
    std::string deep = repeat("1 + (", kSelectorMaxDepth) + "a" + repeat(")", kSelectorMaxDepth) + " = 66";
    // (truth() would add a level of its own: these use selects().)
    CHECK(selects(deep, {{"a", "2"}}));
    CHECK_FALSE(selects(deep, {{"a", "3"}}));
    std::string logic = repeat("TRUE AND (", kSelectorMaxDepth) + "a = 1" + repeat(")", kSelectorMaxDepth);
    CHECK(selects(logic, {{"a", "1"}}));
    CHECK_FALSE(selects(logic, {{"a", "2"}}));
    std::string negated = repeat("NOT (", kSelectorMaxDepth) + "a = 1" + repeat(")", kSelectorMaxDepth);
    CHECK(selects(negated, {{"a", "1"}}));  // an even number of NOTs
    const std::string too_deep = repeat("(", kSelectorMaxDepth + 1) + "TRUE" + repeat(")", kSelectorMaxDepth + 1);
    const selector_error d = error_of(too_deep);
    CHECK(d.position == kSelectorMaxDepth);
    CHECK(d.message == "selector: at column 65: parentheses nested deeper than 64 levels (the limit)");

    // Chains of operators, NOT and signs are no nesting: they may fill the text.
    CHECK(truth(repeat("NOT ", 1000) + "TRUE") == "TRUE");
    CHECK(truth(repeat("-", 2000) + "a = 2", {{"a", "2"}}) == "TRUE");
    CHECK(truth("a = " + repeat("1 + ", 900) + "1", {{"a", "901"}}) == "TRUE");
    CHECK(truth("a " + repeat("AND a ", 600), {{"a", "true"}}) == "TRUE");
  }

  TEST_CASE("the API: std::function or any callable; copies share the program; text() as given") {
    const selector s = parsed("color = 'red' AND weight > 2.5");
    const headers h{{"color", "red"}, {"weight", "3"}};
    const selector_lookup f = [&h](std::string_view name) -> std::optional<std::string_view> {
      auto it = h.find(name);
      return it == h.end() ? std::nullopt : std::optional<std::string_view>(it->second);
    };
    CHECK(s.matches(f));
    CHECK(s.matches(lookup_in(h)));
    selector copy = s;
    CHECK(copy.matches(lookup_in(h)));
    CHECK(copy.text() == "color = 'red' AND weight > 2.5");
    const selector moved = std::move(copy);
    CHECK(moved.matches(lookup_in(h)));
    CHECK_FALSE(moved.matches(lookup_in({{"color", "blue"}, {"weight", "3"}})));
    // The views the lookup returns need only live through the call.
    CHECK(parsed("a LIKE 'x%' AND b IN ('y')").matches([](std::string_view name) -> std::optional<std::string_view> {
      return name == "a" ? std::string_view("xz") : std::string_view("y");
    }));
  }
}
