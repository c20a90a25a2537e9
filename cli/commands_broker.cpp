// escrow status, config, connections, subscriptions, subscription delete, backup.
#include <fmt/format.h>

#include <boost/json/serialize.hpp>
#include <filesystem>
#include <iostream>
#include <ostream>

#include "admin_call.h"
#include "commands.h"
#include "output.h"

namespace escrow::cli {

namespace {

// One value of the config answer as the configuration file writes it (a JSON string is a TOML
// basic string; a fraction keeps its point: 2.0, not 2).
std::string toml_value(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::bool_: return v.get_bool() ? "true" : "false";
    case boost::json::kind::int64: return std::to_string(v.get_int64());
    case boost::json::kind::uint64: return std::to_string(v.get_uint64());
    case boost::json::kind::double_: {
      std::string number = fmt::format("{}", v.get_double());
      if (number.find_first_of(".en") == std::string::npos) number += ".0";
      return number;
    }
    case boost::json::kind::array: {
      std::string items;
      for (const auto& e : v.get_array()) items += (items.empty() ? "" : ", ") + toml_value(e);
      return "[" + items + "]";
    }
    default: return boost::json::serialize(v);  // strings (and anything else, as JSON)
  }
}

bool is_table_list(const boost::json::value& v) {
  if (!v.is_array() || v.get_array().empty()) return false;
  for (const auto& e : v.get_array())
    if (!e.is_object()) return false;
  return true;
}

// The file's lists of tables ([[NAME]]): TOML cannot write an empty one, so a comment says none.
bool table_list_key(const std::string& key) {
  return key == "address-settings" || key == "security-settings" || key == "tls-listener" ||
         key == "websocket-listener" || key == "postgresql";
}

// The table `o` (named `name`, "" for the top level) as TOML: its keys, then its [tables] and
// [[lists of tables]], in the answer's order.
void print_toml(std::ostream& out, const boost::json::object& o, const std::string& name) {
  for (const auto& kv : o) {
    std::string key(kv.key());
    const boost::json::value& v = kv.value();
    if (v.is_object() || is_table_list(v) || (v.is_array() && v.get_array().empty() && table_list_key(key)))
      continue;
    if (v.is_null())
      out << "# " << key << ": not set\n";
    else
      out << key << " = " << toml_value(v) << "\n";
  }
  for (const auto& kv : o) {
    std::string key(kv.key());
    std::string full = name.empty() ? key : name + "." + key;
    const boost::json::value& v = kv.value();
    if (v.is_object()) {
      out << "\n[" << full << "]\n";
      print_toml(out, v.get_object(), full);
    } else if (is_table_list(v)) {
      for (const auto& e : v.get_array()) {
        out << "\n[[" << full << "]]\n";
        print_toml(out, e.get_object(), full);
      }
    } else if (v.is_array() && v.get_array().empty() && table_list_key(key)) {
      out << "\n# [[" << full << "]]: none\n";
    }
  }
}

std::string joined(const boost::json::array& items) {
  std::string out;
  for (const auto& i : items)
    if (i.is_string()) out += (out.empty() ? "" : ", ") + std::string(i.as_string());
  return out;
}

}  // namespace

bool print_json(const output_options& o, const admin_answer& a) {
  if (o.json) std::cout << a.body << (a.body.ends_with('\n') ? "" : "\n");
  return o.json;
}

void run_status(const settings& s, const output_options& o) {
  admin_answer a = admin_call(s, "status");
  if (print_json(o, a)) return;
  const auto& j = a.json;
  const auto& store = j.at("store");
  const auto& totals = j.at("totals");
  std::string listeners;
  for (const auto& l : array(j, "listeners")) listeners += (listeners.empty() ? "" : ", ") + std::string(l.as_string());
  std::uint64_t map = number(store, "map_size_bytes"), used = number(store, "map_used_bytes");
  std::cout << "version      " << text(j, "version") << "\n"
            << "uptime       " << age_ms(static_cast<std::uint64_t>(j.at("uptime_seconds").to_number<double>() * 1000))
            << "\n"
            << "listeners    " << listeners << "\n"
            << "data dir     " << text(j, "data_dir") << "\n"
            << "connections  " << number(j, "connections") << "\n"
            << "store        " << (store.at("writable").as_bool() ? "writable" : "NOT WRITABLE (see the log)") << ", "
            << bytes(number(store, "file_bytes")) << " on disk and a commit log of "
            << bytes(store.as_object().contains("log_bytes") ? number(store, "log_bytes") : 0) << ", map " << bytes(used) << " of " << bytes(map) << " used ("
            << (map ? used * 100 / map : 0) << "%)\n"
            << "queues       " << number(totals, "queues") << " holding " << number(totals, "depth") << " messages\n"
            << "totals       " << number(totals, "enqueued") << " enqueued, " << number(totals, "acknowledged")
            << " acknowledged, " << number(totals, "expired") << " expired, " << number(totals, "dead_lettered")
            << " dead-lettered (since start)\n";
  std::string branches;
  for (const auto& [state, n] : j.at("branches").as_object())
    if (n.to_number<std::uint64_t>() > 0) branches += (branches.empty() ? "" : ", ") + std::to_string(n.to_number<std::uint64_t>()) + " " + std::string(state);
  std::cout << "branches     " << (branches.empty() ? "none" : branches) << "\n";
}

void run_config(const settings& s, const output_options& o) {
  admin_answer a = admin_call(s, "config");
  if (print_json(o, a)) return;
  const auto& j = a.json;
  std::string file = text(j, "config_file");
  std::string command_line = joined(array(j, "command_line_keys"));
  std::string reloadable = joined(array(j, "reloadable"));
  std::cout << "# the configuration escrowd runs with: every key, with its value in force (defaults included);\n"
            << "# passwords in conninfo strings are shown as ***, the users, token and key files by their paths\n"
            << "# file: " << (file.empty() ? "none (escrowd was started without --config)" : file) << "\n";
  if (!command_line.empty()) std::cout << "# set on the command line, over the file: " << command_line << "\n";
  if (!reloadable.empty()) std::cout << "# SIGHUP applies " << reloadable << "; the other keys take a restart\n";
  std::cout << "\n";
  print_toml(std::cout, j.at("config").as_object(), "");
}

void run_connections(const settings& s, const output_options& o) {
  admin_answer a = admin_list(s, "connections", {"connections"});
  if (print_json(o, a)) return;
  // USER is who logged in (empty when escrowd has no users file; --json also gives CONNECT's login).
  table t({"ID", "PEER", "USER", "CLIENT-ID", "STOMP", "SUBSCRIPTIONS", "IN-FLIGHT", "TRANSACTIONS", "XA-BRANCH"});
  for (const auto& c : array(a.json, "connections"))
    t.add({text(c, "id"), text(c, "peer"), text(c, "user"), text(c, "client_id"), text(c, "version"),
           text(c, "subscriptions"), text(c, "in_flight"), text(c, "transactions"), text(c, "xa_branch")});
  t.print(std::cout);
}

void run_subscriptions(const settings& s, const output_options& o) {
  admin_answer a = admin_list(s, "subscriptions", {"subscriptions", "durable"});
  if (print_json(o, a)) return;
  table t({"CONNECTION", "ID", "KIND", "DESTINATION", "ACK", "IN-FLIGHT", "DEPTH"});
  for (const auto& x : array(a.json, "subscriptions"))
    t.add({text(x, "connection"), text(x, "id"), text(x, "kind"), text(x, "destination"), text(x, "ack"),
           text(x, "in_flight"), text(x, "depth")});
  t.print(std::cout);
  std::cout << "\ndurable subscriptions (DEPTH: messages waiting, how far behind it is)\n";
  table d({"CLIENT-ID", "SUBSCRIPTION", "USER", "TOPIC", "ACTIVE", "DEPTH"});
  for (const auto& x : array(a.json, "durable"))
    d.add({text(x, "client_id"), text(x, "subscription"), text(x, "user"), text(x, "topic"), text(x, "active"),
           text(x, "depth")});
  d.print(std::cout);
}

void run_subscription_delete(const settings& s, const output_options& o, const std::string& client_id,
                             const std::string& name, const std::string& owner) {
  admin_args headers{{"client-id", client_id}, {"subscription", name}};
  if (!owner.empty()) headers.emplace_back("user", owner);
  admin_answer a = admin_call(s, "subscription-delete", headers);
  if (print_json(o, a)) return;
  std::cout << "deleted durable subscription " << text(a.json, "deleted") << " and its "
            << count_of(number(a.json, "messages"), "message") << "\n";
}

void run_backup(const settings& s, const output_options& o, const std::string& dir, bool compact) {
  // The broker writes the copy; an absolute path means the same on both sides when both run on one
  // machine (the usual case). On another machine, give the path as the broker's host sees it.
  std::string path = std::filesystem::absolute(dir).lexically_normal().string();
  admin_answer a = admin_call(s, "backup", {{"path", path}, {"compact", compact ? "true" : "false"}},
                              std::chrono::hours(24));
  if (print_json(o, a)) return;
  std::cout << "backup written to " << text(a.json, "path") << " (" << bytes(number(a.json, "bytes")) << ", "
            << text(a.json, "seconds") << " s" << (compact ? ", compacted" : "") << ")\n";
}

}  // namespace escrow::cli
