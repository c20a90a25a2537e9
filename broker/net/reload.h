// Internal to broker/net: SIGHUP. Re-reads the configuration file the broker started with, applies
// what can change at run time (config/reload_keys.cpp's kConfigKeys says which keys) and logs what changed and
// which changed keys need a restart. A file that no longer loads changes nothing (the error is logged).
// Called on the I/O thread that handles the signal; the broker part runs on the core strand.
// With `http` (the endpoint is on), [http] allowed-hosts and the token file apply too.
#pragma once

#include "escrow/broker/core/broker.h"
#include "escrow/broker/config/config.h"
#include "escrow/broker/admin/http_server.h"

namespace escrow::broker {

void reload_configuration(const broker_config& running, broker& core, http_context* http = nullptr);

}  // namespace escrow::broker
