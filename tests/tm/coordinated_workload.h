// escrow-tm --coordinated NAME: the orders workload of workload.h (same tables, queues and
// messages) without a transaction manager: escrowd coordinates one PostgreSQL transaction per
// STOMP transaction (docs/exactly-once.md). Each worker thread, per order:
//
//   STOMP  receive one order (ack:client-individual, prefetch-count:1)
//   STOMP  BEGIN transaction:T coordinate:postgresql/NAME   -> RECEIPT pg-gid:GID
//   STOMP  ACK the order in T                               -> RECEIPT
//   PG     BEGIN; INSERT INTO orders (id, body, xid) VALUES (order-id, body, GID)
//   STOMP  SEND the confirmation in T                       -> RECEIPT
//   PG     PREPARE TRANSACTION 'GID'                           (durable write 1)
//   STOMP  COMMIT T                                         -> RECEIPT database:committed|pending
//          (escrowd: its decision in the commit batch, durable write 2; COMMIT PREPARED, 3)
//
// The same round trips as the two-phase workload up to the commit (xa_start ~ BEGIN, every ACK
// and SEND waits for its RECEIPT as libescrow's consumer and producer do there), so what differs
// is the commit: here three durable writes, there five (two prepares, the manager's decision log,
// two commits).
//
// STOMP goes through libescrow's connection::call() with frames built here: its transaction class
// cannot carry BEGIN's coordinate header nor hand back the RECEIPT's headers. The consumer is
// libescrow's, only for receiving (its ACKs are sent by hand, in T).
//
// After a failure the worker never finishes a prepared GID itself: before COMMIT was sent it
// sends ABORT (escrowd rolls the GID back), after it the outcome is escrowd's to finish; a GID
// left in pg_prepared_xacts after the run is escrowd's bug, which the benchmark checks.
//
// Thread safety: run_coordinated_workers() starts and joins its own threads; each has its own
// STOMP connection and PostgreSQL session.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "escrow/client.h"
#include "workload.h"

namespace escrow::tm {

struct coordinated_options {
  client::connect_options stomp;    // host, port, login, passcode, timeout (from --escrow)
  std::string database;             // NAME in coordinate:postgresql/NAME
  std::string conninfo;             // the workers' own libpq connection string
  std::string input = "/queue/orders";
  std::string output = "/queue/confirmations";
  int threads = 4;
  std::chrono::milliseconds idle_exit{3000};
};

// Beyond workload_counts (committed: every COMMIT that got its RECEIPT, pending ones included;
// rolled_back: orders given back after a failure before COMMIT was sent).
struct coordinated_counts {
  std::atomic<long> pending{0};    // RECEIPT said database:pending (escrowd finishes it later)
  std::atomic<long> failures{0};   // exceptions caught by a worker (ERROR frames, timeouts, ...)
  std::atomic<long> unknown{0};    // failures after COMMIT was sent: the outcome is escrowd's
};

// Reads escrow-tm's --escrow string (the XA open string: host, port, login, passcode, timeout;
// resource and branch are ignored) into connect options. False (and *error) if it does not parse.
bool parse_open_string(const std::string& text, client::connect_options& out, std::string* error);

// Runs the workers until each has been idle for idle_exit. Throws if a worker hit something it
// cannot get past: a duplicate order row (exactly-once broken), escrowd or PostgreSQL down for
// two minutes.
void run_coordinated_workers(const coordinated_options& options, workload_counts& counts, coordinated_counts& extra);

// Preloads `count` persistent orders into `input`: order-id order-NNNNNNN, a body of `body_size`
// bytes ("order N " then 'x's). Pipelined, the last one with a receipt. Throws client::error.
void load_orders(const client::connect_options& stomp, const std::string& input, long count, std::size_t body_size);

}  // namespace escrow::tm
