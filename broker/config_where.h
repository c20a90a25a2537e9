// Where a value sits in a TOML file, for the error messages of every reader of one (config.cpp,
// config_tls.cpp, config_security.cpp, security.cpp): "FILE:LINE: KEY".
#pragma once

#include <fmt/format.h>

#include <string>
#include <toml++/toml.h>

namespace escrow::broker {

inline std::string where(const std::string& path, const toml::node& node, const std::string& key) {
  return fmt::format("{}:{}: {}", path, node.source().begin.line, key);
}

}  // namespace escrow::broker
