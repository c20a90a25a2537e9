// The [[security-settings]] tables (see config_security.h): a match pattern and, per permission,
// the list of roles granted it.
#include "config_security.h"

#include <fmt/format.h>

#include "address_settings.h"
#include "config_where.h"

namespace escrow::broker {
namespace {

std::optional<permission> permission_named(std::string_view key) {
  for (std::size_t p = 0; p < kPermissionCount; ++p)
    if (permission_name(static_cast<permission>(p)) == key) return static_cast<permission>(p);
  return std::nullopt;
}

std::string read_entry(const std::string& path, const toml::table& t, const std::string& name,
                       security_setting_entry& e) {
  for (const auto& [key, value] : t) {
    std::string k(key.str());
    if (k == "match") {
      if (!value.is_string()) return where(path, value, name + ".match") + " must be an address pattern (a string)";
      e.match = *value.value<std::string>();
      if (std::string err = check_pattern(e.match); !err.empty())
        return where(path, value, name + ".match") + " '" + e.match + "': " + err;
      continue;
    }
    auto p = permission_named(k);
    if (!p)
      return where(path, value, name + "." + k) +
             ": unknown key (use match, send, consume, browse, create-durable-subscription, admin)";
    const toml::array* list = value.as_array();
    if (!list) return where(path, value, name + "." + k) + " must be an array of role names, e.g. [\"app\"]";
    std::vector<std::string> roles;
    for (const auto& r : *list) {
      if (!r.is_string() || r.value<std::string>()->empty())
        return where(path, r, name + "." + k) + " must be an array of role names (non-empty strings)";
      roles.push_back(*r.value<std::string>());
    }
    e.roles[static_cast<std::size_t>(*p)] = std::move(roles);
  }
  return "";
}

}  // namespace

std::string load_security_settings(const std::string& path, const toml::node& node,
                                   std::vector<security_setting_entry>& out) {
  const toml::array* list = node.as_array();
  if (!list || !list->is_array_of_tables())
    return where(path, node, "security-settings") + " must be a list of tables ([[security-settings]])";
  std::vector<security_setting_entry> entries;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::table& t = *list->get(i)->as_table();
    std::string name = fmt::format("security-settings[{}]", i + 1);
    security_setting_entry e;
    e.line = static_cast<int>(t.source().begin.line);
    if (std::string err = read_entry(path, t, name, e); !err.empty()) return err;
    if (e.match.empty()) return where(path, t, name) + " has no match key (the address pattern it applies to)";
    for (const auto& earlier : entries)
      if (earlier.match == e.match)
        return where(path, t, name + ".match") + " '" + e.match + "' is already used by the security-settings at line " +
               std::to_string(earlier.line) + "; merge the two";
    entries.push_back(std::move(e));
  }
  out = std::move(entries);
  return "";
}

}  // namespace escrow::broker
