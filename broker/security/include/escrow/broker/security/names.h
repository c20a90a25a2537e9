// What may be in a name a client chooses (queue, topic, client-id, durable subscription name), and
// how client text is written to the log. A name that shows differently from what it is (control
// characters, zero-width or direction-changing characters, bytes that are not UTF-8) is refused,
// so that operators, logs and JSON answers see what clients see (docs/security.md, "Names").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace escrow::broker {

// One UTF-8 sequence at the start of `s` (not empty): its code point and length; length 0 when
// malformed (overlong forms, surrogates and values above U+10FFFF included).
std::pair<char32_t, std::size_t> decode_utf8(std::string_view s);
// Whether `text` is well-formed UTF-8.
bool is_utf8(std::string_view text);

// Why `name` cannot be a name, e.g. "it contains U+200B (zero-width or formatting) at byte 5";
// nullopt when it can.
std::optional<std::string> name_problem(std::string_view name);

// Why `name` cannot name a queue: it holds '@', which only the names of durable subscriptions hold
// (CLIENT-ID.NAME@USER, broker/core/durable_name.h), so that no queue can pass for, or stand in
// front of, a user's subscription in escrow browse, purge and move (docs/security.md, "Tenants");
// nullopt when it can. On top of name_problem, which every name passes.
std::optional<std::string> queue_name_problem(std::string_view name);

// `text` for a log line: control characters, invalid UTF-8 and the characters name_problem
// refuses written as \n, \t, \xHH or \u{HHHH}, and backslashes doubled, so that a client cannot
// write a line of its own into the log.
std::string loggable(std::string_view text);

}  // namespace escrow::broker
