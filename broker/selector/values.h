// The values a selector computes with and JMS's rules for them: the three-valued logic (TRUE,
// FALSE, UNKNOWN), comparison and arithmetic with NULL, exact (long) and approximate (double)
// numbers, and how a STOMP header's text takes part (read as a number or a boolean when the other
// operand asks for one). Pure functions; evaluate.cpp applies them, selector_test.cpp checks them
// through the public API. docs/stomp.md, "Selectors", states the same rules for users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace escrow::broker::selector_detail {

// A run of bytes in a program's pool.
struct slice {
  std::uint32_t offset = 0;
  std::uint32_t length = 0;
};

enum class kind : std::uint8_t {
  null,     // a missing header, UNKNOWN, a value that could not be read
  boolean,  // a condition's TRUE or FALSE, TRUE/FALSE literals, JMSRedelivered
  exact,    // long
  approx,   // double
  string,   // a string literal, a JMS name of type String (JMSMessageID, JMSType, ...)
  text,     // a header's text: no type of its own until an operator needs one
};

// An operand on the evaluator's stack. Strings point into the program's pool or into the text the
// lookup returned.
struct value {
  kind type = kind::null;
  bool boolean = false;
  std::int64_t exact = 0;
  double approx = 0;
  const char* data = nullptr;
  std::size_t size = 0;

  std::string_view str() const { return {data, size}; }
  static value null() { return {}; }
  static value of(bool b) { value v; v.type = kind::boolean; v.boolean = b; return v; }
  static value of_exact(std::int64_t i) { value v; v.type = kind::exact; v.exact = i; return v; }
  static value of_approx(double d) { value v; v.type = kind::approx; v.approx = d; return v; }
  static value of_string(kind k, std::string_view s) { value v; v.type = k; v.data = s.data(); v.size = s.size(); return v; }
};

// A literal as the program stores it: strings as slices of its pool, so moving the program moves
// nothing that points into it.
struct constant {
  kind type = kind::null;
  bool boolean = false;
  std::int64_t exact = 0;
  double approx = 0;
  slice text;
};

enum class tribool : std::uint8_t { is_false, is_true, unknown };

// A value as a condition: booleans as they are; a header's text "true" or "false" (any case) as
// that boolean; anything else (NULL, other text) UNKNOWN.
tribool as_condition(const value& v);
value from_tribool(tribool t);
tribool logical_not(tribool t);
tribool logical_and(tribool a, tribool b);
tribool logical_or(tribool a, tribool b);

// A header's text as a number: the whole text must be one, in decimal: an optional sign, then
// digits (exact when they fit a long, else approximate), or digits with a fraction and/or an
// exponent (approximate: "1.5", "-.5", "7.", "6.22E3"). No blanks, no hex, no "NaN"/"Infinity";
// out of double's range is not a number. std::nullopt when it is not one.
std::optional<value> read_number(std::string_view text);
// "true" or "false" in any case.
std::optional<bool> read_boolean(std::string_view text);

// Comparisons. UNKNOWN when an operand is NULL or a header's text cannot be read as the other
// operand's type; FALSE for operands of unlike types (a string and a number: JMS's rule, for =
// and <> alike); exact and approximate numbers compare as doubles (Java's promotion).
tribool equal(const value& a, const value& b);
tribool not_equal(const value& a, const value& b);
enum class order { less, less_equal, greater, greater_equal };
// Numbers only (the parser refuses string and boolean operands): a header's text is read as one.
tribool compare(const value& a, order op, const value& b);

// Arithmetic: NULL in, or a header's text that is not a number, gives NULL. Exact with exact stays
// exact unless it overflows a long, then the double result (never a wrapped one); exact division
// truncates, as Java's; division by zero (exact or approximate) is NULL, as is a NaN result.
enum class arithmetic { add, subtract, multiply, divide };
value apply(arithmetic op, const value& a, const value& b);
value negate(const value& v);
value unary_plus(const value& v);  // a number, or NULL

}  // namespace escrow::broker::selector_detail
