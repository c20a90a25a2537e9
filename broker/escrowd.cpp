// escrowd: the broker daemon. With no arguments it runs on the embedded default (127.0.0.1:61613,
// data in ./escrow-data); a TOML file and the command line override it, in that order.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "escrow/broker/config/config.h"
#include "escrow/broker/security/password_hash.h"
#include "escrow/broker/security/password_prompt.h"
#include "escrow/broker/net/server.h"

namespace {

// --hash-password: the line read (without echo on a terminal) becomes a users file hash.
int print_password_hash() {
  auto password = escrow::broker::read_password("password: ");
  if (!password) {
    std::cerr << "escrowd: --hash-password: no password on standard input\n";
    return 2;
  }
  std::cout << escrow::broker::make_password_hash(*password) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using escrow::broker::broker_config;
  CLI::App app{"escrowd: a STOMP 1.2 message broker and X/Open XA resource manager.\n"
               "With no options it listens on 127.0.0.1:61613 and keeps its data in ./escrow-data.",
               "escrowd"};
  std::string config_file;
  std::vector<std::string> listen;
  std::string data_dir;
  std::string log_level;
  app.add_option("-c,--config", config_file, "TOML configuration file (see docs/configuration.md)")
      ->check(CLI::ExistingFile);
  app.add_option("-l,--listen", listen,
                 "HOST:PORT to accept STOMP connections on; repeat for several. Port 0 picks a free port. "
                 "Replaces the configured list.");
  app.add_option("-d,--data-dir", data_dir, "directory of the LMDB store (created if missing)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or critical");
  bool hash_password = false;
  app.add_flag("--hash-password", hash_password,
               "read a password from standard input (one line) and print its hash for the users file, then exit");
  app.set_version_flag("--version", "escrowd 0.1.0");
  CLI11_PARSE(app, argc, argv);
  if (hash_password) return print_password_hash();

  broker_config config;
  config.config_file = config_file;
  if (!listen.empty()) config.command_line_keys.push_back("listen");
  if (!data_dir.empty()) config.command_line_keys.push_back("data-dir");
  if (!log_level.empty()) config.command_line_keys.push_back("log-level");
  if (!config_file.empty()) {
    if (std::string err = escrow::broker::load_config_file(config_file, config); !err.empty()) {
      std::cerr << "escrowd: bad configuration: " << err << "\n";
      return 2;
    }
  }
  if (!listen.empty()) {
    config.listen.clear();
    for (const auto& text : listen) {
      auto address = escrow::broker::parse_listen_address(text);
      if (!address) {
        std::cerr << "escrowd: --listen " << text << ": use HOST:PORT, e.g. 127.0.0.1:61613\n";
        return 2;
      }
      config.listen.push_back(*address);
    }
  }
  if (!data_dir.empty()) config.data_dir = data_dir;
  if (!log_level.empty()) config.log_level = log_level;

  auto level = spdlog::level::from_str(config.log_level);
  if (level == spdlog::level::off && config.log_level != "off") {
    std::cerr << "escrowd: unknown log level '" << config.log_level << "'\n";
    return 2;
  }
  // Logs go to stderr, leaving stdout free; systemd and the tests read stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("escrowd"));
  spdlog::set_level(level);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  return escrow::broker::run_server(config);
}
