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

#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "escrow/broker/security/http_access.h"

namespace escrow::broker {

class broker;
class authenticator;
class console_sessions;
struct metrics_snapshot;

// What STOMP over WebSocket counts (escrow_websocket_* in /metrics): upgrades refused and
// connections closed for bad input, by reason. Incremented by the sessions, on any thread.
enum class websocket_event {
  refused_origin,      // the Origin is not allowed (403)
  refused_handshake,   // not a WebSocket upgrade, no STOMP subprotocol, a bad request (400)
  refused_timeout,     // the handshake did not finish within connect-timeout-ms
  refused_anonymous,   // no users file and the peer is not on loopback (403)
  refused_limits,      // limits.max-connections or the limits of connections not logged in (503)
  closed_too_big,      // a message over the limit (close 1009)
  closed_protocol,     // a WebSocket protocol error
  closed_frame_error,  // STOMP it could not parse: ERROR, then close
  closed_slow_reader,  // it read nothing of its frames for limits.slow-consumer-timeout-ms
};
inline constexpr std::array<const char*, 9> kWebsocketEventNames = {
    "origin", "handshake", "timeout", "anonymous-remote", "limits", "too-big", "protocol", "frame-error", "slow-reader"};
struct websocket_counters {
  std::atomic<std::uint64_t> accepted{0};  // upgrades completed
  std::atomic<std::int64_t> open{0};       // WebSocket connections open now
  std::array<std::atomic<std::uint64_t>, kWebsocketEventNames.size()> events{};
  void count(websocket_event e) { events[static_cast<std::size_t>(e)].fetch_add(1, std::memory_order_relaxed); }
};

// Who a console session is logged in as (the console's login, console_sessions.h).
struct console_user {
  std::string user;  // "" anonymous (no users file)
  std::vector<std::string> roles;
};

// A request to /stomp of the HTTP listener that asks for a WebSocket: the session takes it over.
struct stomp_upgrade {
  boost::beast::http::request<boost::beast::http::string_body> request;
  std::optional<console_user> user;  // the console session's user when the request carried its cookie
};

struct http_context {
  explicit http_context(broker& b) : core(b) {}
  broker& core;
  std::vector<std::string> listeners;  // the STOMP listeners, as /status shows them
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<bool> listeners_up{false};  // every STOMP listener accepting (false once stopping)
  std::uint16_t port = 0;                 // the port the endpoint is bound to (for the Host check)
  std::uint32_t max_connections = 64;     // [http] max-connections: set before the server starts
  std::atomic<std::uint32_t> open_connections{0};  // HTTP connections being served now
  websocket_counters websocket;                    // every WebSocket listener's, this one's too
  // Takes over a connection whose request asked for STOMP over WebSocket at /stomp (set by the
  // server before it starts; unset: /stomp is not served). Called on the connection's strand.
  std::function<void(boost::asio::ip::tcp::socket, stomp_upgrade)> upgrade;
  // The web console (console_api.h): its sessions, who checks its logins (nullptr: no users file,
  // the console is anonymous and for loopback clients only), and the origins allowed besides
  // loopback and its own. Set by use_console before the server starts.
  std::shared_ptr<console_sessions> console;
  authenticator* console_auth = nullptr;
  std::vector<std::string> allowed_origins;
  void use_console(std::chrono::milliseconds session_timeout, std::size_t max_sessions,
                   std::size_t max_sessions_per_user, authenticator* auth, std::vector<std::string> origins);
  // Completes a snapshot from the core with what the endpoint knows (version, uptime, listeners,
  // WebSocket counts).
  void fill(metrics_snapshot& s) const;

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
