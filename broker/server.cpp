// Wiring: store, core, acceptors, sessions, signals and the I/O thread pool.
#include "server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>
#include <thread>
#include <vector>

#include "broker.h"
#include "escrow/storage/store.h"
#include "session.h"

namespace escrow::broker {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// The sessions alive, so that shutdown can close them; weak so a closed session can go.
struct session_registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<session>> sessions;  // guarded by mutex

  void add(const std::shared_ptr<session>& s) {
    std::lock_guard lock(mutex);
    std::erase_if(sessions, [](const std::weak_ptr<session>& w) { return w.expired(); });
    sessions.push_back(s);
  }
  void stop_all() {
    std::lock_guard lock(mutex);
    for (auto& w : sessions)
      if (auto s = w.lock()) s->stop();
  }
};

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, broker& core, const broker_config& config,
                                  session_registry& registry) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(acceptor.get_executor()),
                                                       asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      spdlog::warn("accept failed: {}", ec.message());
      continue;
    }
    auto s = std::make_shared<session>(std::move(socket), core, config);
    registry.add(s);
    s->start();
  }
}

}  // namespace

int run_server(const broker_config& config) {
  storage::store_options options;
  options.path = config.data_dir;
  options.map_size = config.map_size;
  options.max_group_batches = config.max_group_batches;
  std::unique_ptr<storage::store> store;
  if (storage::status s = storage::store::open(options, store); !s.ok()) {
    spdlog::critical("cannot start: {}", s.message());
    return 1;
  }

  // The committer thread keeps one core busy under load; the I/O pool (which also runs the core
  // strand) gets the others. On this project's 2-core machines one I/O thread measured faster than
  // two (docs/performance.md).
  unsigned io_threads = config.io_threads;
  if (io_threads == 0) {
    unsigned cores = std::thread::hardware_concurrency();  // 0 when unknown
    io_threads = cores > 2 ? cores - 1 : 1;
  }
  asio::io_context io(static_cast<int>(io_threads));
  broker core(io, *store, config);
  if (storage::status s = core.open(); !s.ok()) {
    spdlog::critical("cannot load the store: {}", s.message());
    return 1;
  }

  session_registry registry;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  // Installed before anything says "ready": a SIGTERM right after that must stop us cleanly.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {}: stopping", signal);
    for (auto& a : acceptors) {
      boost::system::error_code ignored;
      a->close(ignored);
    }
    registry.stop_all();
    // Give sessions a moment to finish their closing work, then stop the pool.
    auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(200));
    timer->async_wait([&io, timer](const boost::system::error_code&) { io.stop(); });
  });

  for (const auto& address : config.listen) {
    boost::system::error_code ec;
    auto ip = asio::ip::make_address(address.host, ec);
    if (ec) {
      spdlog::critical("cannot listen on {}:{}: '{}' is not an IP address", address.host, address.port, address.host);
      return 1;
    }
    auto acceptor = std::make_unique<tcp::acceptor>(io);
    tcp::endpoint endpoint(ip, address.port);
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      spdlog::critical("cannot listen on {}:{}: {}", address.host, address.port, ec.message());
      return 1;
    }
    auto bound = acceptor->local_endpoint();
    // Tests and scripts read this line to learn the port when 0 was asked for.
    spdlog::info("listening on {}:{}", bound.address().to_string(), bound.port());
    asio::co_spawn(io, accept_loop(*acceptor, core, config, registry), asio::detached);
    acceptors.push_back(std::move(acceptor));
  }
  spdlog::info("escrowd ready, data in {}", config.data_dir);

  std::vector<std::thread> pool;
  for (unsigned i = 1; i < io_threads; ++i) pool.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : pool) t.join();
  // Close the store while the I/O context still exists: its committer finishes what was submitted
  // and posts the completions into the stopped context, where they are dropped.
  store.reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace escrow::broker
