// Internal to config.cpp: reading the [[tls-listener]] tables of the TOML file into
// broker_config::tls_listeners. Only the shape is checked here (keys, types, HOST:PORT, versions);
// the certificate and key files are loaded, and their errors reported, when the broker starts
// (broker/tls.h), naming the file, line and key recorded here.
#pragma once

#include <string>
#include <toml++/toml.h>
#include <vector>

#include "escrow/broker/config/config.h"

namespace escrow::broker {

// Replaces `out` with the listeners of `node` (an array of tables). Returns "" on success,
// otherwise an error starting with "PATH:LINE: tls-listener[N].KEY".
std::string load_tls_listeners(const std::string& path, const toml::node& node,
                               std::vector<tls_listener_config>& out);

// The same for [[websocket-listener]]: `listen`, `allowed-origins`, and the TLS keys above, which
// make it a wss listener (certificate-chain and private-key together, or neither).
std::string load_websocket_listeners(const std::string& path, const toml::node& node,
                                     std::vector<websocket_listener_config>& out);

}  // namespace escrow::broker
