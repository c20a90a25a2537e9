// The fault-injection seam of the committer, for tests only: it makes the k-th commit or sync
// fail the way a full map, a full disk or a failing device does, or kills the process just before
// it. Compiled in only when meson's `fault_injection` option is on (scripts/setup turns it on for
// the test builds); a release escrowd has no seam and ignores ESCROW_FAULTS.
//
// A plan is a comma-separated list of rules `POINT:RANGE:FAULT`:
//   POINT  commit (an LMDB write transaction of the committer, counted from 1 after open),
//          sync (the sync that makes a group durable: its commit log record's fdatasync, or the
//          checkpoint of a group too large for the log), data_sync (a checkpoint's sync of
//          data.mdb, by the data syncer), or replay (a commit log record applied to LMDB at start,
//          before the committer runs); and two points of the broker's coordinated transactions
//          (docs/exactly-once.md), where only kill applies: decided (a commit's decision is
//          durable, COMMIT PREPARED not yet sent) and db_committed (the database committed, the
//          RECEIPT not yet written)
//   RANGE  K (the k-th only), K-L (the k-th to the l-th), or K+ (the k-th and every later one)
//   FAULT  map_full, enospc (the write is refused before anything reaches the file), eio (at a
//          commit: a write of LMDB's pages fails, as a short write does, and LMDB aborts it; at a
//          sync: the write happens, then the sync reports an I/O error, so what is on disk is
//          unknown), kill (SIGKILL just before the commit or sync), stall (a slow disk: the call
//          waits a second, then goes on)
// e.g. ESCROW_FAULTS="commit:3:enospc,sync:2+:eio". docs/storage.md, "Fault injection".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace escrow::storage {

class fault_plan {
 public:
  enum class point : std::uint8_t { commit, sync, data_sync, replay, decided, db_committed };
  enum class fault : std::uint8_t { none, map_full, enospc, eio, kill, stall };

  // Parses `spec`; on a malformed one returns false with `error` saying which rule and why.
  static bool parse(std::string_view spec, fault_plan& out, std::string& error);
  bool empty() const { return rules_.empty(); }

  // Counts one more occurrence of `p` and returns the fault planned for it (none when no rule
  // matches). Called by one thread at a time (the store's opening code, then its committer).
  fault next(point p);

 private:
  struct rule {
    point at;
    std::uint64_t first = 0;
    std::uint64_t last = 0;  // inclusive; UINT64_MAX for "K+"
    fault what = fault::none;
  };
  std::vector<rule> rules_;
  std::uint64_t counts_[6] = {};  // occurrences so far, by point
};

// Whether this build has the seam (the `fault_injection` meson option).
bool fault_injection_compiled();

}  // namespace escrow::storage
