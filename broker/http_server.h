// The HTTP endpoint for monitoring (docs/operations.md): GET or HEAD /metrics (Prometheus text
// format), /status (JSON) and /health (200 "ok", or 503 with the reason). Off unless [http] listen
// is set. Boost.Beast over the broker's I/O pool: one coroutine per connection, bounded requests,
// idle timeouts. Broker state is never read here: each request asks the core strand for a
// snapshot (broker::collect_metrics) and resumes on its own executor with the copy.
//
// Threads: start_http_server() is called once by run_server() before the pool runs; the context
// must outlive the I/O context's run. listeners_up may be set from any thread.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace escrow::broker {

class broker;

struct http_context {
  explicit http_context(broker& b) : core(b) {}
  broker& core;
  std::vector<std::string> listeners;  // the STOMP listeners, as /status shows them
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<bool> listeners_up{false};  // every STOMP listener accepting (false once stopping)
};

// Serves HTTP on an acceptor already listening, until it is closed. The accept loop runs on
// `accepts` (a strand), where the acceptor is also closed; each connection gets a strand of its own.
void start_http_server(boost::asio::ip::tcp::acceptor& acceptor, http_context& context,
                       const boost::asio::any_io_executor& accepts);

}  // namespace escrow::broker
