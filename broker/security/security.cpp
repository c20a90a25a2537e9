// Permission resolution over [[security-settings]].
#include "escrow/broker/security/security.h"

#include "escrow/broker/security/address_pattern.h"

namespace escrow::broker {

std::string_view permission_name(permission p) {
  switch (p) {
    case permission::send: return "send";
    case permission::consume: return "consume";
    case permission::browse: return "browse";
    case permission::create_durable_subscription: return "create-durable-subscription";
    case permission::admin: return "admin";
  }
  return "?";
}

address_grants resolve_grants(const std::vector<security_setting_entry>& entries, std::string_view address) {
  address_grants out;
  for (std::size_t p = 0; p < kPermissionCount; ++p) {
    const security_setting_entry* best = nullptr;
    for (const auto& e : entries) {
      if (!e.roles[p] || !pattern_matches(e.match, address)) continue;
      if (!best || !more_specific(best->match, e.match)) best = &e;  // a later entry wins a tie
    }
    if (best) out[p] = *best->roles[p];
  }
  return out;
}

bool holds(const address_grants& grants, permission p, const std::vector<std::string>& roles) {
  for (const auto& granted : grants[static_cast<std::size_t>(p)])
    for (const auto& role : roles)
      if (granted == role) return true;
  return false;
}

}  // namespace escrow::broker
