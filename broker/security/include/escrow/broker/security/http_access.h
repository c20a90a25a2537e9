// Who may use the HTTP endpoint (docs/security.md, "The HTTP endpoint"): the Host header a request
// must carry (the defence against DNS rebinding: a web page whose name an attacker re-points at
// 127.0.0.1 reaches the endpoint with its own name in Host, which is refused) and, with [http]
// token-file, the bearer token it must present. Pure functions of the configuration and the
// request's headers, so that they are tested on their own (tests/unit/broker/http_access_test.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::broker {

// A Host header or an [http] allowed-hosts entry: a name (lower case), an IPv4 address, or an IPv6
// address (without its brackets), and the port if one was given.
struct host_and_port {
  std::string host;
  std::optional<std::uint16_t> port;
};

// Parses "NAME", "NAME:PORT", "1.2.3.4[:PORT]", "[::1][:PORT]" (and, for configuration entries,
// a bare "::1"). Names may hold letters, digits, '-', '_' and '.'; anything else (a scheme, a path,
// userinfo, spaces) is refused. Returns nullopt when malformed.
std::optional<host_and_port> parse_host(std::string_view text, bool allow_bare_ipv6 = false);

// Checks one [http] allowed-hosts entry; "" when good, otherwise what is wrong.
std::string check_allowed_host(std::string_view entry);

using token_digest = std::array<unsigned char, 32>;  // SHA-256 of a token

// Reads [http] token-file: one token per line (blank lines ignored; surrounding spaces trimmed),
// each at least 16 visible ASCII characters without spaces; several lines let a token be rotated
// without a moment where neither is accepted. Returns "" or what is wrong (not naming the file).
std::string load_http_tokens(const std::string& path, std::vector<token_digest>& out);

struct http_access {
  std::string listen_host;             // [http] listen's host, lower case, IPv6 without brackets
  std::uint16_t port = 0;              // the port the endpoint is bound to
  std::vector<host_and_port> allowed;  // [http] allowed-hosts; an entry without a port allows any
  bool any_host = false;               // allowed-hosts holds "*": the Host header is not checked
  std::vector<token_digest> tokens;    // empty: no token needed
};

// Builds the policy from [http] allowed-hosts (already checked by the configuration reader).
http_access make_http_access(const std::string& listen_host, std::uint16_t port,
                             const std::vector<std::string>& allowed_hosts, std::vector<token_digest> tokens);

// Whether a request whose Host header is `host` is for this endpoint: localhost, a loopback address
// (127.0.0.0/8, ::1) or the listen host, without a port or with the endpoint's; or an allowed-hosts
// entry (its port, or any port when the entry has none; no port in Host stands for port 80).
bool host_allowed(const http_access& access, std::string_view host);

enum class bearer_check { ok, missing, wrong };

// Checks an Authorization header value ("" when absent) against the tokens, in constant time with
// respect to the tokens: the SHA-256 digests are compared with CRYPTO_memcmp, every one of them.
// `missing`: no header or another scheme than Bearer.
bearer_check check_bearer(const http_access& access, std::string_view authorization);

// Origins (RFC 6454) of browser requests: a WebSocket upgrade or a console request carries the
// origin of the page that made it. Parses "http://HOST[:PORT]" or "https://HOST[:PORT]" (no path).
struct web_origin {
  bool https = false;
  host_and_port host;  // the port filled in from the scheme when absent (80, 443)
};
std::optional<web_origin> parse_origin(std::string_view text);

// Checks one allowed-origins entry ("https://app.example.com", "http://10.0.0.5:8080", or "*");
// "" when good, otherwise what is wrong.
std::string check_allowed_origin(std::string_view entry);

// Which origins besides those of the allowed list a check accepts.
struct origin_rules {
  // A loopback origin (localhost, 127.0.0.0/8, ::1; any scheme and port): a page of this machine.
  bool any_loopback = true;
  // An origin naming the request's own Host (a page this endpoint served). Only where the Host
  // itself was checked (http_access's host_allowed, not with allowed-hosts "*"): elsewhere a
  // page whose name was re-pointed here (DNS rebinding) would name itself in both.
  bool own_host = true;
};

// Whether a request with Origin `origin` (nullopt: the header is absent, as from a client that is
// not a browser) and Host `host` may go on: no Origin; an origin `rules` accept; or one of
// `allowed` (exact scheme, host and port; "*" allows any). "null" and anything malformed are
// refused.
bool origin_allowed(std::optional<std::string_view> origin, std::string_view host,
                    const std::vector<std::string>& allowed, origin_rules rules = {});

}  // namespace escrow::broker
