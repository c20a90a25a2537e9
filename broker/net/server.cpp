// Wiring: TLS contexts, store, core, acceptors (plain and TLS), sessions, signals and the I/O
// thread pool. The accept loops refuse a connection over limits.max-connections or the limits of
// connections not yet logged in (prelogin.h) before any session exists, and pause when the process
// is out of file descriptors (escrow/common/descriptors.h).
#include "escrow/broker/net/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "escrow/broker/config/users_file.h"
#include "escrow/broker/security/authenticator.h"
#include "escrow/broker/core/broker.h"
#include "graceful_stop.h"
#include "reload.h"
#include "escrow/storage/store.h"
#include "escrow/broker/admin/admin.h"
#include "escrow/broker/admin/http_server.h"
#include "escrow/common/descriptors.h"
#include "prelogin.h"
#include "session.h"
#include "tls.h"

namespace escrow::broker {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// The sessions alive, so that shutdown can close them; weak so a closed session can go.
struct session_registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<session_base>> sessions;  // guarded by mutex

  void add(const std::shared_ptr<session_base>& s) {
    std::lock_guard lock(mutex);
    std::erase_if(sessions, [](const std::weak_ptr<session_base>& w) { return w.expired(); });
    sessions.push_back(s);
  }
  std::size_t live() {  // sessions not yet destroyed
    std::lock_guard lock(mutex);
    std::erase_if(sessions, [](const std::weak_ptr<session_base>& w) { return w.expired(); });
    return sessions.size();
  }
  std::size_t finish_all() {  // each writes what is queued, then closes; returns how many were alive
    std::lock_guard lock(mutex);
    std::size_t n = 0;
    for (auto& w : sessions)
      if (auto s = w.lock()) {
        s->finish();
        ++n;
      }
    return n;
  }
};

// When the process has no file descriptor left (EMFILE, ENFILE), an accept loop closes the
// connections waiting for it (with the spare descriptor) and pauses this long before it accepts
// again, instead of retrying at once: the retries spun a core and wrote a log line each.
constexpr auto kDescriptorPause = std::chrono::milliseconds(100);
constexpr int kShedPerPause = 256;
// Refusals at accept are logged at warn level once per interval (with how many were not), every
// one at debug level: a flood of connections must not become a flood of log lines.
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);

// What a plain client refused at accept reads: an ERROR frame (best effort, never blocking).
std::string refusal_frame(std::string_view message, std::string_view body) {
  std::string bytes = "ERROR\ncontent-type:text/plain\nmessage:" + std::string(message) + "\n\n" + std::string(body);
  bytes.push_back('\0');
  return bytes;
}

// Refuses an accepted connection: a plain client reads `message` in an ERROR frame, a TLS one is closed.
template <typename Socket>
void refuse(Socket& socket, bool tls, std::string_view message, std::string_view body) {
  boost::system::error_code ignored;
  if (!tls) {
    std::string bytes = refusal_frame(message, body);
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(bytes), ignored);  // never blocks the acceptor
  }
  socket.close(ignored);
}

// Logs a refusal at warn level when `throttle` lets it through (saying how many were not), else at debug.
void log_refusal(log_throttle& throttle, const std::string& line) {
  if (std::uint64_t held_back = 0; throttle.due(held_back))
    spdlog::warn("{} ({} more refusals of this kind since the last such line; every one is logged at debug level)",
                 line, held_back);
  else
    spdlog::debug("{}", line);
}

// The address connections not yet logged in are counted by: an IPv4 address as it is, an IPv6 one
// by its /64 (one site or host has a whole /64 to connect from).
std::string prelogin_key(const asio::ip::address& address) {
  if (address.is_v4()) return address.to_string();
  auto v6 = address.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string();
  auto bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

// The connection limits checked at accept, before a session exists: limits.max-connections, then
// the connections not yet logged in (prelogin.h). "" when `peer` may come in (its slot in `slot`),
// else the ERROR's message, naming the limit.
std::string admit(const tcp::endpoint& peer, const broker_config& config, session_registry& registry,
                  prelogin_counts& prelogin, prelogin_slot& slot) {
  static log_throttle connections(kAcceptLogInterval), total(kAcceptLogInterval), per_address(kAcceptLogInterval);
  std::string who = peer.address().to_string();
  if (registry.live() >= config.max_connections) {
    log_refusal(connections, fmt::format("connection from {} refused: {} connections open (limits.max-connections)",
                                         who, config.max_connections));
    return "too many connections (limits.max-connections)";
  }
  std::string key = prelogin_key(peer.address());
  std::uint32_t cap = unauthenticated_cap(config);
  switch (prelogin.admit(key, config.max_unauthenticated_per_address, cap)) {
    case prelogin_counts::verdict::admitted:
      slot = prelogin_slot(prelogin, key);
      return "";
    case prelogin_counts::verdict::over_total:
      log_refusal(total, fmt::format("connection from {} refused: {} connections are not logged in yet "
                                     "(limits.max-unauthenticated-connections)", who, cap));
      return "too many connections not logged in yet (limits.max-unauthenticated-connections)";
    case prelogin_counts::verdict::over_address:
      log_refusal(per_address, fmt::format("connection from {} refused: {} connections from {} are not logged in "
                                           "yet (limits.max-unauthenticated-per-address)",
                                           who, config.max_unauthenticated_per_address, key));
      return "too many connections not logged in yet from this address (limits.max-unauthenticated-per-address)";
  }
  return "";
}

// The process is out of descriptors: close what waits on `acceptor` (the spare makes room for
// each accept), log once per interval, pause. `farewell` is what each closed peer is sent.
asio::awaitable<void> pause_for_descriptors(tcp::acceptor& acceptor, spare_descriptor& spare, std::string_view farewell,
                                            const boost::system::error_code& ec) {
  static log_throttle throttle(kAcceptLogInterval);
  int shed = acceptor.is_open() ? spare.shed(acceptor.native_handle(), farewell, kShedPerPause) : 0;
  if (std::uint64_t held_back = 0; throttle.due(held_back)) {
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    spdlog::warn("accept failed: {}: escrowd has no file descriptor left (RLIMIT_NOFILE {}); closed {} waiting "
                 "connections and pauses accepting for {} ms each time ({} more times since the last such line). "
                 "Raise LimitNOFILE (ulimit -n) or lower limits.max-connections",
                 ec.message(), limit.rlim_cur, shed, kDescriptorPause.count(), held_back);
  }
  asio::steady_timer pause(acceptor.get_executor());
  pause.expires_after(kDescriptorPause);
  co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
}

// What a listener speaks, and for WebSocket what its upgrades must satisfy.
struct listener_kind {
  asio::ssl::context* tls = nullptr;  // TLS (tls, wss); nullptr: plain
  bool websocket = false;
  const std::vector<std::string>* allowed_origins = nullptr;  // WebSocket
  websocket_counters* counters = nullptr;                     // WebSocket
};

// A raw HTTP answer that closes the connection, for a WebSocket client refused at accept.
std::string http_refusal(std::string_view message) {
  return fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n"
                     "Connection: close\r\nContent-Length: {}\r\n\r\n{}\n",
                     message.size() + 1, message);
}

// Refuses a WebSocket client before its session exists: a plain one reads a 503 naming why (best
// effort, never blocking), a TLS one is closed (there is no channel before its handshake).
template <typename Socket>
void refuse_websocket(Socket& socket, bool tls, std::string_view message) {
  boost::system::error_code ignored;
  if (!tls) {
    std::string bytes = http_refusal(message);
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(bytes), ignored);
  }
  socket.close(ignored);
}

// Makes and starts the session of an admitted connection.
template <typename Session, typename Stream>
void start_session(Stream stream, broker& core, const broker_config& config, session_registry& registry,
                   prelogin_slot slot, std::optional<websocket_options> ws) {
  auto s = std::make_shared<Session>(std::move(stream), core, config);
  s->hold(std::move(slot));
  if (ws) s->use_websocket(std::move(*ws));
  registry.add(s);
  s->start();
}

// Accepts connections for one listener of kind `kind`.
asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, broker& core, const broker_config& config,
                                  session_registry& registry, prelogin_counts& prelogin, listener_kind kind) {
  spare_descriptor spare;
  asio::ssl::context* tls = kind.tls;
  const std::string farewell =
      tls ? ""
      : kind.websocket ? http_refusal("the broker is out of file descriptors; try again later")
                       : refusal_frame("the broker is out of file descriptors; try again later", "try again later\n");
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(acceptor.get_executor()),
                                                       asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (out_of_descriptors(ec.value())) {
        co_await pause_for_descriptors(acceptor, spare, farewell, ec);
        continue;
      }
      spdlog::warn("accept failed: {}", ec.message());
      continue;
    }
    // Refused before any session is made, so a flood of connections costs a file descriptor for a
    // moment and no more. A plain client is told why.
    boost::system::error_code peer_error;
    auto peer = socket.remote_endpoint(peer_error);
    if (peer_error) {  // the peer has gone already
      socket.close(peer_error);
      continue;
    }
    prelogin_slot slot;
    if (std::string refusal = admit(peer, config, registry, prelogin, slot); !refusal.empty()) {
      if (kind.websocket) {
        if (kind.counters) kind.counters->count(websocket_event::refused_limits);
        refuse_websocket(socket, tls != nullptr, refusal);
        continue;
      }
      refuse(socket, tls != nullptr, refusal, "the broker refused this connection; try again later\n");
      continue;
    }
    std::optional<websocket_options> ws;
    if (kind.websocket) ws = websocket_options{{}, {}, *kind.allowed_origins, false, kind.counters, 0};
    if (kind.websocket && tls)
      start_session<wss_session>(wss_stream(std::move(socket), *tls), core, config, registry, std::move(slot),
                                 std::move(ws));
    else if (kind.websocket)
      start_session<ws_session>(ws_stream(std::move(socket)), core, config, registry, std::move(slot), std::move(ws));
    else if (tls)
      start_session<tls_session>(tls_stream(std::move(socket), *tls), core, config, registry, std::move(slot), {});
    else
      start_session<plain_session>(std::move(socket), core, config, registry, std::move(slot), {});
  }
}

// /stomp of the HTTP listener: the HTTP endpoint hands over a connection that asked for STOMP over
// WebSocket, with the request it read; the connection limits apply as at a STOMP listener's accept.
void serve_stomp_upgrades(http_context& http, broker& core, const broker_config& config, session_registry& registry,
                          prelogin_counts& prelogin) {
  if (!config.http_websocket) return;
  http.upgrade = [&http, &core, &config, &registry, &prelogin](tcp::socket socket, stomp_upgrade upgrade) {
    boost::system::error_code peer_error;
    auto peer = socket.remote_endpoint(peer_error);
    if (peer_error) return;
    prelogin_slot slot;
    // A graceful stop has begun (its list of sessions to finish is made): no new session.
    std::string refusal = core.input_stopped() ? "escrowd is stopping" : admit(peer, config, registry, prelogin, slot);
    if (!refusal.empty()) {
      http.websocket.count(websocket_event::refused_limits);
      refuse_websocket(socket, false, refusal);
      return;
    }
    websocket_options ws{std::move(upgrade.request), std::move(upgrade.user), config.http_allowed_origins,
                         !http.access()->any_host, &http.websocket, 0};
    start_session<ws_session>(ws_stream(std::move(socket)), core, config, registry, std::move(slot), std::move(ws));
  };
}

// Binds and listens on `address`; nullptr after logging why not.
std::unique_ptr<tcp::acceptor> open_acceptor(asio::io_context& io, const listen_address& address) {
  boost::system::error_code ec;
  auto ip = asio::ip::make_address(address.host, ec);
  if (ec) {
    spdlog::critical("cannot listen on {}:{}: '{}' is not an IP address", address.host, address.port, address.host);
    return nullptr;
  }
  auto acceptor = std::make_unique<tcp::acceptor>(io);
  tcp::endpoint endpoint(ip, address.port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::critical("cannot listen on {}:{}: {}", address.host, address.port, ec.message());
    return nullptr;
  }
  return acceptor;
}

// Who besides the owner `mode` lets in at all: "its group", "others", "its group and others"; "".
std::string who_else(mode_t mode) {
  bool group = mode & S_IRWXG, others = mode & S_IRWXO;
  return group && others ? "its group and others" : group ? "its group" : others ? "others" : "";
}

// The store is every message: a data directory others may enter exposes them (or lets them
// replace the files when they may write). escrowd makes its own directory 0700; this catches one
// made by hand or by an older release.
void warn_if_data_dir_open(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;
  std::string who = who_else(st.st_mode);
  if (who.empty()) return;
  bool writable = st.st_mode & (S_IWGRP | S_IWOTH);
  spdlog::warn("data directory {} is open to {} (mode {:04o}): they may read every stored message{}; make it "
               "private: chmod 0700 {} (docs/security.md)",
               dir, who, st.st_mode & 07777, writable ? " and change or remove the store" : "", dir);
}

// The embedded default's HTTP listener, or nullptr after a warning when it cannot be bound.
std::unique_ptr<tcp::acceptor> open_default_http_acceptor(asio::io_context& io, const listen_address& address) {
  boost::system::error_code ec;
  auto acceptor = std::make_unique<tcp::acceptor>(io);
  tcp::endpoint endpoint(asio::ip::make_address(address.host, ec), address.port);
  if (!ec) acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) return acceptor;
  spdlog::warn("http: cannot listen on {}:{} (the default of [http] listen): {}; running without the web console, "
               "/metrics and STOMP over WebSocket. Set [http] listen to another port (or \"\" to turn HTTP off)",
               address.host, address.port, ec.message());
  return nullptr;
}

// [http] listen: the monitoring endpoint, its acceptor closed with the others at a stop signal.
bool start_http(asio::io_context& io, const asio::any_io_executor& accepts, const broker_config& config,
                http_context& http, std::vector<token_digest> tokens,
                std::vector<std::unique_ptr<tcp::acceptor>>& acceptors) {
  if (!config.http_listen) return true;
  std::unique_ptr<tcp::acceptor> acceptor;
  if (config.http_listen_is_default) {
    // The embedded default (the console on 127.0.0.1:8161): a port already taken, by another
    // escrowd or anything else, costs the console, not the broker.
    acceptor = open_default_http_acceptor(io, *config.http_listen);
    if (!acceptor) return true;
  } else {
    acceptor = open_acceptor(io, *config.http_listen);
    if (!acceptor) return false;
  }
  auto bound = acceptor->local_endpoint();
  spdlog::info("http listening on {}:{}", bound.address().to_string(), bound.port());
  bool token = !tokens.empty();
  http.port = bound.port();
  http.max_connections = config.http_max_connections;
  auto access = std::make_shared<http_access>(
      make_http_access(config.http_listen->host, bound.port(), config.http_allowed_hosts, std::move(tokens)));
  if (token)
    spdlog::info("http: every request but /health needs a bearer token from {} ({} token{})", config.http_token_file,
                 access->tokens.size(), access->tokens.size() == 1 ? "" : "s");
  if (!bound.address().is_loopback() && !token)
    spdlog::warn("http: {} is not a loopback address: /metrics and /status are open to the network, without "
                 "authentication; set [http] token-file, or bind [http] listen to 127.0.0.1 unless that is intended",
                 bound.address().to_string());
  if (access->any_host && !token)
    spdlog::warn("http: allowed-hosts holds \"*\": the Host header is not checked, so a web page whose name "
                 "points here (DNS rebinding) can read /metrics and /status; set [http] token-file too");
  http.set_access(std::move(access));
  http.use_console(std::chrono::milliseconds(config.http_session_timeout_ms), config.http_max_sessions,
                   config.http_max_sessions_per_user, http.core.authentication(), config.http_allowed_origins);
  std::string host = bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
  spdlog::info("web console at http://{}:{}/{}", host, bound.port(),
               http.console_auth ? "" : " (no users file: loopback clients only, no login)");
  if (config.http_websocket) spdlog::info("STOMP over WebSocket at ws://{}:{}/stomp", host, bound.port());
  start_http_server(*acceptor, http, accepts);
  acceptors.push_back(std::move(acceptor));
  return true;
}

// Exit codes of run_server (docs/operations.md): 2 a bad configuration, 1 a failure to start.
constexpr int kBadConfiguration = 2;
constexpr int kCannotStart = 1;

// Anonymous access (no users file) is for a broker only this host can reach: false (logged) when a
// listener is elsewhere, or there is none.
bool listeners_allowed(const broker_config& config) {
  if (config.listen.empty() && config.tls_listeners.empty()) {
    spdlog::critical("bad configuration: nothing to listen on (listen is empty and there is no [[tls-listener]])");
    return false;
  }
  if (!config.users_file.empty()) return true;
  std::vector<listen_address> all = config.listen;
  for (const auto& t : config.tls_listeners) all.push_back(t.listen);
  for (const auto& w : config.websocket_listeners) all.push_back(w.tls.listen);
  for (const auto& a : all) {
    boost::system::error_code ec;
    auto ip = asio::ip::make_address(a.host, ec);
    if (ec || !ip.is_loopback()) {
      spdlog::critical("bad configuration: the listener {}:{} is not on a loopback address and there is no "
                       "[security] users-file: anonymous access is allowed only on loopback. Set users-file "
                       "(docs/security.md) or listen on 127.0.0.1 or ::1",
                       a.host, a.port);
      return false;
    }
  }
  return true;
}

// The users file, when one is named (null: anonymous). False (logged) when it cannot be read.
bool load_users(const broker_config& config, std::shared_ptr<const users_table>& users) {
  if (config.users_file.empty()) return true;
  auto table = std::make_shared<users_table>();
  if (std::string err = load_users_file(config.users_file, *table); !err.empty()) {
    spdlog::critical("bad users file: {}", err);
    return false;
  }
  spdlog::info("users file {}: {} users", config.users_file, table->by_name.size());
  if (std::string warning = users_file_exposure(config.users_file); !warning.empty()) spdlog::warn("{}", warning);
  users = std::move(table);
  return true;
}

// One TLS context per [[tls-listener]], loaded before anything else so that a wrong path is
// reported at once. False (logged) when one cannot be made.
// Then one per wss [[websocket-listener]], in their order, after them.
bool load_tls_contexts(const broker_config& config, std::vector<std::unique_ptr<asio::ssl::context>>& out) {
  std::vector<const tls_listener_config*> all;
  for (const auto& listener : config.tls_listeners) all.push_back(&listener);
  for (const auto& w : config.websocket_listeners)
    if (w.secure) all.push_back(&w.tls);
  for (const tls_listener_config* l : all) {
    const auto& listener = *l;
    std::string error;
    auto context = make_server_tls_context(listener, &error);
    if (!context) {
      spdlog::critical("bad configuration: {}", error);
      return false;
    }
    out.push_back(std::move(context));
  }
  return true;
}

// [http] token-file, read before the store is opened like the TLS files. Others should not read
// it: whoever has the token reads /metrics and /status.
bool load_http_tokens(const broker_config& config, std::vector<token_digest>& tokens) {
  if (std::string err = load_http_token_file(config, tokens); !err.empty()) {
    spdlog::critical("bad configuration: {}", err);
    return false;
  }
  if (struct stat st {}; !config.http_token_file.empty() && ::stat(config.http_token_file.c_str(), &st) == 0 &&
                         (st.st_mode & S_IRWXO))
    spdlog::warn("http: the token file {} is open to others (mode {:04o}): anyone who reads it can read /metrics "
                 "and /status; chmod 0640 {} (owner root, group of escrowd) or 0600",
                 config.http_token_file, st.st_mode & 07777, config.http_token_file);
  return true;
}

// Opens the store the configuration names; 0, or the exit code (logged).
int open_store(const broker_config& config, std::unique_ptr<storage::store>& store) {
  storage::store_options options;
  options.path = config.data_dir;
  options.map_size = config.map_size;
  options.max_group_batches = config.max_group_batches;
  options.max_size = config.max_size;
  options.map_size_limit = config.max_map_size;
  options.min_free_disk = config.min_free_disk;
  options.log_size = config.log_size;
  options.checkpoint_interval_ms = config.checkpoint_interval_ms;
  // Test builds only: ESCROW_FAULTS makes chosen commits or syncs fail (docs/storage.md).
  if (const char* faults = std::getenv("ESCROW_FAULTS"); faults && *faults) {
    std::string error;
    if (!storage::fault_plan::parse(faults, options.faults, error)) {
      spdlog::critical("bad ESCROW_FAULTS: {}", error);
      return kBadConfiguration;
    }
  }
  if (storage::status s = storage::store::open(options, store); !s.ok()) {
    spdlog::critical("cannot start: {}", s.message());
    return kCannotStart;
  }
  warn_if_data_dir_open(config.data_dir);
  return 0;
}

// The committer thread keeps one core busy under load; the I/O pool (which also runs the core
// strand) gets the others. On this project's 2-core machines one I/O thread measured faster than
// two (docs/performance.md).
unsigned io_threads_for(const broker_config& config) {
  if (config.io_threads != 0) return config.io_threads;
  unsigned cores = std::thread::hardware_concurrency();  // 0 when unknown
  return cores > 2 ? cores - 1 : 1;
}

// Binds every listener (plain ones first: their "listening on" lines come first, tests read the
// first one) and starts its accept loop on `accepts`; tells `http` and the core where they are.
// False (logged) when one cannot bind.
bool start_listeners(asio::io_context& io, const asio::any_io_executor& accepts, const broker_config& config,
                     broker& core, session_registry& registry, prelogin_counts& prelogin,
                     const std::vector<std::unique_ptr<asio::ssl::context>>& tls_contexts, http_context& http,
                     std::vector<std::unique_ptr<tcp::acceptor>>& acceptors) {
  std::size_t listeners = config.listen.size() + config.tls_listeners.size();
  for (std::size_t i = 0; i < listeners; ++i) {
    bool tls = i >= config.listen.size();
    const listen_address& address = tls ? config.tls_listeners[i - config.listen.size()].listen : config.listen[i];
    asio::ssl::context* context = tls ? tls_contexts[i - config.listen.size()].get() : nullptr;
    auto acceptor = open_acceptor(io, address);
    if (!acceptor) return false;
    auto bound = acceptor->local_endpoint();
    std::string where = bound.address().to_string() + ":" + std::to_string(bound.port());
    // Tests and scripts read this line to learn the port when 0 was asked for.
    spdlog::info("listening on {}{}", where, tls ? " (tls)" : "");
    asio::co_spawn(accepts, accept_loop(*acceptor, core, config, registry, prelogin, listener_kind{context}),
                   asio::detached);
    acceptors.push_back(std::move(acceptor));
    http.listeners.push_back(tls ? where + " (tls)" : where);
  }
  std::size_t next_context = config.tls_listeners.size();
  for (const auto& w : config.websocket_listeners) {
    auto acceptor = open_acceptor(io, w.tls.listen);
    if (!acceptor) return false;
    auto bound = acceptor->local_endpoint();
    std::string where = bound.address().to_string() + ":" + std::to_string(bound.port());
    const char* what = w.secure ? " (wss)" : " (ws)";
    spdlog::info("websocket listening on {}{}", where, w.secure ? " (wss)" : "");
    listener_kind kind{w.secure ? tls_contexts[next_context++].get() : nullptr, true, &w.allowed_origins,
                       &http.websocket};
    asio::co_spawn(accepts, accept_loop(*acceptor, core, config, registry, prelogin, kind), asio::detached);
    acceptors.push_back(std::move(acceptor));
    http.listeners.push_back(where + what);
  }
  core.set_listeners(http.listeners);  // for `escrow status`
  return true;
}

// SIGINT and SIGTERM stop gracefully: listeners, then connections (their deliveries return to
// their queues), then the pool stops and the store is closed by run_server; each step is logged
// (graceful_stop.h). The handler shares the accept loops' strand: an acceptor is not safe to close
// on one thread while another starts an accept on it.
void on_stop_signal(asio::signal_set& signals, const asio::any_io_executor& accepts, asio::io_context& io,
                    broker& core, http_context& http, session_registry& registry,
                    std::vector<std::unique_ptr<tcp::acceptor>>& acceptors) {
  signals.async_wait(asio::bind_executor(accepts, [&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    stop_hooks hooks;
    hooks.close_listeners = [&] {
      http.listeners_up = false;
      for (auto& a : acceptors) {
        boost::system::error_code ignored;
        a->close(ignored);
      }
      return acceptors.size();
    };
    hooks.close_connections = [&] { return registry.finish_all(); };
    stop_gracefully(io, core, signal, std::move(hooks));
  }));
}

// SIGHUP re-reads the configuration file and applies what can change at run time, every time.
void on_hangup(asio::signal_set& hangups, const broker_config& config, broker& core, http_context& http) {
  hangups.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    reload_configuration(config, core, &http);
    on_hangup(hangups, config, core, http);
  });
}

// Closes the store while the I/O context still exists: its committer finishes what was submitted
// and posts the completions into the stopped context, where they are dropped.
void close_store(broker& core, std::unique_ptr<storage::store>& store) {
  core.stop_store_readers();  // a read of the store must not outlive it
  spdlog::info("stopping: closing the store (the committer finishes every write already submitted)");
  bool writable = store->stats().writable;
  store.reset();
  if (writable)
    spdlog::info("stopping: store closed cleanly");
  else
    spdlog::warn("stopping: store closed; it had refused writes since a failed commit (see above)");
}

}  // namespace

int run_server(const broker_config& config) {
  std::shared_ptr<const users_table> users;
  // The TLS contexts outlive the I/O context: sessions still queued in it at the end use them.
  std::vector<std::unique_ptr<asio::ssl::context>> tls_contexts;
  std::vector<token_digest> http_tokens;
  if (!listeners_allowed(config) || !load_users(config, users) || !load_tls_contexts(config, tls_contexts) ||
      !load_http_tokens(config, http_tokens))
    return kBadConfiguration;
  std::unique_ptr<storage::store> store;
  if (int code = open_store(config, store); code != 0) return code;

  unsigned io_threads = io_threads_for(config);
  // Before the I/O context: sessions still queued in it at the end hold slots of it.
  prelogin_counts prelogin;
  asio::io_context io(static_cast<int>(io_threads));
  // After the I/O context, so destroyed before it: the login threads join while the context the
  // checks answer to still exists.
  authenticator auth(users, login_limits{
                                .backoff_max_ms = config.login_backoff_max_ms,
                                .threads = config.login_threads,
                                .max_waiting_per_address = config.max_waiting_logins_per_address,
                                .max_pending = config.max_pending_logins,
                                .max_waiting_per_user = config.max_waiting_logins_per_user,
                                // At most half: the addresses with failures keep the other half.
                                .reserved_pending = std::min(config.reserved_pending_logins,
                                                             config.max_pending_logins / 2),
                                .max_delay_ms = config.max_login_delay_ms});
  broker core(io, *store, config);
  // On every return from here on, `core` must not be destroyed before the store's committer has
  // finished: the completions of what open() or a client submitted call into it. An early return
  // (a listener that cannot bind) closes the store here; the normal stop does it below, with logs.
  struct store_closer {
    broker& core;
    std::unique_ptr<storage::store>& store;
    ~store_closer() {
      core.stop_store_readers();
      store.reset();
    }
  } closer{core, store};
  core.use_authenticator(&auth);
  core.use_admin(handle_admin_command);
  if (storage::status s = core.open(); !s.ok()) {
    spdlog::critical("cannot load the store: {}", s.message());
    return kCannotStart;
  }
  if (users) core.warn_about_owners_gone(users, "at start");  // users removed while escrowd was down

  session_registry registry;
  http_context http(core);
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  // Installed before anything says "ready": a SIGTERM right after that must stop us cleanly.
  asio::any_io_executor accepts = asio::make_strand(io);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  on_stop_signal(signals, accepts, io, core, http, registry, acceptors);
  asio::signal_set hangups(io, SIGHUP);
  on_hangup(hangups, config, core, http);
  serve_stomp_upgrades(http, core, config, registry, prelogin);
  if (!start_listeners(io, accepts, config, core, registry, prelogin, tls_contexts, http, acceptors) ||
      !start_http(io, accepts, config, http, std::move(http_tokens), acceptors))
    return kCannotStart;
  http.listeners_up = true;
  spdlog::info("escrowd ready, data in {}", config.data_dir);

  std::vector<std::thread> pool;
  for (unsigned i = 1; i < io_threads; ++i) pool.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : pool) t.join();
  close_store(core, store);
  spdlog::info("stopped");
  return 0;
}

}  // namespace escrow::broker
