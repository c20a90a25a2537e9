// Wiring: TLS contexts, store, core, acceptors (plain and TLS), sessions, signals and the I/O
// thread pool.
#include "server.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdlib>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "authenticator.h"
#include "broker.h"
#include "graceful_stop.h"
#include "reload.h"
#include "escrow/storage/store.h"
#include "http_server.h"
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

// Accepts connections for one listener; `tls` is its context, nullptr for a plain listener.
asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, broker& core, const broker_config& config,
                                  session_registry& registry, asio::ssl::context* tls) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(acceptor.get_executor()),
                                                       asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      spdlog::warn("accept failed: {}", ec.message());
      continue;
    }
    // limits.max-connections: refused before any session is made, so a flood of connections costs
    // a file descriptor for a moment and no more. A plain client is told why.
    if (registry.live() >= config.max_connections) {
      boost::system::error_code ignored;
      auto peer = socket.remote_endpoint(ignored);
      spdlog::warn("connection from {} refused: {} connections open (limits.max-connections)",
                   peer.address().to_string(), config.max_connections);
      if (!tls) {
        static const std::string refusal =
            "ERROR\ncontent-type:text/plain\nmessage:too many connections (limits.max-connections)\n\n"
            "the broker has its maximum number of connections open; try again later\n";
        std::string bytes = refusal;
        bytes.push_back('\0');
        socket.non_blocking(true, ignored);
        socket.write_some(asio::buffer(bytes), ignored);  // best effort: never blocks the acceptor
      }
      socket.close(ignored);
      continue;
    }
    if (tls) {
      auto s = std::make_shared<tls_session>(tls_stream(std::move(socket), *tls), core, config);
      registry.add(s);
      s->start();
    } else {
      auto s = std::make_shared<plain_session>(std::move(socket), core, config);
      registry.add(s);
      s->start();
    }
  }
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

// [http] listen: the monitoring endpoint, its acceptor closed with the others at a stop signal.
bool start_http(asio::io_context& io, const asio::any_io_executor& accepts, const broker_config& config,
                http_context& http, std::vector<token_digest> tokens,
                std::vector<std::unique_ptr<tcp::acceptor>>& acceptors) {
  if (!config.http_listen) return true;
  auto acceptor = open_acceptor(io, *config.http_listen);
  if (!acceptor) return false;
  auto bound = acceptor->local_endpoint();
  spdlog::info("http listening on {}:{}", bound.address().to_string(), bound.port());
  bool token = !tokens.empty();
  http.port = bound.port();
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
  start_http_server(*acceptor, http, accepts);
  acceptors.push_back(std::move(acceptor));
  return true;
}

}  // namespace

int run_server(const broker_config& config) {
  if (config.listen.empty() && config.tls_listeners.empty()) {
    spdlog::critical("bad configuration: nothing to listen on (listen is empty and there is no [[tls-listener]])");
    return 2;
  }
  // Anonymous access (no users file) is for a broker only this host can reach.
  if (config.users_file.empty()) {
    std::vector<listen_address> all = config.listen;
    for (const auto& t : config.tls_listeners) all.push_back(t.listen);
    for (const auto& a : all) {
      boost::system::error_code ec;
      auto ip = asio::ip::make_address(a.host, ec);
      if (ec || !ip.is_loopback()) {
        spdlog::critical("bad configuration: the listener {}:{} is not on a loopback address and there is no "
                         "[security] users-file: anonymous access is allowed only on loopback. Set users-file "
                         "(docs/security.md) or listen on 127.0.0.1 or ::1",
                         a.host, a.port);
        return 2;
      }
    }
  }
  std::shared_ptr<const users_table> users;
  if (!config.users_file.empty()) {
    auto table = std::make_shared<users_table>();
    if (std::string err = load_users_file(config.users_file, *table); !err.empty()) {
      spdlog::critical("bad users file: {}", err);
      return 2;
    }
    spdlog::info("users file {}: {} users", config.users_file, table->by_name.size());
    if (std::string warning = users_file_exposure(config.users_file); !warning.empty()) spdlog::warn("{}", warning);
    users = std::move(table);
  }

  // TLS files are loaded before anything else, so that a wrong path is reported at once. The
  // contexts outlive the I/O context: sessions still queued in it at the end use them.
  std::vector<std::unique_ptr<asio::ssl::context>> tls_contexts;
  for (const auto& listener : config.tls_listeners) {
    std::string error;
    auto context = make_server_tls_context(listener, &error);
    if (!context) {
      spdlog::critical("bad configuration: {}", error);
      return 2;
    }
    tls_contexts.push_back(std::move(context));
  }

  // [http] token-file, read before the store is opened like the TLS files. Others should not
  // read it: whoever has the token reads /metrics and /status.
  std::vector<token_digest> http_tokens;
  if (std::string err = load_http_token_file(config, http_tokens); !err.empty()) {
    spdlog::critical("bad configuration: {}", err);
    return 2;
  }
  if (struct stat st {}; !config.http_token_file.empty() && ::stat(config.http_token_file.c_str(), &st) == 0 &&
                         (st.st_mode & S_IRWXO))
    spdlog::warn("http: the token file {} is open to others (mode {:04o}): anyone who reads it can read /metrics "
                 "and /status; chmod 0640 {} (owner root, group of escrowd) or 0600",
                 config.http_token_file, st.st_mode & 07777, config.http_token_file);

  storage::store_options options;
  options.path = config.data_dir;
  options.map_size = config.map_size;
  options.max_group_batches = config.max_group_batches;
  options.max_size = config.max_size;
  options.map_size_limit = config.max_map_size;
  options.min_free_disk = config.min_free_disk;
  // Test builds only: ESCROW_FAULTS makes chosen commits or syncs fail (docs/storage.md).
  if (const char* faults = std::getenv("ESCROW_FAULTS"); faults && *faults) {
    std::string error;
    if (!storage::fault_plan::parse(faults, options.faults, error)) {
      spdlog::critical("bad ESCROW_FAULTS: {}", error);
      return 2;
    }
  }
  std::unique_ptr<storage::store> store;
  if (storage::status s = storage::store::open(options, store); !s.ok()) {
    spdlog::critical("cannot start: {}", s.message());
    return 1;
  }
  warn_if_data_dir_open(config.data_dir);

  // The committer thread keeps one core busy under load; the I/O pool (which also runs the core
  // strand) gets the others. On this project's 2-core machines one I/O thread measured faster than
  // two (docs/performance.md).
  unsigned io_threads = config.io_threads;
  if (io_threads == 0) {
    unsigned cores = std::thread::hardware_concurrency();  // 0 when unknown
    io_threads = cores > 2 ? cores - 1 : 1;
  }
  asio::io_context io(static_cast<int>(io_threads));
  // After the I/O context, so destroyed before it: the login threads join while the context the
  // checks answer to still exists.
  authenticator auth(users, login_limits{config.login_backoff_max_ms, config.login_threads,
                                         config.max_waiting_logins_per_address, config.max_pending_logins});
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
  if (storage::status s = core.open(); !s.ok()) {
    spdlog::critical("cannot load the store: {}", s.message());
    return 1;
  }

  session_registry registry;
  http_context http(core);
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  // Installed before anything says "ready": a SIGTERM right after that must stop us cleanly.
  // The accept loops and the stop signal's handler, which closes their acceptors, share one strand:
  // an acceptor is not safe to close on one thread while another starts an accept on it.
  asio::any_io_executor accepts = asio::make_strand(io);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait(asio::bind_executor(accepts, [&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    // Listeners, then connections (their deliveries return to their queues), then the pool stops
    // and the store is closed below; each step is logged (graceful_stop.h).
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

  // SIGHUP re-reads the configuration file and applies what can change at run time.
  asio::signal_set hangups(io, SIGHUP);
  std::function<void()> wait_for_hangup = [&] {
    hangups.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      reload_configuration(config, core, &http);
      wait_for_hangup();
    });
  };
  wait_for_hangup();

  // Plain listeners first: their "listening on" lines come first (tests read the first one).
  for (const auto& address : config.listen) {
    auto acceptor = open_acceptor(io, address);
    if (!acceptor) return 1;
    auto bound = acceptor->local_endpoint();
    // Tests and scripts read this line to learn the port when 0 was asked for.
    spdlog::info("listening on {}:{}", bound.address().to_string(), bound.port());
    asio::co_spawn(accepts, accept_loop(*acceptor, core, config, registry, nullptr), asio::detached);
    acceptors.push_back(std::move(acceptor));
  }
  for (std::size_t i = 0; i < config.tls_listeners.size(); ++i) {
    auto acceptor = open_acceptor(io, config.tls_listeners[i].listen);
    if (!acceptor) return 1;
    auto bound = acceptor->local_endpoint();
    spdlog::info("listening on {}:{} (tls)", bound.address().to_string(), bound.port());
    asio::co_spawn(accepts, accept_loop(*acceptor, core, config, registry, tls_contexts[i].get()),
                   asio::detached);
    acceptors.push_back(std::move(acceptor));
  }
  for (const auto& a : acceptors) {
    auto bound = a->local_endpoint();
    http.listeners.push_back(bound.address().to_string() + ":" + std::to_string(bound.port()));
  }
  for (std::size_t i = 0; i < config.tls_listeners.size(); ++i) http.listeners[config.listen.size() + i] += " (tls)";
  core.set_listeners(http.listeners);  // for `escrow status`
  if (!start_http(io, accepts, config, http, std::move(http_tokens), acceptors)) return 1;
  http.listeners_up = true;
  spdlog::info("escrowd ready, data in {}", config.data_dir);

  std::vector<std::thread> pool;
  for (unsigned i = 1; i < io_threads; ++i) pool.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : pool) t.join();
  // Close the store while the I/O context still exists: its committer finishes what was submitted
  // and posts the completions into the stopped context, where they are dropped.
  core.stop_store_readers();  // a read of the store must not outlive it
  spdlog::info("stopping: closing the store (the committer finishes every write already submitted)");
  bool writable = store->stats().writable;
  store.reset();
  if (writable)
    spdlog::info("stopping: store closed cleanly");
  else
    spdlog::warn("stopping: store closed; it had refused writes since a failed commit (see above)");
  spdlog::info("stopped");
  return 0;
}

}  // namespace escrow::broker
