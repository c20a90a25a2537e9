// Users, roles and per-address permissions (docs/security.md). Users come from the users file
// ([security] users-file): a name, a password hash (password_hash.h), roles, and optionally the
// subject of a client certificate that logs in as that user. Permissions come from the
// [[security-settings]] tables of the configuration: per address pattern (the wildcards of
// address settings), the roles granted each permission. Each permission of an address is taken
// from the most specific pattern that sets it, as address settings are; nobody has a permission
// no pattern grants.
//
// Pure values and functions (the users file reader is config/users_file.h); the core strand owns
// the tables in use.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::broker {

enum class permission : std::uint8_t { send, consume, browse, create_durable_subscription, admin };
inline constexpr std::size_t kPermissionCount = 5;

// The permission's key in [[security-settings]] and in ERROR messages ("create-durable-subscription").
std::string_view permission_name(permission p);

// One [[security-settings]] table: the roles it grants each permission it sets.
struct security_setting_entry {
  std::string match;
  int line = 0;  // in the configuration file, for messages
  std::array<std::optional<std::vector<std::string>>, kPermissionCount> roles;
};

// The roles holding each permission on one address, resolved from every matching entry.
using address_grants = std::array<std::vector<std::string>, kPermissionCount>;
address_grants resolve_grants(const std::vector<security_setting_entry>& entries, std::string_view address);

// Whether someone with `roles` holds `p` in `grants`.
bool holds(const address_grants& grants, permission p, const std::vector<std::string>& roles);

struct user_entry {
  std::string name;
  std::string password_hash;        // "": the user logs in only with a client certificate
  std::vector<std::string> roles;
  std::string certificate_subject;  // RFC 2253 subject of a client certificate ("": none)
  int line = 0;
};

struct users_table {
  std::map<std::string, user_entry> by_name;
  std::map<std::string, std::string> name_by_subject;  // certificate subject -> user name
};

}  // namespace escrow::broker
