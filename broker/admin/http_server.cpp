// Boost.Beast HTTP/1.1 for /metrics, /status and /health. Each connection is a coroutine on its own
// strand: read one request (headers at most 8 KiB, else 431; a body at most 4 KiB, else 413; 10 s
// for the whole request to arrive), answer, repeat while the client keeps the connection alive. At
// most [http] max-connections are served at once: the next is answered 503 and closed at accept.
// With no file descriptor left, the accept loop closes what waits and pauses (descriptors.h). A request must carry exactly one Host header
// naming this endpoint (400 without, 421 for another name) and, with a token file, the bearer token
// (401; /health needs none). Then only GET and HEAD; other methods get 405, other paths 404.
#include "escrow/broker/admin/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <array>
#include <atomic>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>

#include "escrow/broker/core/broker.h"
#include "await_core.h"
#include "console_api.h"
#include "console_sessions.h"
#include "escrow/broker/admin/metrics_text.h"
#include "escrow/broker/core/metrics.h"
#include "escrow/common/descriptors.h"

namespace escrow::broker {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::string_view kVersion = "0.1.0";  // as escrowd's CONNECTED frame says (broker.cpp)
constexpr std::size_t kHeaderLimit = 8 * 1024;
constexpr std::size_t kBodyLimit = 4 * 1024;
constexpr auto kTimeout = std::chrono::seconds(10);
constexpr auto kRefusalLogInterval = std::chrono::seconds(60);
// Out of file descriptors: how long the accept loop pauses, and the most waiting connections it
// closes each time (each peer reads a 503 instead of hanging in the listen queue).
constexpr auto kDescriptorPause = std::chrono::milliseconds(100);
constexpr int kShedPerPause = 256;
// The most of a refused request's bytes read (and dropped) before the connection closes, so that
// the client reads the answer instead of a reset.
constexpr std::size_t kDrainLimit = 64 * 1024;
constexpr auto kDrainTimeout = std::chrono::seconds(1);

using response = http::response<http::string_body>;

response make_response(const http::request<http::string_body>& req, http::status status,
                       std::string_view content_type, std::string body) {
  response res{status, req.version()};
  res.set(http::field::server, "escrowd/" + std::string(kVersion));
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(req.keep_alive());
  res.content_length(body.size());
  if (req.method() != http::verb::head) res.body() = std::move(body);
  return res;
}

// A value from the request, safe to put in a plain-text answer and the log: printable ASCII, short.
std::string printable(std::string_view value) {
  std::string out;
  for (char c : value.substr(0, 100)) out += (c >= ' ' && c < 0x7f) ? c : '?';
  return value.size() > 100 ? out + "..." : out;
}

// Refused requests are logged at debug level, and one of them a minute at warn level, so that a
// misconfigured scraper (or someone trying) shows in the log without flooding it.
void log_refusal(const std::string& peer, const std::string& why) {
  static std::atomic<std::int64_t> last_warned{std::numeric_limits<std::int64_t>::min()};
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  auto last = last_warned.load();
  auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(kRefusalLogInterval).count();
  if ((last == std::numeric_limits<std::int64_t>::min() || now - last >= interval) &&
      last_warned.compare_exchange_strong(last, now))
    spdlog::warn("http: refused a request from {}: {} (one refusal a minute is logged at this level, every one "
                 "at debug level)", peer, why);
  else
    spdlog::debug("http: refused a request from {}: {}", peer, why);
}

asio::awaitable<response> answer(const http::request<http::string_body>& req, http_context& context,
                                 const std::string& peer, const std::string& peer_ip, bool loopback) {
  constexpr std::string_view text = "text/plain; charset=utf-8";
  std::string_view target(req.target().data(), req.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  std::shared_ptr<const http_access> access = context.access();

  // The Host check comes first: a page that re-pointed its own name at this address learns nothing.
  if (req.count(http::field::host) != 1) {
    log_refusal(peer, "no Host header, or more than one");
    co_return make_response(req, http::status::bad_request, text, "bad request: a request needs one Host header\n");
  }
  std::string_view host(req[http::field::host].data(), req[http::field::host].size());
  if (!host_allowed(*access, host)) {
    log_refusal(peer, "Host '" + printable(host) + "' is not allowed ([http] allowed-hosts)");
    co_return make_response(req, http::status::misdirected_request, text,
                            "misdirected request: Host '" + printable(host) +
                                "' is not a name of this endpoint (an operator may add it to [http] allowed-hosts)\n");
  }
  // /stomp is STOMP's to authenticate (its CONNECT), not the bearer token's.
  if (path == "/stomp" && context.upgrade)
    co_return make_response(req, http::status::upgrade_required, text,
                            "upgrade required: /stomp serves STOMP over WebSocket (RFC 6455, subprotocol v12.stomp)\n");
  // The console authenticates with its session cookie (console_api.h), not the bearer token.
  if (context.console && is_console_path(path)) {
    auto op = answer_console(req, context, peer_ip, loopback);  // named: see console_api.cpp's run_admin
    co_return co_await std::move(op);
  }
  // /health stays open to a load balancer that cannot send a token: it says only ok or why not.
  if (!access->tokens.empty() && path != "/health") {
    auto headers = req.count(http::field::authorization);
    bearer_check check = headers == 0 ? bearer_check::missing
                         : headers > 1
                             ? bearer_check::wrong
                             : check_bearer(*access, std::string_view(req[http::field::authorization].data(),
                                                                      req[http::field::authorization].size()));
    if (check != bearer_check::ok) {
      bool missing = check == bearer_check::missing;
      log_refusal(peer, missing ? "no bearer token" : "wrong bearer token");
      auto res = make_response(req, http::status::unauthorized, text,
                               missing ? "unauthorized: this endpoint needs Authorization: Bearer <token>\n"
                                       : "unauthorized: the bearer token is not valid\n");
      res.set(http::field::www_authenticate,
              missing ? R"(Bearer realm="escrowd")" : R"(Bearer realm="escrowd", error="invalid_token")");
      co_return res;
    }
  }
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    auto res = make_response(req, http::status::method_not_allowed, text,
                             "method not allowed: only GET and HEAD are served here\n");
    res.set(http::field::allow, "GET, HEAD");
    co_return res;
  }
  if (path != "/metrics" && path != "/status" && path != "/health")
    co_return make_response(req, http::status::not_found, text,
                            "not found: this endpoint serves /metrics, /status and /health\n");

  auto start = [&context](auto done) mutable {
    context.core.collect_metrics(std::function<void(metrics_snapshot)>(std::move(done)));
  };
  auto collecting = wait_for<metrics_snapshot>(std::move(start));
  metrics_snapshot s = co_await std::move(collecting);
  context.fill(s);

  if (path == "/metrics")
    co_return make_response(req, http::status::ok, "text/plain; version=0.0.4; charset=utf-8", write_prometheus(s));
  if (path == "/status") co_return make_response(req, http::status::ok, "application/json", write_status_json(s));
  if (!s.store.writable)
    co_return make_response(req, http::status::service_unavailable, text,
                            "store not writable: a commit failed; restart escrowd (see its log)\n");
  if (!s.listeners_up)
    co_return make_response(req, http::status::service_unavailable, text, "listeners not up: starting or stopping\n");
  co_return make_response(req, http::status::ok, text, "ok\n");
}

// An answer to a request that could not be read whole (431, 413): plain text, and the connection closes.
response unread_request_response(http::status status, std::string body) {
  response res{status, 11};
  res.set(http::field::server, "escrowd/" + std::string(kVersion));
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(false);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// A raw HTTP/1.1 answer that closes the connection, for refusals at accept (no request read).
std::string raw_response(std::string_view status_line, std::string_view body) {
  return fmt::format("HTTP/1.1 {}\r\nServer: escrowd/{}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
                     status_line, kVersion, body.size(), body);
}

// The request broke the header or body limit: answer 431 or 413, read what else the client sent
// (a little, briefly), and let the connection close.
asio::awaitable<void> refuse_unread(beast::tcp_stream& stream, const boost::system::error_code& ec,
                                    const std::string& peer) {
  bool header = ec == http::error::header_limit;
  log_refusal(peer, header ? "its header section is over 8192 bytes (431)" : "its body is over 4096 bytes (413)");
  response res = header ? unread_request_response(http::status::request_header_fields_too_large,
                                                  "request header fields too large: at most 8192 bytes of headers\n")
                        : unread_request_response(http::status::payload_too_large,
                                                  "content too large: a request body is at most 4096 bytes\n");
  stream.expires_after(kTimeout);
  auto [wec, written] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
  if (wec) co_return;
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 4096> sink;
  stream.expires_after(kDrainTimeout);
  for (std::size_t drained = 0; drained < kDrainLimit;) {
    auto [rec, n] = co_await stream.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
    if (rec) break;
    drained += n;
  }
}

// A WebSocket upgrade at /stomp with an allowed Host (the Origin is the session's to check).
bool wants_stomp(const http::request<http::string_body>& req, http_context& context) {
  std::string_view target(req.target().data(), req.target().size());
  if (target.substr(0, target.find('?')) != "/stomp" || !context.upgrade || !beast::websocket::is_upgrade(req))
    return false;
  if (req.count(http::field::host) != 1) return false;
  return host_allowed(*context.access(), std::string_view(req[http::field::host].data(), req[http::field::host].size()));
}

// One HTTP connection counted in http_context::open_connections while it lives.
struct counted_connection {
  explicit counted_connection(http_context& c) : context(&c) { context->open_connections.fetch_add(1); }
  counted_connection(counted_connection&& other) noexcept : context(std::exchange(other.context, nullptr)) {}
  counted_connection(const counted_connection&) = delete;
  counted_connection& operator=(const counted_connection&) = delete;
  counted_connection& operator=(counted_connection&&) = delete;
  ~counted_connection() {
    if (context) context->open_connections.fetch_sub(1);
  }
  http_context* context;
};

asio::awaitable<void> serve(tcp::socket socket, http_context& context, counted_connection) {
  boost::system::error_code peer_error;
  auto remote = socket.remote_endpoint(peer_error);
  std::string peer =
      peer_error ? "an unknown peer" : remote.address().to_string() + ":" + std::to_string(remote.port());
  std::string peer_ip = peer_error ? "unknown" : remote.address().to_string();
  bool loopback = !peer_error && remote.address().is_loopback();
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer(kHeaderLimit + kBodyLimit);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(kBodyLimit);
    stream.expires_after(kTimeout);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    // Beast's own header limit leaves out part of the start of the request: the bytes the header
    // took (request line, fields, blank line) are the exact measure.
    if (!ec && n > kHeaderLimit) ec = http::error::header_limit;
    if (!ec) std::tie(ec, n) = co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    if (ec == http::error::header_limit || ec == http::error::body_limit) {
      co_await refuse_unread(stream, ec, peer);
      break;
    }
    if (ec) {
      // end_of_stream and timeouts are the ordinary end of a connection; anything else is a
      // client that broke HTTP, worth a debug line.
      if (ec != http::error::end_of_stream && ec != beast::error::timeout)
        spdlog::debug("http: request not read: {}", ec.message());
      break;
    }
    http::request<http::string_body> req = parser.release();
    if (wants_stomp(req, context)) {
      // The session takes the connection over; this coroutine's part ends here.
      std::optional<console_user> user = console_user_of(req, context);  // before req is moved
      context.upgrade(stream.release_socket(), stomp_upgrade{std::move(req), std::move(user)});
      co_return;
    }
    response res = co_await answer(req, context, peer, peer_ip, loopback);
    bool keep_alive = res.keep_alive();
    stream.expires_after(kTimeout);
    auto [wec, written] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    if (wec || !keep_alive) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// No file descriptor left: close what waits (each peer reads `farewell`), log once per interval, pause.
asio::awaitable<void> pause_for_descriptors(tcp::acceptor& acceptor, spare_descriptor& spare,
                                            std::string_view farewell, const boost::system::error_code& ec) {
  static log_throttle throttle(std::chrono::seconds(10));
  int shed = acceptor.is_open() ? spare.shed(acceptor.native_handle(), farewell, kShedPerPause) : 0;
  if (std::uint64_t held_back = 0; throttle.due(held_back))
    spdlog::warn("http: accept failed: {}: escrowd has no file descriptor left; answered {} waiting connections "
                 "503 and pauses accepting for {} ms each time ({} more times since the last such line). Raise "
                 "LimitNOFILE (ulimit -n) or lower [http] max-connections and limits.max-connections",
                 ec.message(), shed, kDescriptorPause.count(), held_back);
  asio::steady_timer pause(acceptor.get_executor());
  pause.expires_after(kDescriptorPause);
  co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
}

// [http] max-connections open already: a 503 the socket takes without waiting, then close.
template <typename Socket>
void refuse_over_cap(Socket& socket, const http_context& context) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  std::string peer = ec ? "an unknown peer" : remote.address().to_string() + ":" + std::to_string(remote.port());
  log_refusal(peer, fmt::format("{} HTTP connections are open ([http] max-connections)", context.max_connections));
  std::string bytes = raw_response(
      "503 Service Unavailable",
      fmt::format("service unavailable: {} HTTP connections are open, the most this endpoint serves at once "
                  "([http] max-connections); try again later\n",
                  context.max_connections));
  socket.non_blocking(true, ec);
  socket.write_some(asio::buffer(bytes), ec);
  socket.close(ec);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, http_context& context) {
  spare_descriptor spare;
  const std::string farewell =
      raw_response("503 Service Unavailable", "service unavailable: escrowd has no file descriptor left; try again later\n");
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(acceptor.get_executor()),
                                                       asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (out_of_descriptors(ec.value())) {
        co_await pause_for_descriptors(acceptor, spare, farewell, ec);
        continue;
      }
      spdlog::warn("http: accept failed: {}", ec.message());
      continue;
    }
    if (context.open_connections.load() >= context.max_connections) {
      refuse_over_cap(socket, context);
      continue;
    }
    auto executor = socket.get_executor();
    asio::co_spawn(executor, serve(std::move(socket), context, counted_connection(context)), asio::detached);
  }
}

}  // namespace

void http_context::use_console(std::chrono::milliseconds session_timeout, std::size_t max_sessions,
                               std::size_t max_sessions_per_user, authenticator* auth,
                               std::vector<std::string> origins) {
  console = std::make_shared<console_sessions>(session_timeout, max_sessions, max_sessions_per_user);
  console_auth = auth;
  allowed_origins = std::move(origins);
}

void http_context::fill(metrics_snapshot& s) const {
  s.version = std::string(kVersion);
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  s.listeners = listeners;
  s.listeners_up = listeners_up.load();
  s.websocket_accepted = websocket.accepted.load();
  s.websocket_open = static_cast<std::uint64_t>(std::max<std::int64_t>(0, websocket.open.load()));
  s.websocket_events.clear();
  for (std::size_t i = 0; i < kWebsocketEventNames.size(); ++i)
    s.websocket_events.emplace_back(kWebsocketEventNames[i], websocket.events[i].load());
}

void start_http_server(tcp::acceptor& acceptor, http_context& context, const asio::any_io_executor& accepts) {
  asio::co_spawn(accepts, accept_loop(acceptor, context), asio::detached);
}

}  // namespace escrow::broker
