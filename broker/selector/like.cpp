// LIKE patterns (like.h): compilation into the bit-parallel automaton, and the matcher.
#include "like.h"

#include <algorithm>
#include <utility>

#include "escrow/broker/selector/selector.h"  // kSelectorMaxBytes
#include "utf8.h"

namespace escrow::broker::selector_detail {

namespace {

// A pattern has at most kSelectorMaxBytes characters, so a state set fits in this many words: the
// matcher keeps its two sets on the stack.
constexpr std::size_t kMaxWords = kSelectorMaxBytes / 64 + 1;

std::uint32_t code_of(std::string_view character) {
  std::uint32_t code = 0;
  for (char c : character) code = code << 8 | static_cast<unsigned char>(c);
  return code;
}

void set_bit(std::vector<std::uint64_t>& bits, std::size_t j) { bits[j / 64] |= std::uint64_t{1} << (j % 64); }

}  // namespace

std::variant<like_pattern, std::string> compile_like(std::string_view pattern, std::optional<std::string_view> escape) {
  // First the characters: (code, state) for each literal one, '_' and '%' as flags.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> literals;
  std::vector<std::uint32_t> any_one, loops;
  std::uint32_t length = 0;
  std::size_t i = 0;
  while (i < pattern.size()) {
    std::size_t n = utf8_length(pattern, i);
    std::string_view c = pattern.substr(i, n);
    i += n;
    if (escape && c == *escape) {
      if (i >= pattern.size()) return std::string("expected a character after the escape character, found the end of the LIKE pattern");
      n = utf8_length(pattern, i);
      literals.emplace_back(code_of(pattern.substr(i, n)), ++length);
      i += n;
    } else if (c == "%") {
      if (loops.empty() || loops.back() != length) loops.push_back(length);
    } else if (c == "_") {
      any_one.push_back(++length);
    } else {
      literals.emplace_back(code_of(c), ++length);
    }
  }

  like_pattern out;
  out.length_ = length;
  out.words_ = length / 64 + 1;
  out.any_one_.assign(out.words_, 0);
  out.loop_.assign(out.words_, 0);
  for (std::uint32_t j : any_one) set_bit(out.any_one_, j);
  for (std::uint32_t j : loops) set_bit(out.loop_, j);

  // Then each character's mask, sparse: the words where it has bits. ASCII characters first, in
  // order, then the others sorted by code, so that both are found without searching much.
  std::sort(literals.begin(), literals.end());
  std::size_t at = 0;
  auto add_character = [&](std::uint32_t code) {
    const auto first = static_cast<std::uint32_t>(out.literal_bits_.size());
    for (; at < literals.size() && literals[at].first == code; ++at) {
      const std::uint32_t j = literals[at].second;
      const std::uint64_t bit = std::uint64_t{1} << (j % 64);
      if (out.literal_bits_.size() > first && out.literal_bits_.back().word == j / 64)
        out.literal_bits_.back().bits |= bit;
      else
        out.literal_bits_.push_back({j / 64, bit});
    }
    return first;
  };
  for (std::uint32_t c = 0; c < 128; ++c) out.ascii_first_[c] = add_character(c);
  out.ascii_first_[128] = static_cast<std::uint32_t>(out.literal_bits_.size());
  while (at < literals.size()) {
    const std::uint32_t code = literals[at].first;
    const std::uint32_t first = add_character(code);
    out.wide_.push_back({code, first, static_cast<std::uint32_t>(out.literal_bits_.size()) - first});
  }
  return out;
}

bool like_pattern::matches(std::string_view text) const {
  // Only the first words_ words are used; they alone are initialized (zeroing all is most of the
  // work for a short pattern).
  std::array<std::uint64_t, kMaxWords> states, next;
  std::fill_n(states.begin(), words_, 0);
  states[0] = 1;  // state 0: nothing matched yet
  const std::size_t last_word = length_ / 64;
  const std::uint64_t last_bit = std::uint64_t{1} << (length_ % 64);
  const bool trailing_loop = (loop_[last_word] & last_bit) != 0;
  std::size_t at = 0;
  while (at < text.size()) {
    if (trailing_loop && (states[last_word] & last_bit)) return true;  // the final '%' takes the rest
    const std::size_t n = utf8_length(text, at);
    const std::string_view c = text.substr(at, n);
    at += n;
    // next = (states << 1) & (any_one | this character's mask)  |  states & loop
    std::uint64_t carry = 0, any = 0;
    for (std::size_t w = 0; w < words_; ++w) {
      const std::uint64_t shifted = states[w] << 1 | carry;
      carry = states[w] >> 63;
      next[w] = (shifted & any_one_[w]) | (states[w] & loop_[w]);
    }
    const word_bits* bits = nullptr;
    std::size_t count = 0;
    if (n == 1 && static_cast<unsigned char>(c[0]) < 0x80) {
      const auto b = static_cast<unsigned char>(c[0]);
      bits = literal_bits_.data() + ascii_first_[b];
      count = ascii_first_[b + 1] - ascii_first_[b];
    } else {
      const std::uint32_t code = code_of(c);
      auto it = std::lower_bound(wide_.begin(), wide_.end(), code, [](const wide_char& x, std::uint32_t k) { return x.code < k; });
      if (it != wide_.end() && it->code == code) {
        bits = literal_bits_.data() + it->first;
        count = it->count;
      }
    }
    for (std::size_t k = 0; k < count; ++k) {
      const std::uint32_t w = bits[k].word;
      const std::uint64_t shifted = states[w] << 1 | (w > 0 ? states[w - 1] >> 63 : 0);
      next[w] |= shifted & bits[k].bits;
    }
    for (std::size_t w = 0; w < words_; ++w) any |= next[w];
    if (any == 0) return false;  // no state left: nothing after this can match
    std::swap(states, next);
  }
  return (states[last_word] & last_bit) != 0;
}

}  // namespace escrow::broker::selector_detail
