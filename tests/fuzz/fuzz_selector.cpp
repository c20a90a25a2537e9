// Fuzz target: JMS message selectors (broker/selector/): the parser on arbitrary text, then the
// evaluator on every selector it accepts, against a fixed message and against an empty one.
//
// Input: the selector's text, whole. Properties checked:
//  - parse() either accepts, or refuses with an error at a position inside the text (or at its end)
//    whose message reads "selector: at column N: ..." with N the column of that position;
//  - an accepted selector keeps its text, and parsing that text again accepts it again with the
//    same results;
//  - a selector and its negation, NOT (S), never both select a message (three-valued logic);
//    S OR NOT (S) selects exactly when S is not UNKNOWN, S AND NOT (S) never does.
// libFuzzer's own timeout catches a selector that takes long (the text is at most 4096 bytes).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "check.h"
#include "escrow/broker/selector/selector.h"

namespace {

using escrow::broker::selector;
using escrow::broker::selector_error;

// One message with headers of every kind a selector meets: numbers exact and approximate, one past
// a long, booleans, text, empty, UTF-8, LIKE's wildcards, and the STOMP headers of the JMS names.
constexpr std::pair<std::string_view, std::string_view> kHeaders[] = {
    {"color", "red"},         {"price", "12.5"},         {"qty", "7"},
    {"neg", "-3"},            {"big", "99999999999999999999"}, {"flag", "true"},
    {"off", "FALSE"},         {"name", "it's"},          {"pattern", "abc%_def"},
    {"empty", ""},            {"utf", "gr\xc3\xbc\xc3\x9f" "e"}, {"a", "1"},
    {"b", "2"},               {"x", "0"},                {"content-type", "text/plain"},
    {"priority", "7"},        {"persistent", "false"},   {"timestamp", "1700000000000"},
    {"expires", "0"},         {"redelivered", "true"},   {"type", "order"},
    {"message-id", "ID:1"},   {"correlation-id", "c-1"}, {"min", "-9223372036854775808"},
};

std::optional<std::string_view> full(std::string_view name) {
  for (const auto& [header, text] : kHeaders)
    if (header == name) return text;
  return std::nullopt;
}

std::optional<std::string_view> none(std::string_view) { return std::nullopt; }

std::size_t column_of(std::string_view text, std::size_t position) {
  // Characters before `position`, counted as the library counts them: every byte that is not a
  // UTF-8 continuation byte starts one (close enough for well-formed text; exact for ASCII).
  std::size_t column = 1;
  for (std::size_t i = 0; i < position; ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80) ++column;
  return column;
}

bool ascii(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::optional<selector> parse(const std::string& text) {
  auto r = selector::parse(text);
  if (auto* s = std::get_if<selector>(&r)) return std::move(*s);
  return std::nullopt;
}

void check_logic(const selector& s, const std::string& text, auto lookup) {
  const bool yes = s.matches(lookup);
  auto negated = parse("NOT (" + text + ")");
  if (!negated) return;  // one level too deep, or too long
  const bool no = negated->matches(lookup);
  FUZZ_CHECK(!(yes && no));
  if (auto both = parse("(" + text + ") AND NOT (" + text + ")")) FUZZ_CHECK(!both->matches(lookup));
  if (auto either = parse("(" + text + ") OR NOT (" + text + ")")) FUZZ_CHECK(either->matches(lookup) == (yes || no));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = selector::parse(text);
  if (auto* e = std::get_if<selector_error>(&r)) {
    FUZZ_CHECK(e->position <= text.size());
    const std::string prefix = "selector: at column ";
    FUZZ_CHECK(e->message.starts_with(prefix));
    if (ascii(text)) FUZZ_CHECK(e->message.starts_with(prefix + std::to_string(column_of(text, e->position)) + ": "));
    FUZZ_CHECK(e->message.size() < 400);  // excerpts are cut short
    return 0;
  }
  const selector& s = std::get<selector>(r);
  FUZZ_CHECK(s.text() == text);
  const bool on_full = s.matches(full);
  const bool on_none = s.matches(none);
  auto again = parse(s.text());
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->matches(full) == on_full && again->matches(none) == on_none);
  if (s.empty()) {
    FUZZ_CHECK(on_full && on_none);
    return 0;
  }
  check_logic(s, text, full);
  check_logic(s, text, none);
  return 0;
}
