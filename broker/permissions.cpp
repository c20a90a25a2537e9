// The core's side of security (docs/security.md): permission checks per address, the broker-wide
// admin permission, connections per user and open branches per connection. Core strand only.
#include <spdlog/spdlog.h>

#include "authenticator.h"
#include "core.h"

namespace escrow::broker {
namespace {


std::string who(const connection& c) { return c.info.user.empty() ? "anonymous" : "user '" + c.info.user + "'"; }

}  // namespace

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

bool broker::impl::admit(connection& c) {
  auto& n = connections_per_user[c.info.user];
  if (n >= config.max_connections_per_user) {
    if (n == 0) connections_per_user.erase(c.info.user);
    error(c, "too many connections: " + who(c) + " already has " + std::to_string(n) +
                 " (limits.max-connections-per-user)");
    return false;
  }
  ++n;
  return true;
}

void broker::impl::release(connection& c) {
  auto it = connections_per_user.find(c.info.user);
  if (it == connections_per_user.end()) return;
  if (--it->second == 0) connections_per_user.erase(it);
}

bool broker::impl::may_start_branch(connection& c, const frame* request) {
  std::erase_if(c.started_branches, [](const std::weak_ptr<rm::branch>& w) {
    auto b = w.lock();
    return !b || (b->state != rm::branch_state::active && b->state != rm::branch_state::idle &&
                  b->state != rm::branch_state::rollback_only);
  });
  std::size_t open = c.started_branches.size() + c.transactions.size();
  if (open < config.max_branches_per_connection) return true;
  error(c, "too many open transactions on this connection: " + std::to_string(open) +
               " begun or started and not yet prepared or finished (limits.max-branches-per-connection)",
        request);
  return false;
}

}  // namespace escrow::broker
