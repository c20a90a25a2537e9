// One client connection's network side, on its own strand of the I/O pool: a reading coroutine
// that parses frames and hands them to the core, a writing coroutine that sends whatever the core
// queued in one gather write (and heart-beats when it has been quiet), and a watchdog that closes
// a connection that says nothing (no byte within first-byte-timeout-ms, no CONNECT in time, or
// heart-beats missed; the time a CONNECT's password check waits for its turn does not count). The
// session handles CONNECT itself (login, version and heart-beat negotiation); every later frame
// goes to the core in order. Until its CONNECT succeeds it holds a prelogin_slot (prelogin.h).
//
// The same code runs over a plain TCP socket and over TLS: basic_session is a template on the
// stream, instantiated for both in session.cpp (plain_session, tls_session). A TLS session first
// completes its handshake, within connect-timeout-ms, and only then starts the three coroutines; a
// failed handshake is logged with the peer and the reason and closes that connection alone.
//
// And over WebSocket (websocket.h: ws_session, wss_session): the handshake reads the HTTP upgrade
// (or takes the one the HTTP endpoint read at /stomp), checks its Origin and subprotocol and
// accepts it; the bytes of each WebSocket message go to the same parser (a frame may span
// messages, a message may hold several frames), and each write is one message, text when it is
// valid UTF-8. The connection ends with a WebSocket close.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "escrow/broker/security/authenticator.h"
#include "escrow/broker/core/broker.h"
#include "escrow/broker/config/config.h"
#include "escrow/broker/core/outbound.h"
#include "prelogin.h"
#include "tls.h"
#include "websocket.h"

namespace escrow::broker {

// What the server's registry of live sessions needs, whatever the stream.
class session_base {
 public:
  virtual ~session_base() = default;
  // Closes the connection now. Thread-safe.
  virtual void stop() = 0;
  // Writes what is already queued for the connection (receipts of work that is durable), then
  // closes it (graceful stop). Thread-safe.
  virtual void finish() = 0;
};

template <typename Stream>
class basic_session final : public session_base,
                            public outbound,
                            public std::enable_shared_from_this<basic_session<Stream>> {
 public:
  static constexpr bool kWs = std::is_same_v<Stream, ws_stream> || std::is_same_v<Stream, wss_stream>;
  static constexpr bool kTls = std::is_same_v<Stream, tls_stream> || std::is_same_v<Stream, wss_stream>;

  // `stream` is connected; for TLS, its handshake has not started yet.
  basic_session(Stream stream, broker& core, const broker_config& config);

  // Starts the handshake (TLS) and the coroutines. The session keeps itself alive until all end.
  void start();
  void stop() override;
  void finish() override { send_and_close({}, closing::done); }
  // Its place among the connections not yet logged in (prelogin.h): held until CONNECT succeeds
  // or the connection ends. Called by the accept loop before start().
  void hold(prelogin_slot slot) { prelogin_ = std::move(slot); }
  // WebSocket: how the connection came (websocket.h). Called by the accept loop before start().
  void use_websocket(websocket_options options) { ws_ = std::move(options); }

  void send(std::string bytes) override;
  void send_and_close(std::string bytes, closing why) override;
  std::size_t pending_bytes() const override { return pending_bytes_.load(std::memory_order_relaxed); }

 private:
  using clock = std::chrono::steady_clock;
  using std::enable_shared_from_this<basic_session<Stream>>::shared_from_this;
  void run();
  boost::asio::awaitable<void> handshake();
  boost::asio::awaitable<bool> tls_handshake();
  boost::asio::awaitable<bool> websocket_handshake();
  // An upgrade that may not proceed: refuse() records the HTTP status and why, send_refusal()
  // answers with them and closes (two steps, so that no temporary is part of a co_await).
  void refuse(unsigned status, std::string why, websocket_event event);
  boost::asio::awaitable<void> send_refusal();
  boost::asio::awaitable<void> websocket_close();
  auto& socket() { return boost::beast::get_lowest_layer(stream_); }
  boost::asio::awaitable<bool> first_byte();
  boost::asio::awaitable<void> read_loop();
  boost::asio::awaitable<bool> hand_on(std::vector<frame>& frames);
  boost::asio::awaitable<void> write_loop();
  boost::asio::awaitable<void> watchdog();
  // Handles a frame on the session's strand; returns false when the connection must stop reading.
  bool on_frame(frame& f);
  bool on_connect(const frame& f);
  boost::asio::awaitable<login_result> authenticate(const frame& f);
  void fail(const std::string& problem, const std::optional<std::string>& receipt);
  void send_error(const std::string& problem, const std::optional<std::string>& receipt);
  // Queues bytes to write; with `ending`, the connection closes once they are written.
  void enqueue(std::string bytes, std::optional<closing> ending = std::nullopt);
  void close_socket();
  void coroutine_done();

  Stream stream_;
  broker& core_;
  const broker_config& config_;
  std::uint64_t id_;
  std::string peer_;     // "IP:PORT"
  std::string peer_ip_;  // for the failed-login back-off, which is per address
  login_result login_;   // who CONNECT logged in as
  frame_parser parser_;

  // Strand state.
  std::deque<std::string> outgoing_;
  std::string flat_;  // TLS: the frames of one write, copied together (one record, not one per frame)
  boost::asio::steady_timer wake_writer_;
  boost::asio::steady_timer watchdog_timer_;
  bool handshake_done_ = false;       // TLS: the handshake finished (always true when plain)
  bool handshake_timed_out_ = false;  // TLS: connect-timeout-ms passed during the handshake
  std::string peer_subject_;          // TLS: the client certificate's subject, "" when none
  bool connected_ = false;
  bool connect_received_ = false;  // its CONNECT waits for the password check: no connect timeout
  bool received_any_ = false;      // a byte has arrived (limits.first-byte-timeout-ms no longer applies)
  prelogin_slot prelogin_;         // given back at login
  bool producer_ = false;  // it has sent a SEND: not read while the memory alarm is set
  bool frames_behind_connect_ = false;  // frames came with its CONNECT: not dropped if it closes
  std::uint64_t login_ticket_ = 0;  // its waiting password check (authenticator::cancel), 0 when none
  bool closing_ = false;  // stop reading; write what is queued, then close
  bool reported_closed_ = false;
  int live_coroutines_ = 0;
  std::uint64_t heartbeat_send_ms_ = 0;
  std::uint64_t heartbeat_receive_ms_ = 0;
  clock::time_point started_ = clock::now();
  clock::time_point last_read_ = clock::now();
  std::size_t written_since_notice_ = 0;
  bool writing_ = false;           // a write is waiting for the socket (slow consumer check)
  clock::time_point write_progress_{};  // when the socket last took bytes of it

  std::atomic<std::size_t> pending_bytes_{0};
  // Reading (read_loop): at most this much at once; a TLS connection starts with the small size.
  static constexpr std::size_t kReadChunk = 64 * 1024;
  static constexpr std::size_t kSmallTlsRead = 4 * 1024;
  std::size_t tls_last_read_ = 0;  // TLS: bytes the last read returned
  // WebSocket: how it came; whether the upgrade was accepted; the close code it ends with.
  websocket_options ws_;
  unsigned refusal_status_ = 400;
  std::string refusal_;
  websocket_event refusal_event_ = websocket_event::refused_handshake;
  bool ws_open_ = false;
  boost::beast::websocket::close_code ws_close_code_ = boost::beast::websocket::close_code::normal;
};

using plain_session = basic_session<boost::asio::ip::tcp::socket>;
using tls_session = basic_session<tls_stream>;
using ws_session = basic_session<ws_stream>;
using wss_session = basic_session<wss_stream>;

extern template class basic_session<boost::asio::ip::tcp::socket>;
extern template class basic_session<tls_stream>;
extern template class basic_session<ws_stream>;
extern template class basic_session<wss_stream>;

}  // namespace escrow::broker
