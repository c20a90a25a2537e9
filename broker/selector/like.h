// LIKE patterns (JMS: `identifier [NOT] LIKE pattern [ESCAPE 'c']`): '_' stands for any one
// character, '%' for any run of characters (even none), everything else for itself. Characters are
// UTF-8: '_' takes one whole character however many bytes it has (a byte that does not start a
// well-formed sequence counts as one).
//
// A pattern is compiled once, at parse time, into a bit-parallel automaton (Shift-And): state j
// means "the first j characters of the pattern, '%' aside, are matched"; each character of the
// text moves every state at once with a few word operations. Matching takes time proportional to
// text length x pattern length / 64 whatever the pattern (no backtracking, no regular
// expressions) and allocates nothing; the per-character masks are stored sparsely, so a pattern
// costs memory in proportion to its length.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace escrow::broker::selector_detail {

class like_pattern {
 public:
  bool matches(std::string_view text) const;

 private:
  friend std::variant<like_pattern, std::string> compile_like(std::string_view, std::optional<std::string_view>);

  // Bits of the word `word` of one character's mask.
  struct word_bits {
    std::uint32_t word;
    std::uint64_t bits;
  };
  // A non-ASCII character's mask: `count` entries of literal_bits_ from `first`.
  struct wide_char {
    std::uint32_t code;  // its bytes, packed big-endian
    std::uint32_t first;
    std::uint32_t count;
  };

  std::size_t length_ = 0;              // characters of the pattern, '%' aside: the final state
  std::size_t words_ = 1;               // 64-bit words per state set (length_ + 1 bits)
  std::vector<std::uint64_t> any_one_;  // bit j: the j-th character is '_'
  std::vector<std::uint64_t> loop_;     // bit j: a '%' follows the j-th character (j = 0: it starts with one)
  std::vector<word_bits> literal_bits_;          // bit j: the j-th character is this one (sparse)
  std::array<std::uint32_t, 129> ascii_first_{};  // ASCII c: literal_bits_[ascii_first_[c], ascii_first_[c + 1])
  std::vector<wide_char> wide_;                   // sorted by code
};

// Compiles `pattern` (the string literal's value) with the optional escape character (the ESCAPE
// literal's value, which the parser has checked is one character). An escape character makes the
// character after it literal, whatever it is (even '%' or '_'). Fails, with the message, only when
// the pattern ends with the escape character.
std::variant<like_pattern, std::string> compile_like(std::string_view pattern, std::optional<std::string_view> escape);

}  // namespace escrow::broker::selector_detail
