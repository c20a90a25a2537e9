// Escrow as a participant of the test transaction manager, driven only as a real manager drives a
// resource: through the function pointers of an xa_switch_t (escrow_xa_switch) and, for the
// application's own sends and receives inside a branch, escrow_xa_connection(rmid).
//
// Thread safety: one object per manager thread (the switch keeps one connection per thread and
// rmid); never share one between threads.
#pragma once

#include <string>

#include "escrow/xa.h"
#include "escrow/xa_switch.h"
#include "participant.h"

namespace escrow::client {
class connection;
}

namespace escrow::tm {

class escrow_participant : public participant {
 public:
  // `sw`: the switch (normally &escrow_xa_switch); `open_string`: xa_open's info.
  escrow_participant(xa_switch_t* sw, int rmid, std::string open_string);
  ~escrow_participant() override;  // xa_close
  escrow_participant(const escrow_participant&) = delete;
  escrow_participant& operator=(const escrow_participant&) = delete;

  const char* name() const override { return "escrow"; }
  // xa_open unless this thread's connection is open. Each time a new connection is opened,
  // generation() grows: subscriptions made on the old one are gone.
  void reopen() override;
  unsigned generation() const { return generation_; }
  // The connection the application uses inside branches (nullptr while it is down).
  client::connection* connection() const;

  // xa_start(TMNOFLAGS) / xa_end(TMSUCCESS or TMFAIL). Throw unavailable or failed.
  void start(const xid& x);
  void end(const xid& x, bool success);
  bool associated() const { return associated_; }

  vote prepare(const xid& x) override;
  void commit(const xid& x, bool one_phase) override;
  void rollback(const xid& x) override;
  std::vector<xid> recover(long format_id, const std::string& prefix) override;

 private:
  // Throws unavailable for XAER_RMFAIL, failed for other codes not in `accepted`.
  [[noreturn]] void raise(int code, const char* call, const xid* x) const;
  // Forgets a heuristically completed branch after saying what happened.
  void heuristic(int code, const char* call, const xid& x);

  xa_switch_t* switch_;
  int rmid_;
  std::string open_string_;
  unsigned generation_ = 0;
  bool associated_ = false;
};

}  // namespace escrow::tm
