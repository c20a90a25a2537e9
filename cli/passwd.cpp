// escrow passwd NAME: a [[user]] entry for the users file (docs/security.md), with the password
// read without echo and stored only as its PBKDF2 hash.
#include <iostream>

#include "commands.h"
#include "exit_codes.h"
#include "escrow/broker/security/password_hash.h"
#include "escrow/broker/security/password_prompt.h"

namespace escrow::cli {

int run_passwd(const std::string& name, const std::vector<std::string>& roles) {
  auto quoted = [](const std::string& text) {
    std::string q = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  };
  auto password = broker::read_password(("password for " + name + ": ").c_str());
  if (!password) {
    std::cerr << "escrow: passwd: no password on standard input\n";
    return exit_usage;
  }
  std::cout << "[[user]]\nname = " << quoted(name) << "\npassword = " << quoted(broker::make_password_hash(*password))
            << "\nroles = [";
  for (std::size_t i = 0; i < roles.size(); ++i) std::cout << (i ? ", " : "") << quoted(roles[i]);
  std::cout << "]\n";
  return exit_ok;
}

}  // namespace escrow::cli
