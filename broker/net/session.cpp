// The network side of a connection (see session.h). All members are touched on the session's
// strand; pending_bytes_ is the one value the core reads from its own strand. Written once for any
// stream; the few places where TLS differs (handshake, how a write is laid out) use if constexpr.
#include "session.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <poll.h>
#include <sys/ioctl.h>
#include <span>
#include <tuple>
#include <vector>

#include "escrow/broker/security/authenticator.h"
#include "escrow/broker/security/names.h"
#include "escrow/common/descriptors.h"

namespace escrow::broker {

namespace asio = boost::asio;
using asio::use_awaitable;
constexpr auto kNoThrow = asio::as_tuple(use_awaitable);
// How often a connection whose login waits for its check looks whether its client has gone.
constexpr std::chrono::milliseconds kClosedLoginPoll{100};

namespace {

// The calling thread's buffer for plain reads. A function of its own, not a thread_local in the
// coroutine: a coroutine resumed on another thread must not keep the first thread's address.
[[gnu::noinline]] std::vector<char>& read_scratch(std::size_t size) {
  thread_local std::vector<char> scratch;
  if (scratch.size() < size) scratch.resize(size);
  return scratch;
}

// Submits a password check to the authenticator and completes with its verdict on the caller's
// executor; the I/O thread is free meanwhile.
// `ticket` gets the check's ticket (for authenticator::cancel) as soon as it is queued.
template <typename Token>
auto async_check(authenticator& auth, login_request request, std::uint64_t& ticket, Token&& token) {
  return asio::async_initiate<Token, void(login_result)>(
      [&auth, &ticket](auto handler, login_request request) {
        auto home = asio::get_associated_executor(handler);
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        ticket = auth.submit(std::move(request), [shared, home](login_result verdict) {
          asio::post(home, [shared, verdict = std::move(verdict)]() mutable { std::move(*shared)(std::move(verdict)); });
        });
      },
      token, std::move(request));
}

// Whether the peer has closed its side (or reset the connection) and sent nothing after its
// CONNECT, without reading. Frames it sent after CONNECT (a script's SEND and DISCONNECT before it
// closes) keep its login: they are handled once it is checked, never dropped unread.
bool peer_has_closed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) != 1 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) return false;
  int unread = 0;
  return (p.revents & (POLLHUP | POLLERR)) != 0 || (::ioctl(fd, FIONREAD, &unread) == 0 && unread == 0);
}

// limits.first-byte-timeout-ms closes sockets that never speak (port scans, a flood of idle
// connections): one line per interval at info level, every one at debug level.
void log_first_byte_timeout(std::uint64_t id, const std::string& peer, std::uint64_t ms) {
  static log_throttle throttle(std::chrono::seconds(10));
  if (std::uint64_t held_back = 0; throttle.due(held_back))
    spdlog::info("connection {} ({}): nothing received within {} ms of connecting (limits.first-byte-timeout-ms); "
                 "closed ({} more such connections closed since the last line; every one at debug level)",
                 id, peer, ms, held_back);
  else
    spdlog::debug("connection {} ({}): nothing received within {} ms of connecting (limits.first-byte-timeout-ms); "
                  "closed", id, peer, ms);
}

// Why a WebSocket connection stopped being read, counted when it was bad input: a message over
// the limit (Beast has closed it with 1009) or a broken WebSocket frame.
void note_websocket_end(websocket_counters* counters, std::uint64_t id, const std::string& peer,
                        const boost::system::error_code& ec) {
  namespace websocket = boost::beast::websocket;
  if (!ec || ec == websocket::error::closed || ec == asio::error::eof || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == asio::error::bad_descriptor)
    return;
  bool too_big = ec == websocket::error::message_too_big || ec == websocket::error::buffer_overflow;
  if (!too_big && ec.category() != boost::beast::websocket::make_error_code(websocket::error::closed).category())
    return;
  if (counters) counters->count(too_big ? websocket_event::closed_too_big : websocket_event::closed_protocol);
  spdlog::info("connection {} ({}): {}; closed", id, peer,
               too_big ? "a WebSocket message over the limit (limits.max-frame-size plus 64 KiB)"
                       : "a WebSocket protocol error: " + ec.message());
}

}  // namespace

template <typename Stream>
basic_session<Stream>::basic_session(Stream stream, broker& core, const broker_config& config)
    : stream_(std::move(stream)), core_(core), config_(config), id_(core.new_connection_id()),
      parser_(config.frames), wake_writer_(stream_.get_executor()), watchdog_timer_(stream_.get_executor()),
      handshake_done_(!kTls) {
  boost::system::error_code ec;
  auto ep = socket().remote_endpoint(ec);
  peer_ip_ = ec ? "unknown" : ep.address().to_string();
  peer_ = ec ? "unknown" : peer_ip_ + ":" + std::to_string(ep.port());
  socket().set_option(asio::ip::tcp::no_delay(true), ec);
}

template <typename Stream>
void basic_session<Stream>::start() {
  spdlog::debug("connection {} from {}{}", id_, peer_, kWs ? (kTls ? " (wss)" : " (websocket)") : kTls ? " (tls)" : "");
  if constexpr (kTls || kWs) {
    asio::co_spawn(stream_.get_executor(), [self = shared_from_this()]() { return self->handshake(); }, asio::detached);
  } else {
    run();
  }
}

template <typename Stream>
void basic_session<Stream>::run() {
  auto self = shared_from_this();
  live_coroutines_ = 3;
  asio::co_spawn(stream_.get_executor(), [self]() { return self->read_loop(); }, asio::detached);
  asio::co_spawn(stream_.get_executor(), [self]() { return self->write_loop(); }, asio::detached);
  asio::co_spawn(stream_.get_executor(), [self]() { return self->watchdog(); }, asio::detached);
}

// The handshakes before STOMP: TLS (tls, wss), then the WebSocket upgrade (ws, wss); each closes
// the connection when it fails. Then the three coroutines start.
template <typename Stream>
asio::awaitable<void> basic_session<Stream>::handshake() {
  // Each step's awaitable named: g++ 12 miscompiled a co_await in an if's condition (SIGILL).
  bool ok = true;
  if constexpr (kTls) {
    auto tls = tls_handshake();
    ok = co_await std::move(tls);
  }
  if constexpr (kWs) {
    if (ok) {
      auto ws = websocket_handshake();
      ok = co_await std::move(ws);
    }
  }
  if (ok) run();
  co_return;
}

// The TLS handshake, bounded by connect-timeout-ms: the timer closes the socket, which ends the
// handshake with an error. Nothing is read or written as STOMP before it succeeds.
template <typename Stream>
asio::awaitable<bool> basic_session<Stream>::tls_handshake() {
  if constexpr (kTls) {
    tls_stream& tls = [this]() -> tls_stream& {
      if constexpr (kWs) return stream_.next_layer();
      else return stream_;
    }();
    auto waiting = first_byte();  // named: see handshake()
    bool spoke = co_await std::move(waiting);
    if (!spoke) co_return false;
    watchdog_timer_.expires_at(started_ + std::chrono::milliseconds(config_.connect_timeout_ms));
    watchdog_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->handshake_done_) return;
      self->handshake_timed_out_ = true;
      self->close_socket();
    });
    auto [ec] = co_await tls.async_handshake(asio::ssl::stream_base::server, kNoThrow);
    handshake_done_ = true;
    watchdog_timer_.cancel();
    if (ec || closing_) {
      if (handshake_timed_out_)
        spdlog::info("connection {} from {}: TLS handshake not finished within {} ms (connect-timeout-ms); closed",
                     id_, peer_, config_.connect_timeout_ms);
      else if (!closing_)
        spdlog::info("connection {} from {}: TLS handshake failed: {}; closed", id_, peer_,
                     handshake_failure_reason(tls, ec));
      if (handshake_timed_out_ && ws_.counters) ws_.counters->count(websocket_event::refused_timeout);
      close_socket();
      co_return false;
    }
    peer_subject_ = peer_certificate_subject(tls);
    spdlog::debug("connection {} from {}: TLS handshake done ({}, {}){}", id_, peer_,
                  SSL_get_version(tls.native_handle()), SSL_get_cipher_name(tls.native_handle()),
                  peer_subject_.empty() ? "" : ", client certificate " + peer_subject_);
  }
  co_return true;
}

// The WebSocket upgrade: read it (unless the HTTP endpoint did), check it, accept it; all within
// connect-timeout-ms of the connection's start. A refusal is an HTTP answer naming the problem.
template <typename Stream>
asio::awaitable<bool> basic_session<Stream>::websocket_handshake() {
  if constexpr (kWs) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    namespace websocket = beast::websocket;
    if constexpr (!kTls) {
      if (!ws_.request) {
        auto waiting = first_byte();  // named: see handshake()
        bool spoke = co_await std::move(waiting);
        if (!spoke) co_return false;
      }
    }
    // The HTTP endpoint read the request: the client has spoken (limits.first-byte-timeout-ms
    // no longer applies; connect-timeout-ms does).
    if (ws_.request) received_any_ = true;
    handshake_timed_out_ = false;
    watchdog_timer_.expires_at(started_ + std::chrono::milliseconds(config_.connect_timeout_ms));
    // Weak: a handshake that failed otherwise does not keep its session (and the connection slots
    // it holds) until the timer runs out.
    watchdog_timer_.async_wait([weak = this->weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->ws_open_) return;
      self->handshake_timed_out_ = true;
      self->close_socket();
    });
    auto timed_out = [this] {
      spdlog::info("connection {} from {}: WebSocket handshake not finished within {} ms (connect-timeout-ms); closed",
                   id_, peer_, config_.connect_timeout_ms);
      if (ws_.counters) ws_.counters->count(websocket_event::refused_timeout);
      close_socket();
    };
    if (!ws_.request) {
      beast::flat_buffer buffer;
      http::request_parser<http::string_body> parser;
      parser.header_limit(8 * 1024);
      parser.body_limit(0);
      auto [ec, n] = co_await http::async_read(stream_.next_layer(), buffer, parser, kNoThrow);
      if (ec) {
        watchdog_timer_.cancel();
        if (handshake_timed_out_) {
          timed_out();
        } else if (ec == http::error::end_of_stream || closing_) {
          close_socket();
        } else {
          refuse(400, "bad request: not an HTTP/1.1 WebSocket upgrade (" + ec.message() + ")",
                                  websocket_event::refused_handshake);
          co_await send_refusal();
        }
        co_return false;
      }
      ws_.request = parser.release();
    }
    upgrade_request& req = *ws_.request;
    if (!websocket::is_upgrade(req)) {
      refuse(400, "bad request: this port serves STOMP over WebSocket: send a WebSocket upgrade "
                                   "(GET with Upgrade: websocket, Connection: Upgrade, Sec-WebSocket-Key and "
                                   "Sec-WebSocket-Version: 13)",
                              websocket_event::refused_handshake);
      co_await send_refusal();
      co_return false;
    }
    std::optional<std::string_view> origin;
    if (auto it = req.find(http::field::origin); it != req.end()) origin = std::string_view(it->value().data(), it->value().size());
    std::string_view host(req[http::field::host].data(), req[http::field::host].size());
    if (!origin_allowed(origin, host, ws_.allowed_origins, {.any_loopback = true, .own_host = ws_.own_host_origin})) {
      refuse(403, "forbidden: the origin '" + loggable(*origin) +
                                       "' may not open STOMP connections here (an operator may add it to "
                                       "allowed-origins)",
                              websocket_event::refused_origin);
      co_await send_refusal();
      co_return false;
    }
    boost::system::error_code peer_error;
    auto remote = socket().remote_endpoint(peer_error);
    if (!core_.authentication() && (peer_error || !remote.address().is_loopback())) {
      refuse(403, "forbidden: without a users file escrowd serves only loopback clients",
                              websocket_event::refused_anonymous);
      co_await send_refusal();
      co_return false;
    }
    std::optional<std::string_view> offered;
    if (auto it = req.find(http::field::sec_websocket_protocol); it != req.end())
      offered = std::string_view(it->value().data(), it->value().size());
    auto protocol = choose_subprotocol(offered);
    if (!protocol) {
      refuse(400, "bad request: no STOMP subprotocol offered (Sec-WebSocket-Protocol: v12.stomp, "
                                   "v11.stomp or v10.stomp)",
                              websocket_event::refused_handshake);
      co_await send_refusal();
      co_return false;
    }
    stream_.set_option(websocket::stream_base::decorator([protocol = *protocol](websocket::response_type& res) {
      res.set(http::field::server, "escrowd");
      if (!protocol.empty()) res.set(http::field::sec_websocket_protocol, protocol);
    }));
    // The close handshake is bounded like the opening one; silence is the watchdog's (heart-beats).
    websocket::stream_base::timeout timeouts{std::chrono::milliseconds(config_.connect_timeout_ms),
                                             websocket::stream_base::none(), false};
    stream_.set_option(timeouts);
    stream_.read_message_max(ws_.max_message_bytes ? ws_.max_message_bytes
                                                   : config_.frames.max_frame_size + 64 * 1024);
    auto [ec] = co_await stream_.async_accept(req, kNoThrow);
    ws_.request.reset();
    if (ec || closing_ || handshake_timed_out_) {
      watchdog_timer_.cancel();
      if (handshake_timed_out_) {
        timed_out();
      } else {
        spdlog::info("connection {} from {}: WebSocket handshake failed: {}; closed", id_, peer_, ec.message());
        if (ws_.counters && !closing_) ws_.counters->count(websocket_event::refused_handshake);
        close_socket();
      }
      co_return false;
    }
    ws_open_ = true;
    watchdog_timer_.cancel();
    if (ws_.counters) {
      ws_.counters->accepted.fetch_add(1, std::memory_order_relaxed);
      ws_.counters->open.fetch_add(1, std::memory_order_relaxed);
    }
    spdlog::debug("connection {} from {}: WebSocket open (subprotocol '{}')", id_, peer_, *protocol);
  }
  co_return true;
}

// Answers an upgrade that may not proceed with an HTTP status and why, then closes.
template <typename Stream>
void basic_session<Stream>::refuse(unsigned status, std::string why, websocket_event event) {
  refusal_status_ = status;
  refusal_ = std::move(why);
  refusal_event_ = event;
}

template <typename Stream>
asio::awaitable<void> basic_session<Stream>::send_refusal() {
  if constexpr (kWs) {
    unsigned status = refusal_status_;
    const std::string& why = refusal_;
    websocket_event event = refusal_event_;
    namespace http = boost::beast::http;
    static log_throttle throttle(std::chrono::seconds(10));
    if (std::uint64_t held_back = 0; throttle.due(held_back))
      spdlog::info("connection {} from {}: WebSocket upgrade refused ({}): {} ({} more refusals since the last such "
                   "line; every one at debug level)", id_, peer_, status, why, held_back);
    else
      spdlog::debug("connection {} from {}: WebSocket upgrade refused ({}): {}", id_, peer_, status, why);
    if (ws_.counters) ws_.counters->count(event);
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "escrowd");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.set(http::field::connection, "close");
    res.body() = why + "\n";
    res.prepare_payload();
    // A peer that does not read its answer is not waited for.
    watchdog_timer_.expires_after(std::chrono::seconds(1));
    watchdog_timer_.async_wait([weak = this->weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->close_socket();
    });
    auto [ec, n] = co_await http::async_write(stream_.next_layer(), res, kNoThrow);
    watchdog_timer_.cancel();
    close_socket();
  }
  co_return;
}

// The end of a WebSocket connection: a close frame with the code of why (1000, or 1008 after an
// ERROR), bounded by connect-timeout-ms. A connection the peer closed, or that failed, has none.
template <typename Stream>
asio::awaitable<void> basic_session<Stream>::websocket_close() {
  if constexpr (kWs) {
    if (!ws_open_ || !stream_.is_open()) co_return;
    auto [ec] = co_await stream_.async_close(ws_close_code_, kNoThrow);
  }
  co_return;
}

// TLS: waits for the client's first byte (its ClientHello), at most limits.first-byte-timeout-ms
// (and never past connect-timeout-ms); false, the socket closed, when none came or it failed.
template <typename Stream>
asio::awaitable<bool> basic_session<Stream>::first_byte() {
  auto limit = std::min(config_.first_byte_timeout_ms, config_.connect_timeout_ms);
  watchdog_timer_.expires_at(started_ + std::chrono::milliseconds(limit));
  watchdog_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->received_any_) return;
    self->handshake_timed_out_ = true;
    self->close_socket();
  });
  auto [ec] = co_await socket().async_wait(asio::ip::tcp::socket::wait_read, kNoThrow);
  bool timed_out = handshake_timed_out_;
  received_any_ = !ec && !timed_out && !closing_;
  watchdog_timer_.cancel();
  if (received_any_) co_return true;
  handshake_timed_out_ = false;
  if (timed_out && limit < config_.connect_timeout_ms)
    log_first_byte_timeout(id_, peer_, limit);
  else if (timed_out)
    spdlog::info("connection {} from {}: {} handshake not finished within {} ms (connect-timeout-ms); closed", id_,
                 peer_, kTls ? "TLS" : "WebSocket", config_.connect_timeout_ms);
  if (timed_out && ws_.counters) ws_.counters->count(websocket_event::refused_timeout);
  close_socket();
  co_return false;
}

template <typename Stream>
void basic_session<Stream>::close_socket() {
  boost::system::error_code ec;
  socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket().close(ec);
}

template <typename Stream>
void basic_session<Stream>::stop() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    self->closing_ = true;
    self->close_socket();
    self->wake_writer_.cancel();
    self->watchdog_timer_.cancel();
  });
}

template <typename Stream>
void basic_session<Stream>::send(std::string bytes) {
  pending_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  asio::post(stream_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes)]() mutable {
    self->enqueue(std::move(bytes));
  });
}

template <typename Stream>
void basic_session<Stream>::send_and_close(std::string bytes, closing why) {
  pending_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  asio::post(stream_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes), why]() mutable {
    self->enqueue(std::move(bytes), why);
  });
}

template <typename Stream>
void basic_session<Stream>::enqueue(std::string bytes, std::optional<closing> ending) {
  if (ending == closing::after_error) ws_close_code_ = boost::beast::websocket::close_code::policy_error;
  if (!bytes.empty()) outgoing_.push_back(std::move(bytes));
  if (ending) closing_ = true;
  wake_writer_.cancel();
}

// A protocol error seen by the session: ERROR, then close; nothing more is read or handed on.
template <typename Stream>
void basic_session<Stream>::fail(const std::string& problem, const std::optional<std::string>& receipt) {
  spdlog::info("connection {} ({}): ERROR {}", id_, peer_, problem);
  send_error(problem, receipt);
}

// ERROR, then close, without a log line (the caller logs, or not).
template <typename Stream>
void basic_session<Stream>::send_error(const std::string& problem, const std::optional<std::string>& receipt) {
  frame e{"ERROR", {{"message", problem}}, {}};
  if (receipt) e.add("receipt-id", *receipt);
  e.body = problem + "\n";
  e.add("content-type", "text/plain");
  e.add("content-length", std::to_string(e.body.size()));
  std::string bytes = encode(e);
  pending_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  enqueue(std::move(bytes), closing::after_error);
}

template <typename Stream>
bool basic_session<Stream>::on_connect(const frame& f) {
  // accept-version absent: a STOMP 1.0 client.
  std::string_view accept = f.get("accept-version", "1.0");
  std::optional<stomp_version> chosen;
  std::size_t pos = 0;
  while (pos <= accept.size()) {
    std::size_t comma = accept.find(',', pos);
    std::string_view v = accept.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    std::optional<stomp_version> candidate;
    if (v == "1.2") candidate = stomp_version::v1_2;
    if (v == "1.1") candidate = stomp_version::v1_1;
    if (v == "1.0") candidate = stomp_version::v1_0;
    if (candidate && (!chosen || *candidate > *chosen)) chosen = candidate;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (!chosen) {
    frame e{"ERROR", {{"version", "1.0,1.1,1.2"}, {"message", "no common protocol version: this broker speaks 1.0, 1.1 and 1.2"}}, {}};
    e.body = "Supported protocol versions are 1.0, 1.1 and 1.2; the client offered " + std::string(accept) + "\n";
    e.add("content-type", "text/plain");
    e.add("content-length", std::to_string(e.body.size()));
    std::string bytes = encode(e);
    pending_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
    enqueue(std::move(bytes), closing::after_error);
    return false;
  }
  std::uint64_t client_send = 0, client_receive = 0;
  if (const std::string* hb = f.find("heart-beat")) {
    auto parsed = parse_heart_beat(*hb);
    if (!parsed) {
      fail("invalid heart-beat header '" + loggable(*hb) + "': use two non-negative integers, e.g. 10000,10000",
           std::nullopt);
      return false;
    }
    // Clamped, so that no deadline computed from them leaves the clock's range.
    client_send = std::min(parsed->first, config_.heartbeat_max_ms);
    client_receive = std::min(parsed->second, config_.heartbeat_max_ms);
  }
  parser_.set_version(*chosen);
  connected_ = true;
  prelogin_.release();  // logged in: no longer counts against limits.max-unauthenticated-*
  connect_info info;
  info.version = *chosen;
  info.peer_certificate_subject = peer_subject_;
  info.client_id = std::string(f.get("client-id"));
  info.login = std::string(f.get("login"));
  info.peer = peer_;
  info.user = std::move(login_.user);
  info.roles = std::move(login_.roles);
  heartbeat_send_ms_ = negotiate_heart_beat(config_.heartbeat_send_ms, client_receive);
  heartbeat_receive_ms_ = negotiate_heart_beat(client_send, config_.heartbeat_receive_ms);
  // CONNECTED carries what the server offers; the client derives the same intervals from it.
  info.heartbeat_send_ms = client_receive ? config_.heartbeat_send_ms : 0;
  info.heartbeat_receive_ms = client_send ? config_.heartbeat_receive_ms : 0;
  core_.on_connect(id_, shared_from_this(), std::move(info));
  watchdog_timer_.cancel();  // re-arm for the heart-beat interval and the slow-consumer check
  wake_writer_.cancel();                                // re-arm with the heart-beat interval
  return true;
}

template <typename Stream>
bool basic_session<Stream>::on_frame(frame& f) {
  bool is_connect = f.command == "CONNECT" || f.command == "STOMP";
  if (!connected_) {
    if (!is_connect) {
      fail("the first frame must be CONNECT or STOMP, not " + f.command, f.find("receipt") ? std::optional<std::string>(*f.find("receipt")) : std::nullopt);
      return false;
    }
    return on_connect(f);
  }
  std::vector<frame> one;
  one.push_back(std::move(f));
  core_.on_frames(id_, std::move(one));
  return true;
}

// Checks CONNECT's credentials (authenticator.h): answered at once when no password check is
// needed (a login that already succeeded, a client certificate), else queued for a login thread.
// From here on the connect timeout no longer applies: the client has sent its CONNECT, and the
// time its check waits for its turn is the broker's, not the client's.
template <typename Stream>
asio::awaitable<login_result> basic_session<Stream>::authenticate(const frame& f) {
  authenticator* auth = core_.authentication();
  // A page of the console opened this connection with its session's cookie: that session's user,
  // unless CONNECT names a login of its own.
  if (ws_.console && f.get("login").empty()) co_return login_result{true, ws_.console->user, ws_.console->roles, {}};
  if (!auth) co_return login_result{true, {}, {}, {}};
  login_request request{peer_ip_, std::string(f.get("login")), std::string(f.get("passcode")), peer_subject_};
  if (auto at_once = auth->answer_at_once(request)) co_return std::move(*at_once);
  connect_received_ = true;
  watchdog_timer_.cancel();  // from now on it watches for the client closing while the check waits
  // Named, not a temporary inside the co_await expression: g++ 12 destroyed such temporaries'
  // members twice (free(): invalid pointer at the first login).
  auto check = async_check(*auth, std::move(request), login_ticket_, use_awaitable);
  login_result verdict = co_await std::move(check);
  login_ticket_ = 0;
  co_return verdict;
}

template <typename Stream>
asio::awaitable<void> basic_session<Stream>::read_loop() {
  // A plain connection waits for its socket to be readable without a buffer, then reads into this
  // thread's scratch buffer and parses at once: an idle connection holds no read buffer
  // (docs/performance.md, "Idle connections"). A TLS connection reads into a buffer of its own
  // (asio's TLS stream keeps the records it has read), which grows while reads fill it and goes
  // back to its small size when they no longer do.
  if constexpr (!kTls && !kWs) {
    boost::system::error_code ignored;
    stream_.non_blocking(true, ignored);
  }
  std::vector<char> tls_buffer(kTls || kWs ? kSmallTlsRead : 0);
  std::vector<frame> frames;
  boost::system::error_code read_error;  // WebSocket: why reading ended, for the counters
  asio::steady_timer pause(stream_.get_executor());
  while (!closing_) {
    // Back-pressure: while more than max-unstored-bytes of received frames wait for the core or
    // the disk, nothing more is read from the connections holding more than their share of them
    // (from every one above twice the limit); TCP then slows those producers down. Short polls:
    // the wait ends as soon as the committer has caught up.
    for (bool logged = false; connected_ && !closing_ && core_.reading_paused(id_); logged = true) {
      if (!logged)
        spdlog::debug("connection {} ({}): reading paused: received frames wait for the core or the disk "
                      "(limits.max-unstored-bytes)", id_, peer_);
      last_read_ = clock::now();  // our choice, not the client's silence
      pause.expires_after(std::chrono::milliseconds(2));
      co_await pause.async_wait(kNoThrow);
    }
    // The memory alarm (limits.memory-high-watermark): a connection that has sent a SEND is not
    // read while it is set; the others go on, so consumers can take and acknowledge what holds the
    // memory. Polled every 10 ms: the alarm is measured every 100.
    for (bool logged = false; producer_ && !closing_ && core_.memory_alarm_set(); logged = true) {
      if (!logged)
        spdlog::debug("connection {} ({}): reading paused: the memory alarm is set (limits.memory-high-watermark)",
                      id_, peer_);
      last_read_ = clock::now();
      pause.expires_after(std::chrono::milliseconds(10));
      co_await pause.async_wait(kNoThrow);
    }
    // A SEND of this connection waits for room in a full queue (address-full-policy BLOCK): nothing
    // more is read until the core takes it. The connection is not timed out meanwhile (our choice,
    // not the client's silence); polled every 10 ms.
    for (bool logged = false; connected_ && !closing_ && core_.sends_blocked(id_); logged = true) {
      if (!logged)
        spdlog::debug("connection {} ({}): reading paused: a SEND waits for room in a full queue "
                      "(address-full-policy BLOCK)", id_, peer_);
      last_read_ = clock::now();
      pause.expires_after(std::chrono::milliseconds(10));
      co_await pause.async_wait(kNoThrow);
    }
    if (closing_) break;
    boost::system::error_code ec;
    std::size_t n = 0;
    const char* buffer = nullptr;
    if constexpr (kTls || kWs) {
      if (tls_last_read_ == tls_buffer.size() && tls_buffer.size() < kReadChunk) {
        tls_buffer.resize(tls_buffer.size() * 2);
      } else if (tls_last_read_ < tls_buffer.size() / 8 && tls_buffer.size() > kSmallTlsRead) {
        std::vector<char>(kSmallTlsRead).swap(tls_buffer);
      }
      std::tie(ec, n) = co_await stream_.async_read_some(asio::buffer(tls_buffer), kNoThrow);
      tls_last_read_ = n;
      read_error = ec;
      buffer = tls_buffer.data();
    } else {
      for (;;) {
        std::vector<char>& scratch = read_scratch(kReadChunk);  // this thread's, after any resumption
        buffer = scratch.data();  // used before the next suspension only
        n = stream_.read_some(asio::buffer(scratch), ec);  // the socket is non-blocking
        if (ec != asio::error::would_block && ec != asio::error::try_again) break;
        std::tie(ec) = co_await stream_.async_wait(asio::ip::tcp::socket::wait_read, kNoThrow);
        if (ec || closing_) break;
      }
    }
    if (ec || closing_) break;
    received_any_ = true;
    if (core_.input_stopped()) continue;  // a graceful stop: dropped; the loop waits to be closed
    last_read_ = clock::now();
    // A TLS ClientHello (a handshake record: 0x16 0x03) on a plain listener: the client expects
    // TLS, so a STOMP ERROR would be noise to it. Say so in the log and close.
    if (!kTls && !kWs && !connected_ && n >= 2 && buffer[0] == 0x16 && buffer[1] == 0x03) {
      spdlog::info("connection {} from {}: a TLS handshake on a plain listener (the client should use a "
                   "TLS listener's port); closed",
                   id_, peer_);
      break;
    }
    frames.clear();
    bool ok = parser_.feed(std::string_view(buffer, n), frames);
    if (!co_await hand_on(frames)) break;
    if (!ok) {
      if (ws_.counters) ws_.counters->count(websocket_event::closed_frame_error);
      fail(parser_.error(), parser_.error_receipt());
      break;
    }
  }
  if constexpr (kWs) note_websocket_end(ws_.counters, id_, peer_, read_error);
  closing_ = true;
  wake_writer_.cancel();
  coroutine_done();
}

// The frames of one read: CONNECT (and anything before the connection is logged in) handled here,
// the rest handed to the core in one post. False when the connection must stop reading.
template <typename Stream>
asio::awaitable<bool> basic_session<Stream>::hand_on(std::vector<frame>& frames) {
  std::vector<frame> for_core;
  for (auto& f : frames) {
    if (connected_ && f.command != "CONNECT" && f.command != "STOMP") {
      producer_ = producer_ || f.command == "SEND";
      for_core.push_back(std::move(f));
      continue;
    }
    if (!for_core.empty()) core_.on_frames(id_, std::move(for_core));
    for_core.clear();
    if (!connected_ && (f.command == "CONNECT" || f.command == "STOMP")) {
      frames_behind_connect_ = &f != &frames.back();  // read with it: they keep its check
      login_ = co_await authenticate(f);
      if (closing_) co_return false;
      if (!login_.ok) {
        fail(login_.problem, f.find("receipt") ? std::optional<std::string>(*f.find("receipt")) : std::nullopt);
        co_return false;
      }
    }
    if (!on_frame(f)) co_return false;
  }
  if (!for_core.empty()) core_.on_frames(id_, std::move(for_core));
  co_return true;
}

template <typename Stream>
asio::awaitable<void> basic_session<Stream>::write_loop() {
  std::vector<std::string> writing;
  std::vector<asio::const_buffer> buffers;
  for (;;) {
    if (outgoing_.empty()) {
      if (closing_) break;
      if (heartbeat_send_ms_ && connected_) {
        wake_writer_.expires_after(std::chrono::milliseconds(heartbeat_send_ms_));
      } else {
        wake_writer_.expires_at(clock::time_point::max());
      }
      auto [ec] = co_await wake_writer_.async_wait(kNoThrow);
      // The timer ran out with nothing to send: a heart-beat keeps the client's watchdog quiet.
      if (!ec && outgoing_.empty() && !closing_ && heartbeat_send_ms_) {
        pending_bytes_.fetch_add(1, std::memory_order_relaxed);
        outgoing_.push_back("\n");
      }
      continue;
    }
    writing.assign(std::make_move_iterator(outgoing_.begin()), std::make_move_iterator(outgoing_.end()));
    outgoing_.clear();
    buffers.clear();
    std::size_t total = 0;
    for (auto& s : writing) {
      buffers.push_back(asio::buffer(s));
      total += s.size();
    }
    if constexpr (kTls || kWs) {
      // An SSL stream encrypts one buffer of a sequence per record; many small frames would each
      // cost a record and a system call. Copied together, they go out in as few as fit.
      flat_.clear();
      flat_.reserve(total);
      for (auto& s : writing) flat_ += s;
      buffers.assign(1, asio::buffer(flat_));
    }
    // Written piece by piece (what async_write does inside) so that the watchdog sees progress:
    // a slow reader that takes something is not a reader that takes nothing.
    writing_ = true;
    write_progress_ = clock::now();
    boost::system::error_code ec;
    std::size_t first = 0;  // buffers[first..] are left to write
    if constexpr (kWs) {
      // One WebSocket message per write, in pieces (so that the watchdog sees progress); text
      // when it is UTF-8, which is what browsers' STOMP clients expect.
      stream_.text(valid_utf8(flat_));
      constexpr std::size_t kPiece = 64 * 1024;
      for (std::size_t off = 0; off < flat_.size();) {
        std::size_t take = std::min(kPiece, flat_.size() - off);
        auto [e, n] = co_await stream_.async_write_some(off + take == flat_.size(),
                                                        asio::buffer(flat_.data() + off, take), kNoThrow);
        if (e) {
          ec = e;
          break;
        }
        off += take;
        write_progress_ = clock::now();
      }
    } else {
      while (first < buffers.size()) {
        auto [e, n] = co_await stream_.async_write_some(
            std::span<const asio::const_buffer>(buffers.data() + first, buffers.size() - first), kNoThrow);
        if (e) {
          ec = e;
          break;
        }
        write_progress_ = clock::now();
        while (n > 0 && first < buffers.size()) {
          std::size_t take = std::min(n, buffers[first].size());
          buffers[first] += take;
          n -= take;
          if (buffers[first].size() == 0) ++first;
        }
      }
    }
    writing_ = false;
    pending_bytes_.fetch_sub(total, std::memory_order_relaxed);
    writing.clear();
    if constexpr (kTls || kWs) {
      if (flat_.capacity() > 1024 * 1024) std::string().swap(flat_);  // not kept after a large burst
    }
    if (ec) break;
    written_since_notice_ += total;
    // The core stops delivering to a connection with too much unwritten; tell it when it drained.
    if (outgoing_.empty() && written_since_notice_ >= config_.max_pending_bytes / 4) {
      written_since_notice_ = 0;
      core_.on_writable(id_);
    }
  }
  closing_ = true;
  co_await websocket_close();
  close_socket();
  watchdog_timer_.cancel();
  coroutine_done();
}

template <typename Stream>
asio::awaitable<void> basic_session<Stream>::watchdog() {
  while (!closing_) {
    auto now = clock::now();
    if (!connected_ && connect_received_) {
      // Its login waits for its check: a client that closes meanwhile gives up its place at once
      // (authenticator::cancel), so CONNECTs sent by clients that leave hold no login slot.
      if (login_ticket_ && !frames_behind_connect_ && peer_has_closed(socket().native_handle())) {
        core_.authentication()->cancel(std::exchange(login_ticket_, 0));
        watchdog_timer_.expires_at(clock::time_point::max());
      } else {
        watchdog_timer_.expires_at(now + kClosedLoginPoll);
      }
    } else if (!connected_) {
      auto deadline = started_ + std::chrono::milliseconds(config_.connect_timeout_ms);
      // limits.first-byte-timeout-ms: a socket that has said nothing at all goes well before a
      // slow CONNECT would (an idle flood holds connections for seconds, not connect-timeout-ms).
      auto silent_until = started_ + std::chrono::milliseconds(config_.first_byte_timeout_ms);
      if (!received_any_ && now >= silent_until && silent_until < deadline) {
        log_first_byte_timeout(id_, peer_, config_.first_byte_timeout_ms);
        send_error("nothing received within " + std::to_string(config_.first_byte_timeout_ms) +
                       " ms of connecting (limits.first-byte-timeout-ms)",
                   std::nullopt);
        break;
      }
      if (!received_any_) deadline = std::min(deadline, silent_until);
      if (now >= deadline) {
        spdlog::info("connection {} ({}): no CONNECT within {} ms; closing", id_, peer_, config_.connect_timeout_ms);
        fail("no CONNECT frame within " + std::to_string(config_.connect_timeout_ms) + " ms", std::nullopt);
        break;
      }
      watchdog_timer_.expires_at(deadline);
    } else if (heartbeat_receive_ms_) {
      auto allowed = std::chrono::milliseconds(heartbeat_receive_ms_ + config_.heartbeat_grace_ms);
      if (now - last_read_ > allowed) {
        spdlog::info("connection {} ({}): nothing received for {} ms (heart-beat {} ms); closing", id_, peer_,
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - last_read_).count(),
                     heartbeat_receive_ms_);
        fail("heart-beat timeout: nothing received for longer than " + std::to_string(heartbeat_receive_ms_) +
                 " ms plus a grace of " + std::to_string(config_.heartbeat_grace_ms) + " ms",
             std::nullopt);
        break;
      }
      watchdog_timer_.expires_at(last_read_ + allowed + std::chrono::milliseconds(1));
    } else {
      watchdog_timer_.expires_at(clock::time_point::max());
    }
    // A reader that takes nothing for slow-consumer-timeout-ms while a write waits on it: its
    // unsent frames stay bounded by max-pending-bytes meanwhile (the core stops delivering), and
    // then it goes, so that its messages can go to someone else. Checked twice per timeout.
    if (connected_ && config_.slow_consumer_timeout_ms) {
      auto limit = std::chrono::milliseconds(config_.slow_consumer_timeout_ms);
      if (writing_ && now - write_progress_ > limit) {
        spdlog::warn("connection {} ({}): disconnected as a slow consumer: it read nothing of its frames for {} ms "
                     "({} bytes unsent; limits.slow-consumer-timeout-ms is {})",
                     id_, peer_, std::chrono::duration_cast<std::chrono::milliseconds>(now - write_progress_).count(),
                     pending_bytes_.load(std::memory_order_relaxed), config_.slow_consumer_timeout_ms);
        if (ws_.counters) ws_.counters->count(websocket_event::closed_slow_reader);
        closing_ = true;
        close_socket();
        wake_writer_.cancel();
        break;
      }
      watchdog_timer_.expires_at(std::min(watchdog_timer_.expiry(), now + limit / 2));
    }
    co_await watchdog_timer_.async_wait(kNoThrow);
  }
  coroutine_done();
}

template <typename Stream>
void basic_session<Stream>::coroutine_done() {
  if (--live_coroutines_ > 0) return;
  prelogin_.release();
  if (ws_open_ && ws_.counters) ws_.counters->open.fetch_sub(1, std::memory_order_relaxed);
  ws_open_ = false;
  if (connected_ && !reported_closed_) {
    reported_closed_ = true;
    core_.on_closed(id_);
  }
  spdlog::debug("connection {} ({}) closed", id_, peer_);
}

template class basic_session<asio::ip::tcp::socket>;
template class basic_session<tls_stream>;
template class basic_session<ws_stream>;
template class basic_session<wss_stream>;

}  // namespace escrow::broker
