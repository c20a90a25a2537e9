// The web console's files and JSON API (console_api.h). Each API request that needs the broker
// hands its work to the core (broker::run_admin, broker::collect_metrics) or to the login threads
// (authenticator::submit) and resumes on its connection's strand with the answer.
#include "console_api.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <memory>
#include <set>
#include <variant>

#include "await_core.h"
#include "console_files.h"
#include "console_sessions.h"
#include "escrow/broker/admin/metrics_text.h"
#include "escrow/broker/core/broker.h"
#include "escrow/broker/security/authenticator.h"
#include "escrow/broker/security/http_access.h"
#include "escrow/broker/security/names.h"
#include "json.h"

namespace escrow::broker {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

constexpr std::string_view kCookie = "escrow_session";
constexpr std::string_view kCsrfHeader = "X-Escrow-CSRF";
// Scripts and styles from the console's own files only: no inline script, no eval, no framing.
constexpr std::string_view kPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

// ADMIN commands that only read (GET) and those that change something (POST, with the CSRF token).
const std::set<std::string, std::less<>> kReadCommands = {"status", "queues", "queue-show", "browse", "connections",
                                                           "subscriptions", "xa-list", "coordinator", "config"};
const std::set<std::string, std::less<>> kWriteCommands = {"purge", "move", "subscription-delete", "xa-commit",
                                                            "xa-rollback", "xa-forget", "group-reset"};

http_response make(const http_request& req, http::status status, std::string_view type, std::string body) {
  http_response res{status, req.version()};
  res.set(http::field::server, "escrowd");
  res.set(http::field::content_type, type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("X-Frame-Options", "DENY");
  res.set("Content-Security-Policy", kPolicy);
  res.set("Referrer-Policy", "no-referrer");
  res.keep_alive(req.keep_alive());
  res.content_length(body.size());
  if (req.method() != http::verb::head) res.body() = std::move(body);
  return res;
}

http_response json_answer(const http_request& req, http::status status, json::value v) {
  return make(req, status, "application/json", to_json(std::move(v)) + "\n");
}

http_response json_error(const http_request& req, http::status status, std::string message,
                         std::string_view admin_status = {}) {
  json::object o{{"error", std::move(message)}};
  if (!admin_status.empty()) o["status"] = admin_status;
  return json_answer(req, status, std::move(o));
}

std::string_view header(const http_request& req, std::string_view name) {
  auto it = req.find(name);
  return it == req.end() ? std::string_view{} : std::string_view(it->value().data(), it->value().size());
}

// The request's Origin header; nullopt when it has none (a client that is not a browser).
std::optional<std::string_view> origin_of(const http_request& req) {
  auto it = req.find(http::field::origin);
  if (it == req.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

// The value of cookie `name` in the request's Cookie headers, "" when absent.
std::string_view cookie(const http_request& req, std::string_view name) {
  for (auto it = req.find(http::field::cookie); it != req.end() && it->name() == http::field::cookie; ++it) {
    std::string_view rest(it->value().data(), it->value().size());
    while (!rest.empty()) {
      auto semi = rest.find(';');
      std::string_view pair = rest.substr(0, semi);
      rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
      while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
      auto eq = pair.find('=');
      if (eq != std::string_view::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
    }
  }
  return {};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A query string's parameters, percent-decoded ('+' is a space); nullopt when malformed.
std::optional<std::vector<std::pair<std::string, std::string>>> query_parameters(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  auto decode = [](std::string_view s) -> std::optional<std::string> {
    std::string r;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        r += ' ';
      } else if (s[i] == '%') {
        int hi = i + 1 < s.size() ? hex_digit(s[i + 1]) : -1, lo = i + 2 < s.size() ? hex_digit(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) return std::nullopt;
        r += static_cast<char>(hi * 16 + lo);
        i += 2;
      } else {
        r += s[i];
      }
    }
    return r;
  };
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    auto eq = item.find('=');
    auto name = decode(item.substr(0, eq));
    auto value = decode(eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1));
    if (!name || !value) return std::nullopt;
    out.emplace_back(std::move(*name), std::move(*value));
  }
  return out;
}

asio::awaitable<http_admin_answer> run_admin(http_context& context, const console_user& user, frame f) {
  // Every awaitable named, none a temporary of the co_await expression: g++ 12 destroyed such
  // temporaries' members twice (free(): invalid pointer), as session.cpp notes.
  broker& core = context.core;
  auto start = [&core, user, f = std::move(f)](auto done) mutable {
    core.run_admin(user.user, user.roles, std::move(f), std::function<void(http_admin_answer)>(std::move(done)));
  };
  auto op = wait_for<http_admin_answer>(std::move(start));
  http_admin_answer answer = co_await std::move(op);
  co_return answer;
}

json::object session_json(const console_session& s, const http_context& context) {
  return {{"user", s.user.user},
          {"admin", s.admin},
          {"csrf", s.csrf},
          {"login_required", context.console_auth != nullptr},
          {"expires_in", context.console->timeout().count() / 1000}};
}

// A cookie for the browser's session (no Max-Age: the broker ends an idle session, not the
// browser at a fixed time after login); `clear` makes the browser drop it.
std::string session_cookie(std::string_view id, bool clear = false) {
  return fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict{}", kCookie, id, clear ? "; Max-Age=0" : "");
}

// A state-changing request must come from the console's own pages: its Origin, when the browser
// sends one, names this endpoint (or an allowed origin), and for an API call other than login it
// repeats the session's CSRF token. "" when it may go on, else why not.
std::string cross_site_problem(const http_request& req, const http_context& context, const console_session* session) {
  std::optional<std::string_view> origin = origin_of(req);
  if (!origin_allowed(origin, header(req, "Host"), context.allowed_origins,
                      {.any_loopback = true, .own_host = !context.access()->any_host}))
    return "forbidden: a request from another site (Origin " + loggable(std::string(*origin)) + ")";
  if (session && !same_secret(header(req, kCsrfHeader), session->csrf))
    return "forbidden: the request lacks the session's X-Escrow-CSRF header";
  return "";
}

asio::awaitable<http_response> login(const http_request& req, http_context& context, const std::string& peer_ip) {
  if (req.method() != http::verb::post) co_return json_error(req, http::status::method_not_allowed, "use POST");
  if (std::string problem = cross_site_problem(req, context, nullptr); !problem.empty())
    co_return json_error(req, http::status::forbidden, problem);
  std::string_view type = header(req, "Content-Type");
  if (type.substr(0, type.find(';')) != "application/json")
    co_return json_error(req, http::status::unsupported_media_type,
                         "a login is a JSON object {\"user\":...,\"password\":...} with Content-Type: application/json");
  boost::system::error_code ec;
  json::value body = boost::json::parse(req.body(), ec);
  if (ec || !body.is_object())
    co_return json_error(req, http::status::bad_request, "a login is a JSON object {\"user\":...,\"password\":...}");
  auto text = [&body](std::string_view key) -> std::string {
    const json::value* v = body.as_object().if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  console_user user;
  if (authenticator* auth = context.console_auth) {
    login_request request{peer_ip, text("user"), text("password"), {}};
    if (request.login.empty())
      co_return json_error(req, http::status::unauthorized, "log in with a user of the users file");
    std::optional<login_result> verdict = auth->answer_at_once(request);
    if (!verdict) {
      auto start = [auth, request = std::move(request)](auto done) mutable {
        auth->submit(std::move(request), authenticator::callback(std::move(done)));
      };
      auto op = wait_for<login_result>(std::move(start));
      verdict = co_await std::move(op);
    }
    if (!verdict->ok) co_return json_error(req, http::status::unauthorized, verdict->problem);
    user = {verdict->user, verdict->roles};
  }
  // Whether to offer the operations (the broker checks every request all the same).
  auto start = [&context, roles = user.roles](auto done) mutable {
    context.core.holds_admin(std::move(roles), std::function<void(bool)>(std::move(done)));
  };
  auto probing = wait_for<bool>(std::move(start));
  bool admin = co_await std::move(probing);
  console_session s = context.console->create(user, admin);
  spdlog::info("http: console login by {} from {}", user.user.empty() ? "anonymous" : loggable(user.user), peer_ip);
  auto res = json_answer(req, http::status::ok, session_json(s, context));
  res.set(http::field::set_cookie, session_cookie(s.id));
  co_return res;
}

// The ADMIN frame for /api/v1/admin/COMMAND: the query's parameters (GET) or the JSON body's
// members (POST) as its headers.
std::variant<frame, std::string> admin_frame(const http_request& req, std::string_view command, std::string_view query) {
  frame f{"ADMIN", {{"admin-command", std::string(command)}}, {}};
  if (req.method() == http::verb::post) {
    if (req.body().empty()) return f;
    boost::system::error_code ec;
    json::value body = boost::json::parse(req.body(), ec);
    if (ec || !body.is_object()) return std::string("the body must be a JSON object of the command's arguments");
    for (const auto& [key, value] : body.as_object()) {
      if (key == "admin-command" || key == "receipt") continue;
      if (value.is_string())
        f.add(std::string(key), std::string(value.as_string()));
      else if (value.is_int64() || value.is_uint64() || value.is_bool())
        f.add(std::string(key), json::serialize(value));
      else
        return "argument '" + std::string(key) + "' must be a string, a number or true/false";
    }
    return f;
  }
  auto params = query_parameters(query);
  if (!params) return std::string("the query string is not well formed (a % not followed by two hex digits)");
  for (auto& [name, value] : *params)
    if (name != "admin-command" && name != "receipt") f.add(std::move(name), std::move(value));
  return f;
}

http::status status_of(const admin_outcome& o) {
  if (o.status == "ok") return http::status::ok;
  if (o.status == "not-found") return http::status::not_found;
  if (o.status == "refused") return http::status::conflict;
  return http::status::bad_request;
}

asio::awaitable<http_response> admin_command(const http_request& req, http_context& context, const console_session& s,
                                             std::string_view command, std::string_view query) {
  bool read = kReadCommands.contains(command), write = kWriteCommands.contains(command);
  if (!read && !write)
    co_return json_error(req, http::status::not_found, "no such command: " + loggable(std::string(command)));
  bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  if ((read && !get) || (write && req.method() != http::verb::post))
    co_return json_error(req, http::status::method_not_allowed,
                         std::string(command) + (read ? " only reads: use GET" : " changes the broker: use POST"));
  auto f = admin_frame(req, command, query);
  if (auto* problem = std::get_if<std::string>(&f)) co_return json_error(req, http::status::bad_request, *problem);
  auto running = run_admin(context, s.user, std::move(std::get<frame>(f)));
  http_admin_answer a = co_await std::move(running);
  if (a.denied) co_return json_error(req, http::status::forbidden, a.message);
  if (a.outcome.status == "ok" || !a.outcome.json.empty()) {
    auto res = make(req, status_of(a.outcome), "application/json", std::move(a.outcome.json));
    if (a.outcome.status != "ok") res.set("X-Escrow-Admin-Message", loggable(a.outcome.message));
    co_return res;
  }
  co_return json_error(req, status_of(a.outcome), a.outcome.message, a.outcome.status);
}

asio::awaitable<http_response> api(const http_request& req, http_context& context, const std::string& peer_ip,
                                   bool loopback, std::string_view rest, std::string_view query) {
  if (!context.console_auth && !loopback)
    co_return json_error(req, http::status::forbidden,
                         "without a users file the console serves loopback clients only ([security] users-file)");
  if (rest == "login") {
    auto op = login(req, context, peer_ip);
    co_return co_await std::move(op);
  }
  std::optional<console_session> s = context.console->find(cookie(req, kCookie));
  if (!s) {
    json::object o{{"error", "not logged in: POST /api/v1/login first"}, {"login_required", context.console_auth != nullptr}};
    co_return json_answer(req, http::status::unauthorized, std::move(o));
  }
  if (req.method() == http::verb::post)
    if (std::string problem = cross_site_problem(req, context, &*s); !problem.empty())
      co_return json_error(req, http::status::forbidden, problem);
  if (rest == "session") co_return json_answer(req, http::status::ok, session_json(*s, context));
  if (rest == "logout") {
    if (req.method() != http::verb::post) co_return json_error(req, http::status::method_not_allowed, "use POST");
    context.console->end(s->id);
    auto res = make(req, http::status::no_content, "application/json", "");
    res.set(http::field::set_cookie, session_cookie("", true));
    co_return res;
  }
  if (rest == "metrics") {
    if (req.method() != http::verb::get && req.method() != http::verb::head)
      co_return json_error(req, http::status::method_not_allowed, "use GET");
    auto start = [&context](auto done) mutable {
      context.core.collect_metrics(std::function<void(metrics_snapshot)>(std::move(done)));
    };
    auto op = wait_for<metrics_snapshot>(std::move(start));
    metrics_snapshot snapshot = co_await std::move(op);
    context.fill(snapshot);
    // The queues by name are an operator's to see (as `escrow queues`); the totals are everyone's.
    if (!s->admin) snapshot.queues.clear();
    co_return make(req, http::status::ok, "application/json", write_status_json(snapshot));
  }
  if (rest.starts_with("admin/")) {
    auto op = admin_command(req, context, *s, rest.substr(6), query);
    co_return co_await std::move(op);
  }
  co_return json_error(req, http::status::not_found, "no such API path: /api/v1/" + loggable(std::string(rest)));
}

}  // namespace

bool is_console_path(std::string_view path) {
  return path == "/" || path.starts_with("/console/") || path == "/favicon.ico" || path.starts_with("/api/");
}

asio::awaitable<http_response> answer_console(const http_request& req, http_context& context,
                                              const std::string& peer_ip, bool loopback) {
  std::string_view target(req.target().data(), req.target().size());
  auto q = target.find('?');
  std::string_view path = target.substr(0, q), query = q == std::string_view::npos ? "" : target.substr(q + 1);
  if (path.starts_with("/api/")) {
    if (!path.starts_with("/api/v1/"))
      co_return json_error(req, http::status::not_found, "this broker's API is /api/v1/ (docs/operations.md)");
    auto op = api(req, context, peer_ip, loopback, path.substr(8), query);
    co_return co_await std::move(op);
  }
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    auto res = make(req, http::status::method_not_allowed, "text/plain; charset=utf-8", "only GET and HEAD\n");
    res.set(http::field::allow, "GET, HEAD");
    co_return res;
  }
  std::string_view name = path == "/" ? "index.html" : path == "/favicon.ico" ? "favicon.svg" : path.substr(9);
  for (const auto& f : console_files())
    if (f.name == name) {
      auto res = make(req, http::status::ok, f.content_type, std::string(f.bytes));
      res.set(http::field::cache_control, "no-cache");
      co_return res;
    }
  co_return make(req, http::status::not_found, "text/plain; charset=utf-8", "not found: no such console file\n");
}

std::optional<console_user> console_user_of(const http_request& req, http_context& context) {
  if (!context.console) return std::nullopt;
  // The cookie is sent by every page of the same site, which includes any port of 127.0.0.1: its
  // user goes only to a page of this endpoint (its own origin, or an allowed one), or to a client
  // that is no browser (no Origin).
  std::optional<std::string_view> origin = origin_of(req);
  if (!origin_allowed(origin, header(req, "Host"), context.allowed_origins,
                      {.any_loopback = false, .own_host = !context.access()->any_host}))
    return std::nullopt;
  auto s = context.console->find(cookie(req, kCookie));
  if (!s) return std::nullopt;
  return s->user;
}

}  // namespace escrow::broker
