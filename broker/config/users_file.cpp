// The users file reader (users_file.h).
#include "escrow/broker/config/users_file.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <toml++/toml.h>

#include "config_walk.h"
#include "escrow/broker/security/names.h"
#include "escrow/broker/security/password_hash.h"

namespace escrow::broker {

namespace {

// The keys of one [[user]] table `name`.
toml_keys user_keys(const std::string& path, const std::string& name, user_entry& u) {
  return {{"name", string_field(u.name)},
          {"certificate-subject", string_field(u.certificate_subject)},
          {"password", [&path, &u, at = name + ".password"](const toml::node& n) -> std::string {
             if (!n.is_string()) return "must be a string";
             std::string hash = *n.value<std::string>();
             if (std::string err = check_password_hash(hash); !err.empty())
               return located(where(path, n, at) + ": " + err);
             u.password_hash = hash;
             return "";
           }},
          {"roles", [&path, &u, at = name + ".roles"](const toml::node& n) -> std::string {
             const toml::array* list = n.as_array();
             if (!list) return "must be an array of role names";
             for (const auto& r : *list) {
               if (!r.is_string() || r.value<std::string>()->empty())
                 return located(where(path, r, at) + " must be an array of role names (non-empty strings)");
               u.roles.push_back(*r.value<std::string>());
             }
             return "";
           }}};
}

// Adds the user of the [[user]] table `name` to `users`.
std::string add_user(const std::string& path, const toml::table& t, const std::string& name, users_table& users) {
  user_entry u;
  u.line = static_cast<int>(t.source().begin.line);
  if (std::string err = walk_table(path, t, name, user_keys(path, name, u),
                                   "(a user has name, password, roles, certificate-subject)");
      !err.empty())
    return err;
  if (u.name.empty()) return where(path, t, name) + " has no name";
  // A user's name is part of the keys of what it owns (branches, durable subscriptions).
  if (auto problem = name_problem(u.name))
    return where(path, t, name + ".name") + " '" + loggable(u.name) + "' cannot be a user's name: " + *problem;
  if (u.password_hash.empty() && u.certificate_subject.empty())
    return where(path, t, name) + " '" + u.name +
           "' has neither a password nor a certificate-subject: it could never log in";
  if (users.by_name.count(u.name))
    return where(path, t, name + ".name") + " '" + u.name + "' is already defined at line " +
           std::to_string(users.by_name[u.name].line);
  if (!u.certificate_subject.empty()) {
    auto [it, fresh] = users.name_by_subject.emplace(u.certificate_subject, u.name);
    if (!fresh)
      return where(path, t, name + ".certificate-subject") + " '" + u.certificate_subject + "' already maps to user '" +
             it->second + "'";
  }
  users.by_name.emplace(u.name, std::move(u));
  return "";
}

}  // namespace

std::string load_users_file(const std::string& path, users_table& out) {
  toml::table root;
  if (std::string err = parse_toml(path, root); !err.empty()) return err;
  users_table users;
  const toml_keys keys{{"user", [&](const toml::node& n) {
    return located(walk_list(path, n, "user", [&](const toml::table& t, const std::string& name) {
      return add_user(path, t, name, users);
    }));
  }}};
  if (std::string err = walk_table(path, root, "", keys, "(the users file holds [[user]] tables)"); !err.empty())
    return err;
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
