// Address patterns and their precedence (rules in address_pattern.h).
#include "escrow/broker/security/address_pattern.h"

#include <algorithm>
#include <vector>

namespace escrow::broker {
namespace {

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

// Dynamic programming over (pattern word, address word), so that patterns with several `#` cost
// O(pattern x address) however the address is built (addresses come from clients).
bool match_words(const std::vector<std::string_view>& p, const std::vector<std::string_view>& a) {
  // can[j]: the pattern words seen so far match the first j address words.
  std::vector<char> can(a.size() + 1, 0), next(a.size() + 1, 0);
  can[0] = 1;
  for (std::string_view w : p) {
    std::fill(next.begin(), next.end(), 0);
    for (std::size_t j = 0; j <= a.size(); ++j) {
      if (w == "#") {
        next[j] = can[j] || (j > 0 && next[j - 1]);  // zero words, or one more word
      } else if (j > 0 && can[j - 1] && (w == "*" || w == a[j - 1])) {
        next[j] = 1;
      }
    }
    can.swap(next);
  }
  return can[a.size()] != 0;
}

int rank(std::string_view word) { return word == "#" ? 0 : word == "*" ? 1 : 2; }

bool has_wildcard(const std::vector<std::string_view>& w) {
  return std::any_of(w.begin(), w.end(), [](std::string_view x) { return rank(x) < 2; });
}

}  // namespace

std::string check_pattern(std::string_view pattern) {
  if (pattern.empty()) return "is empty";
  for (std::string_view w : words(pattern))
    if (w.empty()) return "has an empty word (a leading, trailing or doubled '.')";
  return "";
}

bool pattern_matches(std::string_view pattern, std::string_view address) {
  return match_words(words(pattern), words(address));
}

bool more_specific(std::string_view a, std::string_view b) {
  auto wa = words(a), wb = words(b);
  bool literal_a = !has_wildcard(wa), literal_b = !has_wildcard(wb);
  if (literal_a != literal_b) return literal_a;
  for (std::size_t i = 0; i < std::min(wa.size(), wb.size()); ++i) {
    int ra = rank(wa[i]), rb = rank(wb[i]);
    if (ra != rb) return ra > rb;
  }
  return wa.size() > wb.size();
}

}  // namespace escrow::broker
