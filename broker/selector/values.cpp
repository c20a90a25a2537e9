// JMS's value rules (values.h): three-valued logic, comparisons, arithmetic, header text as numbers.
#include "values.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

namespace escrow::broker::selector_detail {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

bool is_number(const value& v) { return v.type == kind::exact || v.type == kind::approx; }
bool is_stringish(const value& v) { return v.type == kind::string || v.type == kind::text; }

double as_double(const value& v) { return v.type == kind::exact ? static_cast<double>(v.exact) : v.approx; }

// A number operand: numbers as they are, a header's text read as one; nullopt for NULL, text that
// is not a number, or any other type.
std::optional<value> numeric(const value& v) {
  if (is_number(v)) return v;
  if (v.type == kind::text) return read_number(v.str());
  return std::nullopt;
}

// -1, 0, 1, or nullopt when either is NaN (no order).
std::optional<int> three_way(const value& a, const value& b) {
  if (a.type == kind::exact && b.type == kind::exact) return a.exact < b.exact ? -1 : a.exact > b.exact ? 1 : 0;
  const double x = as_double(a), y = as_double(b);
  if (std::isnan(x) || std::isnan(y)) return std::nullopt;
  return x < y ? -1 : x > y ? 1 : 0;
}

// Operands of types JMS calls unlike: a number and a string or a boolean, a boolean and a string.
// A header's text is like every type (it is read as the other operand's type when compared).
bool unlike(const value& a, const value& b) {
  auto typed = [](const value& v) { return v.type == kind::string || v.type == kind::boolean; };
  if (is_number(a)) return typed(b);
  if (is_number(b)) return typed(a);
  return (a.type == kind::boolean && b.type == kind::string) || (a.type == kind::string && b.type == kind::boolean);
}

tribool of(bool b) { return b ? tribool::is_true : tribool::is_false; }

value approx_or_null(double d) { return std::isnan(d) ? value::null() : value::of_approx(d); }

}  // namespace

tribool as_condition(const value& v) {
  if (v.type == kind::boolean) return of(v.boolean);
  if (v.type == kind::text)
    if (auto b = read_boolean(v.str())) return of(*b);
  return tribool::unknown;
}

value from_tribool(tribool t) { return t == tribool::unknown ? value::null() : value::of(t == tribool::is_true); }

tribool logical_not(tribool t) {
  if (t == tribool::unknown) return t;
  return t == tribool::is_true ? tribool::is_false : tribool::is_true;
}

tribool logical_and(tribool a, tribool b) {
  if (a == tribool::is_false || b == tribool::is_false) return tribool::is_false;
  if (a == tribool::unknown || b == tribool::unknown) return tribool::unknown;
  return tribool::is_true;
}

tribool logical_or(tribool a, tribool b) {
  if (a == tribool::is_true || b == tribool::is_true) return tribool::is_true;
  if (a == tribool::unknown || b == tribool::unknown) return tribool::unknown;
  return tribool::is_false;
}

std::optional<value> read_number(std::string_view text) {
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  const std::size_t digits_start = i;
  while (i < text.size() && is_digit(text[i])) ++i;
  const std::size_t int_digits = i - digits_start;
  std::size_t frac_digits = 0;
  bool approximate = false;
  if (i < text.size() && text[i] == '.') {
    approximate = true;
    ++i;
    const std::size_t frac_start = i;
    while (i < text.size() && is_digit(text[i])) ++i;
    frac_digits = i - frac_start;
  }
  if (int_digits + frac_digits == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    approximate = true;
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    const std::size_t exp_start = i;
    while (i < text.size() && is_digit(text[i])) ++i;
    if (i == exp_start) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  // from_chars reads neither a leading '+' nor (for integers) a '-' we want to check ourselves,
  // so it gets the unsigned part and the sign is applied here.
  const char* first = text.data() + digits_start;
  const char* last = text.data() + text.size();
  if (!approximate) {
    std::uint64_t magnitude = 0;
    auto [end, ec] = std::from_chars(first, last, magnitude);
    constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (ec == std::errc() && end == last && (magnitude <= kMax || (negative && magnitude == kMax + 1)))
      return value::of_exact(negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude));
    // An integer beyond a long: an approximate number, as the rules say.
  }
  double d = 0;
  auto [end, ec] = std::from_chars(first, last, d, std::chars_format::general);
  if (ec != std::errc() || end != last || !std::isfinite(d)) return std::nullopt;
  return value::of_approx(negative ? -d : d);
}

std::optional<bool> read_boolean(std::string_view text) {
  if (equals_ignoring_case(text, "true")) return true;
  if (equals_ignoring_case(text, "false")) return false;
  return std::nullopt;
}

tribool equal(const value& a, const value& b) {
  if (a.type == kind::null || b.type == kind::null) return tribool::unknown;
  if (unlike(a, b)) return tribool::is_false;
  if (is_stringish(a) && is_stringish(b)) return of(a.str() == b.str());
  if (is_number(a) || is_number(b)) {
    auto x = numeric(a), y = numeric(b);
    if (!x || !y) return tribool::unknown;  // a header's text that is not a number
    auto c = three_way(*x, *y);
    return of(c && *c == 0);
  }
  // A boolean and a boolean or a header's text.
  tribool x = as_condition(a), y = as_condition(b);
  if (x == tribool::unknown || y == tribool::unknown) return tribool::unknown;
  return of(x == y);
}

tribool not_equal(const value& a, const value& b) {
  if (a.type == kind::null || b.type == kind::null) return tribool::unknown;
  if (unlike(a, b)) return tribool::is_false;  // JMS: unlike types compare FALSE, whatever the operator
  return logical_not(equal(a, b));
}

tribool compare(const value& a, order op, const value& b) {
  auto x = numeric(a), y = numeric(b);
  if (!x || !y) return tribool::unknown;
  auto c = three_way(*x, *y);
  if (!c) return tribool::is_false;  // NaN: no order, as in Java
  switch (op) {
    case order::less: return of(*c < 0);
    case order::less_equal: return of(*c <= 0);
    case order::greater: return of(*c > 0);
    case order::greater_equal: return of(*c >= 0);
  }
  return tribool::unknown;
}

value apply(arithmetic op, const value& a, const value& b) {
  auto x = numeric(a), y = numeric(b);
  if (!x || !y) return value::null();
  if (x->type == kind::exact && y->type == kind::exact) {
    const std::int64_t l = x->exact, r = y->exact;
    std::int64_t result = 0;
    bool overflow = false;
    switch (op) {
      case arithmetic::add: overflow = __builtin_add_overflow(l, r, &result); break;
      case arithmetic::subtract: overflow = __builtin_sub_overflow(l, r, &result); break;
      case arithmetic::multiply: overflow = __builtin_mul_overflow(l, r, &result); break;
      case arithmetic::divide:
        if (r == 0) return value::null();
        overflow = l == std::numeric_limits<std::int64_t>::min() && r == -1;
        if (!overflow) result = l / r;
        break;
    }
    if (!overflow) return value::of_exact(result);
    // Past a long: the double result, never a wrapped one.
  }
  const double l = as_double(*x), r = as_double(*y);
  switch (op) {
    case arithmetic::add: return approx_or_null(l + r);
    case arithmetic::subtract: return approx_or_null(l - r);
    case arithmetic::multiply: return approx_or_null(l * r);
    case arithmetic::divide: return r == 0 ? value::null() : approx_or_null(l / r);
  }
  return value::null();
}

value negate(const value& v) {
  auto x = numeric(v);
  if (!x) return value::null();
  if (x->type == kind::exact) {
    if (x->exact == std::numeric_limits<std::int64_t>::min()) return value::of_approx(-static_cast<double>(x->exact));
    return value::of_exact(-x->exact);
  }
  return value::of_approx(-x->approx);
}

value unary_plus(const value& v) {
  auto x = numeric(v);
  return x ? *x : value::null();
}

}  // namespace escrow::broker::selector_detail
