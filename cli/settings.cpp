// Resolving the connection settings of the `escrow` command (settings.h).
#include "settings.h"

#include <toml++/toml.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "exit_codes.h"

namespace escrow::cli {

namespace {

std::string default_config_file() {
  const char* home = std::getenv("HOME");
  if (!home) return {};
  std::filesystem::path p = std::filesystem::path(home) / ".config" / "escrow" / "escrow.toml";
  std::error_code ec;
  return std::filesystem::exists(p, ec) ? p.string() : std::string();
}

void read_file(const std::string& path, settings& s) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw failure(exit_usage, path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  for (auto& [key, node] : t) {
    std::string k(key.str());
    int line = static_cast<int>(node.source().begin.line);
    auto where = path + ":" + std::to_string(line) + ": " + k;
    if (k != "url" && k != "user" && k != "password" && k != "ca-file" && k != "timeout")
      throw failure(exit_usage, where + ": unknown key (use url, user, password, ca-file, timeout)");
    if (k == "timeout") {
      auto v = node.value<std::int64_t>();
      if (!v || *v <= 0) throw failure(exit_usage, where + ": use a positive number of seconds");
      s.timeout_seconds = static_cast<int>(*v);
      continue;
    }
    auto v = node.value<std::string>();
    if (!v) throw failure(exit_usage, where + ": use a string");
    if (k == "url") s.url = *v;
    else if (k == "user") s.user = *v;
    else if (k == "password") s.password = *v;
    else s.ca_file = *v;
  }
}

}  // namespace

settings resolve_settings(const command_line& given) {
  settings s;
  std::string file = given.config_file.empty() ? default_config_file() : given.config_file;
  if (!file.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) throw failure(exit_usage, "config file " + file + " does not exist");
    read_file(file, s);
  }
  if (const char* env = std::getenv("ESCROW_PASSWORD"); env && *env) s.password = env;
  if (!given.url.empty()) s.url = given.url;
  if (!given.user.empty()) s.user = given.user;
  if (!given.password.empty()) s.password = given.password;
  if (!given.ca_file.empty()) s.ca_file = given.ca_file;
  if (given.timeout_seconds > 0) s.timeout_seconds = given.timeout_seconds;
  return s;
}

client::connect_options connect_options_for(const settings& s) {
  client::connect_options o;
  std::string rest;
  if (s.url.rfind("stomp://", 0) == 0) {
    rest = s.url.substr(8);
  } else if (s.url.rfind("stomp+ssl://", 0) == 0) {
    rest = s.url.substr(12);
    o.tls.enabled = true;
    o.tls.ca_file = s.ca_file;
  } else {
    throw failure(exit_usage, "--url " + s.url + ": use stomp://HOST:PORT or stomp+ssl://HOST:PORT");
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  auto colon = rest.rfind(':');
  std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 61613;
  if (colon != std::string::npos) {
    std::string_view text = std::string_view(rest).substr(colon + 1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size() || port == 0 || port > 65535)
      throw failure(exit_usage, "--url " + s.url + ": the port must be 1 to 65535");
  }
  if (host.empty()) throw failure(exit_usage, "--url " + s.url + ": no host");
  o.host = host;
  o.port = static_cast<std::uint16_t>(port);
  o.login = s.user;
  o.passcode = s.password;
  o.timeout = std::chrono::seconds(s.timeout_seconds);
  return o;
}

}  // namespace escrow::cli
