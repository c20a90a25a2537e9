// Reading the TOML configuration with toml++. Unknown keys and wrong types stop the broker at
// start with the file, line and key, rather than running with a setting the user did not get.
#include "escrow/broker/config/config.h"
#include "config_security.h"
#include "config_tls.h"
#include "config_walk.h"
#include "escrow/broker/security/http_access.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <toml++/toml.h>

namespace escrow::broker {

std::string load_http_token_file(const broker_config& config, std::vector<token_digest>& tokens) {
  if (config.http_token_file.empty()) return "";
  if (std::string err = load_http_tokens(config.http_token_file, tokens); !err.empty())
    return (config.http_token_file_where.empty() ? "http.token-file" : config.http_token_file_where) + " '" +
           config.http_token_file + "': " + err;
  return "";
}

std::optional<listen_address> parse_listen_address(const std::string& text) {
  std::string host;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return std::nullopt;
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) return std::nullopt;
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535)
    return std::nullopt;
  return listen_address{host, static_cast<std::uint16_t>(port)};
}

std::vector<address_setting_entry> embedded_address_settings() {
  address_setting_entry all;
  all.match = "#";
  all.expiry_address = "ExpiryQueue";
  all.dead_letter_address = "DLQ";
  return {all};
}

namespace {

// Integers are read with value_exact: value<std::int64_t>() converts a float first, and for one out
// of range (5e99) that conversion is undefined behaviour inside toml++ (found by
// tests/fuzz/fuzz_config).
template <typename T>
toml_setter unsigned_field(T& field, std::uint64_t min = 0, std::uint64_t max = std::numeric_limits<T>::max()) {
  return [&field, min, max](const toml::node& n) -> std::string {
    auto v = n.value_exact<std::int64_t>();
    if (!n.is_integer() || !v) return "must be an integer";
    if (*v < 0 || static_cast<std::uint64_t>(*v) < min) return fmt::format("must be at least {}", min);
    if (static_cast<std::uint64_t>(*v) > max) return fmt::format("must be at most {}", max);
    field = static_cast<T>(*v);
    return "";
  };
}

toml_setter bool_field(bool& field) {
  return [&field](const toml::node& n) -> std::string {
    if (!n.is_boolean()) return "must be true or false";
    field = *n.value<bool>();
    return "";
  };
}

toml_setter scan_period_field(std::int64_t& field) {
  return [&field](const toml::node& n) -> std::string {
    auto v = n.value_exact<std::int64_t>();
    if (!n.is_integer() || !v || (*v < 1 && *v != -1))
      return "must be a period in milliseconds (at least 1), or -1 to turn the reaper off";
    field = *v;
    return "";
  };
}

// The most ids id-cache-size may keep per address (ten million: a few GB of store at most).
constexpr std::int64_t kMaxIdCacheSize = 10000000;

// The keys of one [[address-settings]] table, each checked and stored in `e`.
toml_keys address_setting_keys(address_setting_entry& e) {
  auto address = [](std::optional<std::string>& field) -> toml_setter {
    return [&field](const toml::node& n) -> std::string {
      if (!n.is_string()) return "must be a string (a queue name, /queue/NAME or /topic/NAME; \"\" for none)";
      field = *n.value<std::string>();
      return "";
    };
  };
  auto non_negative = [](auto& field) -> toml_setter {
    return [&field](const toml::node& n) -> std::string {
      auto v = n.value_exact<std::int64_t>();
      if (!n.is_integer() || !v) return "must be an integer";
      if (*v < 0) return "must not be negative";
      field = static_cast<std::uint64_t>(*v);
      return "";
    };
  };
  auto boolean = [](std::optional<bool>& field) -> toml_setter {
    return [&field](const toml::node& n) -> std::string {
      if (!n.is_boolean()) return "must be true or false";
      field = *n.value<bool>();
      return "";
    };
  };
  // A STOMP header name: not empty, no ':', no line break (STOMP 1.2 could not carry it).
  auto header_name = [](std::optional<std::string>& field) -> toml_setter {
    return [&field](const toml::node& n) -> std::string {
      if (!n.is_string()) return "must be a string: the name of the header messages carry their key in";
      std::string name = *n.value<std::string>();
      if (name.empty() || name.find_first_of(":\r\n") != std::string::npos)
        return "must be a header name (not empty, without ':' or a line break)";
      field = std::move(name);
      return "";
    };
  };
  // A limit: an integer of at least `min`, or -1 for none.
  auto limit = [](std::optional<std::int64_t>& field, std::int64_t min, const char* rule) -> toml_setter {
    return [&field, min, rule](const toml::node& n) -> std::string {
      auto v = n.value_exact<std::int64_t>();
      if (!n.is_integer() || !v || (*v < min && *v != -1)) return std::string("must be ") + rule;
      field = *v;
      return "";
    };
  };
  auto real = [](std::optional<double>& field, double min, double max, const char* rule) -> toml_setter {
    return [&field, min, max, rule](const toml::node& n) -> std::string {
      auto v = n.value<double>();  // an integer is accepted as a number too
      if (!(n.is_floating_point() || n.is_integer()) || !v) return std::string("must be a number ") + rule;
      if (!(*v >= min && *v <= max)) return std::string("must be ") + rule;  // NaN too
      field = *v;
      return "";
    };
  };
  return {
      {"match", [&e](const toml::node& n) -> std::string {
         if (!n.is_string()) return "must be a string";
         std::string p = *n.value<std::string>();
         if (auto problem = check_pattern(p); !problem.empty()) return "'" + p + "' " + problem;
         e.match = std::move(p);
         return "";
       }},
      {"expiry-address", address(e.expiry_address)},
      {"dead-letter-address", address(e.dead_letter_address)},
      {"expiry-delay", [&e](const toml::node& n) -> std::string {
         auto v = n.value_exact<std::int64_t>();
         if (!n.is_integer() || !v || (*v < 0 && *v != -1))
           return "must be milliseconds (0 or more), or -1 for no default time to live";
         e.expiry_delay_ms = *v;
         return "";
       }},
      {"redelivery-delay", non_negative(e.redelivery_delay_ms)},
      {"auto-delete-queues", boolean(e.auto_delete_queues)},
      {"auto-delete-queues-delay", non_negative(e.auto_delete_queues_delay_ms)},
      {"id-cache-size", [&e](const toml::node& n) -> std::string {
         auto v = n.value_exact<std::int64_t>();
         if (!n.is_integer() || !v || *v < 0 || *v > kMaxIdCacheSize)
           return fmt::format("must be a count of ids from 0 (no duplicate detection) to {}", kMaxIdCacheSize);
         e.id_cache_size = static_cast<std::uint32_t>(*v);
         return "";
       }},
      {"max-size-messages", limit(e.max_size_messages, 0, "a count of messages (0 or more), or -1 for no limit")},
      {"max-size-bytes", limit(e.max_size_bytes, 0, "a size in bytes (0 or more), or -1 for no limit")},
      {"ring-size", limit(e.ring_size, 1, "a count of messages (at least 1), or -1 for no ring")},
      {"address-full-policy", [&e](const toml::node& n) -> std::string {
         auto p = n.is_string() ? parse_full_policy(*n.value<std::string>()) : std::nullopt;
         if (!p) return "must be \"FAIL\", \"DROP\", \"DROP-HEAD\" or \"BLOCK\" (or RabbitMQ's \"reject-publish\", "
                        "\"drop-head\")";
         e.address_full_policy = *p;
         return "";
       }},
      {"dead-letter-on-drop", boolean(e.dead_letter_on_drop)},
      // Artemis's names: last-value-key on a queue, default-last-value-key in its address settings;
      // last-value-queue (default-last-value-queue) the older boolean, keyed on _AMQ_LVQ_NAME.
      {"last-value-key", header_name(e.last_value_key)},
      {"default-last-value-key", header_name(e.last_value_key)},
      {"last-value", boolean(e.last_value)},
      {"exclusive", boolean(e.exclusive)},
      {"default-exclusive-queue", boolean(e.exclusive)},
      {"last-value-queue", boolean(e.last_value)},
      {"default-last-value-queue", boolean(e.last_value)},
      {"max-redelivery-delay", non_negative(e.max_redelivery_delay_ms)},
      {"redelivery-delay-multiplier", real(e.redelivery_multiplier, 1.0, 1e6, "of at least 1.0")},
      {"redelivery-collision-avoidance-factor",
       real(e.collision_avoidance_factor, 0.0, 1.0, "from 0.0 to 1.0")},
      {"max-delivery-attempts", [&e](const toml::node& n) -> std::string {
         auto v = n.value_exact<std::int64_t>();
         if (!n.is_integer() || !v || (*v < 1 && *v != -1))
           return "must be a count of at least 1, or -1 to never dead-letter";
         e.max_delivery_attempts = *v;
         return "";
       }},
  };
}

std::string load_address_settings(const std::string& path, const toml::node& node,
                                  std::vector<address_setting_entry>& out) {
  return walk_match_list<address_setting_entry>(path, node, "address-settings", out,
                                                [](const std::string&, auto& e) { return address_setting_keys(e); });
}

// A key holding a list of tables read by `load` (which names the file and line in its errors).
template <typename Entry>
toml_setter list_key(const std::string& path, std::vector<Entry>& out,
                     std::string (*load)(const std::string&, const toml::node&, std::vector<Entry>&)) {
  return [&path, &out, load](const toml::node& n) { return located(load(path, n, out)); };
}

toml_setter listen_field(std::vector<listen_address>& field) {
  return [&field](const toml::node& n) -> std::string {
    const toml::array* list = n.as_array();
    // Empty: no plain listener (a broker that only speaks TLS).
    if (!list) return "must be an array of \"HOST:PORT\" strings";
    std::vector<listen_address> out;
    for (const auto& item : *list) {
      auto s = item.value<std::string>();
      auto a = s ? parse_listen_address(*s) : std::nullopt;
      if (!a) return "must be an array of \"HOST:PORT\" strings";
      out.push_back(*a);
    }
    field = std::move(out);
    return "";
  };
}

toml_keys storage_keys(broker_config& config) {
  return {{"map-size", unsigned_field(config.map_size, 1024 * 1024)},
          {"max-group-batches", unsigned_field(config.max_group_batches, 1)},
          {"max-size", unsigned_field(config.max_size)},
          {"max-map-size", unsigned_field(config.max_map_size)},
          {"min-free-disk", unsigned_field(config.min_free_disk)},
          {"log-size", unsigned_field(config.log_size, 16 * 1024 * 1024)},
          {"checkpoint-interval-ms", unsigned_field(config.checkpoint_interval_ms, 1)},
          {"backup-root", string_field(config.backup_root)}};
}

toml_keys limits_keys(broker_config& config) {
  return {{"max-frame-size", unsigned_field(config.frames.max_frame_size, 64)},
          {"max-headers", unsigned_field(config.frames.max_headers, 1)},
          {"max-header-length", unsigned_field(config.frames.max_header_length, 16)},
          {"max-pending-bytes", unsigned_field(config.max_pending_bytes, 4096)},
          {"connect-timeout-ms", unsigned_field(config.connect_timeout_ms, 1)},
          {"slow-consumer-timeout-ms", unsigned_field(config.slow_consumer_timeout_ms)},
          {"max-unstored-bytes", unsigned_field(config.max_unstored_bytes, 1024 * 1024)},
          {"max-connections", unsigned_field(config.max_connections, 1)},
          {"max-connections-per-user", unsigned_field(config.max_connections_per_user, 1)},
          {"max-subscriptions-per-connection", unsigned_field(config.max_subscriptions_per_connection, 1)},
          {"max-consumer-window", unsigned_field(config.max_consumer_window, 1)},
          {"max-groups-per-queue", unsigned_field(config.max_groups_per_queue, 1)},
          {"max-branches-per-connection", unsigned_field(config.max_branches_per_connection, 1)},
          {"max-branches-per-user", unsigned_field(config.max_branches_per_user, 1)},
          {"max-prepared-branches-per-user", unsigned_field(config.max_prepared_branches_per_user, 1)},
          {"max-transaction-bytes", unsigned_field(config.max_transaction_bytes, 1)},
          {"max-transaction-bytes-per-user", unsigned_field(config.max_transaction_bytes_per_user, 1)},
          {"max-queues-per-user", unsigned_field(config.max_queues_per_user, 1)},
          {"max-subscriptions-per-user", unsigned_field(config.max_subscriptions_per_user, 1)},
          {"max-consumer-window-bytes", unsigned_field(config.max_consumer_window_bytes, 1)},
          {"max-memory-bytes-per-queue", unsigned_field(config.max_memory_bytes_per_queue, 1)},
          {"max-memory-bytes-per-user", unsigned_field(config.max_memory_bytes_per_user, 1)},
          {"memory-high-watermark", unsigned_field(config.memory_high_watermark)},
          {"memory-full-policy", [&config](const toml::node& n) -> std::string {
             auto v = n.value<std::string>();
             if (!n.is_string() || (*v != "refuse" && *v != "drop-oldest")) return "must be \"refuse\" or \"drop-oldest\"";
             config.memory_full_policy = *v;
             return "";
           }},
          {"max-stored-bytes-per-user", unsigned_field(config.max_stored_bytes_per_user)},
          {"max-unauthenticated-per-address", unsigned_field(config.max_unauthenticated_per_address, 1)},
          {"max-unauthenticated-connections", unsigned_field(config.max_unauthenticated_connections)},
          {"first-byte-timeout-ms", unsigned_field(config.first_byte_timeout_ms, 1, 86'400'000)}};
}

toml_keys security_keys(broker_config& config) {
  return {{"users-file", string_field(config.users_file)},
          {"login-backoff-max-ms", unsigned_field(config.login_backoff_max_ms)},
          {"populate-validated-user", bool_field(config.populate_validated_user)},
          {"login-threads", [&config](const toml::node& n) -> std::string {
             auto v = n.value_exact<std::int64_t>();
             if (!n.is_integer() || !v) return "must be an integer";
             if (*v < 1 || *v > 64) return "must be from 1 to 64";
             config.login_threads = static_cast<unsigned>(*v);
             return "";
           }},
          {"max-waiting-logins-per-address", unsigned_field(config.max_waiting_logins_per_address)},
          {"max-pending-logins", unsigned_field(config.max_pending_logins, 1)},
          {"max-waiting-logins-per-user", unsigned_field(config.max_waiting_logins_per_user, 1)},
          {"reserved-pending-logins", unsigned_field(config.reserved_pending_logins)},
          {"max-login-delay-ms", unsigned_field(config.max_login_delay_ms, 0, 86'400'000)}};
}

toml_keys delivery_keys(broker_config& config) {
  return {{"consumer-window", unsigned_field(config.consumer_window, 1)},
          {"queue-memory-window", unsigned_field(config.queue_memory_window, 1)},
          {"queue-memory-bytes", unsigned_field(config.queue_memory_bytes, 1)},
          {"message-expiry-scan-period", scan_period_field(config.message_expiry_scan_period_ms)},
          {"message-expiry-thread-priority", unsigned_field(config.message_expiry_thread_priority, 0, 9)},
          {"persist-delivery-count-before-delivery", bool_field(config.persist_delivery_count_before_delivery)}};
}

toml_keys transactions_keys(broker_config& config) {
  return {{"timeout-ms", unsigned_field(config.branch_timeout_ms, 1)},
          {"local-timeout-ms", unsigned_field(config.local_timeout_ms, 1)}};
}

std::string load_coordinated_databases(const std::string& path, const toml::node& node,
                                       std::vector<coordinated_database>& out) {
  std::vector<coordinated_database> list;
  std::string problem = walk_list(path, node, "coordinator.postgresql", [&](const toml::table& t, const std::string& name) {
    coordinated_database d;
    d.where = where(path, t, name);
    bool has_conninfo = false;
    toml_keys keys{{"name", [&d](const toml::node& n) -> std::string {
                      auto v = n.value<std::string>();
                      if (!n.is_string() || v->empty() || v->size() > 64 ||
                          v->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
                              std::string::npos)
                        return "must be a name of 1 to 64 letters, digits, '_', '-' or '.' (what BEGIN's "
                               "coordinate:postgresql/NAME names)";
                      d.name = *v;
                      return "";
                    }},
                   {"conninfo", [&d, &has_conninfo](const toml::node& n) -> std::string {
                      if (!n.is_string()) return "must be a string: libpq's connection string, e.g. \"host=127.0.0.1 dbname=orders\"";
                      d.conninfo = *n.value<std::string>();
                      has_conninfo = true;
                      return "";
                    }}};
    if (std::string err = walk_table(path, t, name, keys); !err.empty()) return err;
    if (d.name.empty() || !has_conninfo)
      return d.where + " needs both name and conninfo (a coordinated database is named and reached by them)";
    for (const auto& other : list)
      if (other.name == d.name) return d.where + ": the name '" + d.name + "' is already used by " + other.where;
    list.push_back(std::move(d));
    return std::string();
  });
  if (problem.empty()) out = std::move(list);
  return problem;
}

toml_keys coordinator_keys(const std::string& path, broker_config& config) {
  return {{"postgresql", list_key(path, config.coordinated_databases, load_coordinated_databases)},
          {"max-transactions", unsigned_field(config.max_coordinated_transactions, 1, 1000000)},
          {"connections", unsigned_field(config.coordinator_connections, 1, 64)},
          {"statement-timeout-ms", unsigned_field(config.coordinator_statement_timeout_ms, 100, 3'600'000)},
          {"recovery-interval-ms", unsigned_field(config.coordinator_recovery_interval_ms, 100, 86'400'000)}};
}

toml_keys http_keys(const std::string& path, broker_config& config) {
  return {{"listen", [&config](const toml::node& n) -> std::string {
             auto text = n.value<std::string>();
             if (!n.is_string() || !text) return "must be a string \"HOST:PORT\" (\"\" turns HTTP off)";
             config.http_listen_is_default = false;
             if (text->empty()) {
               config.http_listen.reset();
               return "";
             }
             auto a = parse_listen_address(*text);
             if (!a) return "'" + *text + "' is not \"HOST:PORT\" (e.g. \"127.0.0.1:8161\"; \"\" turns HTTP off)";
             config.http_listen = *a;
             return "";
           }},
          {"websocket", bool_field(config.http_websocket)},
          {"allowed-origins", origins_field(config.http_allowed_origins, check_allowed_origin)},
          {"session-timeout-ms", unsigned_field(config.http_session_timeout_ms, 1000, 7 * 86'400'000ULL)},
          {"max-sessions", unsigned_field(config.http_max_sessions, 1, 1000000)},
          {"max-sessions-per-user", unsigned_field(config.http_max_sessions_per_user, 1, 1000000)},
          {"allowed-hosts", [&config](const toml::node& n) -> std::string {
             const toml::array* list = n.as_array();
             if (!list) return "must be an array of host names, e.g. [\"metrics.example.com\"]";
             std::vector<std::string> out;
             for (const auto& item : *list) {
               auto s = item.value<std::string>();
               if (!item.is_string() || !s) return "must be an array of host names, e.g. [\"metrics.example.com\"]";
               if (auto problem = check_allowed_host(*s); !problem.empty()) return problem;
               out.push_back(*s);
             }
             config.http_allowed_hosts = std::move(out);
             return "";
           }},
          {"token-file", [&config, &path](const toml::node& n) -> std::string {
             if (!n.is_string()) return "must be a string (the path of a file holding the token; \"\" for none)";
             config.http_token_file = *n.value<std::string>();
             config.http_token_file_where = where(path, n, "http.token-file");
             return "";
           }},
          {"max-queue-metrics", unsigned_field(config.max_queue_metrics, 0, 1000000)},
          {"max-connections", unsigned_field(config.http_max_connections, 1, 100000)}};
}

toml_keys admin_keys(broker_config& config) {
  return {{"max-page-size", unsigned_field(config.admin_max_page_size, 1, 100000)},
          // Below the 10 MiB frame limit of the clients (the `escrow` command's included).
          {"max-page-bytes", unsigned_field(config.admin_max_page_bytes, 1024, 8 * 1024 * 1024)}};
}

toml_keys heartbeat_keys(broker_config& config) {
  constexpr std::uint64_t kDay = 86'400'000;  // keeps every deadline far from the clock's range
  return {{"send-ms", unsigned_field(config.heartbeat_send_ms, 0, kDay)},
          {"receive-ms", unsigned_field(config.heartbeat_receive_ms, 0, kDay)},
          {"grace-ms", unsigned_field(config.heartbeat_grace_ms, 0, kDay)},
          {"max-ms", unsigned_field(config.heartbeat_max_ms, 1, kDay)}};
}

// Applies a parsed file over `config`; `path` names it in errors.
std::string apply_config(const toml::table& root, const std::string& path, broker_config& config) {
  const toml_keys top{
      {"data-dir", string_field(config.data_dir)},
      {"log-level", string_field(config.log_level)},
      {"io-threads", unsigned_field(config.io_threads, 0)},
      {"listen", listen_field(config.listen)},
      {"address-settings", list_key(path, config.address_settings, load_address_settings)},
      {"security-settings", list_key(path, config.security_settings, load_security_settings)},
      {"tls-listener", list_key(path, config.tls_listeners, load_tls_listeners)},
      {"websocket-listener", list_key(path, config.websocket_listeners, load_websocket_listeners)},
      {"storage", table_key(path, "storage", storage_keys(config))},
      {"limits", table_key(path, "limits", limits_keys(config))},
      {"security", table_key(path, "security", security_keys(config))},
      {"delivery", table_key(path, "delivery", delivery_keys(config))},
      {"transactions", table_key(path, "transactions", transactions_keys(config))},
      {"http", table_key(path, "http", http_keys(path, config))},
      {"admin", table_key(path, "admin", admin_keys(config))},
      {"coordinator", table_key(path, "coordinator", coordinator_keys(path, config))},
      {"heartbeat", table_key(path, "heartbeat", heartbeat_keys(config))},
  };
  return walk_table(path, root, "", top);
}

}  // namespace

std::string load_config_file(const std::string& path, broker_config& config) {
  toml::table root;
  std::string err = parse_toml(path, root);
  return err.empty() ? apply_config(root, path, config) : err;
}

std::string load_config_text(std::string_view text, const std::string& name, broker_config& config) {
  toml::table root;
  std::string err = parse_toml(name, root, text);
  return err.empty() ? apply_config(root, name, config) : err;
}

}  // namespace escrow::broker
