// The two-phase commit of the test transaction manager: given the participants that did work in
// a transaction, it commits in one phase when there is only one; otherwise it prepares each (in
// the order given), writes the commit decision to the decision log, and commits each (in reverse
// order), retrying a participant that is unavailable until it answers or `retry_for` runs out.
// Any failure before the decision rolls every participant back (presumed abort).
//
// Thread safety: complete() and abort() may run on several threads at once, each with its own
// participants; the log and the crash points are shared and thread-safe.
#pragma once

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "crash_points.h"
#include "decision_log.h"
#include "participant.h"

namespace escrow::tm {

enum class outcome { committed, rolled_back };

class coordinator {
 public:
  coordinator(decision_log& log, crash_points& points, std::chrono::milliseconds retry_for)
      : log_(log), points_(points), retry_for_(retry_for) {}

  // Finishes transaction `x` whose work is done. Throws unavailable if a decided outcome could
  // not be delivered within retry_for (recovery finishes it later), failed on heuristic damage or
  // a one-phase commit whose outcome is unknown.
  outcome complete(const xid& x, const std::vector<participant*>& workers);

  // Rolls `x` back in every participant, retrying unavailable ones. Throws unavailable (after
  // retry_for) or failed.
  void abort(const xid& x, const std::vector<participant*>& participants);

  // Runs `step` on `p` (after p->reopen()) until it returns or throws something other than
  // unavailable, or retry_for has passed (then rethrows the last unavailable).
  template <typename Step>
  void persist(participant& p, Step&& step);

 private:
  decision_log& log_;
  crash_points& points_;
  std::chrono::milliseconds retry_for_;
};

template <typename Step>
void coordinator::persist(participant& p, Step&& step) {
  auto deadline = std::chrono::steady_clock::now() + retry_for_;
  for (int attempt = 1;; ++attempt) {
    try {
      p.reopen();
      step();
      if (attempt > 1) std::fprintf(stderr, "escrow-tm: %s answered after %d attempts\n", p.name(), attempt);
      return;
    } catch (const unavailable& e) {
      if (attempt == 1) std::fprintf(stderr, "escrow-tm: %s unavailable, retrying: %s\n", p.name(), e.what());
      if (std::chrono::steady_clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace escrow::tm
