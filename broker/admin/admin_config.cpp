// The `config` ADMIN command (`escrow config`, docs/operations.md): the configuration escrowd runs
// with, as JSON. Every key of the file is there with the value in force (a default when the file
// does not set it, the command line's value when --listen, --data-dir or --log-level set it), under
// its name and in its section as docs/configuration.md writes them, so that an operator reads it as
// the file. The lists of tables ([[address-settings]], [[security-settings]], [[tls-listener]],
// [[websocket-listener]], [[coordinator.postgresql]]) hold each table as the file wrote it.
//
// Nothing secret is written: the users file, the HTTP token file and the TLS certificates and keys
// appear by their paths only (their contents are never read here), and in a coordinated database's
// conninfo the value of each password keyword (password, sslpassword) and a URI's password are
// written ***.
#include <algorithm>
#include <cctype>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "admin_commands.h"
#include "escrow/broker/config/config.h"
#include "escrow/broker/security/security.h"
#include "json.h"

namespace escrow::broker {

namespace {

constexpr std::string_view kHidden = "***";

// The keys SIGHUP applies (docs/configuration.md, "Reloading with SIGHUP": the core's are the
// entries with `apply` in broker/config/reload_keys.cpp, the others broker/net/reload.cpp's);
// every other key takes a restart. tests/unit/broker/admin_config_test.cpp checks the core's.
constexpr const char* kReloadable[] = {
    "log-level",
    "storage.backup-root",
    "delivery.message-expiry-scan-period",
    "delivery.persist-delivery-count-before-delivery",
    "http.allowed-hosts",
    "http.token-file",
    "http.max-queue-metrics",
    "admin.max-page-size",
    "admin.max-page-bytes",
    "address-settings",
    "security-settings",
};

// "HOST:PORT" as the file writes it (IPv6 as "[::1]:61613").
std::string address_text(const listen_address& a) {
  std::string host = a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host;
  return host + ":" + std::to_string(a.port);
}

json::array strings(const std::vector<std::string>& items) { return json::array(items.begin(), items.end()); }

// Whether a conninfo keyword holds a password: libpq's password and sslpassword (any case, so
// that a misspelt one is not shown either).
bool secret_keyword(std::string_view key) {
  constexpr std::string_view tail = "password";
  if (key.size() < tail.size()) return false;
  key = key.substr(key.size() - tail.size());
  for (std::size_t i = 0; i < tail.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(key[i])) != tail[i]) return false;
  return true;
}

bool is_uri(std::string_view s) { return s.starts_with("postgresql://") || s.starts_with("postgres://"); }

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// `s` with each %XX decoded (a % not followed by two hex digits stays as it is).
std::string percent_decoded(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool mentions_password(std::string_view s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("password") != std::string::npos;
}

// The URI form, postgresql://[USER[:PASSWORD]@][HOST][/DBNAME][?KEY=VALUE&...]: the password of
// the user part and the value of each password parameter hidden. Where they end is taken widely,
// so that a password with a '?', '/' or '@' left unencoded shows nothing either: the user part's
// password runs from the first ':' after "//" to the last '@'.
std::string hidden_in_uri(std::string_view s) {
  constexpr auto npos = std::string_view::npos;
  std::size_t authority = s.find("://") + 3;
  std::vector<std::pair<std::size_t, std::size_t>> hide;  // [begin, end) of s
  std::size_t at = s.rfind('@');
  std::size_t colon = s.find(':', authority);
  if (at != npos && at > authority && colon != npos && colon < at) hide.emplace_back(colon + 1, at);
  if (std::size_t query = s.find('?', authority); query != npos) {
    for (std::size_t begin = query + 1; begin <= s.size();) {
      std::size_t end = s.find('&', begin);
      if (end == npos) end = s.size();
      std::string_view p = s.substr(begin, end - begin);
      if (std::size_t eq = p.find('='); eq != npos) {
        std::string key = percent_decoded(p.substr(0, eq));
        if (secret_keyword(key) || (key == "dbname" && mentions_password(percent_decoded(p.substr(eq + 1)))))
          hide.emplace_back(begin + eq + 1, end);
      }
      begin = end + 1;
    }
  }
  std::sort(hide.begin(), hide.end());
  std::string out;
  std::size_t pos = 0;  // s is copied up to here
  for (const auto& [begin, end] : hide) {
    if (begin >= pos) {
      out.append(s.substr(pos, begin - pos));
      out += kHidden;
      pos = end;
    } else if (end > pos) {
      pos = end;  // overlaps the range hidden before it
    }
  }
  out.append(s.substr(pos));
  return out;
}

// `value` as a single-quoted conninfo value.
std::string quoted(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// The keyword/value form, KEY=VALUE separated by spaces (libpq's conninfo_parse: spaces around
// '=' allowed, a value single-quoted or not, a backslash escaping the next character): the text as
// written but the value of each password keyword, and a dbname that is itself a connection
// string with its passwords hidden. Returns false when libpq could not read it either.
bool hidden_in_keywords(std::string_view s, std::string& out) {
  std::size_t i = 0, n = s.size();
  while (i < n) {
    std::size_t start = i;
    while (i < n && is_space(s[i])) ++i;
    if (i == n) {
      out.append(s.substr(start));
      break;
    }
    std::size_t key_begin = i;
    while (i < n && s[i] != '=' && !is_space(s[i])) ++i;
    std::string_view key = s.substr(key_begin, i - key_begin);
    while (i < n && is_space(s[i])) ++i;
    if (i == n || s[i] != '=') return false;
    ++i;
    while (i < n && is_space(s[i])) ++i;
    std::size_t value_begin = i;
    std::string value;  // unescaped
    if (i < n && s[i] == '\'') {
      for (++i;;) {
        if (i == n) return false;  // unterminated quoted string
        if (s[i] == '\\') {
          if (++i < n) value += s[i++];
        } else if (s[i] == '\'') {
          ++i;
          break;
        } else {
          value += s[i++];
        }
      }
    } else {
      while (i < n && !is_space(s[i])) {
        if (s[i] == '\\') {
          if (++i < n) value += s[i++];
        } else {
          value += s[i++];
        }
      }
    }
    out.append(s.substr(start, value_begin - start));  // the spaces, the keyword and '=' as written
    if (secret_keyword(key))
      out += kHidden;
    else if (key == "dbname" && (is_uri(value) || value.find('=') != std::string::npos))
      out += quoted(hide_conninfo_password(value));  // libpq expands a dbname that is a connection string
    else
      out.append(s.substr(value_begin, i - value_begin));
  }
  return true;
}

json::object address_setting_json(const address_setting_entry& e) {
  json::object j{{"match", e.match}};
  if (e.dead_letter_address) j["dead-letter-address"] = *e.dead_letter_address;
  if (e.expiry_address) j["expiry-address"] = *e.expiry_address;
  if (e.expiry_delay_ms) j["expiry-delay"] = *e.expiry_delay_ms;
  if (e.redelivery_delay_ms) j["redelivery-delay"] = *e.redelivery_delay_ms;
  if (e.redelivery_multiplier) j["redelivery-delay-multiplier"] = *e.redelivery_multiplier;
  if (e.max_redelivery_delay_ms) j["max-redelivery-delay"] = *e.max_redelivery_delay_ms;
  if (e.max_delivery_attempts) j["max-delivery-attempts"] = *e.max_delivery_attempts;
  if (e.auto_delete_queues) j["auto-delete-queues"] = *e.auto_delete_queues;
  if (e.auto_delete_queues_delay_ms) j["auto-delete-queues-delay"] = *e.auto_delete_queues_delay_ms;
  if (e.id_cache_size) j["id-cache-size"] = *e.id_cache_size;
  if (e.max_size_messages) j["max-size-messages"] = *e.max_size_messages;
  if (e.max_size_bytes) j["max-size-bytes"] = *e.max_size_bytes;
  if (e.address_full_policy) j["address-full-policy"] = to_string(*e.address_full_policy);
  if (e.dead_letter_on_drop) j["dead-letter-on-drop"] = *e.dead_letter_on_drop;
  if (e.ring_size) j["ring-size"] = *e.ring_size;
  if (e.last_value_key) j["last-value-key"] = *e.last_value_key;
  if (e.last_value) j["last-value"] = *e.last_value;
  if (e.exclusive) j["exclusive"] = *e.exclusive;
  if (e.collision_avoidance_factor) j["redelivery-collision-avoidance-factor"] = *e.collision_avoidance_factor;
  return j;
}

json::object security_setting_json(const security_setting_entry& e) {
  json::object j{{"match", e.match}};
  for (std::size_t p = 0; p < kPermissionCount; ++p)
    if (const auto& roles = e.roles[p]) j[std::string(permission_name(static_cast<permission>(p)))] = strings(*roles);
  return j;
}

json::object tls_listener_json(const tls_listener_config& t) {
  // The files by their paths: what they hold (the private key) is never read here.
  json::object j{{"listen", address_text(t.listen)},
                 {"certificate-chain", t.certificate_chain},
                 {"private-key", t.private_key}};
  if (!t.client_ca.empty()) j["client-ca"] = t.client_ca;  // the file refuses "" for it: absent, none
  j["min-version"] = t.min_version;
  j["ciphers"] = t.ciphers;            // "": escrowd's default TLS 1.2 list
  j["ciphersuites"] = t.ciphersuites;  // "": OpenSSL's default
  return j;
}

// A [[websocket-listener]]: its listen and allowed-origins, and the TLS keys of a wss one (the file
// refuses them on a ws one).
json::object websocket_listener_json(const websocket_listener_config& w) {
  json::object j = w.secure ? tls_listener_json(w.tls) : json::object{{"listen", address_text(w.tls.listen)}};
  j["allowed-origins"] = strings(w.allowed_origins);
  return j;
}

// The configuration in the file's shape (docs/configuration.md, in its order).
json::object config_json(const broker_config& c) {
  std::vector<std::string> listen;
  for (const auto& a : c.listen) listen.push_back(address_text(a));
  json::object out;
  out["listen"] = strings(listen);
  out["data-dir"] = c.data_dir;
  out["log-level"] = c.log_level;
  out["io-threads"] = c.io_threads;
  out["storage"] = json::object{{"map-size", c.map_size},
                                {"max-map-size", c.max_map_size},
                                {"max-size", c.max_size},
                                {"min-free-disk", c.min_free_disk},
                                {"max-group-batches", c.max_group_batches},
                                {"log-size", c.log_size},
                                {"checkpoint-interval-ms", c.checkpoint_interval_ms},
                                {"backup-root", c.backup_root}};
  out["limits"] = json::object{{"max-frame-size", c.frames.max_frame_size},
                               {"max-headers", c.frames.max_headers},
                               {"max-header-length", c.frames.max_header_length},
                               {"max-pending-bytes", c.max_pending_bytes},
                               {"connect-timeout-ms", c.connect_timeout_ms},
                               {"slow-consumer-timeout-ms", c.slow_consumer_timeout_ms},
                               {"max-unstored-bytes", c.max_unstored_bytes},
                               {"max-connections", c.max_connections},
                               {"max-connections-per-user", c.max_connections_per_user},
                               {"max-unauthenticated-per-address", c.max_unauthenticated_per_address},
                               {"max-unauthenticated-connections", c.max_unauthenticated_connections},
                               {"first-byte-timeout-ms", c.first_byte_timeout_ms},
                               {"max-subscriptions-per-connection", c.max_subscriptions_per_connection},
                               {"max-consumer-window", c.max_consumer_window},
                               {"max-groups-per-queue", c.max_groups_per_queue},
                               {"max-branches-per-connection", c.max_branches_per_connection},
                               {"max-branches-per-user", c.max_branches_per_user},
                               {"max-prepared-branches-per-user", c.max_prepared_branches_per_user},
                               {"max-transaction-bytes", c.max_transaction_bytes},
                               {"max-transaction-bytes-per-user", c.max_transaction_bytes_per_user},
                               {"max-queues-per-user", c.max_queues_per_user},
                               {"max-subscriptions-per-user", c.max_subscriptions_per_user},
                               {"max-consumer-window-bytes", c.max_consumer_window_bytes},
                               {"max-memory-bytes-per-queue", c.max_memory_bytes_per_queue},
                               {"memory-full-policy", c.memory_full_policy},
                               {"max-memory-bytes-per-user", c.max_memory_bytes_per_user},
                               {"memory-high-watermark", c.memory_high_watermark},
                               {"max-stored-bytes-per-user", c.max_stored_bytes_per_user}};
  // The users file by its path: the users and their password hashes are never written.
  out["security"] = json::object{{"users-file", c.users_file},
                                 {"login-backoff-max-ms", c.login_backoff_max_ms},
                                 {"populate-validated-user", c.populate_validated_user},
                                 {"login-threads", c.login_threads},
                                 {"max-waiting-logins-per-address", c.max_waiting_logins_per_address},
                                 {"max-pending-logins", c.max_pending_logins},
                                 {"max-waiting-logins-per-user", c.max_waiting_logins_per_user},
                                 {"reserved-pending-logins", c.reserved_pending_logins},
                                 {"max-login-delay-ms", c.max_login_delay_ms}};
  json::array security_settings;
  for (const auto& e : c.security_settings) security_settings.push_back(security_setting_json(e));
  out["security-settings"] = std::move(security_settings);
  out["delivery"] = json::object{{"consumer-window", c.consumer_window},
                                 {"queue-memory-window", c.queue_memory_window},
                                 {"queue-memory-bytes", c.queue_memory_bytes},
                                 {"message-expiry-scan-period", c.message_expiry_scan_period_ms},
                                 {"persist-delivery-count-before-delivery", c.persist_delivery_count_before_delivery}};
  json::array address_settings;
  for (const auto& e : c.address_settings) address_settings.push_back(address_setting_json(e));
  out["address-settings"] = std::move(address_settings);
  out["transactions"] = json::object{{"timeout-ms", c.branch_timeout_ms}, {"local-timeout-ms", c.local_timeout_ms}};
  json::array databases;
  for (const auto& d : c.coordinated_databases)
    databases.push_back(json::object{{"name", d.name}, {"conninfo", hide_conninfo_password(d.conninfo)}});
  json::object coordinator{{"max-transactions", c.max_coordinated_transactions},
                           {"connections", c.coordinator_connections},
                           {"statement-timeout-ms", c.coordinator_statement_timeout_ms},
                           {"recovery-interval-ms", c.coordinator_recovery_interval_ms}};
  coordinator["postgresql"] = std::move(databases);
  out["coordinator"] = std::move(coordinator);
  out["heartbeat"] = json::object{{"send-ms", c.heartbeat_send_ms},
                                  {"receive-ms", c.heartbeat_receive_ms},
                                  {"grace-ms", c.heartbeat_grace_ms},
                                  {"max-ms", c.heartbeat_max_ms}};
  // The token file by its path: the tokens are never written. listen "": off, as in the file.
  json::object http{{"listen", c.http_listen ? address_text(*c.http_listen) : std::string()}};
  http["websocket"] = c.http_websocket;
  http["allowed-origins"] = strings(c.http_allowed_origins);
  http["session-timeout-ms"] = c.http_session_timeout_ms;
  http["max-sessions"] = c.http_max_sessions;
  http["max-sessions-per-user"] = c.http_max_sessions_per_user;
  http["allowed-hosts"] = strings(c.http_allowed_hosts);
  http["token-file"] = c.http_token_file;
  http["max-queue-metrics"] = c.max_queue_metrics;
  http["max-connections"] = c.http_max_connections;
  out["http"] = std::move(http);
  out["admin"] = json::object{{"max-page-size", c.admin_max_page_size}, {"max-page-bytes", c.admin_max_page_bytes}};
  json::array tls;
  for (const auto& t : c.tls_listeners) tls.push_back(tls_listener_json(t));
  out["tls-listener"] = std::move(tls);
  json::array websocket;
  for (const auto& w : c.websocket_listeners) websocket.push_back(websocket_listener_json(w));
  out["websocket-listener"] = std::move(websocket);
  return out;
}

}  // namespace

std::string hide_conninfo_password(std::string_view conninfo) {
  if (is_uri(conninfo)) return hidden_in_uri(conninfo);
  std::string out;
  // What libpq cannot read (escrowd refuses to start with it) is hidden whole.
  return hidden_in_keywords(conninfo, out) ? out : std::string(kHidden);
}

std::string config_answer(const broker_config& config) {
  json::object answer;
  if (config.config_file.empty())
    answer["config_file"] = nullptr;
  else
    answer["config_file"] = config.config_file;
  answer["command_line_keys"] = strings(config.command_line_keys);
  answer["reloadable"] = json::array(std::begin(kReloadable), std::end(kReloadable));
  answer["config"] = config_json(config);
  return to_json(std::move(answer));
}

admin_outcome admin_config(const admin_core& core, const frame&) {
  return admin_outcome{"ok", {}, config_answer(core.config())};
}

}  // namespace escrow::broker
