// The keys of the configuration file and which of them SIGHUP applies (config.h:
// changes_needing_restart, apply_reloadable_keys).
#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "escrow/broker/config/config.h"

namespace escrow::broker {
namespace {

using C = broker_config;

// Whether the field at `path` (a member, or a member's member) is the same in both.
template <auto... path>
bool same(const C& a, const C& b) {
  return (a .* ... .* path) == (b .* ... .* path);
}
bool same_heartbeat(const C& a, const C& b) {
  return a.heartbeat_send_ms == b.heartbeat_send_ms && a.heartbeat_receive_ms == b.heartbeat_receive_ms &&
         a.heartbeat_grace_ms == b.heartbeat_grace_ms && a.heartbeat_max_ms == b.heartbeat_max_ms;
}
bool same_tls_listeners(const C& a, const C& b) {
  auto files_and_form = [](const tls_listener_config& x) {  // not where each key was set
    return std::tie(x.listen, x.certificate_chain, x.private_key, x.client_ca, x.min_version, x.ciphers,
                    x.ciphersuites);
  };
  return std::ranges::equal(a.tls_listeners, b.tls_listeners, {}, files_and_form, files_and_form);
}
bool same_websocket_listeners(const C& a, const C& b) {
  auto form = [](const websocket_listener_config& x) {
    const auto& t = x.tls;
    return std::tie(t.listen, t.certificate_chain, t.private_key, t.client_ca, t.min_version, t.ciphers,
                    t.ciphersuites, x.allowed_origins);
  };
  return std::ranges::equal(a.websocket_listeners, b.websocket_listeners, {}, form, form);
}
// Address and security settings are applied, and logged, at every SIGHUP.
bool never_same(const C&, const C&) { return false; }

// Copies the field's new value into the running configuration; returns it as the log line shows it.
template <auto field>
std::string take(C& running, const C& fresh) {
  const auto& value = running.*field = fresh.*field;
  using T = std::remove_cvref_t<decltype(value)>;
  if constexpr (std::is_same_v<T, bool>) return value ? "true" : "false";
  else if constexpr (std::is_same_v<T, std::string>) return "'" + value + "'";
  else if constexpr (std::is_integral_v<T>) return std::to_string(value);
  else return "(" + std::to_string(value.size()) + " tables)";  // address or security settings
}

// The keys of the configuration file, by their names there, and how a change to each is seen. A
// key with `apply` is applied at SIGHUP by the core, on its strand (apply copies the new value into
// the running configuration and returns it as logged); one without takes effect only at a restart.
// reload_configuration applies log-level, [http] allowed-hosts and token-file, and the users file's
// contents itself. Within each kind the order is that of the log lines.
struct config_key {
  const char* name;
  bool (*same)(const C& running, const C& fresh);
  std::string (*apply)(C& running, const C& fresh) = nullptr;
};

const config_key kConfigKeys[] = {
    {"listen", same<&C::listen>},
    {"data-dir", same<&C::data_dir>},
    {"io-threads", same<&C::io_threads>},
    {"storage.map-size", same<&C::map_size>},
    {"storage.max-group-batches", same<&C::max_group_batches>},
    {"storage.max-size", same<&C::max_size>},
    {"storage.max-map-size", same<&C::max_map_size>},
    {"storage.min-free-disk", same<&C::min_free_disk>},
    {"storage.log-size", same<&C::log_size>},
    {"storage.checkpoint-interval-ms", same<&C::checkpoint_interval_ms>},
    {"limits.max-frame-size", same<&C::frames, &frame_limits::max_frame_size>},
    {"limits.max-headers", same<&C::frames, &frame_limits::max_headers>},
    {"limits.max-header-length", same<&C::frames, &frame_limits::max_header_length>},
    {"limits.max-pending-bytes", same<&C::max_pending_bytes>},
    {"limits.connect-timeout-ms", same<&C::connect_timeout_ms>},
    {"limits.max-connections", same<&C::max_connections>},
    {"limits.slow-consumer-timeout-ms", same<&C::slow_consumer_timeout_ms>},
    {"limits.max-unstored-bytes", same<&C::max_unstored_bytes>},
    {"limits.max-connections-per-user", same<&C::max_connections_per_user>},
    {"limits.max-subscriptions-per-connection", same<&C::max_subscriptions_per_connection>},
    {"limits.max-consumer-window", same<&C::max_consumer_window>},
    {"limits.max-groups-per-queue", same<&C::max_groups_per_queue>},
    {"limits.max-branches-per-connection", same<&C::max_branches_per_connection>},
    {"limits.max-branches-per-user", same<&C::max_branches_per_user>},
    {"limits.max-prepared-branches-per-user", same<&C::max_prepared_branches_per_user>},
    {"limits.max-transaction-bytes", same<&C::max_transaction_bytes>},
    {"limits.max-transaction-bytes-per-user", same<&C::max_transaction_bytes_per_user>},
    {"limits.max-queues-per-user", same<&C::max_queues_per_user>},
    {"limits.max-subscriptions-per-user", same<&C::max_subscriptions_per_user>},
    {"limits.max-consumer-window-bytes", same<&C::max_consumer_window_bytes>},
    {"limits.max-memory-bytes-per-queue", same<&C::max_memory_bytes_per_queue>},
    {"limits.max-memory-bytes-per-user", same<&C::max_memory_bytes_per_user>},
    {"limits.memory-high-watermark", same<&C::memory_high_watermark>},
    {"limits.memory-full-policy", same<&C::memory_full_policy>},
    {"limits.max-stored-bytes-per-user", same<&C::max_stored_bytes_per_user>},
    {"limits.max-unauthenticated-per-address", same<&C::max_unauthenticated_per_address>},
    {"limits.max-unauthenticated-connections", same<&C::max_unauthenticated_connections>},
    {"limits.first-byte-timeout-ms", same<&C::first_byte_timeout_ms>},
    {"security.users-file", same<&C::users_file>},
    {"security.login-backoff-max-ms", same<&C::login_backoff_max_ms>},
    {"security.populate-validated-user", same<&C::populate_validated_user>},
    {"security.login-threads", same<&C::login_threads>},
    {"security.max-waiting-logins-per-address", same<&C::max_waiting_logins_per_address>},
    {"security.max-pending-logins", same<&C::max_pending_logins>},
    {"security.max-waiting-logins-per-user", same<&C::max_waiting_logins_per_user>},
    {"security.reserved-pending-logins", same<&C::reserved_pending_logins>},
    {"security.max-login-delay-ms", same<&C::max_login_delay_ms>},
    {"delivery.consumer-window", same<&C::consumer_window>},
    {"delivery.queue-memory-window", same<&C::queue_memory_window>},
    {"delivery.queue-memory-bytes", same<&C::queue_memory_bytes>},
    {"transactions.timeout-ms", same<&C::branch_timeout_ms>},
    {"transactions.local-timeout-ms", same<&C::local_timeout_ms>},
    {"coordinator.postgresql", same<&C::coordinated_databases>},
    {"coordinator.max-transactions", same<&C::max_coordinated_transactions>},
    {"coordinator.connections", same<&C::coordinator_connections>},
    {"coordinator.statement-timeout-ms", same<&C::coordinator_statement_timeout_ms>},
    {"coordinator.recovery-interval-ms", same<&C::coordinator_recovery_interval_ms>},
    {"http.listen", same<&C::http_listen>},
    {"http.max-connections", same<&C::http_max_connections>},
    {"http.websocket", same<&C::http_websocket>},
    {"http.allowed-origins", same<&C::http_allowed_origins>},
    {"http.session-timeout-ms", same<&C::http_session_timeout_ms>},
    {"http.max-sessions", same<&C::http_max_sessions>},
    {"http.max-sessions-per-user", same<&C::http_max_sessions_per_user>},
    {"websocket-listener", same_websocket_listeners},
    {"heartbeat", same_heartbeat},
    {"tls-listener", same_tls_listeners},
    {"delivery.message-expiry-scan-period", same<&C::message_expiry_scan_period_ms>,
     take<&C::message_expiry_scan_period_ms>},
    {"delivery.message-expiry-thread-priority", same<&C::message_expiry_thread_priority>,
     take<&C::message_expiry_thread_priority>},
    {"storage.backup-root", same<&C::backup_root>, take<&C::backup_root>},
    {"delivery.persist-delivery-count-before-delivery", same<&C::persist_delivery_count_before_delivery>,
     take<&C::persist_delivery_count_before_delivery>},
    // Limits of what the core answers: taken from the next scrape or ADMIN frame on.
    {"http.max-queue-metrics", same<&C::max_queue_metrics>, take<&C::max_queue_metrics>},
    {"admin.max-page-size", same<&C::admin_max_page_size>, take<&C::admin_max_page_size>},
    {"admin.max-page-bytes", same<&C::admin_max_page_bytes>, take<&C::admin_max_page_bytes>},
    // Resolved again on next use; queues the new addresses name are created.
    {"address-settings", never_same, take<&C::address_settings>},
    // Permissions: checked again from the next frame on; logged-in users keep their roles.
    {"security-settings", never_same, take<&C::security_settings>},
};

}  // namespace

std::vector<std::string> changes_needing_restart(const broker_config& running, const broker_config& fresh) {
  std::vector<std::string> out;
  for (const config_key& k : kConfigKeys)
    if (!k.apply && !k.same(running, fresh)) out.emplace_back(k.name);
  return out;
}

std::vector<std::string> apply_reloadable_keys(broker_config& running, const broker_config& fresh) {
  std::vector<std::string> changed;
  for (const config_key& k : kConfigKeys)
    if (k.apply && !k.same(running, fresh)) changed.push_back(k.name + (" " + k.apply(running, fresh)));
  return changed;
}

}  // namespace escrow::broker
