// The graceful stop's steps (graceful_stop.h): close the listeners, close the connections and wait
// until the core has returned their deliveries, report the prepared branches, stop the pool.
#include "graceful_stop.h"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <memory>

#include "escrow/broker/core/broker.h"
#include "escrow/broker/core/metrics.h"

namespace escrow::broker {

namespace asio = boost::asio;

namespace {

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal";
  }
}

std::uint64_t total_redelivered(const metrics_snapshot& s) {
  std::uint64_t n = 0;
  for (const auto& q : s.queues) n += q.redelivered;
  return n;
}

std::uint64_t total_in_flight(const metrics_snapshot& s) {
  std::uint64_t n = 0;
  for (const auto& q : s.queues) n += q.in_flight;
  return n;
}

std::uint64_t prepared(const metrics_snapshot& s) {
  auto it = s.branches_by_state.find("prepared");
  return it == s.branches_by_state.end() ? 0 : it->second;
}

// The state of one stop, kept alive by the callbacks that poll the core.
struct stopping : std::enable_shared_from_this<stopping> {
  asio::io_context& io;
  broker& core;
  asio::steady_timer timer;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::uint64_t redelivered_before = 0;

  stopping(asio::io_context& io_, broker& core_) : io(io_), core(core_), timer(io_) {}

  // `then` runs on the I/O context with a fresh snapshot (the core calls back on its strand).
  void with_snapshot(std::function<void(metrics_snapshot)> then) {
    core.collect_metrics([self = shared_from_this(), then = std::move(then)](metrics_snapshot s) mutable {
      asio::post(self->io, [s = std::move(s), then = std::move(then)]() mutable { then(std::move(s)); });
    });
  }

  // First every write already submitted completes and its receipts go to their sessions, which
  // write them before they close: a client whose work became durable before the stop hears so.
  void close_connections(const stop_hooks& hooks) {
    core.stop_input();
    core.after_stored([self = shared_from_this(), hooks] {
      asio::post(self->io, [self, hooks] { self->close_connections_now(hooks); });
    });
  }

  void close_connections_now(const stop_hooks& hooks) {
    with_snapshot([self = shared_from_this(), hooks](metrics_snapshot s) {
      self->redelivered_before = total_redelivered(s);
      std::size_t sessions = hooks.close_connections();
      spdlog::info("stopping: closing {} connections ({} after CONNECT); their {} unacknowledged deliveries "
                   "return to their queues",
                   sessions, s.connections, total_in_flight(s));
      self->wait_for_connections();
    });
  }

  void wait_for_connections() {
    with_snapshot([self = shared_from_this()](metrics_snapshot s) {
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                           self->started);
      if (s.connections > 0 && waited < kConnectionCloseLimit) {
        self->timer.expires_after(std::chrono::milliseconds(20));
        self->timer.async_wait([self](const boost::system::error_code&) { self->wait_for_connections(); });
        return;
      }
      if (s.connections > 0)
        spdlog::warn("stopping: {} connections still open after {} ms; stopping without waiting for them "
                     "(their unacknowledged messages are in the store and return at the next start)",
                     s.connections, waited.count());
      else
        spdlog::info("stopping: every connection closed in {} ms; {} deliveries returned to their queues",
                     waited.count(), total_redelivered(s) - self->redelivered_before);
      spdlog::info("stopping: prepared transaction branches left prepared in the store: {} (the transaction "
                   "manager, or `escrow xa`, finishes them after the restart)",
                   prepared(s));
      self->io.stop();
    });
  }
};

}  // namespace

void stop_gracefully(asio::io_context& io, broker& core, int signal, stop_hooks hooks) {
  spdlog::info("{} (signal {}): stopping gracefully", signal_name(signal), signal);
  std::size_t listeners = hooks.close_listeners();
  spdlog::info("stopping: {} listeners closed; new connections are refused", listeners);
  std::make_shared<stopping>(io, core)->close_connections(hooks);
}

}  // namespace escrow::broker
