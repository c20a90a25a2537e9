// PostgreSQL as a participant of the test transaction manager, through libpq: the work runs in an
// ordinary transaction (BEGIN ...), phase one is PREPARE TRANSACTION 'gid', phase two COMMIT
// PREPARED / ROLLBACK PREPARED, recovery reads pg_prepared_xacts. The gid is the xid's text form
// (formatID:gtrid-hex:bqual-hex), the same the broker prints, so an operator can match them.
//
// Thread safety: one object (one PGconn) per manager thread.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <vector>

#include "participant.h"

namespace escrow::tm {

// A unique_violation (SQLSTATE 23505): the same order was inserted twice.
struct duplicate_key : failed {
  using failed::failed;
};

class pg_participant : public participant {
 public:
  explicit pg_participant(std::string conninfo);
  ~pg_participant() override;
  pg_participant(const pg_participant&) = delete;
  pg_participant& operator=(const pg_participant&) = delete;

  const char* name() const override { return "postgresql"; }
  // Connects unless connected. Throws unavailable while the server is down or starting.
  void reopen() override;

  // BEGIN. Throws unavailable or failed.
  void begin();
  // One statement with text parameters ($1, $2, ...) inside the current transaction (or outside
  // any, for set-up). Throws duplicate_key, unavailable or failed.
  void execute(const std::string& sql, const std::vector<std::string>& params = {});

  vote prepare(const xid& x) override;
  void commit(const xid& x, bool one_phase) override;
  void rollback(const xid& x) override;
  std::vector<xid> recover(long format_id, const std::string& prefix) override;

 private:
  using result = std::unique_ptr<PGresult, void (*)(PGresult*)>;
  // Runs `sql`; returns the result of a successful command. Throws as execute() does, except that
  // an error whose SQLSTATE is `tolerated` returns nullptr.
  result run(const std::string& sql, const std::vector<std::string>& params = {}, const char* tolerated = nullptr);
  std::string gid_literal(const xid& x);

  std::string conninfo_;
  PGconn* conn_ = nullptr;
};

}  // namespace escrow::tm
