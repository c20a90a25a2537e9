// The durable store: one LMDB environment with named tables, a schema version checked at open,
// the atomic write unit (a batch) and the single committer thread that groups batches into one
// LMDB write transaction (group commit).
//
// Threads: submit() and the read calls are safe from any thread. Completions run on the store's
// committer or log writer thread, one at a time, in submission order, and only after the batch is
// durable: its group's record synced in the commit log (see run_committer in store.cpp, and
// docs/storage.md, "The commit log"). A completion must not block; post the result to where it
// belongs.
//
// When a write is refused (docs/storage.md, "When a write fails"): a full map grows by itself; a
// batch that still does not fit, or a full disk met by a commit, completes with store_full and
// later writes go on. A failed write or sync of the log, or a failed sync of data.mdb, leaves what
// is on disk unknown: that group completes with `failed`, and so does every later write until the
// process restarts (sticky, as PostgreSQL and LevelDB do after a failed fsync).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/storage/batch.h"
#include "escrow/storage/fault_injection.h"
#include "escrow/storage/status.h"

namespace escrow::storage {

// 3: queue records may end with their creator, branch keys may start with their owner, durable
// subscription keys may end with their owner (docs/storage.md). 4: the store has a commit log
// (the file `log`, commit_log.h) whose last records LMDB may not hold yet. A version-2 or -3
// store reads as it is and is marked 4 at open (and gets its log), so that an older release,
// which would ignore the log, refuses it clearly. 5: a message record may end with its sender
// (schema.h); an older store reads as it is and is marked 5, so that an older release, which
// would take such records for corrupt ones, refuses it.
inline constexpr std::uint32_t kSchemaVersion = 7;
inline constexpr std::uint32_t kOldestSchemaVersion = 2;  // the oldest that opens (and is upgraded)

struct store_options {
  std::string path;                                  // a directory; created if missing
  std::uint64_t map_size = 8ull * 1024 * 1024 * 1024;  // initial address space reserved; grows
  std::uint64_t map_size_limit = 0;  // the map grows up to this (0: as far as address space allows)
  std::size_t max_group_batches = 1024;                // at most this many batches per commit
  // send_room() refuses new messages once the store's live pages reach max_size bytes (0: no
  // cap), or once the disk's free space plus the file's reusable pages is below min_free_disk.
  std::uint64_t max_size = 0;
  std::uint64_t min_free_disk = 256ull * 1024 * 1024;
  // Bytes of the commit log's ring (storage.log-size): a group's record may take a quarter of it;
  // a larger group is committed to LMDB with its own syncs instead.
  std::uint64_t log_size = 64ull * 1024 * 1024;
  // At most this long between checkpoints while commits come (storage.checkpoint-interval-ms):
  // data.mdb is synced and the log before it may be reused. What a restart replays is bounded by it.
  std::uint32_t checkpoint_interval_ms = 500;
  // The inode the commit log must name to be this data.mdb's (0: data.mdb's own). `escrow check`
  // recovers a copy of a store that was not closed cleanly: the copy's log names the original.
  std::uint64_t log_data_file = 0;
  fault_plan faults;  // test builds only (fault_injection.h); ignored elsewhere
};

// What the committer has done so far, and how full the store is; for tests and metrics
// (docs/operations.md). The committer keeps these in atomics: stats() may be called from any
// thread, and a snapshot is consistent per field, not across fields.
struct commit_stats {
  std::uint64_t commits = 0;  // LMDB write transactions committed
  std::uint64_t batches = 0;  // batches completed successfully
  std::uint64_t map_grows = 0;  // times the map was grown because it was full
  bool writable = true;       // false once a commit or sync failed (sticky until restart)
  // Histograms: counts[i] is the number of observations in bucket i alone (at most bounds[i],
  // above bounds[i-1]); the last count is above every bound.
  std::vector<double> batches_per_commit_bounds;
  std::vector<std::uint64_t> batches_per_commit;
  std::uint64_t batches_per_commit_sum = 0;
  std::vector<double> fsync_bounds_seconds;
  std::vector<std::uint64_t> fsync;  // mdb_txn_commit (syncs data pages) and mdb_env_sync calls
  double fsync_seconds_sum = 0;
  std::uint64_t fsync_count = 0;
  std::uint64_t map_size_bytes = 0;  // the map LMDB reserved
  std::uint64_t map_used_bytes = 0;  // (last page number + 1) * page size
  std::uint64_t file_bytes = 0;      // data.mdb's size on disk
  std::uint64_t log_bytes = 0;       // the commit log's blocks on disk (all of its ring, from the start)
  std::uint64_t log_size_bytes = 0;  // the ring's size (storage.log-size)
  // Bytes of records after the last checkpoint's, as of the last commit: how full the ring is
  // (a checkpoint starts when a quarter is used, and a group waits for one when it would overwrite
  // what a restart needs).
  std::uint64_t log_used_bytes = 0;
  // As of the last send_room() check: pages the tables use, the disk's free space, and whether
  // new messages are refused (max-size or min-free-disk).
  std::uint64_t live_bytes = 0;
  std::uint64_t disk_free_bytes = 0;
  bool refusing_sends = false;
};

class store {
 public:
  using completion = std::function<void(status)>;

  // Opens (creating if needed) the environment at options.path and starts the committer.
  // Fails with a message when the directory cannot be used, or when the stored schema version is
  // not kSchemaVersion (a newer broker wrote it, or the data is not Escrow's).
  static status open(const store_options& options, std::unique_ptr<store>& out);

  // Stops the committer after completing every batch already submitted, then closes LMDB.
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  // Queues `b` for the next group commit. `done` runs on the committer thread once the batch is
  // durable (status ok), or failed (store_full: nothing of the batch was applied; failed: the
  // store has stopped taking writes). An empty batch is a barrier: it completes after every batch
  // submitted before it, without a write transaction of its own.
  void submit(batch b, completion done);
  // Queues `first` then `second` at once, so that the committer takes both into one group (unless
  // `first` fills the group to max_group_batches); each is applied, refused and completed on its own.
  void submit(batch first, completion first_done, batch second, completion second_done);

  // Reads the value under `key`. not_found when absent.
  status get(table t, std::string_view key, std::string& value) const;

  // Visits keys >= `from` that start with `prefix`, in key order, until `visit` returns false.
  // Views passed to `visit` are only valid during the call.
  using visitor = std::function<bool(std::string_view key, std::string_view value)>;
  status scan(table t, std::string_view from, std::string_view prefix, const visitor& visit) const;

  // A read view of the store as it is at this call, to scan later from one other thread (the
  // broker counts its queues in the background at start). Release it soon: LMDB keeps every page
  // it sees until then, and the map cannot grow meanwhile (a write that needs it waits).
  class read_snapshot {
   public:
    ~read_snapshot();
    read_snapshot(const read_snapshot&) = delete;
    read_snapshot& operator=(const read_snapshot&) = delete;

   private:
    friend class store;
    read_snapshot(void* txn, void* lock) : txn_(txn), lock_(lock) {}
    void* txn_;   // MDB_txn*
    void* lock_;  // the map lock, held shared until the snapshot goes (store.cpp)
  };
  status snapshot(std::unique_ptr<read_snapshot>& out) const;
  // scan() over a snapshot instead of the store as it is now.
  status scan(const read_snapshot& at, table t, std::string_view from, std::string_view prefix,
              const visitor& visit) const;

  // The largest key in `t`, or not_found when the table is empty.
  status last_key(table t, std::string& key) const;

  // A hot copy of the environment (what becomes data.mdb) written to the file open for writing at
  // `fd`, from its start, with mdb_env_copyfd2, compacted when `compact` (free pages left out), then
  // synced (fsync). The caller creates the file (its place and mode are the caller's to choose, see
  // broker/admin_backup.cpp), syncs its directory and closes it. Blocking: call it from a thread of
  // its own; the store waits for a copy under way before it closes.
  status copy_to(int fd, bool compact) const;

  // Whether there is room for new messages: ok, or store_full saying which limit (storage.max-size
  // or storage.min-free-disk) is reached and what to do. Sends are refused by it; acknowledgements,
  // commits and rollbacks are not, since they free room or finish what was accepted. Measured at
  // most every 10 ms (any thread), or now with `measure_now`; room that returns is seen by the next
  // measurement.
  status send_room(bool measure_now = false) const;

  commit_stats stats() const;
  // Bytes of batches submitted and not yet completed (what waits for the disk). Any thread.
  std::size_t queued_bytes() const;
  // Bytes of stored message records by their sender (message_record::sender; records without one
  // count for nobody), each record once however many entries share it: changed by every commit
  // since open, plus what add_stored_bytes() added. Any thread (a lock of its own).
  std::uint64_t stored_bytes_of(std::string_view sender) const;
  // The count of what was stored at open, by sender (from a snapshot taken at open, before any
  // change: see broker::impl::count_depths), added once. Any thread.
  void add_stored_bytes(const std::vector<std::pair<std::string, std::uint64_t>>& by_sender);
  // The sender and record size of a stored value: an entries value with its message inline, or a
  // messages value. False when it has no sender (or no message, or does not decode).
  static bool stored_sender(table t, std::string_view value, std::string_view& sender, std::size_t& bytes);
  // False once a commit or sync failed: every later write is refused until escrowd restarts.
  bool writable() const;

 private:
  struct impl;
  explicit store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace escrow::storage
