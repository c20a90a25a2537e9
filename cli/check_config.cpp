// escrow check-config FILE: loads a configuration with escrowd's own reader (broker/config.h)
// without starting a broker, and says what is wrong where (FILE:LINE: key: problem).
#include <iostream>

#include "commands.h"
#include "escrow/broker/config/config.h"
#include "escrow/broker/config/users_file.h"
#include "exit_codes.h"

namespace escrow::cli {

int run_check_config(const std::string& file, const output_options& o) {
  broker::broker_config config;
  std::string error = broker::load_config_file(file, config);
  // The users file it names is checked too (relative paths: from the current directory, as
  // escrowd reads them from its working directory).
  if (error.empty() && !config.users_file.empty()) {
    broker::users_table users;
    error = broker::load_users_file(config.users_file, users);
  }
  // And [http] token-file (a missing or malformed one stops escrowd at start too).
  if (error.empty()) {
    std::vector<std::array<unsigned char, 32>> tokens;
    error = broker::load_http_token_file(config, tokens);
  }
  if (o.json) {
    auto quoted = [](const std::string& text) {
      std::string q = "\"";
      for (char c : text) {
        if (c == '"' || c == '\\') q += '\\';
        if (c == '\n') q += "\\n";
        else q += c;
      }
      return q + "\"";
    };
    std::cout << "{\"file\":" << quoted(file) << ",\"ok\":" << (error.empty() ? "true" : "false")
              << ",\"error\":" << quoted(error) << "}\n";
  } else if (error.empty()) {
    std::cout << file << ": ok\n";
  } else {
    std::cerr << "escrow: " << error << "\n";
  }
  return error.empty() ? exit_ok : exit_failed;
}

}  // namespace escrow::cli
