// Where the `escrow` command connects and as whom: --url, --user, --password, the environment
// (ESCROW_PASSWORD) and the config file (--config FILE, else ~/.config/escrow/escrow.toml when it
// exists), in that order of precedence. The file is TOML:
//
//   url = "stomp://127.0.0.1:61613"   # or stomp+ssl://HOST:PORT
//   user = "admin"
//   password = "secret"               # better: ESCROW_PASSWORD
//   ca-file = "/etc/escrow/ca.pem"    # for stomp+ssl: the CA that signed the broker's certificate
//   timeout = 30                      # seconds to wait for the broker's answer
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "escrow/client.h"

namespace escrow::cli {

struct settings {
  std::string url = "stomp://127.0.0.1:61613";
  std::string user;
  std::string password;
  std::string ca_file;
  int timeout_seconds = 30;
};

// What the command line set (empty: not set) over the file and the environment.
struct command_line {
  std::string config_file;
  std::string url, user, password, ca_file;
  int timeout_seconds = 0;
};

// Merges the command line, ESCROW_PASSWORD and the config file. Throws failure(exit_usage) for a
// config file that cannot be read or has unknown keys.
settings resolve_settings(const command_line& given);

// The client library's options for `s`. Throws failure(exit_usage) for a malformed URL.
client::connect_options connect_options_for(const settings& s);

}  // namespace escrow::cli
