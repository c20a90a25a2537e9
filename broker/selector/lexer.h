// The selector's tokens (JMS 2.0 3.8.1.1): string literals ('it''s'), exact numbers in Java's
// integer forms (57, 0x1F, 017, 5L), approximate numbers in Java's decimal floating-point forms
// (7., .5, 6.22E3, 1.5e-2, 2f), identifiers (Java's rules: a letter, '_' or '$', then digits too;
// any non-ASCII UTF-8 character counts as a letter) and the extension for STOMP's header names,
// an identifier in double quotes ("content-type"), the keywords (any case), the operators.
// Whitespace is Java's: space, tab, form feed, CR, LF. No comments (JMS: none in SQL's form).
// The lexer reads one token at a time; a malformed one is a token of kind `error` with its text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace escrow::broker::selector_detail {

enum class token_kind : std::uint8_t {
  end,
  error,
  identifier,         // text: the name
  quoted_identifier,  // text: the name, quotes removed, "" made "
  string,             // text: the value, quotes removed, '' made '
  exact,              // integer: the magnitude (up to 2^63, which only a unary minus may take)
  approx,             // approximate: the value
  // keywords
  kw_and, kw_or, kw_not, kw_between, kw_like, kw_escape, kw_in, kw_is, kw_null, kw_true, kw_false,
  // operators and punctuation
  equal, not_equal, less, less_equal, greater, greater_equal,
  plus, minus, star, slash, left_paren, right_paren, comma,
};

struct token {
  token_kind kind = token_kind::end;
  std::size_t position = 0;  // byte offset of its first byte
  std::size_t length = 0;    // bytes of source
  std::string text;          // see token_kind; for `error`, the message
  std::uint64_t integer = 0;
  double approximate = 0;
};

class lexer {
 public:
  explicit lexer(std::string_view source) : source_(source) {}
  // The next token; after `end` or `error`, `end` again and again.
  token next();

 private:
  token number(std::size_t start);
  token quoted(std::size_t start, char quote);
  token word(std::size_t start);
  token fail(std::size_t position, std::size_t length, std::string message);

  std::string_view source_;
  std::size_t at_ = 0;
  bool done_ = false;
};

// The token as error messages name it: "end of input", "the string 'x'", or its source in quotes
// ('AND', '=', 'color'), cut at 32 bytes, control bytes and broken UTF-8 written as \xNN.
std::string describe(const token& t, std::string_view source);
// Source bytes fit for a message: control bytes and broken UTF-8 as \xNN, cut at `max` bytes.
std::string excerpt(std::string_view bytes, std::size_t max = 32);

}  // namespace escrow::broker::selector_detail
