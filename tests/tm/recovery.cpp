// Start-up recovery (recovery.h).
#include "recovery.h"

#include <cstdio>

namespace escrow::tm {

recovery_result recover(coordinator& coordinator, decision_log& log, const std::vector<participant*>& participants,
                        long format_id, const std::string& prefix) {
  recovery_result r;
  for (participant* p : participants) {
    std::vector<xid> prepared;
    coordinator.persist(*p, [&] { prepared = p->recover(format_id, prefix); });
    for (const xid& x : prepared) {
      bool commit = log.committed().count(x.to_string()) > 0;
      std::fprintf(stderr, "escrow-tm: recovery: %s %s in %s\n", commit ? "committing" : "rolling back",
                   x.to_string().c_str(), p->name());
      if (commit) {
        coordinator.persist(*p, [&] { p->commit(x, false); });
        ++r.committed;
      } else {
        coordinator.persist(*p, [&] { p->rollback(x); });
        ++r.rolled_back;
      }
    }
  }
  // Every logged transaction is now finished in every participant.
  log.truncate();
  return r;
}

}  // namespace escrow::tm
