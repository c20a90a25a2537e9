// What the test transaction manager needs from a resource in two-phase commit, whatever the
// resource is (Escrow through its XA switch, PostgreSQL through libpq). One participant object
// belongs to one thread of the manager (its connection is that thread's).
//
// Failures are exceptions: `unavailable` when the resource cannot be reached now (retry after
// reopen(): XAER_RMFAIL, a lost connection, a server restarting), `failed` for anything else (the
// resource said no, or a bug). Heuristic outcomes are reported, forgotten and counted, not thrown.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "escrow/xid.h"

namespace escrow::tm {

struct unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a resource answered to prepare.
enum class vote { prepared, read_only, rolled_back };

class participant {
 public:
  virtual ~participant() = default;
  virtual const char* name() const = 0;

  // (Re)connects if needed. Throws unavailable while the resource is down.
  virtual void reopen() = 0;

  // Phase one. REQUIRES: the branch's work is done (for Escrow: xa_end'ed).
  virtual vote prepare(const xid& x) = 0;
  // Phase two, or the only phase (one_phase: no prepare was made). Returns normally once the
  // branch is committed or known finished (unknown to the resource after an earlier attempt).
  // Throws failed if a one-phase commit was rolled back instead.
  virtual void commit(const xid& x, bool one_phase) = 0;
  // Rolls the branch back, whatever its state (active, idle, prepared, or gone already).
  virtual void rollback(const xid& x) = 0;
  // The prepared (or heuristically completed) branches whose xid has this format id and whose
  // gtrid starts with `prefix`: what recovery must finish.
  virtual std::vector<xid> recover(long format_id, const std::string& prefix) = 0;
};

}  // namespace escrow::tm
