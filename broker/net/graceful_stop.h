// Graceful stop at SIGTERM or SIGINT (docs/operations.md, "Running as a service"). Each step is
// logged as it happens: the listeners close (new connections are refused, /health answers 503);
// no frame read from now on is handled; every write already submitted completes and its receipts
// are written to their clients; then every connection closes and the core returns its
// unacknowledged deliveries to their queues;
// prepared XA branches stay prepared (their records are in the store, recovered at the next
// start); then the I/O pool stops, run_server joins the broker's threads that read the store
// (broker::stop_store_readers) and closes the store, whose committer finishes every write already
// submitted, and exits 0.
//
// Threads: stop_gracefully is called on an I/O thread (the signal handler); it asks the core for
// metrics snapshots (broker::collect_metrics) to see the connections go, polling on a timer.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace boost::asio {
class io_context;
}

namespace escrow::broker {

class broker;

// What only the server can do; both are called on an I/O thread.
struct stop_hooks {
  std::function<std::size_t()> close_listeners;    // closes every acceptor; returns how many
  std::function<std::size_t()> close_connections;  // stops every session; returns how many
};

// How long the stop waits for the core to see every connection closed before it stops anyway.
inline constexpr std::chrono::milliseconds kConnectionCloseLimit{10000};

// Runs the steps for `signal`, then stops `io` (run() returns in every thread of the pool).
void stop_gracefully(boost::asio::io_context& io, broker& core, int signal, stop_hooks hooks);

}  // namespace escrow::broker
