// Internal to broker/core: the part of the core's state that transactions.cpp and
// tenant_limits.cpp keep for transaction branches: the resource manager (every local transaction
// and XA branch, keyed by owner and xid, rm/), the prepare and commit latencies for the metrics,
// and the SEND bytes staged in open transactions by user (limits.max-transaction-bytes-per-user).
// A member of broker::impl (`transactions`), touched only on the core strand.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "escrow/broker/core/metrics.h"
#include "escrow/rm/resource_manager.h"

namespace escrow::broker {

struct transactions_part {
  transactions_part(std::chrono::milliseconds branch_timeout, std::chrono::milliseconds local_timeout)
      : rm(branch_timeout, local_timeout) {}

  rm::resource_manager rm;
  latency_histogram prepare_latency;  // XA-PREPARE to its answer (metrics)
  latency_histogram commit_latency;   // commits to their answer (metrics)
  std::unordered_map<std::string, std::uint64_t> transaction_bytes_by_user;  // staged SEND bytes
};

}  // namespace escrow::broker
