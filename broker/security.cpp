// Permission resolution over [[security-settings]] and the users file reader.
#include "security.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <toml++/toml.h>

#include "address_settings.h"
#include "config_where.h"
#include "password_hash.h"

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

namespace {

std::string read_user(const std::string& path, const toml::table& t, const std::string& name, user_entry& u) {
  for (const auto& [key, value] : t) {
    std::string k(key.str());
    if (k == "name" || k == "password" || k == "certificate-subject") {
      if (!value.is_string()) return where(path, value, name + "." + k) + " must be a string";
      std::string text = *value.value<std::string>();
      if (k == "name") u.name = text;
      if (k == "certificate-subject") u.certificate_subject = text;
      if (k == "password") {
        if (std::string err = check_password_hash(text); !err.empty())
          return where(path, value, name + ".password") + ": " + err;
        u.password_hash = text;
      }
    } else if (k == "roles") {
      const toml::array* list = value.as_array();
      if (!list) return where(path, value, name + ".roles") + " must be an array of role names";
      for (const auto& r : *list) {
        if (!r.is_string() || r.value<std::string>()->empty())
          return where(path, r, name + ".roles") + " must be an array of role names (non-empty strings)";
        u.roles.push_back(*r.value<std::string>());
      }
    } else {
      return where(path, value, name + "." + k) + ": unknown key (a user has name, password, roles, certificate-subject)";
    }
  }
  return "";
}

}  // namespace

std::string load_users_file(const std::string& path, users_table& out) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return fmt::format("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  users_table users;
  for (const auto& [key, node] : root) {
    std::string k(key.str());
    if (k != "user") return where(path, node, k) + ": unknown key (the users file holds [[user]] tables)";
    const toml::array* list = node.as_array();
    if (!list || !list->is_array_of_tables()) return where(path, node, "user") + " must be a list of tables ([[user]])";
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::table& t = *list->get(i)->as_table();
      std::string name = fmt::format("user[{}]", i + 1);
      user_entry u;
      u.line = static_cast<int>(t.source().begin.line);
      if (std::string err = read_user(path, t, name, u); !err.empty()) return err;
      if (u.name.empty()) return where(path, t, name) + " has no name";
      if (u.password_hash.empty() && u.certificate_subject.empty())
        return where(path, t, name) + " '" + u.name +
               "' has neither a password nor a certificate-subject: it could never log in";
      if (users.by_name.count(u.name))
        return where(path, t, name + ".name") + " '" + u.name + "' is already defined at line " +
               std::to_string(users.by_name[u.name].line);
      if (!u.certificate_subject.empty()) {
        auto [it, fresh] = users.name_by_subject.emplace(u.certificate_subject, u.name);
        if (!fresh)
          return where(path, t, name + ".certificate-subject") + " '" + u.certificate_subject +
                 "' already maps to user '" + it->second + "'";
      }
      users.by_name.emplace(u.name, std::move(u));
    }
  }
  out = std::move(users);
  return "";
}

std::string users_file_exposure(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return "";
  unsigned mode = st.st_mode & 07777;
  if ((mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) == 0) return "";
  bool read = mode & (S_IRGRP | S_IROTH), written = mode & (S_IWGRP | S_IWOTH);
  return fmt::format("the users file {} may be {} by others than its owner (mode {:04o}): it holds the password "
                     "hashes; make it readable by escrowd's user only (chmod 600 {})",
                     path, read && written ? "read and written" : read ? "read" : "written", mode, path);
}

}  // namespace escrow::broker
