// The core's side of security (docs/security.md): permission checks per address and the
// broker-wide admin permission (tenant_limits.cpp has what one user may hold). Core strand only.
#include <spdlog/spdlog.h>

#include "escrow/broker/security/authenticator.h"
#include "core.h"

namespace escrow::broker {

std::string who(const connection& c) { return c.info.user.empty() ? "anonymous" : "user '" + c.info.user + "'"; }

void broker::use_authenticator(authenticator* a) { impl_->auth = a && !a->anonymous() ? a : nullptr; }

authenticator* broker::authentication() const { return impl_->auth; }

bool broker::impl::holds_on(const connection& c, permission p, std::string_view address) {
  if (!auth) return true;
  auto it = grants_cache.find(std::string(address));
  if (it == grants_cache.end()) {
    if (grants_cache.size() >= kMaxCachedAddresses) grants_cache.clear();
    it = grants_cache.emplace(std::string(address), resolve_grants(config.security_settings, address)).first;
  }
  return holds(it->second, p, c.info.roles);
}

bool broker::impl::holds_globally(const connection& c, permission p) const {
  if (!auth) return true;
  for (const auto& e : config.security_settings) {
    const auto& roles = e.roles[static_cast<std::size_t>(p)];
    if (e.match != "#" || !roles) continue;
    for (const auto& granted : *roles)
      for (const auto& role : c.info.roles)
        if (granted == role) return true;
  }
  return false;
}

bool broker::impl::permitted(connection& c, permission p, std::string_view address, const frame* request) {
  if (holds_on(c, p, address)) return true;
  // The same answer whether or not the address exists: only what was asked is named.
  error(c, "permission denied: " + who(c) + " lacks the " + std::string(permission_name(p)) + " permission on '" +
               std::string(address) + "'",
        request);
  return false;
}

bool broker::impl::permitted_globally(connection& c, permission p, const frame* request) {
  if (holds_globally(c, p)) return true;
  error(c, "permission denied: " + who(c) + " lacks the " + std::string(permission_name(p)) +
               " permission on the broker (granted by the [[security-settings]] table whose match is \"#\")",
        request);
  return false;
}

}  // namespace escrow::broker
