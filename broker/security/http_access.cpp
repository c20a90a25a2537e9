// The HTTP endpoint's Host check and bearer token (http_access.h).
#include "escrow/broker/security/http_access.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace escrow::broker {
namespace {

constexpr std::size_t kMinTokenLength = 16;
constexpr std::size_t kMaxTokenLength = 4096;
constexpr std::size_t kMaxTokenFileBytes = 64 * 1024;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_';
}

// The canonical text of an IP address (so that "[0:0::1]" and "[::1]" are one host), or "".
std::string canonical_ipv6(std::string_view text) {
  std::string s(text);
  unsigned char bytes[16];
  char out[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET6, s.c_str(), bytes) != 1 || !inet_ntop(AF_INET6, bytes, out, sizeof out)) return "";
  return out;
}

bool parse_port(std::string_view text, std::uint16_t& port) {
  unsigned value = 0;
  if (text.empty() || text.size() > 5) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

token_digest sha256(std::string_view text) {
  token_digest d{};
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), d.data(), &size, EVP_sha256(), nullptr);
  return d;
}

}  // namespace

std::optional<host_and_port> parse_host(std::string_view text, bool allow_bare_ipv6) {
  host_and_port out;
  std::string_view port_text;
  bool has_port = false;
  if (text.empty()) return std::nullopt;
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    out.host = canonical_ipv6(text.substr(1, close - 1));
    if (out.host.empty()) return std::nullopt;
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port_text = rest.substr(1);
      has_port = true;
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    if (!allow_bare_ipv6) return std::nullopt;
    out.host = canonical_ipv6(text);
    if (out.host.empty()) return std::nullopt;
  } else {
    auto colon = text.find(':');
    std::string_view name = text.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      has_port = true;
    }
    if (name.empty() || !std::all_of(name.begin(), name.end(), name_char)) return std::nullopt;
    out.host.reserve(name.size());
    for (char c : name) out.host += lower(c);
  }
  if (has_port) {
    std::uint16_t port = 0;
    if (!parse_port(port_text, port)) return std::nullopt;
    out.port = port;
  }
  return out;
}

std::string check_allowed_host(std::string_view entry) {
  if (entry == "*") return "";
  if (!parse_host(entry, true))
    return "'" + std::string(entry) +
           "' is not a host name or address with an optional port (e.g. \"metrics.example.com\", "
           "\"10.0.0.5:8161\", \"[2001:db8::5]\"; no scheme, no path), nor \"*\"";
  return "";
}

std::string load_http_tokens(const std::string& path, std::vector<token_digest>& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::string("cannot read it: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > static_cast<off_t>(kMaxTokenFileBytes)) {
    ::close(fd);
    return "is not a regular file of at most 64 KiB";
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(got);

  std::vector<token_digest> tokens;
  std::size_t line = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    ++line;
    auto nl = rest.find('\n');
    std::string_view token = trim(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (token.empty()) continue;
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength)
      return "line " + std::to_string(line) + ": a token has from 16 to 4096 characters (make one with `openssl "
             "rand -hex 32`)";
    if (!std::all_of(token.begin(), token.end(), [](char c) { return c > ' ' && c < 0x7f; }))
      return "line " + std::to_string(line) + ": a token is visible ASCII characters without spaces";
    tokens.push_back(sha256(token));
  }
  if (tokens.empty()) return "holds no token: write one on a line of its own (e.g. `openssl rand -hex 32 > FILE`)";
  out = std::move(tokens);
  return "";
}

http_access make_http_access(const std::string& listen_host, std::uint16_t port,
                             const std::vector<std::string>& allowed_hosts, std::vector<token_digest> tokens) {
  http_access a;
  a.port = port;
  a.tokens = std::move(tokens);
  // 0.0.0.0 and :: are no name of the endpoint; a host name or address is.
  if (auto h = parse_host(listen_host, true); h && h->host != "0.0.0.0" && h->host != "::") a.listen_host = h->host;
  for (const auto& entry : allowed_hosts) {
    if (entry == "*") {
      a.any_host = true;
      continue;
    }
    if (auto h = parse_host(entry, true)) a.allowed.push_back(std::move(*h));
  }
  return a;
}

bool host_allowed(const http_access& access, std::string_view host) {
  if (access.any_host) return true;
  auto h = parse_host(host);
  if (!h) return false;
  bool ours = is_loopback(h->host) || (!access.listen_host.empty() && h->host == access.listen_host);
  if (ours && (!h->port || *h->port == access.port)) return true;
  for (const auto& e : access.allowed)
    if (e.host == h->host && (!e.port || *e.port == h->port.value_or(80))) return true;
  return false;
}

bearer_check check_bearer(const http_access& access, std::string_view authorization) {
  authorization = trim(authorization);
  auto space = authorization.find(' ');
  std::string_view scheme = authorization.substr(0, space);
  constexpr std::string_view bearer = "bearer";
  if (scheme.size() != bearer.size() ||
      !std::equal(scheme.begin(), scheme.end(), bearer.begin(), [](char a, char b) { return lower(a) == b; }))
    return bearer_check::missing;
  std::string_view token = space == std::string_view::npos ? std::string_view{} : trim(authorization.substr(space));
  token_digest presented = sha256(token);
  int matched = 0;
  for (const auto& t : access.tokens) matched |= CRYPTO_memcmp(presented.data(), t.data(), t.size()) == 0;
  return matched && !token.empty() ? bearer_check::ok : bearer_check::wrong;
}

std::optional<web_origin> parse_origin(std::string_view text) {
  web_origin o;
  std::string lowered;
  for (char c : text) lowered += lower(c);
  std::string_view rest = lowered;
  if (rest.starts_with("https://")) {
    o.https = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return std::nullopt;
  }
  if (rest.empty() || rest.find('/') != std::string_view::npos) return std::nullopt;
  auto h = parse_host(rest);
  if (!h) return std::nullopt;
  if (!h->port) h->port = o.https ? 443 : 80;
  o.host = std::move(*h);
  return o;
}

std::string check_allowed_origin(std::string_view entry) {
  if (entry == "*" || parse_origin(entry)) return "";
  return "'" + std::string(entry) +
         "' is not an origin: write the scheme, host and optional port of the pages allowed, e.g. "
         "\"https://app.example.com\" or \"http://10.0.0.5:8080\" (no path), or \"*\"";
}

bool origin_allowed(std::optional<std::string_view> origin, std::string_view host,
                    const std::vector<std::string>& allowed, origin_rules rules) {
  if (!origin) return true;
  for (const auto& a : allowed)
    if (a == "*") return true;
  auto o = parse_origin(*origin);
  if (!o) return false;
  if (rules.any_loopback && is_loopback(o->host.host)) return true;
  if (auto h = parse_host(host);
      rules.own_host && h && h->host == o->host.host && h->port.value_or(o->https ? 443 : 80) == *o->host.port)
    return true;
  for (const auto& a : allowed)
    if (auto e = parse_origin(a); e && e->https == o->https && e->host.host == o->host.host && e->host.port == o->host.port)
      return true;
  return false;
}

}  // namespace escrow::broker
