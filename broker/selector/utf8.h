// UTF-8 as the selector code needs it: where one character ends (LIKE's '_', error excerpts) and
// which column a byte offset is in (error messages count characters). Nothing is validated beyond
// the shape of a sequence: a byte that does not start a well-formed one counts as a character.
#pragma once

#include <cstddef>
#include <string_view>

namespace escrow::broker::selector_detail {

// The byte length of the character that starts at text[at] (at < text.size()).
inline std::size_t utf8_length(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const std::size_t n = lead < 0x80                  ? 1
                        : lead >= 0xc2 && lead <= 0xdf ? 2
                        : lead >= 0xe0 && lead <= 0xef ? 3
                        : lead >= 0xf0 && lead <= 0xf4 ? 4
                                                       : 1;
  if (n == 1 || at + n > text.size()) return 1;
  for (std::size_t i = 1; i < n; ++i)
    if ((static_cast<unsigned char>(text[at + i]) & 0xc0) != 0x80) return 1;
  return n;
}

// The 1-based column, in characters, of the byte at `position` (text.size() for the end).
inline std::size_t utf8_column(std::string_view text, std::size_t position) {
  std::size_t column = 1;
  for (std::size_t i = 0; i < position && i < text.size(); i += utf8_length(text, i)) ++column;
  return column;
}

}  // namespace escrow::broker::selector_detail
