// JMS message selectors (JMS 2.0 section 3.8.1.1) over STOMP headers: the `selector` header of a
// SUBSCRIBE names the messages a subscription wants, e.g. "color = 'red' AND JMSPriority > 4".
//
// selector::parse compiles the text once into a small immutable program (bytecode, its literals
// read and its LIKE patterns compiled); selector::matches runs it against one message's headers,
// which the caller hands over through a lookup: a header's name in, its text (or nothing) out. The
// selector library maps the JMS names (JMSPriority -> `priority`, ...) and does the conversions
// (a header's text read as a number, a boolean) itself; docs/stomp.md, "Selectors", has the rules.
//
// Ownership and threads: a selector is a value (copies share the compiled program, which never
// changes), so any number of threads may call matches() on the same selector at once. matches()
// does not allocate unless the selector nests very deeply (its operand stack then lives on the
// heap), and it calls the lookup once per identifier it reaches; the views the lookup returns need
// only stay valid until matches() returns. Only the standard library: no Asio, no logging.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace escrow::broker {

// One property a selector reads, as the broker hands it over: the text of the STOMP header
// `header` of the message, or std::nullopt when the message has no such header.
using selector_lookup = std::function<std::optional<std::string_view>(std::string_view header)>;

// Why a selector's text was refused. `position` is the 0-based byte offset of the offending token
// (the text's length for "end of input"); `message` reads
// "selector: at column C: expected ..., found ...", C counting UTF-8 characters from 1.
struct selector_error {
  std::size_t position = 0;
  std::string message;
};

// Limits on a selector's text, so that no client makes the parser recurse deeply or spend long.
inline constexpr std::size_t kSelectorMaxBytes = 4096;  // text longer than this is refused
inline constexpr std::size_t kSelectorMaxDepth = 64;    // parentheses nested deeper are refused

namespace selector_detail {
struct program;
// A lookup without std::function: a context pointer and the function that calls it.
struct lookup_ref {
  const void* context;
  std::optional<std::string_view> (*call)(const void* context, std::string_view header);
};
}  // namespace selector_detail

class selector {
 public:
  // Compiles `text`. Success: a selector (an empty or all-blank text is the "no selector" of JMS:
  // it matches every message). Failure: the first problem found, as a selector_error: a token the
  // grammar does not allow there, a literal out of range, an operand of the wrong type (a string
  // where arithmetic needs a number, a number where AND needs a condition), a text longer than
  // kSelectorMaxBytes or parentheses nested deeper than kSelectorMaxDepth.
  static std::variant<selector, selector_error> parse(std::string_view text);

  // True only when the expression is TRUE for the message whose headers `lookup` reads (FALSE and
  // UNKNOWN select nothing). Never throws unless the lookup does.
  bool matches(const selector_lookup& lookup) const;

  // The same for any callable `std::optional<std::string_view>(std::string_view)`, without a
  // std::function: the hot path (the core evaluates a selector per message per consumer).
  template <class Lookup>
    requires(!std::same_as<std::remove_cvref_t<Lookup>, selector_lookup> &&
             std::is_invocable_r_v<std::optional<std::string_view>, const Lookup&, std::string_view>)
  bool matches(const Lookup& lookup) const {
    if constexpr (std::is_function_v<Lookup>) {
      auto* function = &lookup;  // a function is no object: pass a pointer to it
      return matches(function);
    } else {
      return run({&lookup, [](const void* context, std::string_view header) -> std::optional<std::string_view> {
                    return (*static_cast<const Lookup*>(context))(header);
                  }});
    }
  }

  // The text as given to parse().
  const std::string& text() const { return text_; }
  // True for the empty selector, which matches everything.
  bool empty() const { return program_ == nullptr; }

 private:
  selector() = default;
  bool run(selector_detail::lookup_ref lookup) const;

  std::string text_;
  std::shared_ptr<const selector_detail::program> program_;  // null: the empty selector
};

}  // namespace escrow::broker
