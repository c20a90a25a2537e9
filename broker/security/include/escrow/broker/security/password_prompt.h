// Reading a password for a users file entry (escrowd --hash-password, escrow passwd): one line
// from standard input, without echo when it is a terminal.
#pragma once

#include <optional>
#include <string>

namespace escrow::broker {

// The line read (without its newline); nullopt at end of input or for an empty line.
std::optional<std::string> read_password(const char* prompt);

}  // namespace escrow::broker
