// Address patterns, their precedence and the resolution of settings (rules in address_settings.h).
#include "address_settings.h"

#include <algorithm>
#include <cmath>

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

std::uint64_t address_settings::redelivery_delay_for(std::uint32_t count, double random_unit) const {
  if (redelivery_delay_ms == 0) return 0;
  double delay = static_cast<double>(redelivery_delay_ms) * std::pow(redelivery_multiplier, count > 0 ? count - 1 : 0);
  double cap = static_cast<double>(max_redelivery_delay_ms.value_or(redelivery_delay_ms * 10));
  delay = std::min(delay, cap);
  delay *= 1.0 + collision_avoidance_factor * std::clamp(random_unit, -1.0, 1.0);
  return delay <= 0 ? 0 : static_cast<std::uint64_t>(std::llround(delay));
}

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

address_settings resolve_settings(const std::vector<address_setting_entry>& entries, std::string_view address) {
  std::vector<const address_setting_entry*> matching;
  for (const auto& e : entries)
    if (pattern_matches(e.match, address)) matching.push_back(&e);
  // Least specific first, so that each more specific entry overrides what it sets; a stable sort
  // keeps file order between equals, so the later one wins a tie.
  std::stable_sort(matching.begin(), matching.end(),
                   [](const auto* x, const auto* y) { return more_specific(y->match, x->match); });
  address_settings s;
  for (const auto* e : matching) {
    if (e->expiry_address) s.expiry_address = *e->expiry_address;
    if (e->expiry_delay_ms) s.expiry_delay_ms = *e->expiry_delay_ms;
    if (e->redelivery_delay_ms) s.redelivery_delay_ms = *e->redelivery_delay_ms;
    if (e->redelivery_multiplier) s.redelivery_multiplier = *e->redelivery_multiplier;
    if (e->max_redelivery_delay_ms) s.max_redelivery_delay_ms = *e->max_redelivery_delay_ms;
    if (e->max_delivery_attempts) s.max_delivery_attempts = *e->max_delivery_attempts;
    if (e->dead_letter_address) s.dead_letter_address = *e->dead_letter_address;
    if (e->collision_avoidance_factor) s.collision_avoidance_factor = *e->collision_avoidance_factor;
    if (e->auto_delete_queues) s.auto_delete_queues = *e->auto_delete_queues;
    if (e->auto_delete_queues_delay_ms) s.auto_delete_queues_delay_ms = *e->auto_delete_queues_delay_ms;
  }
  return s;
}

}  // namespace escrow::broker
