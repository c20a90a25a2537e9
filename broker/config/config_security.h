// Internal to config.cpp: reading the [[security-settings]] tables of the TOML file into
// broker_config::security_settings (security.h says what they mean).
#pragma once

#include <string>
#include <toml++/toml.h>
#include <vector>

#include "escrow/broker/security/security.h"

namespace escrow::broker {

// Replaces `out` with the tables of `node`. Returns "" on success, otherwise an error starting
// with "PATH:LINE: security-settings[N].KEY".
std::string load_security_settings(const std::string& path, const toml::node& node,
                                   std::vector<security_setting_entry>& out);

}  // namespace escrow::broker
