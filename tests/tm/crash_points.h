// Named points in the test transaction manager's two-phase commit where a test makes something
// fail on purpose:
//   before-prepare    the work is done and xa_end'ed; nothing is prepared
//   between-prepares  Escrow is prepared, PostgreSQL not yet
//   after-log         both are prepared and the commit decision is durable in the log
//   during-commit     PostgreSQL is committed, Escrow not yet
// At a point, for the Nth transaction (counted from 1, in this process, over all threads) that
// reaches it:
//   crash  the manager kills itself with SIGKILL (no cleanup, like a power cut for the process);
//   pause  it prints "paused POINT N" on stdout and waits for a line on stdin before going on,
//          so that a test can kill escrowd or restart PostgreSQL at exactly that moment.
//
// Thread safety: reached() may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::tm {

enum class point { before_prepare, between_prepares, after_log, during_commit };
inline constexpr std::size_t kPoints = 4;

std::string_view to_string(point p);
std::optional<point> parse_point(std::string_view name);

class crash_points {
 public:
  enum class action { crash, pause };

  // Adds "POINT:N" (e.g. "between-prepares:120"). False (and *error) if it does not parse.
  bool add(action a, std::string_view spec, std::string* error);

  // Called by every transaction that reaches `p`: crashes, pauses or returns at once.
  void reached(point p);

 private:
  struct trigger {
    action what;
    point where;
    long nth;
  };
  std::vector<trigger> triggers_;  // set before the workers start, read-only afterwards
  std::array<std::atomic<long>, kPoints> counts_{};
  std::mutex pause_mutex_;  // one pause at a time on stdin/stdout
};

}  // namespace escrow::tm
