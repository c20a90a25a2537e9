// The resolution of settings over address patterns (rules in address_settings.h).
#include "escrow/broker/config/address_settings.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace escrow::broker {

const char* to_string(full_policy p) {
  switch (p) {
    case full_policy::fail: return "FAIL";
    case full_policy::drop: return "DROP";
    case full_policy::drop_head: return "DROP-HEAD";
    case full_policy::block: return "BLOCK";
  }
  return "FAIL";
}

std::optional<full_policy> parse_full_policy(std::string_view name) {
  std::string upper;
  for (char ch : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (upper == "FAIL" || upper == "REJECT-PUBLISH") return full_policy::fail;
  if (upper == "DROP") return full_policy::drop;
  if (upper == "DROP-HEAD") return full_policy::drop_head;
  if (upper == "BLOCK") return full_policy::block;
  return std::nullopt;
}

std::uint64_t address_settings::redelivery_delay_for(std::uint32_t count, double random_unit) const {
  if (redelivery_delay_ms == 0) return 0;
  double delay = static_cast<double>(redelivery_delay_ms) * std::pow(redelivery_multiplier, count > 0 ? count - 1 : 0);
  double cap = static_cast<double>(max_redelivery_delay_ms.value_or(redelivery_delay_ms * 10));
  delay = std::min(delay, cap);
  delay *= 1.0 + collision_avoidance_factor * std::clamp(random_unit, -1.0, 1.0);
  return delay <= 0 ? 0 : static_cast<std::uint64_t>(std::llround(delay));
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
    if (e->id_cache_size) s.id_cache_size = *e->id_cache_size;
    if (e->max_size_messages) s.max_size_messages = *e->max_size_messages;
    if (e->max_size_bytes) s.max_size_bytes = *e->max_size_bytes;
    if (e->address_full_policy) s.address_full_policy = *e->address_full_policy;
    if (e->dead_letter_on_drop) s.dead_letter_on_drop = *e->dead_letter_on_drop;
    if (e->ring_size) s.ring_size = *e->ring_size;
    if (e->exclusive) s.exclusive = *e->exclusive;
    // In one table, a key named wins over last-value = true or false.
    if (e->last_value_key) s.last_value_key = *e->last_value_key;
    else if (e->last_value) s.last_value_key = *e->last_value ? std::string(kLastValueHeader) : std::string();
  }
  return s;
}

}  // namespace escrow::broker
