// The selector's tokens (lexer.h).
#include "lexer.h"

#include <array>
#include <charconv>
#include <cmath>
#include <system_error>

#include "utf8.h"

namespace escrow::broker::selector_detail {

namespace {

constexpr std::uint64_t kLongLimit = std::uint64_t{1} << 63;  // |Long.MIN_VALUE|

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\r' || c == '\n'; }
bool is_identifier_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_identifier_part(char c) { return is_identifier_start(c) || is_digit(c); }

char upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }

struct keyword {
  std::string_view name;
  token_kind kind;
};
constexpr std::array<keyword, 11> kKeywords{{
    {"AND", token_kind::kw_and},
    {"OR", token_kind::kw_or},
    {"NOT", token_kind::kw_not},
    {"BETWEEN", token_kind::kw_between},
    {"LIKE", token_kind::kw_like},
    {"ESCAPE", token_kind::kw_escape},
    {"IN", token_kind::kw_in},
    {"IS", token_kind::kw_is},
    {"NULL", token_kind::kw_null},
    {"TRUE", token_kind::kw_true},
    {"FALSE", token_kind::kw_false},
}};

bool same_ignoring_case(std::string_view word, std::string_view upper_name) {
  if (word.size() != upper_name.size()) return false;
  for (std::size_t i = 0; i < word.size(); ++i)
    if (upper(word[i]) != upper_name[i]) return false;
  return true;
}

// Digits in `base`, accumulated with a check against 2^63; false when the value is larger.
bool accumulate(std::string_view digits, unsigned base, std::uint64_t& out) {
  out = 0;
  for (char c : digits) {
    const unsigned d = is_digit(c) ? static_cast<unsigned>(c - '0') : static_cast<unsigned>(upper(c) - 'A' + 10);
    if (out > (kLongLimit - d) / base) return false;
    out = out * base + d;
  }
  return true;
}

}  // namespace

token lexer::fail(std::size_t position, std::size_t length, std::string message) {
  done_ = true;
  token t;
  t.kind = token_kind::error;
  t.position = position;
  t.length = length;
  t.text = std::move(message);
  return t;
}

token lexer::next() {
  if (done_) return token{token_kind::end, source_.size(), 0, {}, 0, 0};
  while (at_ < source_.size() && is_blank(source_[at_])) ++at_;
  if (at_ == source_.size()) {
    done_ = true;
    return token{token_kind::end, at_, 0, {}, 0, 0};
  }
  const std::size_t start = at_;
  const char c = source_[at_];
  if (is_digit(c) || (c == '.' && at_ + 1 < source_.size() && is_digit(source_[at_ + 1]))) return number(start);
  if (c == '\'' || c == '"') return quoted(start, c);
  if (is_identifier_start(c)) return word(start);
  auto op = [&](token_kind kind, std::size_t length) {
    at_ += length;
    return token{kind, start, length, {}, 0, 0};
  };
  const char n = at_ + 1 < source_.size() ? source_[at_ + 1] : '\0';
  switch (c) {
    case '=': return op(token_kind::equal, 1);
    case '<':
      if (n == '>') return op(token_kind::not_equal, 2);
      if (n == '=') return op(token_kind::less_equal, 2);
      return op(token_kind::less, 1);
    case '>':
      if (n == '=') return op(token_kind::greater_equal, 2);
      return op(token_kind::greater, 1);
    case '+': return op(token_kind::plus, 1);
    case '-': return op(token_kind::minus, 1);
    case '*': return op(token_kind::star, 1);
    case '/': return op(token_kind::slash, 1);
    case '(': return op(token_kind::left_paren, 1);
    case ')': return op(token_kind::right_paren, 1);
    case ',': return op(token_kind::comma, 1);
    case '!':
      if (n == '=') return fail(start, 2, "'!=' is not an operator of selectors: use <>");
      break;
    default: break;
  }
  const std::size_t length = utf8_length(source_, start);
  return fail(start, length, "unexpected character '" + excerpt(source_.substr(start, length)) + "'");
}

token lexer::number(std::size_t start) {
  std::size_t i = start;
  auto scan_digits = [&](auto predicate) {
    const std::size_t from = i;
    while (i < source_.size() && predicate(source_[i])) ++i;
    return source_.substr(from, i - from);
  };
  auto at = [&](std::size_t k) { return k < source_.size() ? source_[k] : '\0'; };
  token t;
  t.position = start;

  if (at(i) == '0' && (at(i + 1) == 'x' || at(i + 1) == 'X')) {
    i += 2;
    std::string_view digits = scan_digits(is_hex_digit);
    if (digits.empty()) return fail(start, i - start, "expected hex digits after '" + std::string(source_.substr(start, 2)) + "'");
    if (!accumulate(digits, 16, t.integer))
      return fail(start, i - start, "the number " + excerpt(source_.substr(start, i - start)) + " is out of the range of long");
    if (at(i) == 'l' || at(i) == 'L') ++i;
    t.kind = token_kind::exact;
    t.length = i - start;
    at_ = i;
    return t;
  }

  const std::string_view integer_part = scan_digits(is_digit);
  bool approximate = false;
  if (at(i) == '.') {
    approximate = true;
    ++i;
    scan_digits(is_digit);
  }
  if (at(i) == 'e' || at(i) == 'E') {
    approximate = true;
    ++i;
    if (at(i) == '+' || at(i) == '-') ++i;
    if (scan_digits(is_digit).empty())
      return fail(start, i - start, "expected the digits of an exponent after '" + excerpt(source_.substr(start, i - start)) + "'");
  }
  const std::size_t numeral_end = i;
  const char suffix = at(i);
  if (suffix == 'f' || suffix == 'F' || suffix == 'd' || suffix == 'D') {
    approximate = true;  // Java: 2f and 2d are floating-point literals
    ++i;
  } else if (!approximate && (suffix == 'l' || suffix == 'L')) {
    ++i;
  }
  t.length = i - start;
  at_ = i;
  const std::string_view source = source_.substr(start, t.length);

  if (approximate) {
    double d = 0;
    auto [end, ec] = std::from_chars(source_.data() + start, source_.data() + numeral_end, d, std::chars_format::general);
    if (ec != std::errc() || end != source_.data() + numeral_end || !std::isfinite(d))
      return fail(start, t.length, "the number " + excerpt(source) + " is out of the range of double");
    t.kind = token_kind::approx;
    t.approximate = d;
    return t;
  }
  const bool octal = integer_part.size() > 1 && integer_part[0] == '0';
  if (octal) {
    for (char c : integer_part)
      if (c > '7')
        return fail(start, t.length, "the number " + excerpt(source) + " is not octal, and a leading 0 makes it octal (as in Java)");
  }
  if (!accumulate(integer_part, octal ? 8 : 10, t.integer))
    return fail(start, t.length, "the number " + excerpt(source) + " is out of the range of long");
  t.kind = token_kind::exact;
  return t;
}

token lexer::quoted(std::size_t start, char quote) {
  std::string text;
  std::size_t i = start + 1;
  while (true) {
    const std::size_t close = source_.find(quote, i);
    if (close == std::string_view::npos) {
      at_ = source_.size();
      if (quote == '\'') return fail(start, 1, "expected ' to close the string that starts here, found end of input");
      return fail(start, 1, "expected \" to close the quoted name that starts here, found end of input");
    }
    text.append(source_.substr(i, close - i));
    if (close + 1 < source_.size() && source_[close + 1] == quote) {  // a doubled quote stands for one
      text.push_back(quote);
      i = close + 2;
      continue;
    }
    i = close + 1;
    break;
  }
  if (quote == '"' && text.empty()) return fail(start, i - start, "expected a header name between the double quotes, found \"\"");
  at_ = i;
  token t;
  t.kind = quote == '\'' ? token_kind::string : token_kind::quoted_identifier;
  t.position = start;
  t.length = i - start;
  t.text = std::move(text);
  return t;
}

token lexer::word(std::size_t start) {
  std::size_t i = start;
  while (i < source_.size() && is_identifier_part(source_[i])) ++i;
  at_ = i;
  token t;
  t.position = start;
  t.length = i - start;
  t.text = std::string(source_.substr(start, i - start));
  t.kind = token_kind::identifier;
  for (const keyword& k : kKeywords)
    if (same_ignoring_case(t.text, k.name)) t.kind = k.kind;
  return t;
}

std::string excerpt(std::string_view bytes, std::size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (i >= max) {
      out += "...";
      break;
    }
    const std::size_t n = utf8_length(bytes, i);
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (n == 1 && (b < 0x20 || b >= 0x7f)) {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    } else {
      out.append(bytes.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string describe(const token& t, std::string_view source) {
  if (t.kind == token_kind::end) return "end of input";
  const std::string text = excerpt(source.substr(t.position, t.length));
  if (t.kind == token_kind::string) return "the string " + text;
  return "'" + text + "'";
}

}  // namespace escrow::broker::selector_detail
