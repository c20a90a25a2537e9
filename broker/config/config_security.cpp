// The [[security-settings]] tables (see config_security.h): a match pattern and, per permission,
// the list of roles granted it.
#include "config_security.h"

#include "escrow/broker/config/address_settings.h"
#include "config_walk.h"

namespace escrow::broker {
namespace {

// The keys of one [[security-settings]] table `name`: match, and a list of roles per permission.
toml_keys security_setting_keys(const std::string& path, const std::string& name, security_setting_entry& e) {
  toml_keys keys{{"match", [&e](const toml::node& n) -> std::string {
                    if (!n.is_string()) return "must be an address pattern (a string)";
                    e.match = *n.value<std::string>();
                    if (std::string err = check_pattern(e.match); !err.empty()) return "'" + e.match + "': " + err;
                    return "";
                  }}};
  for (std::size_t p = 0; p < kPermissionCount; ++p) {
    std::string key(permission_name(static_cast<permission>(p)));
    keys[key] = [&path, &e, p, at = name + "." + key](const toml::node& n) -> std::string {
      const toml::array* list = n.as_array();
      if (!list) return "must be an array of role names, e.g. [\"app\"]";
      std::vector<std::string> roles;
      for (const auto& r : *list) {
        if (!r.is_string() || r.value<std::string>()->empty())
          return located(where(path, r, at) + " must be an array of role names (non-empty strings)");
        roles.push_back(*r.value<std::string>());
      }
      e.roles[p] = std::move(roles);
      return "";
    };
  }
  return keys;
}

}  // namespace

std::string load_security_settings(const std::string& path, const toml::node& node,
                                   std::vector<security_setting_entry>& out) {
  return walk_match_list<security_setting_entry>(
      path, node, "security-settings", out,
      [&path](const std::string& name, auto& e) { return security_setting_keys(path, name, e); },
      "(use match, send, consume, browse, create-durable-subscription, admin)");
}

}  // namespace escrow::broker
