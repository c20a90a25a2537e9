// STOMP over WebSocket (RFC 6455, docs/websocket.md): the streams a session runs over (Boost.Beast's
// WebSocket over a TCP socket, or over TLS for wss), and the checks of an upgrade request that do
// not need a socket: which STOMP subprotocol to answer, whether the peer may go on. The session
// (session.h) does the handshake and then reads and writes STOMP frames as WebSocket messages.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/broker/admin/http_server.h"
#include "tls.h"

namespace escrow::broker {

using ws_stream = boost::beast::websocket::stream<boost::asio::ip::tcp::socket>;
using wss_stream = boost::beast::websocket::stream<tls_stream>;
using upgrade_request = boost::beast::http::request<boost::beast::http::string_body>;

// The subprotocol to answer for a Sec-WebSocket-Protocol header (a comma-separated list): the
// highest STOMP version offered ("v12.stomp", "v11.stomp", "v10.stomp"); "" when the header is
// absent (a client that asks for none speaks STOMP all the same); nullopt when it offers only
// other protocols.
std::optional<std::string> choose_subprotocol(std::optional<std::string_view> offered);

// Whether `bytes` is valid UTF-8: what the session sends as a text message (a browser closes a
// connection whose text message is not); anything else goes as a binary message.
bool valid_utf8(std::string_view bytes);

// How a WebSocket connection came, and what its handshake must check.
struct websocket_options {
  // Already read by the HTTP endpoint (/stomp of the HTTP listener); nullopt: the session reads it
  // (a dedicated [[websocket-listener]]).
  std::optional<upgrade_request> request;
  std::optional<console_user> console;          // the console session's user, from its cookie
  std::vector<std::string> allowed_origins;     // besides loopback (and the request's own host)
  // Whether an Origin naming the request's own Host passes: only where the HTTP endpoint checked
  // the Host (/stomp without allowed-hosts "*"); a dedicated listener has no Host check.
  bool own_host_origin = false;
  websocket_counters* counters = nullptr;       // must outlive the session
  std::size_t max_message_bytes = 0;            // 0: limits.max-frame-size plus 64 KiB
};

}  // namespace escrow::broker
