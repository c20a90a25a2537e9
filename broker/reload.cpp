// SIGHUP: reading the file again, telling what needs a restart, and the core's part of a reload.
#include "reload.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "authenticator.h"
#include "core.h"
#include "core_timers.h"

namespace escrow::broker {
namespace {

bool same_address(const listen_address& a, const listen_address& b) { return a.host == b.host && a.port == b.port; }

bool from_command_line(const broker_config& c, const std::string& key) {
  return std::find(c.command_line_keys.begin(), c.command_line_keys.end(), key) != c.command_line_keys.end();
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

std::vector<std::string> changes_needing_restart(const broker_config& a, const broker_config& b) {
  std::vector<std::string> out;
  auto check = [&](bool same, const char* key) {
    if (!same) out.emplace_back(key);
  };
  check(std::equal(a.listen.begin(), a.listen.end(), b.listen.begin(), b.listen.end(), same_address), "listen");
  check(a.data_dir == b.data_dir, "data-dir");
  check(a.io_threads == b.io_threads, "io-threads");
  check(a.map_size == b.map_size, "storage.map-size");
  check(a.max_group_batches == b.max_group_batches, "storage.max-group-batches");
  check(a.max_size == b.max_size, "storage.max-size");
  check(a.max_map_size == b.max_map_size, "storage.max-map-size");
  check(a.min_free_disk == b.min_free_disk, "storage.min-free-disk");
  check(a.frames.max_frame_size == b.frames.max_frame_size, "limits.max-frame-size");
  check(a.frames.max_headers == b.frames.max_headers, "limits.max-headers");
  check(a.frames.max_header_length == b.frames.max_header_length, "limits.max-header-length");
  check(a.max_pending_bytes == b.max_pending_bytes, "limits.max-pending-bytes");
  check(a.connect_timeout_ms == b.connect_timeout_ms, "limits.connect-timeout-ms");
  check(a.max_connections == b.max_connections, "limits.max-connections");
  check(a.slow_consumer_timeout_ms == b.slow_consumer_timeout_ms, "limits.slow-consumer-timeout-ms");
  check(a.max_unstored_bytes == b.max_unstored_bytes, "limits.max-unstored-bytes");
  check(a.max_connections_per_user == b.max_connections_per_user, "limits.max-connections-per-user");
  check(a.max_subscriptions_per_connection == b.max_subscriptions_per_connection,
        "limits.max-subscriptions-per-connection");
  check(a.max_consumer_window == b.max_consumer_window, "limits.max-consumer-window");
  check(a.max_branches_per_connection == b.max_branches_per_connection, "limits.max-branches-per-connection");
  check(a.max_branches_per_user == b.max_branches_per_user, "limits.max-branches-per-user");
  check(a.max_prepared_branches_per_user == b.max_prepared_branches_per_user, "limits.max-prepared-branches-per-user");
  check(a.max_transaction_bytes == b.max_transaction_bytes, "limits.max-transaction-bytes");
  check(a.max_transaction_bytes_per_user == b.max_transaction_bytes_per_user, "limits.max-transaction-bytes-per-user");
  check(a.max_queues_per_user == b.max_queues_per_user, "limits.max-queues-per-user");
  check(a.users_file == b.users_file, "security.users-file");
  check(a.login_backoff_max_ms == b.login_backoff_max_ms, "security.login-backoff-max-ms");
  check(a.populate_validated_user == b.populate_validated_user, "security.populate-validated-user");
  check(a.login_threads == b.login_threads, "security.login-threads");
  check(a.max_waiting_logins_per_address == b.max_waiting_logins_per_address,
        "security.max-waiting-logins-per-address");
  check(a.max_pending_logins == b.max_pending_logins, "security.max-pending-logins");
  check(a.consumer_window == b.consumer_window, "delivery.consumer-window");
  check(a.queue_memory_window == b.queue_memory_window, "delivery.queue-memory-window");
  check(a.branch_timeout_ms == b.branch_timeout_ms, "transactions.timeout-ms");
  check(a.local_timeout_ms == b.local_timeout_ms, "transactions.local-timeout-ms");
  check(a.http_listen.has_value() == b.http_listen.has_value() &&
            (!a.http_listen || same_address(*a.http_listen, *b.http_listen)),
        "http.listen");
  check(a.heartbeat_send_ms == b.heartbeat_send_ms && a.heartbeat_receive_ms == b.heartbeat_receive_ms &&
            a.heartbeat_grace_ms == b.heartbeat_grace_ms,
        "heartbeat");
  check(a.tls_listeners.size() == b.tls_listeners.size() &&
            std::equal(a.tls_listeners.begin(), a.tls_listeners.end(), b.tls_listeners.begin(),
                       [](const tls_listener_config& x, const tls_listener_config& y) {
                         return same_address(x.listen, y.listen) && x.certificate_chain == y.certificate_chain &&
                                x.private_key == y.private_key && x.client_ca == y.client_ca &&
                                x.min_version == y.min_version && x.ciphers == y.ciphers &&
                                x.ciphersuites == y.ciphersuites;
                       }),
        "tls-listener");
  return out;
}

void reload_configuration(const broker_config& running, broker& core, http_context* http) {
  if (running.config_file.empty()) {
    spdlog::warn("SIGHUP: nothing to reload: escrowd was started without --config");
    return;
  }
  broker_config fresh;
  if (std::string err = load_config_file(running.config_file, fresh); !err.empty()) {
    spdlog::error("SIGHUP: configuration not reloaded, the running settings stay: {}", err);
    return;
  }
  // What the command line set still wins over the file.
  fresh.config_file = running.config_file;
  fresh.command_line_keys = running.command_line_keys;
  if (from_command_line(running, "listen")) fresh.listen = running.listen;
  if (from_command_line(running, "data-dir")) fresh.data_dir = running.data_dir;
  if (from_command_line(running, "log-level")) fresh.log_level = running.log_level;
  // [http] token-file is read again (a token rotated in place applies now); a bad one changes nothing.
  std::vector<token_digest> http_tokens;
  if (std::string err = load_http_token_file(fresh, http_tokens); !err.empty()) {
    spdlog::error("SIGHUP: configuration not reloaded, the running settings stay: {}", err);
    return;
  }

  auto level = spdlog::level::from_str(fresh.log_level);
  if (level == spdlog::level::off && fresh.log_level != "off") {
    spdlog::error("SIGHUP: configuration not reloaded: unknown log-level '{}'", fresh.log_level);
    return;
  }
  if (fresh.log_level != running.log_level) {
    spdlog::info("SIGHUP: log-level {} (was {})", fresh.log_level, running.log_level);
    spdlog::set_level(level);
  }
  // The users file is read again (its name is fixed until a restart); a bad one changes nothing.
  if (!running.users_file.empty() && fresh.users_file == running.users_file && core.authentication()) {
    auto users = std::make_shared<users_table>();
    if (std::string err = load_users_file(running.users_file, *users); !err.empty()) {
      spdlog::error("SIGHUP: configuration not reloaded, the running settings stay: {}", err);
      return;
    }
    spdlog::info("SIGHUP: users file {}: {} users", running.users_file, users->by_name.size());
    if (std::string warning = users_file_exposure(running.users_file); !warning.empty())
      spdlog::warn("SIGHUP: {}", warning);
    core.authentication()->replace_users(std::move(users));
  }
  if (http && running.http_listen) {
    bool token = !http_tokens.empty();
    http->set_access(std::make_shared<http_access>(
        make_http_access(running.http_listen->host, http->port, fresh.http_allowed_hosts, std::move(http_tokens))));
    spdlog::info("SIGHUP: http: {} allowed hosts besides localhost and loopback, {}", fresh.http_allowed_hosts.size(),
                 token ? "a bearer token from " + fresh.http_token_file : std::string("no token"));
  }
  if (auto restart = changes_needing_restart(running, fresh); !restart.empty())
    spdlog::warn("SIGHUP: changed in {} but taking effect only at a restart: {}", running.config_file, join(restart));
  core.reload(fresh);
}

void broker::reload(const broker_config& fresh) {
  impl_->post([m = impl_.get(), fresh] {
    std::vector<std::string> changed;
    broker_config& c = m->config;
    if (c.message_expiry_scan_period_ms != fresh.message_expiry_scan_period_ms) {
      changed.push_back("delivery.message-expiry-scan-period " + std::to_string(fresh.message_expiry_scan_period_ms));
      c.message_expiry_scan_period_ms = fresh.message_expiry_scan_period_ms;
      m->timers->reaper.cancel();
      m->schedule_reaper();
    }
    if (c.backup_root != fresh.backup_root) {
      changed.push_back("storage.backup-root '" + fresh.backup_root + "'");
      c.backup_root = fresh.backup_root;
    }
    if (c.persist_delivery_count_before_delivery != fresh.persist_delivery_count_before_delivery) {
      changed.push_back(std::string("delivery.persist-delivery-count-before-delivery ") +
                        (fresh.persist_delivery_count_before_delivery ? "true" : "false"));
      c.persist_delivery_count_before_delivery = fresh.persist_delivery_count_before_delivery;
    }
    // Limits of what the core answers: taken from the next scrape or ADMIN frame on.
    auto limit = [&](std::size_t& running, std::size_t value, const char* key) {
      if (running == value) return;
      changed.push_back(std::string(key) + " " + std::to_string(value));
      running = value;
    };
    limit(c.max_queue_metrics, fresh.max_queue_metrics, "http.max-queue-metrics");
    limit(c.admin_max_page_size, fresh.admin_max_page_size, "admin.max-page-size");
    limit(c.admin_max_page_bytes, fresh.admin_max_page_bytes, "admin.max-page-bytes");
    // Address settings: resolved again on next use; queues the new addresses name are created.
    c.address_settings = fresh.address_settings;
    m->settings_cache.clear();
    storage::batch created;
    m->create_undelivered_queues(created);
    if (!created.empty())
      m->submit(std::move(created), [](const storage::status& s) {
        if (!s.ok()) spdlog::warn("SIGHUP: new undelivered queues' records not stored yet: {}", s.message());
      });
    changed.push_back("address-settings (" + std::to_string(c.address_settings.size()) + " tables)");
    // Permissions: checked again from the next frame on; logged-in users keep their roles.
    c.security_settings = fresh.security_settings;
    m->grants_cache.clear();
    changed.push_back("security-settings (" + std::to_string(c.security_settings.size()) + " tables)");
    spdlog::info("SIGHUP: reloaded {}: {}", c.config_file, join(changed));
    // Messages that waited for a setting (e.g. a lower max-delivery-attempts) move on their next
    // delivery; queues are offered again so that this happens now where consumers wait.
    for (auto& [id, q] : m->queues_by_id) m->dispatch(q);
    m->flush();
  });
}

}  // namespace escrow::broker
