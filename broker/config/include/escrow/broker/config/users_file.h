// Reading the users file ([security] users-file, docs/security.md) into a users_table (security.h):
// a TOML file of [[user]] tables, read by the configuration's TOML walker (config_walk.h). escrowd
// reads it at start and at SIGHUP, `escrow check-config` to check it.
#pragma once

#include <string>

#include "escrow/broker/security/security.h"

namespace escrow::broker {

// Reads the users file. Returns "" on success, else an error naming the file, line and key.
std::string load_users_file(const std::string& path, users_table& out);

// A warning when the users file (holding password hashes) may be read or written by others than
// its owner: group or other permission bits set. "" when it is private (or cannot be examined).
std::string users_file_exposure(const std::string& path);

}  // namespace escrow::broker
