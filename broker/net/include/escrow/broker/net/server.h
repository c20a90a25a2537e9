// The running broker: the I/O thread pool, the store, the core and one acceptor per listen
// address (plain ones from `listen`, TLS ones from [[tls-listener]]). run() blocks until SIGINT or
// SIGTERM, then stops gracefully (graceful_stop.h): stops accepting, closes every connection (their
// unacknowledged deliveries return to their queues), leaves prepared branches prepared, and closes
// the store cleanly (its committer finishes what was submitted).
#pragma once

#include <string>

#include "escrow/broker/config/config.h"

namespace escrow::broker {

// Starts the broker described by `config` and serves until a stop signal. Returns the process
// exit code: 0 after a clean stop, 1 when it cannot start (store, address in use), 2 for a
// configuration that cannot work (a TLS file that does not load, nothing to listen on); start-up
// problems are logged with what to do about them.
int run_server(const broker_config& config);

}  // namespace escrow::broker
