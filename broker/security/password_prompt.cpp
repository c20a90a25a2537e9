// One line from standard input, with terminal echo off while it is typed.
#include "escrow/broker/security/password_prompt.h"

#include <termios.h>
#include <unistd.h>

#include <iostream>

namespace escrow::broker {

std::optional<std::string> read_password(const char* prompt) {
  bool tty = isatty(STDIN_FILENO);
  termios saved{};
  if (tty) {
    std::cerr << prompt << std::flush;
    tcgetattr(STDIN_FILENO, &saved);
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
  }
  std::string password;
  bool got = static_cast<bool>(std::getline(std::cin, password));
  if (tty) {
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    std::cerr << "\n";
  }
  if (!got || password.empty()) return std::nullopt;
  return password;
}

}  // namespace escrow::broker
