// The test transaction manager's workload: each worker thread takes one order message from the
// input queue, inserts the order row into PostgreSQL and sends a confirmation to the output
// queue, all in one distributed transaction (Escrow through escrow_xa_switch, PostgreSQL through
// libpq), until the input queue stays empty for `idle_exit`.
//
// Thread safety: run_workers() starts and joins its own threads; each has its own participants.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "coordinator.h"
#include "escrow/xa.h"
#include "escrow/xa_switch.h"

namespace escrow::tm {

class pg_participant;

struct workload_options {
  xa_switch_t* xa_switch = &escrow_xa_switch;
  int rmid = 1;
  std::string open_string;          // xa_open's info
  std::string conninfo;             // libpq connection string
  std::string input = "/queue/orders";
  std::string output = "/queue/confirmations";
  bool use_database = true;         // false: only Escrow works, so commits are one-phase
  int threads = 4;
  std::chrono::milliseconds idle_exit{3000};
  long format_id = 0;
  std::string gtrid_prefix;         // "NAME:" ; each gtrid is NAME:RUN:SEQUENCE
  std::string run_id;
};

struct workload_counts {
  std::atomic<long> committed{0};
  std::atomic<long> rolled_back{0};
};

// The table the workload writes: orders(id text primary key, body text, xid text).
void create_orders_table(pg_participant& pg);

// Runs the workers until each has been idle for idle_exit. Throws if a worker hit something it
// cannot get past (a participant down for longer than the coordinator's retry time, heuristic
// damage, a duplicate order row: exactly-once broken).
void run_workers(const workload_options& options, coordinator& coordinator, workload_counts& counts);

}  // namespace escrow::tm
