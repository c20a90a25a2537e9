// Internal to broker/core: the state of coordinated PostgreSQL transactions (coordination.cpp,
// docs/exactly-once.md). A STOMP transaction begun with coordinate:postgresql/NAME gets a gid;
// the client prepares its SQL under it; the broker's commit batch records the decision, then the
// database commits it. Here: the databases, the gids in flight and the decisions not yet done in
// their database. A member of broker::impl (`coordination`), touched only on the core strand.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "escrow/broker/coordinator/pg_database.h"
#include "escrow/storage/schema.h"

namespace escrow::broker {

struct coordination_part {
  struct database {
    std::unique_ptr<coordinator::pg_database> pg;
    bool pass_running = false;  // a recovery pass over its pg_prepared_xacts is under way
  };
  std::map<std::string, database, std::less<>> databases;  // by name

  // Every gid of this broker starts with `prefix` ("escrow_" and the store id in hex, then "_"):
  // recovery touches no other. `incarnation` (random, per start) and the counter make it unique.
  std::string prefix;
  std::string incarnation;
  std::uint64_t counter = 0;

  // Begun and neither rolled back nor decided: recovery never rolls these back.
  struct live_transaction {
    std::string database;
    std::string owner;
    std::uint64_t connection = 0;
    std::uint64_t begun_ms = 0;
    bool committing = false;  // its COMMIT is checking the database or writing the decision
    // Its commit's write failed with an unknown outcome (the store stopped): kept here, out of the
    // passes' reach, until escrowd restarts and decides from the store.
    bool in_doubt = false;
  };
  std::unordered_map<std::string, live_transaction> live;

  // Committed here, COMMIT PREPARED not known done (table `decisions`). `seq` orders them against a
  // recovery pass: one made after the pass listed the database is not concluded from its list.
  struct decision {
    storage::decision_record record;
    std::uint64_t seq = 0;
    bool finishing = false;  // a COMMIT PREPARED for it is under way
  };
  std::map<std::string, decision> decisions;
  std::uint64_t decision_seq = 0;

  // Metrics.
  std::uint64_t committed = 0;          // COMMITs answered: both sides committed
  std::uint64_t answered_pending = 0;   // COMMITs answered database:pending
  std::uint64_t rolled_back = 0;        // ended without a decision (ABORT, refusal, timeout, loss)
  std::uint64_t refused_unprepared = 0; // COMMITs refused: the gid was not prepared in the database
  std::uint64_t recovered_commits = 0;  // decisions finished by recovery
  std::uint64_t recovered_rollbacks = 0;  // prepared gids recovery rolled back (presumed abort)

  std::size_t in_flight() const { return live.size() + decisions.size(); }
};

}  // namespace escrow::broker
