// Start-up recovery of the test transaction manager: asks every participant for its prepared
// branches of this manager (format id and gtrid prefix), commits those the decision log says were
// committed and rolls back all others (presumed abort), then empties the log.
//
// REQUIRES: no transaction of this manager is in flight (run it before the workers start).
#pragma once

#include <string>
#include <vector>

#include "coordinator.h"

namespace escrow::tm {

struct recovery_result {
  int committed = 0;
  int rolled_back = 0;
};

// Throws unavailable (a participant stayed down for retry_for) or failed.
recovery_result recover(coordinator& coordinator, decision_log& log, const std::vector<participant*>& participants,
                        long format_id, const std::string& prefix);

}  // namespace escrow::tm
