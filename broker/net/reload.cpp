// SIGHUP: reading the file again and telling what needs a restart; the core applies its part
// (broker::reload, core/reload_core.cpp).
#include "reload.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "escrow/broker/config/users_file.h"
#include "escrow/broker/security/authenticator.h"

namespace escrow::broker {
namespace {

bool from_command_line(const broker_config& c, const std::string& key) {
  return std::find(c.command_line_keys.begin(), c.command_line_keys.end(), key) != c.command_line_keys.end();
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

void reload_configuration(const broker_config& running, broker& core, http_context* http) {
  if (running.config_file.empty()) {
    spdlog::warn("SIGHUP: nothing to reload: escrowd was started without --config");
    return;
  }
  broker_config fresh;
  if (std::string err = load_config_file(running.config_file, fresh); !err.empty()) {
    spdlog::error("SIGHUP: configuration not reloaded, the running settings stay: {}", err);
    return;
  }
  // What the command line set still wins over the file.
  fresh.config_file = running.config_file;
  fresh.command_line_keys = running.command_line_keys;
  if (from_command_line(running, "listen")) fresh.listen = running.listen;
  if (from_command_line(running, "data-dir")) fresh.data_dir = running.data_dir;
  if (from_command_line(running, "log-level")) fresh.log_level = running.log_level;
  // [http] token-file is read again (a token rotated in place applies now). A bad one keeps the
  // endpoint's access as it is (its tokens and allowed-hosts) and nothing else: the users file and
  // the rest are reloaded all the same, or a typo in one file would hold back a removed user.
  std::vector<token_digest> http_tokens;
  bool http_tokens_loaded = true;
  if (std::string err = load_http_token_file(fresh, http_tokens); !err.empty()) {
    spdlog::error("SIGHUP: http: the bearer tokens and allowed-hosts in force stay, the token file was not read: {}; "
                  "the rest of the configuration is reloaded. Fix the file and send SIGHUP again",
                  err);
    http_tokens_loaded = false;
  }

  auto level = spdlog::level::from_str(fresh.log_level);
  if (level == spdlog::level::off && fresh.log_level != "off") {
    spdlog::error("SIGHUP: configuration not reloaded: unknown log-level '{}'", fresh.log_level);
    return;
  }
  if (fresh.log_level != running.log_level) {
    spdlog::info("SIGHUP: log-level {} (was {})", fresh.log_level, running.log_level);
    spdlog::set_level(level);
  }
  // The users file is read again (its name is fixed until a restart); a bad one changes nothing.
  if (!running.users_file.empty() && fresh.users_file == running.users_file && core.authentication()) {
    auto users = std::make_shared<users_table>();
    if (std::string err = load_users_file(running.users_file, *users); !err.empty()) {
      spdlog::error("SIGHUP: configuration not reloaded, the running settings stay: {}", err);
      return;
    }
    spdlog::info("SIGHUP: users file {}: {} users", running.users_file, users->by_name.size());
    if (std::string warning = users_file_exposure(running.users_file); !warning.empty())
      spdlog::warn("SIGHUP: {}", warning);
    core.authentication()->replace_users(users);
    core.warn_about_owners_gone(std::move(users), "SIGHUP");
  }
  if (http && running.http_listen && http_tokens_loaded) {
    bool token = !http_tokens.empty();
    http->set_access(std::make_shared<http_access>(
        make_http_access(running.http_listen->host, http->port, fresh.http_allowed_hosts, std::move(http_tokens))));
    spdlog::info("SIGHUP: http: {} allowed hosts besides localhost and loopback, {}", fresh.http_allowed_hosts.size(),
                 token ? "a bearer token from " + fresh.http_token_file : std::string("no token"));
  }
  if (auto restart = changes_needing_restart(running, fresh); !restart.empty())
    spdlog::warn("SIGHUP: changed in {} but taking effect only at a restart: {}", running.config_file, join(restart));
  core.reload(fresh);
}

}  // namespace escrow::broker
