// Two-phase commit (coordinator.h).
#include "coordinator.h"

#include <cstdio>

namespace escrow::tm {

outcome coordinator::complete(const xid& x, const std::vector<participant*>& workers) {
  points_.reached(point::before_prepare);
  if (workers.empty()) return outcome::committed;
  if (workers.size() == 1) {
    // One resource did work: no prepare, no log record. If the answer is lost, nobody can tell
    // whether it committed: that is the price of one phase, and the caller hears it.
    try {
      workers.front()->commit(x, true);
      return outcome::committed;
    } catch (const unavailable& e) {
      throw failed(std::string("one-phase commit of ") + x.to_string() + ": outcome unknown: " + e.what());
    } catch (const failed&) {
      abort(x, workers);
      return outcome::rolled_back;
    }
  }

  std::vector<participant*> to_commit;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    participant* p = workers[i];
    vote v = vote::rolled_back;
    try {
      v = p->prepare(x);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "escrow-tm: prepare of %s in %s failed, rolling back: %s\n", x.to_string().c_str(),
                   p->name(), e.what());
    }
    if (v == vote::rolled_back) {
      abort(x, workers);
      return outcome::rolled_back;
    }
    if (v == vote::prepared) to_commit.push_back(p);
    if (i == 0 && workers.size() > 1) points_.reached(point::between_prepares);
  }
  if (to_commit.empty()) return outcome::committed;  // every participant was read-only

  // The decision: durable before any participant hears it.
  log_.append_commit(x.to_string());
  points_.reached(point::after_log);
  for (auto it = to_commit.rbegin(); it != to_commit.rend(); ++it) {
    participant* p = *it;
    persist(*p, [&] { p->commit(x, false); });
    if (it == to_commit.rbegin() && to_commit.size() > 1) points_.reached(point::during_commit);
  }
  log_.append_done(x.to_string());
  return outcome::committed;
}

void coordinator::abort(const xid& x, const std::vector<participant*>& participants) {
  for (participant* p : participants) persist(*p, [&] { p->rollback(x); });
}

}  // namespace escrow::tm
