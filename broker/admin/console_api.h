// The web console over the HTTP endpoint (docs/operations.md, "The web console"): its files at /
// and /console/NAME (console_files.h), and its JSON API at /api/v1/: login and logout with a
// session cookie (console_sessions.h), /api/v1/metrics (the /status JSON), and the ADMIN commands
// of the `escrow` command at /api/v1/admin/COMMAND (GET for those that only read, POST with the
// CSRF header for those that change something), run by the core with the permission checks of an
// ADMIN frame (broker::run_admin). Every answer carries the security headers (CSP without inline
// script, X-Frame-Options, nosniff, no referrer). Called by http_server.cpp after its Host check.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>
#include <string>

#include "escrow/broker/admin/http_server.h"

namespace escrow::broker {

using http_request = boost::beast::http::request<boost::beast::http::string_body>;
using http_response = boost::beast::http::response<boost::beast::http::string_body>;

// Whether `path` is the console's or its API's (/, /console/..., /api/...).
bool is_console_path(std::string_view path);

// The answer to a request for a console path. `peer_ip` is the client's address, `loopback`
// whether it is a loopback one (without a users file only those are served).
boost::asio::awaitable<http_response> answer_console(const http_request& req, http_context& context,
                                                     const std::string& peer_ip, bool loopback);

// The user of the console session whose cookie `req` carries (a page opening /stomp), or nullopt.
std::optional<console_user> console_user_of(const http_request& req, http_context& context);

}  // namespace escrow::broker
