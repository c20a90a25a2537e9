// Internal to broker/config: walking the tables of a TOML file, for every reader of one (config.cpp,
// config_tls.cpp, config_security.cpp, users_file.cpp): each key is applied by the setter of its name, a key the
// table may not hold stops the reader, and every error starts with "FILE:LINE: KEY".
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

namespace escrow::broker {

inline std::string where(const std::string& path, const toml::node& node, const std::string& key) {
  return fmt::format("{}:{}: {}", path, node.source().begin.line, key);
}

// Parses `text`, or else the file `path`, into `root`; returns "" or "PATH:LINE: what is wrong".
inline std::string parse_toml(const std::string& path, toml::table& root, std::optional<std::string_view> text = {}) {
  try {
    root = text ? toml::parse(*text, path) : toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return fmt::format("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  return "";
}

// Applies one key's value; returns "" or what is wrong with it ("must be a string"), which the
// walker puts after "FILE:LINE: KEY ". An error naming its own place (a nested table's, an array
// element's) is returned through located().
using toml_setter = std::function<std::string(const toml::node&)>;
using toml_keys = std::map<std::string, toml_setter, std::less<>>;

// Marks a whole message ("FILE:LINE: ...") that the walker passes on as it is; "" stays "".
inline std::string located(std::string message) { return message.empty() ? message : "\n" + message; }

inline toml_setter string_field(std::string& field) {
  return [&field](const toml::node& n) -> std::string {
    if (!n.is_string()) return "must be a string";
    field = *n.value<std::string>();
    return "";
  };
}

// An array of allowed origins ([http] allowed-origins, a [[websocket-listener]]'s), each checked.
inline toml_setter origins_field(std::vector<std::string>& field,
                                 std::string (*check)(std::string_view)) {
  return [&field, check](const toml::node& n) -> std::string {
    const char* shape = "must be an array of origins, e.g. [\"https://app.example.com\"]";
    const toml::array* list = n.as_array();
    if (!list) return shape;
    std::vector<std::string> out;
    for (const auto& item : *list) {
      auto s = item.value<std::string>();
      if (!item.is_string() || !s) return shape;
      if (std::string problem = check(*s); !problem.empty()) return problem;
      out.push_back(*s);
    }
    field = std::move(out);
    return "";
  };
}

// Applies every key of `table`, named `name` in errors ("" for a file's top level), through `keys`.
// A key not among them: "FILE:LINE: NAME.KEY: unknown key", then ` hint` if one is given.
inline std::string walk_table(const std::string& path, const toml::table& table, const std::string& name,
                              const toml_keys& keys, std::string_view hint = "") {
  for (const auto& [key, value] : table) {
    std::string full = name.empty() ? std::string(key.str()) : name + "." + std::string(key.str());
    auto f = keys.find(key.str());
    if (f == keys.end())
      return where(path, value, full) + ": unknown key" + (hint.empty() ? "" : " ") + std::string(hint);
    if (std::string err = f->second(value); !err.empty())
      return err.front() == '\n' ? err.substr(1) : where(path, value, full) + " " + err;
  }
  return "";
}

// The setter of a key holding the table [NAME] of `keys`.
inline toml_setter table_key(const std::string& path, const std::string& name, toml_keys keys) {
  return [path, name, keys = std::move(keys)](const toml::node& n) -> std::string {
    const toml::table* t = n.as_table();
    return t ? located(walk_table(path, *t, name, keys)) : "must be a table ([" + name + "])";
  };
}

// Calls `each` with every table of the list [[NAME]] that `node` must be and its name in errors
// ("NAME[1]", ...); returns the first error.
inline std::string walk_list(const std::string& path, const toml::node& node, const std::string& name,
                             const std::function<std::string(const toml::table&, const std::string&)>& each) {
  const toml::array* list = node.as_array();
  if (!list || !list->is_array_of_tables())
    return where(path, node, name) + " must be a list of tables ([[" + name + "]])";
  for (std::size_t i = 0; i < list->size(); ++i)
    if (std::string err = each(*list->get(i)->as_table(), fmt::format("{}[{}]", name, i + 1)); !err.empty())
      return err;
  return "";
}

// Replaces `out` with the entries of the list [[NAME]] whose tables each apply to the address
// pattern of their match key (address-settings, security-settings), one table per pattern;
// `keys(table_name, entry)` are the keys of one table.
template <typename Entry>
std::string walk_match_list(const std::string& path, const toml::node& node, const std::string& name,
                            std::vector<Entry>& out, const std::function<toml_keys(const std::string&, Entry&)>& keys,
                            std::string_view hint = "") {
  std::vector<Entry> entries;
  std::string problem = walk_list(path, node, name, [&](const toml::table& t, const std::string& table) {
    Entry e;
    e.line = static_cast<int>(t.source().begin.line);
    if (std::string err = walk_table(path, t, table, keys(table, e), hint); !err.empty()) return err;
    if (e.match.empty()) return where(path, t, table) + " has no match key (the address pattern it applies to)";
    for (const auto& earlier : entries)
      if (earlier.match == e.match)
        return where(path, t, table + ".match") + " '" + e.match + "' is already used by the " + name +
               " at line " + std::to_string(earlier.line) + "; merge the two";
    entries.push_back(std::move(e));
    return std::string();
  });
  if (problem.empty()) out = std::move(entries);
  return problem;
}

}  // namespace escrow::broker
