// What may be in a name a client chooses (queue, topic, client-id, durable subscription name), and
// how client text is written to the log. A name that shows differently from what it is (control
// characters, zero-width or direction-changing characters, bytes that are not UTF-8) is refused,
// so that operators, logs and JSON answers see what clients see (docs/security.md, "Names").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace escrow::broker {

// Why `name` cannot be a name, e.g. "it contains U+200B (zero-width or formatting) at byte 5";
// nullopt when it can.
std::optional<std::string> name_problem(std::string_view name);

// `text` for a log line: control characters, invalid UTF-8 and the characters name_problem
// refuses written as \n, \t, \xHH or \u{HHHH}, and backslashes doubled, so that a client cannot
// write a line of its own into the log.
std::string loggable(std::string_view text);

}  // namespace escrow::broker
