// The broker's configuration: the embedded default (a broker that starts with no arguments), the
// TOML file that overrides it, and the command-line options that override both. Every limit the
// broker enforces is a field here; docs/configuration.md lists them with their defaults.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/broker/config/address_settings.h"
#include "escrow/broker/security/security.h"
#include "escrow/frame.h"

namespace escrow::broker {

struct listen_address {
  std::string host;
  std::uint16_t port = 0;  // 0: any free port (the chosen one is logged)

  friend bool operator==(const listen_address&, const listen_address&) = default;
};

// One [[tls-listener]] table: a listener that speaks STOMP over TLS (docs/security.md). The files
// are PEM; relative paths are relative to escrowd's working directory.
struct tls_listener_config {
  listen_address listen;
  std::string certificate_chain;  // the server's certificate, then any intermediate CAs
  std::string private_key;        // its key, unencrypted
  std::string client_ca;          // CA certificates; set: every client must present one they signed
  std::string min_version = "1.2";  // "1.2" or "1.3"; TLS 1.3 is preferred whenever the client has it
  std::string ciphers;            // TLS 1.2 cipher list (OpenSSL syntax); "": kDefaultTls12Ciphers
  std::string ciphersuites;       // TLS 1.3 cipher suites; "": OpenSSL's default
  // "FILE:LINE: tls-listener[N].KEY" for each key set ("" for the table itself), so that a file
  // that fails to load at start is reported where it was configured.
  std::map<std::string, std::string> where;
};

// One [[websocket-listener]] table: STOMP over WebSocket on a port of its own (docs/websocket.md),
// over TLS (wss) when it names certificate-chain and private-key (the keys of [[tls-listener]]).
struct websocket_listener_config {
  tls_listener_config tls;  // `listen`, and the TLS files and settings when `secure`
  bool secure = false;      // certificate-chain and private-key are set: wss
  // Origin values a browser's upgrade may carry besides the loopback origins and the listener's
  // own host (http_access.h, origin_allowed); "*" allows any.
  std::vector<std::string> allowed_origins;
};

// One [[coordinator.postgresql]] table: a database whose transactions escrowd coordinates with
// STOMP transactions (docs/exactly-once.md).
struct coordinated_database {
  std::string name;      // what BEGIN's coordinate:postgresql/NAME names
  std::string conninfo;  // libpq's connection string
  std::string where;     // "FILE:LINE: coordinator.postgresql[N]", for errors at start
  friend bool operator==(const coordinated_database& a, const coordinated_database& b) {
    return a.name == b.name && a.conninfo == b.conninfo;
  }
};

// The embedded default: for every address (`#`), dead letters go to DLQ and expired messages to
// ExpiryQueue, so that nothing is dropped out of the box.
std::vector<address_setting_entry> embedded_address_settings();

struct broker_config {
  std::vector<listen_address> listen{{"127.0.0.1", 61613}};
  std::string data_dir = "./escrow-data";
  std::string log_level = "info";
  // Where this configuration came from, for SIGHUP (docs/operations.md): the file re-read, and
  // the keys the command line set ("listen", "data-dir", "log-level"), which a reload keeps.
  std::string config_file;
  std::vector<std::string> command_line_keys;
  unsigned io_threads = 0;  // 0: one per core but one (the committer thread has the last), at least 1

  // storage
  std::uint64_t map_size = 8ull * 1024 * 1024 * 1024;  // the initial map; it grows when full
  std::size_t max_group_batches = 1024;
  std::uint64_t max_map_size = 0;                      // the map never grows beyond it; 0: no limit
  std::uint64_t max_size = 0;                          // live store bytes that refuse sends; 0: none
  std::uint64_t min_free_disk = 256ull * 1024 * 1024;  // free disk below which sends are refused
  std::uint64_t log_size = 64ull * 1024 * 1024;        // the commit log's ring (docs/storage.md)
  std::uint32_t checkpoint_interval_ms = 500;          // at most this long between checkpoints
  // `escrow backup` writes only into directories under this one (symbolic links resolved); "" (the
  // default): backups are refused. Relative: to escrowd's working directory. SIGHUP applies it.
  std::string backup_root;

  // limits
  frame_limits frames;
  std::size_t max_pending_bytes = 4 * 1024 * 1024;  // per connection, not yet written to its socket
  std::uint64_t connect_timeout_ms = 30000;         // a connection must send CONNECT within this
  std::size_t max_unstored_bytes = 16 * 1024 * 1024;  // received, not yet handled and stored: above it no reading
  std::uint64_t slow_consumer_timeout_ms = 60000;   // a write blocked this long closes the connection; 0: never
  std::uint32_t max_connections = 10000;            // open at once, over every listener
  std::uint32_t max_connections_per_user = 1000;    // open at once by one user (anonymous counts as one)
  std::uint32_t max_subscriptions_per_connection = 1000;
  std::uint32_t max_consumer_window = 10000;        // most unacknowledged messages a consumer may ask for
  std::uint32_t max_groups_per_queue = 65536;       // message groups a queue holds on their own (then buckets)
  std::uint32_t max_branches_per_connection = 100;  // local transactions and XA branches not yet prepared
  // Per user (docs/security.md, "Tenants"; anonymous counts as one user).
  std::uint32_t max_branches_per_user = 1000;           // open: begun or started, not yet prepared or finished
  std::uint32_t max_prepared_branches_per_user = 1000;  // prepared and not yet committed or rolled back
  std::uint64_t max_transaction_bytes = 64ull << 20;           // SEND bytes one open transaction holds
  std::uint64_t max_transaction_bytes_per_user = 256ull << 20;  // the same over all of a user's transactions
  std::uint32_t max_queues_per_user = 10000;  // queues and durable subscriptions a user's frames created
  // Bytes of persistent messages a user's SENDs have stored (docs/security.md, "Tenants"); 0: half
  // of what the store may hold (storage.max-size, else the disk at start: broker::open).
  std::uint64_t max_stored_bytes_per_user = 0;
  // Connections not yet logged in (accepted, no successful CONNECT yet; docs/security.md, "Limits").
  std::uint32_t max_unauthenticated_per_address = 64;  // from one IP address; the next is refused
  std::uint32_t max_unauthenticated_connections = 0;   // all together; 0: half of max-connections
  std::uint64_t first_byte_timeout_ms = 5000;          // a connection that sends nothing by then is closed

  // security (docs/security.md). No users file: anonymous access with every permission, which
  // escrowd allows only when every STOMP listener is on a loopback address.
  std::string users_file;
  std::vector<security_setting_entry> security_settings;  // [[security-settings]]
  // Stamp _AMQ_VALIDATED_USER (the logged-in user) on every message sent, as Artemis's
  // populate-validated-user does; a sender's own copy is dropped either way.
  bool populate_validated_user = false;
  std::uint64_t login_backoff_max_ms = 10000;  // longest delay a failed login imposes on the next check
  unsigned login_threads = 2;                  // threads that check passwords
  std::size_t max_waiting_logins_per_address = 8;  // checks from one address waiting behind its running one
  std::size_t max_pending_logins = 256;        // checks waiting or running, all addresses together
  std::uint32_t max_subscriptions_per_user = 10000;      // over all of one user's connections
  std::uint64_t max_consumer_window_bytes = 16 << 20;   // unacknowledged bytes per subscription (one at least)
  std::uint64_t max_memory_bytes_per_queue = 64 << 20;  // non-persistent messages ready in one queue
  std::string memory_full_policy = "refuse";            // a queue at it: "refuse" the SEND or "drop-oldest"
  std::uint64_t max_memory_bytes_per_user = 256 << 20;  // non-persistent messages a user's SENDs hold in memory
  std::uint64_t memory_high_watermark = 0;  // resident bytes above which producers are not read; 0: 40% of RAM
  std::uint64_t queue_memory_bytes = 8 << 20;           // [delivery] stored messages' bodies kept in memory per queue
  std::size_t max_waiting_logins_per_user = 16;  // checks of one login name waiting or running
  std::size_t reserved_pending_logins = 64;    // of max_pending_logins, for addresses without failures (at most half)
  std::uint64_t max_login_delay_ms = 3000;     // a check that would wait longer is told "try again later"

  // delivery
  std::uint32_t consumer_window = 1000;     // unacknowledged messages per subscription by default
  std::size_t queue_memory_window = 1000;   // ready entries of a queue kept in memory

  // undelivered messages (docs/configuration.md). A file's [[address-settings]] list replaces the
  // embedded one, which sends dead letters to DLQ and expired messages to ExpiryQueue.
  std::vector<address_setting_entry> address_settings = embedded_address_settings();
  std::int64_t message_expiry_scan_period_ms = 30000;  // the reaper's period; -1: no reaper
  // HornetQ's message-expiry-thread-priority, 0-9: the share of the core a large reaper pass may
  // take between deliveries (reaper_share; docs/configuration.md). 3 is a quarter.
  unsigned message_expiry_thread_priority = 3;
  bool persist_delivery_count_before_delivery = false;

  // transactions
  std::uint64_t branch_timeout_ms = 300000;  // a branch not prepared by then is rolled back
  std::uint64_t local_timeout_ms = 300000;   // a local transaction open longer is rolled back

  // coordinator (docs/exactly-once.md): the databases, and coordinated transactions in flight at
  // once (begun and not yet rolled back, or committed here and not yet in the database); a BEGIN
  // beyond it is refused.
  std::vector<coordinated_database> coordinated_databases;
  std::uint32_t max_coordinated_transactions = 1000;
  unsigned coordinator_connections = 4;                // libpq connections per database
  std::uint64_t coordinator_statement_timeout_ms = 5000;  // PostgreSQL's statement_timeout for them
  std::uint64_t coordinator_recovery_interval_ms = 5000;  // between passes over pg_prepared_xacts

  // heart-beats: what the server offers in CONNECTED ("send,receive" in ms); 0 turns one off
  std::uint64_t heartbeat_send_ms = 1000;
  std::uint64_t heartbeat_receive_ms = 1000;
  std::uint64_t heartbeat_grace_ms = 1000;  // extra silence tolerated beyond the interval
  // A client's heart-beat values above this count as this (an hour): larger ones overflowed the
  // timers (a deadline in the past re-armed forever, EOLs written without pause).
  std::uint64_t heartbeat_max_ms = 3'600'000;

  // TLS listeners ([[tls-listener]]), next to the plain ones in `listen`; none by default.
  std::vector<tls_listener_config> tls_listeners;

  // STOMP over WebSocket on listeners of their own ([[websocket-listener]]); none by default.
  std::vector<websocket_listener_config> websocket_listeners;

  // [http] listen: the web console, its API, STOMP over WebSocket at /stomp, /metrics, /status and
  // /health (docs/operations.md); nullopt ("" in the file): off. The embedded default is loopback
  // port 8161; when that port is taken escrowd warns and runs without HTTP (http_listen_is_default).
  std::optional<listen_address> http_listen{listen_address{"127.0.0.1", 8161}};
  bool http_listen_is_default = true;  // not set by the file: failing to bind it is not fatal
  // [http] websocket: serve STOMP over WebSocket at /stomp of the HTTP listener.
  bool http_websocket = true;
  // [http] allowed-origins: Origin values a browser's WebSocket upgrade or console request may
  // carry besides the loopback origins and the endpoint's own host; "*" allows any.
  std::vector<std::string> http_allowed_origins;
  // [http] session-timeout-ms: a console session ends after this long without a request.
  std::uint64_t http_session_timeout_ms = 30 * 60 * 1000;
  // [http] max-sessions: console sessions held at once; a login over it ends the oldest.
  std::uint32_t http_max_sessions = 1000;
  // [http] max-sessions-per-user: console sessions one user holds at once; a new login of theirs
  // ends their own least recently used (so one account cannot push everyone else out).
  std::uint32_t http_max_sessions_per_user = 16;
  // [http] allowed-hosts: Host names (or addresses, "NAME:PORT" for one port, "*" for any) served
  // besides localhost, loopback addresses and the listen host (http_access.h). SIGHUP applies it.
  std::vector<std::string> http_allowed_hosts;
  // [http] token-file: set, every request but /health needs `Authorization: Bearer TOKEN`, a token
  // from that file (one per line). Read at start and at SIGHUP; relative to the working directory.
  std::string http_token_file;
  std::string http_token_file_where;  // "FILE:LINE: http.token-file", for errors reading the file
  // Queues with series of their own in /metrics (and entries in /status): the deepest ones, ties by
  // name; the rest are counted in escrow_queue_metrics_omitted. 0: none.
  std::size_t max_queue_metrics = 1000;
  // [http] max-connections: HTTP connections open at once; the next is answered 503 and closed.
  std::uint32_t http_max_connections = 64;

  // [admin]: the paged list answers of ADMIN frames (queues, connections, subscriptions, xa-list):
  // the most entries of one page (a `limit` header asks for fewer), and the most bytes of its JSON.
  std::size_t admin_max_page_size = 1000;
  std::size_t admin_max_page_bytes = 1024 * 1024;
};

// limits.max-unauthenticated-connections as it applies: its value (at most max-connections), or
// half of max-connections (at least 1) when it is 0, the default. The rest is kept for logged-in sessions.
inline std::uint32_t unauthenticated_cap(const broker_config& config) {
  std::uint32_t cap = config.max_unauthenticated_connections;
  if (cap == 0) cap = config.max_connections / 2 + config.max_connections % 2;
  return cap < config.max_connections ? cap : config.max_connections;
}

// Reads [http] token-file when set (nothing to do otherwise): "" or the error, naming where the
// file was configured. escrowd calls it before opening the store, and `escrow check-config` too.
std::string load_http_token_file(const broker_config& config, std::vector<std::array<unsigned char, 32>>& tokens);

// Parses "HOST:PORT" (IPv6 as "[::1]:61613"). Returns nullopt when malformed.
std::optional<listen_address> parse_listen_address(const std::string& text);

// The keys whose new value in `fresh` differs from `running` and only takes effect at a restart
// (listeners, data directory, storage, limits, TLS, ...), by their names in the file.
std::vector<std::string> changes_needing_restart(const broker_config& running, const broker_config& fresh);
// SIGHUP: copies into `running` each key the core applies at run time (address and security
// settings, the reaper's period, ...) whose value in `fresh` differs, and returns "KEY VALUE" for
// each, as the log line shows them (config/reload_keys.cpp has the table of keys).
std::vector<std::string> apply_reloadable_keys(broker_config& running, const broker_config& fresh);

// Reads a TOML file over the defaults already in `config`. Returns an empty string on success,
// otherwise an error naming the file, the line and the key.
std::string load_config_file(const std::string& path, broker_config& config);
// The same for TOML text already in memory; `name` stands for the file in errors (the fuzz target
// tests/fuzz/fuzz_config.cpp feeds it arbitrary bytes).
std::string load_config_text(std::string_view text, const std::string& name, broker_config& config);

}  // namespace escrow::broker
