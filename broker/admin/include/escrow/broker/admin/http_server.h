// The HTTP endpoint for monitoring (docs/operations.md): GET or HEAD /metrics (Prometheus text
// format), /status (JSON) and /health (200 "ok", or 503 with the reason). Off unless [http] listen
// is set. Every request must name an allowed host in Host, and with [http] token-file present the
// bearer token (all but /health): http_access.h, docs/security.md. Boost.Beast over the broker's I/O
// pool: one coroutine per connection, at most [http] max-connections of them (the next is answered
// 503 and closed), bounded requests (a header section over 8 KiB: 431), idle timeouts. Broker
// state is never read here: each request asks the core strand for a snapshot
// (broker::collect_metrics) and resumes on its own executor with the copy.
//
// Threads: start_http_server() is called once by run_server() before the pool runs; the context
// must outlive the I/O context's run. listeners_up may be set from any thread.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "escrow/broker/security/http_access.h"

namespace escrow::broker {

class broker;

struct http_context {
  explicit http_context(broker& b) : core(b) {}
  broker& core;
  std::vector<std::string> listeners;  // the STOMP listeners, as /status shows them
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<bool> listeners_up{false};  // every STOMP listener accepting (false once stopping)
  std::uint16_t port = 0;                 // the port the endpoint is bound to (for the Host check)
  std::uint32_t max_connections = 64;     // [http] max-connections: set before the server starts
  std::atomic<std::uint32_t> open_connections{0};  // HTTP connections being served now

  // Who may ask (Host, token): set before the server starts, replaced by SIGHUP (reload.cpp).
  std::shared_ptr<const http_access> access() const {
    std::lock_guard lock(access_mutex_);
    return access_;
  }
  void set_access(std::shared_ptr<const http_access> a) {
    std::lock_guard lock(access_mutex_);
    access_ = std::move(a);
  }

 private:
  mutable std::mutex access_mutex_;
  std::shared_ptr<const http_access> access_ = std::make_shared<http_access>();
};

// Serves HTTP on an acceptor already listening, until it is closed. The accept loop runs on
// `accepts` (a strand), where the acceptor is also closed; each connection gets a strand of its own.
void start_http_server(boost::asio::ip::tcp::acceptor& acceptor, http_context& context,
                       const boost::asio::any_io_executor& accepts);

}  // namespace escrow::broker
