// The [[tls-listener]] tables (see config_tls.h). Each key is checked for its type and form;
// where it was set is kept so that start-up can name the line of a file that does not load.
#include "config_tls.h"

#include "config_walk.h"
#include "escrow/broker/security/http_access.h"

namespace escrow::broker {
namespace {

toml_setter path_field(std::string& field) {
  return [&field](const toml::node& n) -> std::string {
    if (!n.is_string() || n.value<std::string>()->empty()) return "must be a file name (a non-empty string)";
    field = *n.value<std::string>();
    return "";
  };
}

toml_setter text_field(std::string& field, const char* what) {
  return [&field, what](const toml::node& n) -> std::string {
    if (!n.is_string()) return std::string("must be a string: ") + what;
    field = *n.value<std::string>();
    return "";
  };
}

toml_keys tls_listener_keys(tls_listener_config& c) {
  return {
      {"listen", [&c](const toml::node& n) -> std::string {
         auto s = n.value<std::string>();
         auto a = n.is_string() ? parse_listen_address(*s) : std::nullopt;
         if (!a) return "must be a \"HOST:PORT\" string, e.g. \"127.0.0.1:61614\"";
         c.listen = *a;
         return "";
       }},
      {"certificate-chain", path_field(c.certificate_chain)},
      {"private-key", path_field(c.private_key)},
      {"client-ca", path_field(c.client_ca)},
      {"min-version", [&c](const toml::node& n) -> std::string {
         auto s = n.value<std::string>();
         if (!n.is_string() || (*s != "1.2" && *s != "1.3"))
           return "must be \"1.2\" or \"1.3\" (older versions of TLS are never accepted)";
         c.min_version = *s;
         return "";
       }},
      {"ciphers", text_field(c.ciphers, "a TLS 1.2 cipher list in OpenSSL syntax")},
      {"ciphersuites", text_field(c.ciphersuites, "TLS 1.3 cipher suites in OpenSSL syntax")},
  };
}

}  // namespace

std::string load_tls_listeners(const std::string& path, const toml::node& node,
                               std::vector<tls_listener_config>& out) {
  std::vector<tls_listener_config> listeners;
  std::string problem = walk_list(path, node, "tls-listener", [&](const toml::table& t, const std::string& name) {
    tls_listener_config c;
    c.where[""] = where(path, t, name);
    if (std::string err = walk_table(path, t, name, tls_listener_keys(c)); !err.empty()) return err;
    for (const auto& [key, value] : t) {
      std::string k(key.str());
      c.where[k] = where(path, value, name + "." + k);
    }
    for (const char* required : {"listen", "certificate-chain", "private-key"})
      if (!c.where.contains(required))
        return c.where[""] + " has no " + required + " key (a TLS listener needs listen, certificate-chain and private-key)";
    listeners.push_back(std::move(c));
    return std::string();
  });
  if (problem.empty()) out = std::move(listeners);
  return problem;
}

std::string load_websocket_listeners(const std::string& path, const toml::node& node,
                                     std::vector<websocket_listener_config>& out) {
  std::vector<websocket_listener_config> listeners;
  std::string problem = walk_list(path, node, "websocket-listener", [&](const toml::table& t, const std::string& name) {
    websocket_listener_config c;
    c.tls.where[""] = where(path, t, name);
    toml_keys keys = tls_listener_keys(c.tls);
    keys.emplace("allowed-origins", origins_field(c.allowed_origins, check_allowed_origin));
    if (std::string err = walk_table(path, t, name, keys); !err.empty()) return err;
    for (const auto& [key, value] : t) {
      std::string k(key.str());
      c.tls.where[k] = where(path, value, name + "." + k);
    }
    if (!c.tls.where.contains("listen")) return c.tls.where[""] + " has no listen key";
    bool chain = c.tls.where.contains("certificate-chain"), key = c.tls.where.contains("private-key");
    if (chain != key)
      return c.tls.where[""] + " has " + (chain ? "certificate-chain without private-key" : "private-key without certificate-chain") +
             " (a wss listener needs both; a ws listener neither)";
    c.secure = chain;
    if (!c.secure)
      for (const char* k : {"client-ca", "min-version", "ciphers", "ciphersuites"})
        if (c.tls.where.contains(k))
          return c.tls.where[k] + ": a TLS setting on a listener without certificate-chain and private-key";
    listeners.push_back(std::move(c));
    return std::string();
  });
  if (problem.empty()) out = std::move(listeners);
  return problem;
}

}  // namespace escrow::broker
