// The LMDB environment, the commit log and the committer thread. LMDB allows one write transaction
// at a time, bound to the thread that began it. So one thread owns every write: it drains all
// waiting batches into one transaction, applies each batch in a nested transaction when one fails
// (a batch that fails leaves no trace and does not spoil the others), commits once without a
// sync, appends the group's batches to the commit log and syncs that, and only then reports each
// batch's completion. That is group commit at the cost of one sequential sync; data.mdb is synced
// by a thread of its own meanwhile (docs/storage.md, "The commit log").
#include "escrow/storage/store.h"

#include <fcntl.h>
#include <lmdb.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>  // std::shared_lock
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "escrow/storage/coding.h"
#include "escrow/storage/commit_log.h"
#include "escrow/storage/lmdb_meta.h"
#include "escrow/storage/schema.h"

namespace escrow::storage {
namespace {

MDB_val as_val(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }
std::string_view as_view(const MDB_val& v) { return {static_cast<const char*>(v.mv_data), v.mv_size}; }

// Translates an LMDB return code; the one place that knows LMDB's integers.
status from_lmdb(int rc, std::string_view what) {
  if (rc == 0) return {};
  std::string message = std::string(what) + ": " + mdb_strerror(rc);
  switch (rc) {
    case MDB_NOTFOUND: return {status::code::not_found, message};
    case MDB_MAP_FULL:
      return {status::code::store_full,
              message + " (the map is at storage.max-map-size: raise it, or consume messages)"};
    case ENOSPC:
    case EDQUOT:
      return {status::code::store_full,
              message + " (the disk holding the data directory is full: free disk space or consume messages)"};
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID: return {status::code::corrupt, message};
    default: return {status::code::io_error, message};
  }
}

// fsync of a directory: a file created or renamed in it is durable only once its entry is
// (DESIGN.md invariant 9). 0 or an errno.
int sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

// Readers of the map against the committer that grows it (mdb_env_set_mapsize needs no transaction
// open in the process). Any number of readers at once, on any thread (a snapshot is released on
// another thread than the one that took it), reading again while they read (a scan's visitor may
// call get); the remap happens in a moment with no reader, and readers wait only while it runs.
// One atomic: the number of readers, or kRemapping. Usable with std::shared_lock and unique_lock.
class map_readers {
 public:
  void lock_shared() {
    for (;;) {
      int n = state_.load(std::memory_order_relaxed);
      if (n >= 0 && state_.compare_exchange_weak(n, n + 1, std::memory_order_acquire)) return;
      if (n < 0) std::this_thread::yield();
    }
  }
  void unlock_shared() { state_.fetch_sub(1, std::memory_order_release); }
  void lock() {  // the committer, rarely: waits for a moment with no reader
    for (;;) {
      int idle = 0;
      if (state_.compare_exchange_weak(idle, kRemapping, std::memory_order_acquire)) return;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void unlock() { state_.store(0, std::memory_order_release); }

 private:
  static constexpr int kRemapping = -1;
  std::atomic<int> state_{0};
};

// A short read-only transaction, aborted on scope exit (LMDB readers must stay short).
struct read_txn {
  MDB_txn* txn = nullptr;
  int rc = 0;
  explicit read_txn(MDB_env* env) { rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn); }
  ~read_txn() {
    if (txn) mdb_txn_abort(txn);
  }
};

// What one batch changes in the bytes stored by sender (store::stored_bytes_of), once committed.
using sender_deltas = std::vector<std::pair<std::string, std::int64_t>>;

void add_delta(sender_deltas* d, std::string_view sender, std::int64_t bytes) {
  if (!d) return;
  for (auto& [name, n] : *d)
    if (name == sender) {
      n += bytes;
      return;
    }
  d->emplace_back(std::string(sender), bytes);
}

struct pending_batch {
  batch work;
  store::completion done;
  status result;
  std::size_t bytes = 0;  // counted in store::impl::queued_bytes until completed
  sender_deltas by_sender;  // set by apply(), taken into stored_by_sender once committed
};

}  // namespace

struct store::impl {
  store_options options;
  MDB_env* env = nullptr;
  MDB_dbi dbi[kTableCount] = {};
  int lock_fd = -1;

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<pending_batch> waiting;  // guarded by mutex
  bool stopping = false;              // guarded by mutex
  int copies = 0;                     // hot copies under way (guarded by mutex); close waits
  std::condition_variable copies_done;
  std::thread committer;

  // The commit log (commit_log.h) and what the committer has reserved in it for the group it is
  // writing: the record's place and its payload (the group's batches).
  std::unique_ptr<commit_log> log;
  std::uint64_t data_file_id = 0;  // data.mdb's inode: the log names the file it belongs to
  log_slot log_at;
  bool log_reserved = false;  // log_at is reserved and not yet handed to the writer or cancelled
  std::string log_payload;
  bool log_record = false;    // false: the group is too large for the log (checkpointed at once)
  std::uint64_t last_txnid = 0;  // the committer's last commit

  // Checkpoints (docs/storage.md, "The commit log"). The data syncer thread syncs data.mdb and
  // then records in the log's control block the commit it made durable, with its meta page; until
  // the next checkpoint, a read transaction (a pin) keeps LMDB from reusing any page of that
  // commit, so that start-up can always go back to it. Only the committer starts a checkpoint and
  // moves the pins; the syncer's side is guarded by sync_mutex.
  std::mutex sync_mutex;
  std::condition_variable sync_changed;
  struct checkpoint_job {
    std::uint64_t txnid = 0;
    std::string meta;           // its meta page (lmdb_meta.h)
    std::uint64_t log_end = 0;  // the virtual offset after its record in the log
    MDB_txn* pin = nullptr;     // holds its pages until the next checkpoint replaces it
    fault_plan::fault planned = fault_plan::fault::none;
  };
  std::optional<checkpoint_job> requested;  // sync_mutex: waiting for or being done by the syncer
  std::optional<checkpoint_job> finished;   // sync_mutex: done, not yet collected by the committer
  int sync_error = 0;                       // sync_mutex: the first checkpoint that failed
  bool syncer_stopping = false;             // sync_mutex
  std::thread syncer;
  // The committer's side.
  checkpoint_job checkpointed;  // the last checkpoint (its pin held)
  bool checkpoint_running = false;
  std::chrono::steady_clock::time_point last_checkpoint_at = std::chrono::steady_clock::now();
  std::uint64_t last_record_end = 0;  // the virtual offset after the last committed record
  std::uint32_t page_size = 4096;

  // The log writer: writes and syncs the records of committed groups in commit order, then
  // completes their batches. The committer writes a group's record itself when nothing else
  // waits (no hand-over on a lone SEND's path) and hands it over when more groups wait, so that
  // the next commit runs while this one's sync does. Guarded by writer_mutex.
  struct durable_job {
    std::vector<pending_batch> group;
    bool record = false;  // a log record to write (else: completed as its results say)
    log_slot slot;
    std::string payload;
  };
  std::mutex writer_mutex;
  std::condition_variable writer_changed;
  std::deque<durable_job> to_write;
  bool writer_busy = false;
  bool writer_stopping = false;
  bool writer_failed = false;  // the writer thread's own: a record's write or sync failed
  std::thread writer;
  std::mutex fault_mutex;  // the fault plan is consulted by the committer, the writer and the syncer

  // Sticky after a failed sync. Written by the committer only; atomic so that stats() and
  // writable() may read it from any thread.
  std::atomic<bool> failed{false};
  // Shared by every read transaction, exclusive while the committer grows the map: LMDB may remap
  // only while no transaction of this process is open (mdb_env_set_mapsize).
  mutable map_readers map_lock;
  std::atomic<std::uint64_t> map_grows{0};
  std::atomic<std::uint64_t> log_used{0};  // log->since_checkpoint() as of the last commit, for stats()
  fault_plan faults;          // committer thread only; empty unless a test asked for faults
  bool refusing = false;      // committer only: the last group was refused (logged once)

  // send_room(): measured at most every kRoomCheckNs, by whichever thread asks first.
  static constexpr std::int64_t kRoomCheckNs = 10'000'000;
  static constexpr std::int64_t kRoomCheckNearNs = 1'000'000;   // below floor * 2 + kNearFloorBytes
  static constexpr std::uint64_t kNearFloorBytes = 16ull << 20;
  mutable std::mutex room_mutex;
  mutable std::atomic<std::int64_t> room_checked_ns{0};
  mutable std::atomic<std::uint64_t> live_bytes{0};
  mutable std::atomic<std::uint64_t> reusable_bytes{0};
  std::atomic<std::uint64_t> pinned_txnid{0};  // checkpointed.txnid, for measure_room on any thread
  mutable std::atomic<std::uint64_t> disk_free{0};
  void measure_room() const;
  std::uint64_t oldest_reader() const;
  mutable std::atomic<bool> short_of_room{false};  // send_room refused: checkpoint soon (maybe_checkpoint)
  std::chrono::steady_clock::time_point last_trim;  // committer thread only
  std::atomic<std::uint64_t> commits{0};
  std::atomic<std::size_t> queued_bytes{0};  // submitted batches not yet completed
  // store::stored_bytes_of: committed changes since open plus the count at open. Written by the
  // committer after each commit and once by the depth counter, read by the core.
  mutable std::mutex stored_mutex;
  std::unordered_map<std::string, std::int64_t> stored_by_sender;
  sender_deltas* deltas = nullptr;  // committer only: where apply() counts, null during replay
  std::atomic<std::uint64_t> batches{0};
  // Metrics histograms, written by the committer only (relaxed atomics, no lock; see
  // docs/locking.md). Bucket i counts values <= kBatchBounds[i]; the last bucket the rest.
  static constexpr double kBatchBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  static constexpr double kFsyncBounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                            0.025,  0.05,    0.1,    0.25,  0.5,    1,    2.5};
  std::atomic<std::uint64_t> batch_buckets[std::size(kBatchBounds) + 1] = {};
  std::atomic<std::uint64_t> batch_sum{0};
  std::atomic<std::uint64_t> fsync_buckets[std::size(kFsyncBounds) + 1] = {};
  std::atomic<std::uint64_t> fsync_nanoseconds{0};
  void observe_group(std::uint64_t batch_count);
  void observe_fsync(std::chrono::steady_clock::duration d);

  ~impl() {
    if (checkpointed.pin) mdb_txn_abort(checkpointed.pin);
    if (env) mdb_env_close(env);
    // Only now: closing any descriptor of lock.mdb drops every lock this process has on it,
    // LMDB's own reader lock included.
    if (probe_fd >= 0) close(probe_fd);
    if (lock_fd >= 0) close(lock_fd);
  }

  status open_environment();
  status make_directory(std::vector<std::filesystem::path>& made, bool& new_store);
  status sync_directories(const std::vector<std::filesystem::path>& made) const;
  status lock_directory();
  status open_tables();
  status check_schema(MDB_txn* txn);
  status give_store_id(MDB_txn* txn);
  std::uint64_t store_id = 0;
  status recover_before_open(bool new_store);
  status alone_on_lock_file();
  int probe_fd = -1;  // lock.mdb, write-locked from the probe until LMDB has opened (alone_on_lock_file)
  // The log position LMDB's latest commit names, read before recovery sets LMDB back to the
  // checkpoint: replay must reach at least the lap it is in (replay_log).
  std::optional<log_position> latest_position;
  void read_latest_position(const lmdb_metas& metas, const std::string& data_file);
  status check_replay_reached(const log_position& replayed_to) const;
  status check_identity();
  bool restored = false;  // recover_before_open set LMDB back to the checkpoint
  status replay_log();
  status start_log();
  status apply_record(MDB_txn* txn, const log_position& at, std::string_view payload);
  void run_committer();
  void run_syncer();
  void run_writer();
  void hand_over(durable_job job, bool more_waiting);
  void write_jobs(std::vector<durable_job>& jobs);
  fault_plan::fault next_fault(fault_plan::point p);
  int data_sync(fault_plan::fault planned);
  bool start_checkpoint();
  int collect_checkpoint(bool wait);
  int checkpoint_now();
  void maybe_checkpoint();
  int release_pins_for_remap();
  bool pin_latest();
  int seal(MDB_txn* txn, std::vector<pending_batch>& group);
  void close_cleanly();
  void trim_resident_pages();
  void find_map();
  static constexpr int kRetryIsolated = -1;  // not an LMDB code: "apply the group batch by batch"
  static constexpr int kInjectedFull = -2;   // not an LMDB code: a full map that growing cannot cure
  static constexpr int kCheckpointFailed = -3;  // not an LMDB code: a checkpoint's sync failed
  void enqueue(std::span<pending_batch> batches);
  int apply_group(std::vector<pending_batch>& group, bool isolated, bool stop_on_full, MDB_txn*& txn,
                  std::uint64_t& applied);
  int write_group(std::vector<pending_batch>& group, std::uint64_t& applied);
  int commit(MDB_txn* txn);
  bool grow_map();
  void fail_for_good(const status& why, std::vector<pending_batch>& group);  // results only
  bool environment_usable();
  status refused_write(int rc) const;
  void complete(std::vector<pending_batch>& done);
  void* map_base = nullptr;  // where LMDB mapped data.mdb, if found
  std::size_t map_length = 0;
  int apply(MDB_txn* txn, std::string_view rep);
  int release(MDB_txn* txn, std::string_view key);
  int set_delivery_count(MDB_txn* txn, std::string_view entry_key, std::string_view count);
  int remove_entry(MDB_txn* txn, std::string_view entry_key);
  int promote_scheduled(MDB_txn* txn, std::string_view scheduled_key);
  int remove_scheduled(MDB_txn* txn, std::string_view scheduled_key);
};

// Opening, in order: the data directory and its lock, recovery before LMDB opens, LMDB itself,
// the tables and the schema version, the directory entries, replay, and the log's new generation.
status store::impl::open_environment() {
  bool new_store = false;
  std::vector<std::filesystem::path> made;  // the directories this start created, outermost first
  if (status s = make_directory(made, new_store); !s.ok()) return s;
  if (status s = lock_directory(); !s.ok()) return s;
  if (status s = recover_before_open(new_store); !s.ok()) return s;
  int rc = mdb_env_create(&env);
  if (rc == 0) rc = mdb_env_set_maxdbs(env, kTableCount + 2);
  if (rc == 0) rc = mdb_env_set_mapsize(env, options.map_size);
  if (rc == 0) rc = mdb_env_set_maxreaders(env, 512);
  // MDB_NOTLS: read transactions are not tied to a thread, so any Asio thread may read.
  // MDB_NOMETASYNC while the store opens (a commit syncs its data pages before it writes its meta
  // page; start_log syncs that too); the committer's commits then run with MDB_NOSYNC (start_log).
  if (rc == 0) rc = mdb_env_open(env, options.path.c_str(), MDB_NOTLS | MDB_NOMETASYNC, 0600);
  if (rc != 0) return from_lmdb(rc, "cannot open the store in " + options.path);
  int dead = 0;
  mdb_reader_check(env, &dead);  // clear reader slots left by a killed process
  find_map();
  if (status s = open_tables(); !s.ok()) return s;
  if (status s = check_identity(); !s.ok()) return s;
  if (status s = replay_log(); !s.ok()) return s;
  if (status s = start_log(); !s.ok()) return s;
  return sync_directories(made);
}

// A file is durable only with its directory entry, and a directory only with its own entry in its
// parent (DESIGN.md invariant 9); LMDB and the log sync their files, not the entries. Every start
// syncs the data directory (data.mdb, log, whoever created them: a start killed before its sync
// left them unsynced) and its parent, and the parent of every directory it made, before the first
// receipt depends on them.
status store::impl::sync_directories(const std::vector<std::filesystem::path>& made) const {
  // The data directory, and its parent as the kernel resolves it ("DIR/..", through any symlink).
  // A failure there is fatal only where this start made the directory; EINVAL is a file system
  // that cannot sync directories (nothing to be had there).
  const bool made_data_dir = !made.empty();
  auto sync = [&](const std::string& d, bool required) -> status {
    int rc = sync_directory(d);
    if (rc == 0) return {};
    if (!required || rc == EINVAL) {
      spdlog::warn("storage: cannot sync the directory {} (it holds the data directory {}): {}", d, options.path,
                   std::strerror(rc));
      return {};
    }
    return {status::code::io_error, "cannot sync the directory " + d + " (the data directory " + options.path +
                                        " or one that holds it): " + std::strerror(rc)};
  };
  if (status s = sync(options.path, true); !s.ok()) return s;
  if (status s = sync(options.path + "/..", made_data_dir); !s.ok()) return s;
  for (const auto& d : made)  // outermost first; the data directory's own parent is done above
    if (d.parent_path() != made.back().parent_path())
      if (status s = sync(d.parent_path().string(), true); !s.ok()) return s;
  return {};
}

// A data directory escrowd makes is private (0700): the store is every message. Its parents, if
// missing too, get the usual mode. One that exists keeps its mode (escrowd warns when it is open,
// broker/server.cpp); the files LMDB and escrowd create in it are 0600.
status store::impl::make_directory(std::vector<std::filesystem::path>& made, bool& new_store) {
  std::error_code ec;
  if (!std::filesystem::is_directory(options.path, ec)) {
    std::filesystem::path dir = std::filesystem::absolute(options.path, ec).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();  // "data/"
    // Each missing ancestor, outermost first, so that each one's parent can be synced.
    std::vector<std::filesystem::path> missing;
    for (auto p = dir.parent_path(); !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
      missing.insert(missing.begin(), p);
      if (p == p.parent_path()) break;
    }
    for (const auto& p : missing) {
      if (::mkdir(p.c_str(), 0777) == 0)  // the usual mode, less the umask
        made.push_back(p);
      else if (errno != EEXIST)
        return {status::code::io_error, "cannot create " + p.string() + " for the data directory " + options.path +
                                            ": " + std::strerror(errno)};
    }
    if (::mkdir(dir.c_str(), 0700) == 0)
      made.push_back(dir);
    else if (errno != EEXIST)
      return {status::code::io_error, "cannot create data directory " + options.path + ": " + std::strerror(errno)};
  }
  new_store = !std::filesystem::exists(std::filesystem::path(options.path) / "data.mdb", ec);
  return {};
}

// Two brokers on one data directory would hand out the same messages twice: refuse the second.
status store::impl::lock_directory() {
  std::string lock_path = options.path + "/escrow.lock";
  lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0)
    return {status::code::io_error, "cannot open " + lock_path + ": " + std::strerror(errno)};
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    return {status::code::io_error,
            "data directory " + options.path + " is in use by another escrowd (" + lock_path +
                " is locked); stop it or choose another --data-dir"};
  return {};
}

// The store's id (meta "store-id", random, written at creation) against the one its commit log
// names: a data.mdb copied over the live one keeps its inode but not its id. Its log is then not
// replayed; if it was already set back to the log's checkpoint, escrowd refuses to start.
status store::impl::check_identity() {
  read_txn r(env);
  if (r.rc != 0) return from_lmdb(r.rc, "cannot begin a read");
  MDB_val key = as_val(kStoreIdKey), value;
  int rc = mdb_get(r.txn, dbi[static_cast<int>(table::meta)], &key, &value);
  std::string_view id_bytes = rc == 0 ? as_view(value) : std::string_view{};
  std::uint64_t id = 0;
  if (rc == 0 && !get_u64(id_bytes, id)) return corrupt_record(table::meta, kStoreIdKey, "the store id is a u64 (8 bytes)");
  if (rc != 0 && rc != MDB_NOTFOUND) return from_lmdb(rc, "cannot read the store id");
  store_id = id;
  if (!log || !log->found() || log->current().store_id == id) return {};
  if (restored)
    return {status::code::corrupt,
            "data.mdb in " + options.path + " is not the store its commit log belongs to (a copy put over the live "
            "file?), and it was set back to that log's checkpoint; restore the copy again, into an empty "
            "directory (docs/operations.md, \"Restore\")"};
  spdlog::warn("storage: the commit log of {} belongs to another store (was data.mdb copied over?); it is not "
               "replayed and starts anew", options.path);
  log.reset();
  return {};
}

// The opening transaction: every table (created when missing) and the schema version, written
// into a new store, moved on in an older one it can read, refused otherwise.
status store::impl::open_tables() {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, 0, &txn);
  if (rc != 0) return from_lmdb(rc, "cannot begin the opening transaction");
  for (int i = 0; i < kTableCount; ++i) {
    rc = mdb_dbi_open(txn, table_name(static_cast<table>(i)), MDB_CREATE, &dbi[i]);
    if (rc != 0) {
      mdb_txn_abort(txn);
      return from_lmdb(rc, std::string("cannot open table ") + table_name(static_cast<table>(i)));
    }
  }
  status s = check_schema(txn);
  if (s.ok()) s = give_store_id(txn);
  if (!s.ok()) {
    mdb_txn_abort(txn);
    return s;
  }
  rc = mdb_txn_commit(txn);
  return from_lmdb(rc, "cannot commit the opening transaction");
}

// A store without an id (new, or written before ids) gets a random one.
status store::impl::give_store_id(MDB_txn* txn) {
  MDB_val key = as_val(kStoreIdKey), value;
  int rc = mdb_get(txn, dbi[static_cast<int>(table::meta)], &key, &value);
  if (rc != MDB_NOTFOUND) return from_lmdb(rc, "cannot read the store id");
  std::random_device device;
  std::uint64_t id = 0;
  while (id == 0) id = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  std::string v;
  put_u64(v, id);
  MDB_val vv = as_val(v);
  return from_lmdb(mdb_put(txn, dbi[static_cast<int>(table::meta)], &key, &vv, 0), "cannot write the store id");
}

status store::impl::check_schema(MDB_txn* txn) {
  MDB_val key = as_val(kSchemaVersionKey), value;
  int rc = mdb_get(txn, dbi[static_cast<int>(table::meta)], &key, &value);
  std::string current;
  put_u32(current, kSchemaVersion);
  MDB_val current_value = as_val(current);
  if (rc == MDB_NOTFOUND) {
    MDB_stat st{}, queues_st{};
    mdb_stat(txn, dbi[static_cast<int>(table::messages)], &st);
    mdb_stat(txn, dbi[static_cast<int>(table::queues)], &queues_st);
    if (st.ms_entries != 0 || queues_st.ms_entries != 0)
      return {status::code::bad_schema,
              "the store in " + options.path + " holds data but no schema version; it was not "
              "written by escrowd. Move it away or choose another --data-dir"};
    return from_lmdb(mdb_put(txn, dbi[static_cast<int>(table::meta)], &key, &current_value, 0),
                     "cannot write the schema version");
  }
  if (rc != 0) return from_lmdb(rc, "cannot read the schema version");
  std::string_view v = as_view(value);
  std::uint32_t version = 0;
  if (v.size() != 4)
    return corrupt_record(table::meta, kSchemaVersionKey,
                          "the schema version is a u32 (4 bytes), found " + std::to_string(v.size()) + " bytes");
  get_u32(v, version);
  if (version >= kOldestSchemaVersion && version < kSchemaVersion) {
    // Every record of the older version reads as it is: only the version moves on.
    rc = mdb_put(txn, dbi[static_cast<int>(table::meta)], &key, &current_value, 0);
    if (rc == 0)
      spdlog::info("storage: the store in {} is upgraded from schema version {} to {}", options.path, version,
                   kSchemaVersion);
    return from_lmdb(rc, "cannot write the schema version");
  }
  if (version != kSchemaVersion)
    return {status::code::bad_schema,
            "the store in " + options.path + " has schema version " + std::to_string(version) +
                " but this escrowd understands version " + std::to_string(kSchemaVersion) +
                "; run the escrowd release that wrote it"};
  return {};
}

// Before LMDB opens: read the commit log, and when the store was not closed cleanly, so that LMDB's
// latest commit is after the log's checkpoint (LMDB's commits run without a sync of their own and
// may not be whole on disk after a power cut), set LMDB back to the checkpoint: its meta page is
// written back, and its pages are on disk and untouched since (the store pinned them). replay_log
// then applies the log's records after it again, in one transaction, so that a crash during
// recovery finds the checkpoint still whole and starts over.
status store::impl::recover_before_open(bool new_store) {
  if (status s = commit_log::open(options.path, log); !s.ok()) return s;
  std::string data_file = options.path + "/data.mdb";
  struct stat st {};
  if (::stat(data_file.c_str(), &st) == 0) data_file_id = static_cast<std::uint64_t>(st.st_ino);
  if (!log->found()) return {};
  commit_log::control control = log->current();
  lmdb_metas metas;
  if (!new_store) {
    if (status s = read_lmdb_metas(data_file, metas); !s.ok()) return s;
  }
  // A log beside a new data.mdb or beside another file is not this store's: it starts anew,
  // nothing of it is replayed.
  const std::uint64_t log_file = options.log_data_file != 0 ? options.log_data_file : data_file_id;
  if (new_store || control.data_file != log_file) {
    spdlog::warn("storage: the commit log of {} does not belong to its data.mdb (a new store beside an old log, "
                 "or a data.mdb restored from a backup?); it is not replayed and starts anew", options.path);
    log.reset();  // start_log opens it again and starts a new generation over it
    return {};
  }
  // The same file, older than the commit the log says is durable in it: the disk lost writes it
  // reported done, or an older copy was written over it. The log's records would not apply.
  if (metas.latest_txnid < control.checkpoint)
    return {status::code::corrupt,
            data_file + " holds LMDB commit " + std::to_string(metas.latest_txnid) + ", older than commit " +
                std::to_string(control.checkpoint) + ", which its commit log " + options.path +
                "/log records as durable in it: the disk lost writes it had reported done, or an older copy of "
                "data.mdb was put in its place. escrowd will not open it. If you restored a backup, restore it "
                "into an empty directory (docs/operations.md, \"Restore\"); otherwise keep a copy of the data "
                "directory, check the disk (dmesg) and restore the last backup"};
  if (metas.latest_txnid == control.checkpoint) return {};
  read_latest_position(metas, data_file);
  // LMDB must not be open in another process meanwhile (escrow check, mdb_stat): LMDB's first
  // opener takes the transaction id from the meta pages; a later one would keep the old one.
  // The probe's lock is held until LMDB has opened (~impl closes it).
  if (status s = alone_on_lock_file(); !s.ok()) return s;
  spdlog::warn("storage: {} was not closed cleanly; LMDB's commits after its last checkpoint ({} to {}) are "
               "set aside and the commit log replayed", options.path, control.checkpoint + 1, metas.latest_txnid);
  restored = true;
  return restore_lmdb_meta(data_file, control.checkpoint_meta);
}

// Whether this process could be LMDB's first opener of the store: no other holds lock.mdb (LMDB
// keeps a read lock on its first byte while the environment is open, and tests for exclusivity
// with a write lock there).
status store::impl::alone_on_lock_file() {
  std::string path = options.path + "/lock.mdb";
  // Created if missing, so that no opener can slip in between the probe and LMDB's own open.
  probe_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (probe_fd < 0)
    return {status::code::io_error, "cannot open " + path + ": " + std::strerror(errno)};
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = 0;
  probe.l_len = 1;
  // Kept: LMDB's open in this process takes the same lock (record locks are the process's, so it
  // succeeds and LMDB sees itself the first opener) and turns it into its shared reader lock.
  if (::fcntl(probe_fd, F_SETLK, &probe) == 0) return {};
  return {status::code::io_error,
          "another process has the store in " + options.path + " open (an escrow check, mdb_stat or mdb_dump?); "
          "escrowd must be alone while it recovers the store after a crash: stop it and start escrowd again"};
}

// Reads the log position that LMDB's latest commit names, through a read-only environment opened
// and closed before recovery (so before the probe, whose lock that close would drop). That commit
// is the one recovery distrusts: after a power cut its pages may be torn or missing, and reading a
// page LMDB thinks is there but lies past the end of the file is a SIGBUS. So a child process
// reads it and hands the position over a pipe; a child that dies leaves it unknown (the check is
// then skipped, with a warning), and escrowd starts as it would without the check.
void store::impl::read_latest_position(const lmdb_metas& metas, const std::string& data_file) {
  struct stat st {};
  if (::stat(data_file.c_str(), &st) != 0 ||
      (metas.latest_last_pgno + 1) * metas.page_size > static_cast<std::uint64_t>(st.st_size))
    return;  // its pages reach past the file: certainly not whole
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    MDB_env* e = nullptr;
    MDB_txn* txn = nullptr;
    MDB_dbi meta_dbi = 0;
    MDB_val key = as_val(kLogPositionKey), value;
    log_position at;
    if (mdb_env_create(&e) == 0 && mdb_env_set_maxdbs(e, kTableCount + 2) == 0 &&
        mdb_env_set_mapsize(e, options.map_size) == 0 &&
        mdb_env_open(e, options.path.c_str(), MDB_RDONLY | MDB_NOTLS, 0600) == 0 &&
        mdb_txn_begin(e, nullptr, MDB_RDONLY, &txn) == 0 &&
        mdb_dbi_open(txn, table_name(table::meta), 0, &meta_dbi) == 0 &&
        mdb_get(txn, meta_dbi, &key, &value) == 0 && log_position::decode(as_view(value), at)) {
      std::string bytes = at.encode();
      if (::write(fds[1], bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) _exit(2);
    }
    _exit(0);  // no destructor, no atexit handler: the child only read
  }
  ::close(fds[1]);
  std::string bytes(24, '\0');
  ssize_t n = child > 0 ? ::read(fds[0], bytes.data(), bytes.size()) : -1;
  ::close(fds[0]);
  int wstatus = 0;
  if (child > 0) ::waitpid(child, &wstatus, 0);
  log_position at;
  if (n == static_cast<ssize_t>(bytes.size()) && log_position::decode(bytes, at)) {
    latest_position = at;
  } else if (child > 0 && WIFSIGNALED(wstatus)) {
    spdlog::warn("storage: LMDB's latest commit in {} could not be read (signal {}: its pages are torn); "
                 "recovery goes back to the checkpoint without checking how far the log reaches",
                 options.path, WTERMSIG(wstatus));
  }
}

// A replay must reach the lap of the ring that LMDB's latest commit is in: that commit's record
// was reserved only once the ring before it, back to one lap earlier, had been checkpointed, so a
// log that ends more than a lap before it has lost records that were synced and reported (an
// overwritten ring). Refused rather than opened without them.
status store::impl::check_replay_reached(const log_position& replayed_to) const {
  if (!latest_position || !log || latest_position->salt != log->current().salt) return {};
  const std::uint64_t capacity = log->current().capacity;
  if (latest_position->end <= replayed_to.end + capacity) return {};
  return {status::code::corrupt,
          "the commit log of " + options.path + " ends at record " + std::to_string(replayed_to.lsn) +
              " (offset " + std::to_string(replayed_to.end) + "), more than a lap of its ring before record " +
              std::to_string(latest_position->lsn) + " that LMDB's latest commit names: records that were "
              "reported stored were overwritten, and opening the store would lose them. escrowd will not "
              "start: keep a copy of the data directory and report it (docs/storage.md, \"The commit log\")"};
}

// Applies one commit log record (a group's batches) to the replay's transaction.
status store::impl::apply_record(MDB_txn* txn, const log_position& at, std::string_view payload) {
#ifdef ESCROW_FAULT_INJECTION
  if (faults.next(fault_plan::point::replay) == fault_plan::fault::kill) raise(SIGKILL);
#endif
  std::string_view rest = payload;
  std::uint64_t count = 0;
  bool well_formed = get_varint(rest, count);
  int rc = 0;
  for (std::uint64_t i = 0; rc == 0 && well_formed && i < count; ++i) {
    std::string_view rep;
    well_formed = get_string(rest, rep);
    if (well_formed) rc = apply(txn, rep);
  }
  if (rc == 0 && (!well_formed || !rest.empty())) rc = MDB_INVALID;
  if (rc == MDB_MAP_FULL) return {status::code::store_full, "map full"};
  if (rc == 0) return {};
  status s = from_lmdb(rc, "the commit log record " + std::to_string(at.lsn) + " of " + options.path +
                               " does not apply to the store");
  return {status::code::corrupt, s.message() + "; escrowd cannot start until it does (docs/storage.md, \"The commit log\")"};
}

// Applies the log's records after the position LMDB holds, all in one transaction with the last
// record's position, synced: LMDB holds them entirely or not at all.
status store::impl::replay_log() {
  if (!log || !log->found()) return {};
  log_position from;
  {
    read_txn r(env);
    if (r.rc != 0) return from_lmdb(r.rc, "cannot begin a read");
    MDB_val key = as_val(kLogPositionKey), value;
    int rc = mdb_get(r.txn, dbi[static_cast<int>(table::meta)], &key, &value);
    if (rc == 0 && !log_position::decode(as_view(value), from))
      return corrupt_record(table::meta, kLogPositionKey, "the log position is 24 bytes (salt, lsn, end)");
  }
  auto started = std::chrono::steady_clock::now();
  for (;;) {
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env, nullptr, 0, &txn);
    if (rc != 0) return from_lmdb(rc, "cannot begin the replay");
    std::uint64_t records = 0;
    log_position last;
    status s = log->replay(from, [&](const log_position& at, std::string_view payload) {
      ++records;
      last = at;
      return apply_record(txn, at, payload);
    });
    if (s.ok() && records > 0) {
      std::string position = last.encode();
      MDB_val key = as_val(kLogPositionKey), value = as_val(position);
      rc = mdb_put(txn, dbi[static_cast<int>(table::meta)], &key, &value, 0);
      if (rc == MDB_MAP_FULL) s = {status::code::store_full, "map full"};
      else if (rc != 0) s = from_lmdb(rc, "cannot store the log position");
    }
    if (s.ok()) {
      const commit_log::control c = log->current();
      s = check_replay_reached(records > 0                ? last
                               : from.salt == c.salt ? from
                                                     : log_position{c.salt, c.first_lsn - 1, 0});
    }
    if (!s.ok() || records == 0) {
      mdb_txn_abort(txn);
      if (s.which() == status::code::store_full && grow_map()) continue;
      return s;
    }
    rc = mdb_txn_commit(txn);
    if (rc == MDB_MAP_FULL && grow_map()) continue;
    if (rc == 0) rc = mdb_env_sync(env, 1);
    if (rc != 0) return from_lmdb(rc, "cannot commit the replay of the commit log of " + options.path);
    spdlog::info("storage: replayed {} commits from the commit log of {} in {} ms", records, options.path,
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
    return {};
  }
}

// Makes what LMDB holds durable, starts a new generation of the log on it, and turns the
// committer's commits to MDB_NOSYNC: from here on the log's sync is what makes a group durable.
status store::impl::start_log() {
  int rc = mdb_env_sync(env, 1);
  MDB_envinfo info{};
  if (rc == 0) rc = mdb_env_info(env, &info);
  if (rc != 0) return from_lmdb(rc, "cannot sync the store in " + options.path);
  last_txnid = info.me_last_txnid;
  struct stat st {};
  if (::stat((options.path + "/data.mdb").c_str(), &st) != 0)
    return {status::code::io_error, "cannot stat " + options.path + "/data.mdb: " + std::strerror(errno)};
  data_file_id = static_cast<std::uint64_t>(st.st_ino);
  if (!log) {
    if (status s = commit_log::open(options.path, log); !s.ok()) return s;
  }
  MDB_stat est{};
  mdb_env_stat(env, &est);
  page_size = est.ms_psize;
  int fd = -1;
  mdb_env_get_fd(env, &fd);
  checkpointed.txnid = last_txnid;
  pinned_txnid = last_txnid;
  if (status s = capture_lmdb_meta(fd, page_size, last_txnid, checkpointed.meta); !s.ok()) return s;
  if (status s = log->start_generation(last_txnid, checkpointed.meta, data_file_id, store_id, options.log_size);
      !s.ok())
    return s;
  rc = mdb_env_set_flags(env, MDB_NOSYNC, 1);
  if (rc != 0) return from_lmdb(rc, "cannot set the store's flags");
  return pin_latest() ? status{} : status{status::code::io_error, "cannot begin the checkpoint's read transaction"};
}

// What send_room() answers from: the pages the tables use (each table's branch, leaf and
// overflow pages, the free list's own pages, the two meta pages), the pages of the file that
// LMDB may reuse now, and the disk's free space. LMDB reuses a free page only once no snapshot
// can see it: pages freed after the checkpoint's commit wait for the next checkpoint (its pin is
// the oldest reader), and meanwhile a write takes new pages at the end of the file, from the
// disk. So only the free list's entries from before the pinned commit count as room.
// The snapshot of the oldest reader, in this process or another (a hot backup, a scan, an escrow
// check on the live store): LMDB reuses only pages freed before it. No better interface than
// mdb_reader_list's text exists in LMDB 0.9: one line per reader slot, "pid thread txnid", with
// "-" for a slot not in a transaction.
std::uint64_t store::impl::oldest_reader() const {
  std::uint64_t oldest = pinned_txnid.load(std::memory_order_relaxed);
  mdb_reader_list(
      env,
      [](const char* line, void* ctx) {
        auto* out = static_cast<std::uint64_t*>(ctx);
        unsigned long long txnid = 0;
        if (std::sscanf(line, "%*d %*x %llu", &txnid) == 1 && txnid < *out) *out = txnid;
        return 0;
      },
      &oldest);
  return oldest;
}

void store::impl::measure_room() const {
  std::uint64_t used_pages = 2, free_pages = 0;
  MDB_envinfo info{};
  MDB_stat st{};
  {
    std::shared_lock lock(map_lock);
    MDB_txn* txn = nullptr;
    if (mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn) != 0) return;
    auto add = [&](MDB_dbi d) {
      MDB_stat t{};
      if (mdb_stat(txn, d, &t) == 0) used_pages += t.ms_branch_pages + t.ms_leaf_pages + t.ms_overflow_pages;
    };
    add(0);  // the free list (FREE_DBI)
    add(1);  // the main table, which names the others (MAIN_DBI)
    for (MDB_dbi d : dbi) add(d);
    // The free list: key the id of the commit that freed the pages, value their count and numbers.
    MDB_cursor* cursor = nullptr;
    if (mdb_cursor_open(txn, 0, &cursor) == 0) {
      const std::uint64_t oldest = oldest_reader();
      MDB_val k, v;
      while (mdb_cursor_get(cursor, &k, &v, MDB_NEXT) == 0 && k.mv_size == sizeof(std::size_t) &&
             v.mv_size >= sizeof(std::size_t)) {
        std::size_t freed_by = 0, count = 0;
        std::memcpy(&freed_by, k.mv_data, sizeof freed_by);
        if (freed_by >= oldest) break;  // in key order: the rest is not reusable yet
        std::memcpy(&count, v.mv_data, sizeof count);
        free_pages += count;
      }
      mdb_cursor_close(cursor);
    }
    mdb_env_info(env, &info);
    mdb_env_stat(env, &st);
    mdb_txn_abort(txn);
  }
  std::uint64_t page = st.ms_psize ? st.ms_psize : 4096;
  live_bytes = used_pages * page;
  reusable_bytes = free_pages * page;
  struct statvfs vfs{};
  if (::statvfs(options.path.c_str(), &vfs) == 0) {
    disk_free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }
}

int store::impl::release(MDB_txn* txn, std::string_view message_key) {
  MDB_val key = as_val(message_key), value;
  MDB_dbi refs = dbi[static_cast<int>(table::message_refs)];
  int rc = mdb_get(txn, refs, &key, &value);
  if (rc == 0) {
    std::string_view v = as_view(value);
    std::uint32_t count = 0;
    get_u32(v, count);
    if (count > 2) {
      std::string next;
      put_u32(next, count - 1);
      MDB_val nv = as_val(next);
      return mdb_put(txn, refs, &key, &nv, 0);
    }
    rc = mdb_del(txn, refs, &key, nullptr);
    if (rc != 0) return rc;
    if (count == 2) return 0;  // one reference left, implied by the absence of a record
  } else if (rc != MDB_NOTFOUND) {
    return rc;
  }
  MDB_dbi messages = dbi[static_cast<int>(table::messages)];
  if (deltas && mdb_get(txn, messages, &key, &value) == 0) {
    std::string_view sender;
    std::size_t bytes = 0;
    if (store::stored_sender(table::messages, as_view(value), sender, bytes))
      add_delta(deltas, sender, -static_cast<std::int64_t>(bytes));
  }
  rc = mdb_del(txn, messages, &key, nullptr);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

int store::impl::set_delivery_count(MDB_txn* txn, std::string_view entry_key, std::string_view count) {
  MDB_dbi entries = dbi[static_cast<int>(table::entries)];
  MDB_val key = as_val(entry_key), value;
  int rc = mdb_get(txn, entries, &key, &value);
  if (rc == MDB_NOTFOUND) return 0;  // acknowledged meanwhile: it stays gone
  if (rc != 0 || value.mv_size < 4 || count.size() != 4) return rc != 0 ? rc : MDB_CORRUPTED;
  std::string updated(as_view(value));
  updated.replace(0, 4, count);
  MDB_val nv = as_val(updated);
  return mdb_put(txn, entries, &key, &nv, 0);
}

int store::impl::remove_entry(MDB_txn* txn, std::string_view entry_key) {
  MDB_dbi entries = dbi[static_cast<int>(table::entries)];
  MDB_val key = as_val(entry_key), value;
  int rc = mdb_get(txn, entries, &key, &value);
  if (rc == MDB_NOTFOUND) return 0;
  if (rc != 0) return rc;
  bool has_inline_message = value.mv_size > 4;
  storage::entry_key parsed;
  bool well_formed = storage::entry_key::decode(entry_key, parsed);
  // The expiry index record goes with the entry; its key needs the message's expiry time.
  std::uint64_t expires = 0;
  if (has_inline_message) {
    expires = peek_expires(as_view(value).substr(4));
    std::string_view sender;
    std::size_t bytes = 0;
    if (deltas && store::stored_sender(table::entries, as_view(value), sender, bytes))
      add_delta(deltas, sender, -static_cast<std::int64_t>(bytes));
  } else if (well_formed) {
    std::string mkey = message_key(parsed.message_id);
    MDB_val mk = as_val(mkey), record;
    if (mdb_get(txn, dbi[static_cast<int>(table::messages)], &mk, &record) == 0) expires = peek_expires(as_view(record));
  }
  rc = mdb_del(txn, entries, &key, nullptr);
  if (rc == 0 && expires != 0 && well_formed) {
    std::string ikey = expiry_key(expires, parsed);
    MDB_val ik = as_val(ikey);
    rc = mdb_del(txn, dbi[static_cast<int>(table::expiries)], &ik, nullptr);
    if (rc == MDB_NOTFOUND) rc = 0;
  }
  if (rc != 0 || has_inline_message || !well_formed) return rc;
  return release(txn, message_key(parsed.message_id));
}

int store::impl::promote_scheduled(MDB_txn* txn, std::string_view k) {
  MDB_dbi scheduled = dbi[static_cast<int>(table::scheduled)];
  MDB_val key = as_val(k), value;
  int rc = mdb_get(txn, scheduled, &key, &value);
  if (rc == MDB_NOTFOUND) return 0;  // delivered or deleted meanwhile
  if (rc != 0) return rc;
  std::uint64_t due = 0;
  storage::entry_key entry;
  if (!parse_scheduled_key(k, due, entry) || value.mv_size < 4) return MDB_CORRUPTED;
  std::string ekey = entry.encode();
  std::uint64_t expires = 0;
  if (value.mv_size > 4) {
    expires = peek_expires(as_view(value).substr(4));
  } else {
    std::string mkey = message_key(entry.message_id);
    MDB_val mk = as_val(mkey), record;
    if (mdb_get(txn, dbi[static_cast<int>(table::messages)], &mk, &record) == 0) expires = peek_expires(as_view(record));
  }
  // The value is copied before the delete: LMDB's pointer is only good until the next write.
  std::string moved(as_view(value));
  MDB_val ek = as_val(ekey), ev = as_val(moved);
  rc = mdb_put(txn, dbi[static_cast<int>(table::entries)], &ek, &ev, 0);
  if (rc == 0) rc = mdb_del(txn, scheduled, &key, nullptr);
  if (rc == 0 && expires != 0) {
    std::string ikey = expiry_key(expires, entry);
    MDB_val ik = as_val(ikey), empty{0, nullptr};
    rc = mdb_put(txn, dbi[static_cast<int>(table::expiries)], &ik, &empty, 0);
  }
  return rc;
}

int store::impl::remove_scheduled(MDB_txn* txn, std::string_view k) {
  MDB_dbi scheduled = dbi[static_cast<int>(table::scheduled)];
  MDB_val key = as_val(k), value;
  int rc = mdb_get(txn, scheduled, &key, &value);
  if (rc == MDB_NOTFOUND) return 0;
  if (rc != 0) return rc;
  std::uint64_t due = 0;
  storage::entry_key entry;
  bool well_formed = parse_scheduled_key(k, due, entry);
  bool has_inline_message = value.mv_size > 4;
  std::string_view sender;
  std::size_t bytes = 0;
  if (has_inline_message && deltas && store::stored_sender(table::scheduled, as_view(value), sender, bytes))
    add_delta(deltas, sender, -static_cast<std::int64_t>(bytes));
  rc = mdb_del(txn, scheduled, &key, nullptr);
  if (rc != 0 || has_inline_message || !well_formed) return rc;
  return release(txn, message_key(entry.message_id));
}

int store::impl::apply(MDB_txn* txn, std::string_view rep) {
  int rc = 0;
  bool well_formed = batch::decode(rep, [&](batch::op o, table t, std::string_view k, std::string_view v) {
    if (rc != 0) return;
    MDB_val key = as_val(k), value = as_val(v);
    MDB_dbi d = dbi[static_cast<int>(t)];
    switch (o) {
      case batch::op::put:
        if (deltas && (t == table::entries || t == table::messages || t == table::scheduled)) {
          std::string_view sender;
          std::size_t bytes = 0;
          if (store::stored_sender(t, v, sender, bytes)) add_delta(deltas, sender, static_cast<std::int64_t>(bytes));
        }
        rc = mdb_put(txn, d, &key, &value, 0);
        break;
      case batch::op::erase:
        rc = mdb_del(txn, d, &key, nullptr);
        if (rc == MDB_NOTFOUND) rc = 0;
        break;
      case batch::op::release_message: rc = release(txn, k); break;
      case batch::op::set_delivery_count: rc = set_delivery_count(txn, k, v); break;
      case batch::op::remove_entry: rc = remove_entry(txn, k); break;
      case batch::op::promote_scheduled: rc = promote_scheduled(txn, k); break;
      case batch::op::remove_scheduled: rc = remove_scheduled(txn, k); break;
    }
  });
  return well_formed ? rc : MDB_INVALID;
}

// Applies every batch of `group` in one write transaction (left open in `txn` for the caller to
// commit or abort). Fast path (isolated = false): all batches straight into the transaction; a
// full map answers MDB_MAP_FULL (when stop_on_full: the caller grows the map and tries again),
// any other failure kRetryIsolated. Isolated: each batch in a nested transaction; a failing batch
// gets its status and the others go on.
int store::impl::apply_group(std::vector<pending_batch>& group, bool isolated, bool stop_on_full, MDB_txn*& txn,
                             std::uint64_t& applied) {
  applied = 0;
  int rc = mdb_txn_begin(env, nullptr, 0, &txn);
  if (rc != 0) return rc;
  for (auto& p : group) {
    p.by_sender.clear();
    if (p.work.empty()) continue;
    deltas = &p.by_sender;
    struct reset {
      sender_deltas*& d;
      ~reset() { d = nullptr; }
    } reset_deltas{deltas};
    if (!isolated) {
      int brc = apply(txn, p.work.rep());
      if (brc == MDB_MAP_FULL && stop_on_full) return MDB_MAP_FULL;
      if (brc != 0) return kRetryIsolated;
      ++applied;
      continue;
    }
    MDB_txn* child = nullptr;
    int brc = mdb_txn_begin(env, txn, 0, &child);
    if (brc == 0) brc = apply(child, p.work.rep());
    if (brc == 0) {
      brc = mdb_txn_commit(child);
    } else if (child) {
      mdb_txn_abort(child);
    }
    if (brc == MDB_MAP_FULL && stop_on_full) return MDB_MAP_FULL;
    if (brc == 0) {
      ++applied;
    } else {
      p.result = from_lmdb(brc, "batch not stored");
      p.by_sender.clear();
    }
  }
  return 0;
}

// Applies and commits `group`: growing a full map and trying again, and applying batch by batch
// when one of them fails. 0 when committed (each batch's result says whether it was applied);
// otherwise the code that refused the whole group (a full map that cannot grow, a full disk, an
// I/O error), with nothing of it applied. The commit does not sync: the group's log record does.
int store::impl::write_group(std::vector<pending_batch>& group, std::uint64_t& applied) {
  bool isolated = false, stop_on_full = true;
  for (;;) {
    for (auto& p : group) p.result = {};
    MDB_txn* txn = nullptr;
    int rc = apply_group(group, isolated, stop_on_full, txn, applied);
    if (rc == 0) rc = seal(txn, group);
    if (rc == 0) {
      std::uint64_t id = mdb_txn_id(txn);
      rc = commit(txn);
      if (rc == 0) {
        last_txnid = id;
        // What a checkpoint of this commit may let the ring reuse: taken from the committed
        // record only, never from a reservation that a refused commit then cancels.
        if (log_reserved) last_record_end = log_at.at.end;
      }
    } else if (txn) {
      mdb_txn_abort(txn);
    }
    if (rc == 0) return 0;
    if (log_reserved) log->cancel(log_at);  // no gap in the log's sequence
    log_reserved = false;
    if (rc == kInjectedFull) {
      // A full map that growing cannot cure: the checkpoint a real one makes before it tries to
      // grow (release_pins_for_remap), then the group is refused.
      if (release_pins_for_remap() != 0 || !pin_latest()) return kCheckpointFailed;
      return MDB_MAP_FULL;
    }
    if (rc == MDB_MAP_FULL && stop_on_full) {
      if (release_pins_for_remap() != 0) return kCheckpointFailed;
      bool grown = grow_map();
      if (!pin_latest()) return kCheckpointFailed;
      if (grown) continue;
      stop_on_full = false;  // cannot grow: refuse what does not fit, batch by batch
      isolated = true;
      continue;
    }
    if (rc == kRetryIsolated && !isolated) {
      // A batch failed (a malformed one, or one too big for the map): redo the group with each
      // batch in a nested transaction, so that the failing one leaves no trace and does not spoil
      // the others. Nested transactions copy every page a batch touches: the slow path only.
      isolated = true;
      continue;
    }
    return rc;
  }
}

// Before the commit: the group's record (its applied batches) gets its place in the commit log,
// and LMDB's log position names it in the same transaction. A record that would overwrite one the
// last checkpoint still needs waits for a checkpoint first. A group whose record would not fit
// in the log is committed without a record (the committer checkpoints it at once).
int store::impl::seal(MDB_txn* txn, std::vector<pending_batch>& group) {
  std::size_t count = 0, size = 0;
  for (auto& p : group)
    if (!p.work.empty() && p.result.ok()) {
      ++count;
      size += string_size(p.work.rep());
    }
  size += varint_size(count);
  log_record = size <= log->max_payload();
  if (!log_record) return 0;
  log_payload.clear();
  log_payload.reserve(size);
  put_varint(log_payload, count);
  for (auto& p : group)
    if (!p.work.empty() && p.result.ok()) put_string(log_payload, p.work.rep());
  for (int attempt = 0;; ++attempt) {
    bool behind = false;
    if (status s = log->reserve(log_payload.size(), log_at, behind); !s.ok()) {
      spdlog::error("storage: {}", s.message());
      return s.which() == status::code::store_full ? ENOSPC : EIO;
    }
    log_reserved = !behind;
    if (!behind) break;
    if (attempt > 0) return EIO;  // cannot happen: a checkpoint of the last commit frees the log
    if (checkpoint_now() != 0) return kCheckpointFailed;
  }
  std::string position = log_at.at.encode();
  MDB_val key = as_val(kLogPositionKey), value = as_val(position);
  return mdb_put(txn, dbi[static_cast<int>(table::meta)], &key, &value, 0);
}

// mdb_txn_commit, through the fault-injection seam in test builds (fault_injection.h). The
// environment runs with MDB_NOSYNC: the commit writes its pages and its meta page, unsynced.
int store::impl::commit(MDB_txn* txn) {
#ifdef ESCROW_FAULT_INJECTION
  switch (next_fault(fault_plan::point::commit)) {
    case fault_plan::fault::map_full: mdb_txn_abort(txn); return kInjectedFull;
    case fault_plan::fault::enospc: mdb_txn_abort(txn); return ENOSPC;
    case fault_plan::fault::eio: mdb_txn_abort(txn); return EIO;  // a page write failed: LMDB aborts
    case fault_plan::fault::kill: raise(SIGKILL); break;
    case fault_plan::fault::stall: std::this_thread::sleep_for(std::chrono::seconds(1)); break;
    case fault_plan::fault::none: break;
  }
#endif
  return mdb_txn_commit(txn);
}

fault_plan::fault store::impl::next_fault(fault_plan::point p) {
  std::lock_guard lock(fault_mutex);
  return faults.next(p);
}

// After a group: its record (or, for a group with nothing to write, its results) goes to the log
// writer, or is written here when nothing else waits and the writer is idle.
void store::impl::hand_over(durable_job job, bool more_waiting) {
  {
    std::lock_guard lock(writer_mutex);
    if (more_waiting || writer_busy || !to_write.empty()) {
      to_write.push_back(std::move(job));
      writer_changed.notify_all();
      return;
    }
    writer_busy = true;
  }
  std::vector<durable_job> jobs;
  jobs.push_back(std::move(job));
  write_jobs(jobs);
  std::lock_guard lock(writer_mutex);
  writer_busy = false;
  writer_changed.notify_all();
}

// Writes the records of `jobs`, syncs the log once (the "sync" fault point), then completes every
// batch of them in order. A failed write or sync fails them and every later write (fsyncgate).
void store::impl::write_jobs(std::vector<durable_job>& jobs) {
  bool any_record = false;
  for (auto& j : jobs) any_record = any_record || j.record;
  int rc = writer_failed ? EIO : 0;
  if (any_record && rc == 0) {
    fault_plan::fault planned = fault_plan::fault::none;
#ifdef ESCROW_FAULT_INJECTION
    planned = next_fault(fault_plan::point::sync);
    if (planned == fault_plan::fault::kill) raise(SIGKILL);
    if (planned == fault_plan::fault::stall) std::this_thread::sleep_for(std::chrono::seconds(1));
    if (planned == fault_plan::fault::map_full || planned == fault_plan::fault::enospc) rc = ENOSPC;
#endif
    auto started = std::chrono::steady_clock::now();
    for (auto& j : jobs)
      if (rc == 0 && j.record) rc = log->write(j.slot, j.payload);
    if (rc == 0) rc = log->sync();
    observe_fsync(std::chrono::steady_clock::now() - started);
    if (rc == 0 && planned == fault_plan::fault::eio) rc = EIO;
    if (rc != 0 && !writer_failed) {
      writer_failed = true;
      failed = true;
      spdlog::critical("storage: the commit log write failed: {}; the store refuses every write until escrowd "
                       "restarts (docs/storage.md, \"When a write fails\")", mdb_strerror(rc));
    }
  }
  status lost(status::code::failed, from_lmdb(rc, "commit log write failed").message() +
                                        "; whether this write reached the disk is unknown (it may be there after a "
                                        "restart); the store refuses every write until escrowd restarts");
  for (auto& j : jobs) {
    if (rc != 0 && j.record)
      for (auto& p : j.group)
        if (!p.work.empty()) p.result = lost;
    complete(j.group);
  }
}

void store::impl::run_writer() {
  std::unique_lock lock(writer_mutex);
  for (;;) {
    writer_changed.wait(lock, [&] { return writer_stopping || (!to_write.empty() && !writer_busy); });
    if (to_write.empty()) return;  // stopping, everything written
    std::vector<durable_job> jobs(std::make_move_iterator(to_write.begin()), std::make_move_iterator(to_write.end()));
    to_write.clear();
    writer_busy = true;
    lock.unlock();
    write_jobs(jobs);
    lock.lock();
    writer_busy = false;
    writer_changed.notify_all();
  }
}

// A read transaction on LMDB's latest commit, which must be the checkpoint's: the pin of that
// commit. False when LMDB refuses one (then nothing more may be committed: the checkpoint's pages
// would not be protected).
bool store::impl::pin_latest() {
  if (checkpointed.pin) return true;
  if (mdb_txn_begin(env, nullptr, MDB_RDONLY, &checkpointed.pin) == 0) return true;
  checkpointed.pin = nullptr;
  spdlog::critical("storage: cannot begin the read transaction that holds the checkpoint of {}", options.path);
  return false;
}

// Growing the map needs no transaction open: checkpoint the latest commit, so that no earlier
// one is needed, and only then let its pin go (pin_latest takes it again once the map has grown).
int store::impl::release_pins_for_remap() {
  if (int rc = checkpoint_now(); rc != 0) return rc;
  if (checkpointed.pin) mdb_txn_abort(checkpointed.pin);
  checkpointed.pin = nullptr;
  return 0;
}

// Hands the last commit to the data syncer, with its meta page and a pin on its pages. False when
// one is already under way or nothing is new since the last checkpoint.
bool store::impl::start_checkpoint() {
  if (failed || checkpoint_running || last_txnid <= checkpointed.txnid) return false;
  checkpoint_job job;
  job.txnid = last_txnid;
  job.log_end = last_record_end;
  int fd = -1;
  mdb_env_get_fd(env, &fd);
  if (!capture_lmdb_meta(fd, page_size, last_txnid, job.meta).ok()) return false;
  if (mdb_txn_begin(env, nullptr, MDB_RDONLY, &job.pin) != 0) return false;
#ifdef ESCROW_FAULT_INJECTION
  job.planned = next_fault(fault_plan::point::data_sync);
#endif
  {
    std::lock_guard lock(sync_mutex);
    requested = std::move(job);
  }
  checkpoint_running = true;
  sync_changed.notify_all();
  return true;
}

// Takes a finished checkpoint (waiting for it when `wait`): its pin replaces the last one, and the
// log's records before its commit may be overwritten. 0, or the errno of its failed sync (the
// store then stops taking writes).
int store::impl::collect_checkpoint(bool wait) {
  if (!checkpoint_running) {
    std::lock_guard lock(sync_mutex);
    return sync_error;  // sticky: a checkpoint that failed stays failed
  }
  std::optional<checkpoint_job> done;
  int error = 0;
  {
    std::unique_lock lock(sync_mutex);
    if (wait) sync_changed.wait(lock, [&] { return finished.has_value(); });
    if (!finished) return 0;
    done = std::move(finished);
    finished.reset();
    error = sync_error;
  }
  checkpoint_running = false;
  if (error != 0) {
    if (done->pin) mdb_txn_abort(done->pin);
    return error;
  }
  if (checkpointed.pin) mdb_txn_abort(checkpointed.pin);
  checkpointed = std::move(*done);
  pinned_txnid = checkpointed.txnid;
  log->keep_from(checkpointed.log_end);
  last_checkpoint_at = std::chrono::steady_clock::now();
  return 0;
}

// A checkpoint of the last commit, waited for. 0 or the errno of its failure.
int store::impl::checkpoint_now() {
  if (int rc = collect_checkpoint(true); rc != 0) return rc;
  if (!start_checkpoint()) return last_txnid <= checkpointed.txnid ? 0 : EIO;
  return collect_checkpoint(true);
}

// After a group, and when idle: collect a finished checkpoint; start the next one when the last
// is storage.checkpoint-interval-ms old, or a quarter of the log has been written since.
void store::impl::maybe_checkpoint() {
  if (failed) return;
  if (collect_checkpoint(false) != 0) {
    failed = true;
    return;
  }
  log_used.store(log->since_checkpoint(), std::memory_order_relaxed);
  auto now = std::chrono::steady_clock::now();
  // While writes or sends are refused for room, at once: the pages that acknowledgements free
  // become reusable only once a checkpoint moves the pin past them (measure_room).
  if (refusing || short_of_room.exchange(false, std::memory_order_relaxed) ||
      now - last_checkpoint_at >= std::chrono::milliseconds(options.checkpoint_interval_ms) ||
      log->since_checkpoint() >= options.log_size / 4)
    start_checkpoint();
}

// mdb_env_sync, through the fault-injection seam (the "data_sync" point).
int store::impl::data_sync(fault_plan::fault planned) {
#ifdef ESCROW_FAULT_INJECTION
  switch (planned) {
    case fault_plan::fault::map_full:
    case fault_plan::fault::enospc: return ENOSPC;
    case fault_plan::fault::eio: mdb_env_sync(env, 1); return EIO;
    case fault_plan::fault::kill: raise(SIGKILL); break;
    case fault_plan::fault::stall: std::this_thread::sleep_for(std::chrono::seconds(1)); break;
    case fault_plan::fault::none: break;
  }
#else
  (void)planned;
#endif
  auto started = std::chrono::steady_clock::now();
  int rc = mdb_env_sync(env, 1);
  observe_fsync(std::chrono::steady_clock::now() - started);
  return rc;
}

// The data syncer: for each checkpoint asked for, syncs data.mdb and then records the commit in
// the log's control block (synced too).
void store::impl::run_syncer() {
  std::unique_lock lock(sync_mutex);
  for (;;) {
    sync_changed.wait(lock, [&] { return syncer_stopping || requested.has_value(); });
    if (!requested) return;  // stopping, nothing asked
    checkpoint_job job = std::move(*requested);
    requested.reset();
    // After a failed sync, a later fdatasync may report success for pages the kernel dropped
    // ("fsyncgate"): no checkpoint is made or recorded again until escrowd restarts.
    int rc = sync_error;
    lock.unlock();
    if (rc == 0) rc = data_sync(job.planned);
    if (rc == 0 && !log->set_checkpoint(job.txnid, job.meta).ok()) rc = EIO;
    lock.lock();
    if (rc != 0 && sync_error == 0) {
      sync_error = rc;
      spdlog::critical("storage: the checkpoint of {} failed: {}; the store refuses every write until escrowd "
                       "restarts (what was reported stored is in the commit log)", options.path, mdb_strerror(rc));
    }
    finished = std::move(job);
    sync_changed.notify_all();
  }
}

// Doubles the map (at most 8 GiB more at once). Called by the committer with no transaction open;
// readers wait on map_lock meanwhile. False when the address space cannot be had.
bool store::impl::grow_map() {
  std::unique_lock lock(map_lock);
  MDB_envinfo info{};
  if (mdb_env_info(env, &info) != 0) return false;
  std::uint64_t current = info.me_mapsize;
  std::uint64_t next = current + std::min<std::uint64_t>(current, 8ull << 30);
  if (options.map_size_limit != 0) next = std::min(next, options.map_size_limit);
  if (next <= current) return false;
  int rc = mdb_env_set_mapsize(env, next);
  if (rc != 0) {
    if (!refusing) spdlog::error("storage: the map of {} is full at {} MiB and cannot grow to {} MiB: {}", options.path,
                  current >> 20, next >> 20, mdb_strerror(rc));
    return false;
  }
  map_grows.fetch_add(1, std::memory_order_relaxed);
  map_base = nullptr;
  find_map();
  spdlog::info("storage: the map of {} grew from {} MiB to {} MiB", options.path, current >> 20, next >> 20);
  return true;
}

// After a failed write or sync what is on disk is unknown, and a retried fsync may report success
// for pages the kernel already dropped ("fsyncgate"): this group and every later write fail, and
// the store stays failed until escrowd restarts and reads what is on disk (and in the log). Sets
// the results; the group is completed in its turn.
void store::impl::fail_for_good(const status& why, std::vector<pending_batch>& group) {
  failed = true;
  status s(status::code::failed, why.message() + "; whether this write reached the disk is unknown (it may be "
                                                "there after a restart); the store refuses every write until "
                                                "escrowd restarts");
  spdlog::critical("storage: {} ({} batches are reported as not stored; docs/storage.md, \"When a write fails\")",
                   s.message(), group.size());
  for (auto& p : group)
    if (!p.work.empty()) p.result = s;
}

// Whether LMDB still takes write transactions after a refused commit: a failed write of a meta
// page marks the environment unusable (MDB_PANIC from then on), a failed write of other pages
// does not. A write transaction (the committer's own) needs no reader slot.
bool store::impl::environment_usable() {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, 0, &txn);
  if (txn) mdb_txn_abort(txn);
  return rc == 0;
}

// The status of a group whose commit LMDB refused without harm: store_full for a full map or
// disk, and for a failed page write when the disk is (nearly) full, as a short write there
// usually means; else the error, and writes go on.
status store::impl::refused_write(int rc) const {
  if (rc == ENOSPC || rc == EDQUOT || rc == MDB_MAP_FULL) return from_lmdb(rc, "store full: batch not stored");
  measure_room();
  std::uint64_t room = disk_free.load(std::memory_order_relaxed);
  if (rc == EIO && room < std::max<std::uint64_t>(options.min_free_disk, 1ull << 20))
    return {status::code::store_full, "store full: a write of data.mdb failed (" + std::string(mdb_strerror(rc)) +
                                          ") with " + std::to_string(room >> 10) + " KiB left on the disk holding " +
                                          options.path + "; free disk space or consume messages. Writes resume by "
                                          "themselves"};
  return {status::code::io_error, from_lmdb(rc, "batch not stored: a write of data.mdb failed").message() +
                                      "; nothing of it is stored, and later writes go on (check dmesg if it repeats)"};
}

void store::impl::complete(std::vector<pending_batch>& done) {
  for (auto& p : done) {
    queued_bytes.fetch_sub(p.bytes, std::memory_order_relaxed);
    p.done(std::move(p.result));
  }
  done.clear();
}

// One group at a time: commit it (no sync), then make it durable with one sync of the commit log
// while data.mdb is synced beside it, then report it. The next group is taken meanwhile only in
// the sense that its batches wait; it commits once data.mdb holds the one before. A full map or a
// full disk met by a commit refuses that group only: the commit before it is already synced, so
// nothing else depends on what the refused commit wrote.
void store::impl::run_committer() {
  std::vector<pending_batch> group;
  for (;;) {
    {
      std::unique_lock lock(mutex);
      // Idle with commits not yet checkpointed: a checkpoint within the interval all the same, so
      // that a restart has little to replay.
      while (!stopping && waiting.empty()) {
        if (!failed && (last_txnid > checkpointed.txnid || checkpoint_running)) {
          if (!wake.wait_for(lock, std::chrono::milliseconds(options.checkpoint_interval_ms),
                             [&] { return stopping || !waiting.empty(); })) {
            lock.unlock();
            maybe_checkpoint();
            lock.lock();
          }
        } else {
          wake.wait(lock, [&] { return stopping || !waiting.empty(); });
        }
      }
      if (waiting.empty()) return;  // stopping, everything completed
      while (!waiting.empty() && group.size() < options.max_group_batches) {
        group.push_back(std::move(waiting.front()));
        waiting.pop_front();
      }
    }
    bool any_writes = false;
    for (auto& p : group) any_writes = any_writes || !p.work.empty();
    durable_job job;
    if (failed) {
      for (auto& p : group)
        if (!p.work.empty())
          p.result = {status::code::failed, "the store stopped taking writes after a failed write or sync; restart escrowd"};
    } else if (any_writes) {
      std::uint64_t applied = 0;
      int rc = write_group(group, applied);
      if (rc == 0 && !log_record) rc = checkpoint_now() == 0 ? 0 : kCheckpointFailed;  // too large for the log
      const bool full = rc == ENOSPC || rc == EDQUOT || rc == MDB_MAP_FULL;
      if (full || (rc != 0 && rc != kCheckpointFailed && environment_usable())) {
        // A full map, a full disk, or a write of LMDB's pages refused (EIO from a short write,
        // often a full disk) under MDB_NOSYNC: LMDB aborted the transaction, nothing of it was
        // reported, and no sync failed, so nothing the kernel may have dropped is relied on. That
        // group is refused and writes go on.
        status s = refused_write(rc);
        if (!refusing) spdlog::error("storage: {}; refusing writes until there is room", s.message());
        refusing = true;
        for (auto& p : group)
          if (!p.work.empty()) p.result = s;
      } else if (rc != 0) {
        fail_for_good(rc == kCheckpointFailed
                          ? status(status::code::io_error, "a checkpoint (the sync of data.mdb) failed")
                          : from_lmdb(rc, "storage write failed"),
                      group);
      } else {
        commits.fetch_add(1, std::memory_order_relaxed);
        batches.fetch_add(applied, std::memory_order_relaxed);
        {
          std::lock_guard lock(stored_mutex);
          for (auto& p : group)
            if (p.result.ok())
              for (auto& [sender, n] : p.by_sender) {
                std::int64_t& total = stored_by_sender[sender];
                total += n;
                if (total == 0) stored_by_sender.erase(sender);
              }
        }
        observe_group(applied);
        if (refusing && applied > 0) {
          refusing = false;
          spdlog::warn("storage: writes are stored again");
        }
        job.record = log_record;
        if (log_record) {
          job.slot = log_at;
          job.payload = std::move(log_payload);
          log_reserved = false;
        }
      }
    }
    job.group = std::move(group);
    group.clear();
    bool more_waiting;
    {
      std::lock_guard lock(mutex);
      more_waiting = !waiting.empty();
    }
    hand_over(std::move(job), more_waiting);
    if (!failed) maybe_checkpoint();
    trim_resident_pages();
  }
}

// A clean close: a checkpoint of the last commit, so that the next start has nothing to go back
// over or replay; then the pins go and the syncer stops.
void store::impl::close_cleanly() {
  if (!failed && log) {
    if (int rc = checkpoint_now(); rc != 0)
      spdlog::warn("storage: the last checkpoint of {} failed: {}; the next start replays the commit log",
                   options.path, mdb_strerror(rc));
  } else {
    (void)collect_checkpoint(true);
  }
  if (checkpointed.pin) mdb_txn_abort(checkpointed.pin);
  checkpointed.pin = nullptr;
  {
    std::lock_guard lock(sync_mutex);
    syncer_stopping = true;
  }
  sync_changed.notify_all();
  if (syncer.joinable()) syncer.join();
}

// Every page LMDB reads through its read-only shared map (each page a write transaction copies
// before changing it, each message delivered) stays mapped into this process and counts in its
// resident set, so a deep backlog would make escrowd look as big as its data file. The pages are
// the kernel's page cache, not ours: twenty times a second, drop our mappings of them. The kernel keeps
// them cached; the next access maps them again with a minor fault. Readers on other threads are
// unaffected: LMDB never rewrites a page a live reader can see, and a dropped page reads back the
// same bytes from the file.
void store::impl::trim_resident_pages() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_trim < std::chrono::milliseconds(50)) return;
  last_trim = now;
  if (map_base == nullptr) return;
  MDB_envinfo info{};
  MDB_stat st{};
  if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &st) != 0) return;
  std::size_t used = (static_cast<std::size_t>(info.me_last_pgno) + 1) * st.ms_psize;
  madvise(map_base, std::min(used, map_length), MADV_DONTNEED);
}

// LMDB does not say where it mapped the data file (mdb_env_info gives the address only for
// MDB_FIXEDMAP), so read it from /proc/self/maps: the mapping of data.mdb.
void store::impl::find_map() {
  std::error_code ec;
  auto data_file = std::filesystem::canonical(std::filesystem::path(options.path) / "data.mdb", ec);
  if (ec) return;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos || line.compare(slash, std::string::npos, data_file.string()) != 0) continue;
    std::uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &start, &end) != 2) continue;
    map_base = reinterpret_cast<void*>(start);
    map_length = end - start;
    return;
  }
}

store::store(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

status store::open(const store_options& options, std::unique_ptr<store>& out) {
  auto p = std::make_unique<impl>();
  p->options = options;
  p->faults = options.faults;
  if (!options.faults.empty()) {
    if (!fault_injection_compiled())
      return {status::code::failed, "fault injection was asked for, but this build has no fault-injection seam "
                                    "(configure with -Dfault_injection=true)"};
    spdlog::warn("storage: fault injection is on (a test build)");
  }
  if (p->options.max_group_batches == 0) p->options.max_group_batches = 1;
  if (status s = p->open_environment(); !s.ok()) return s;
  impl* raw = p.get();
  raw->syncer = std::thread([raw] { raw->run_syncer(); });
  raw->writer = std::thread([raw] { raw->run_writer(); });
  raw->committer = std::thread([raw] { raw->run_committer(); });
  out.reset(new store(std::move(p)));
  return {};
}

store::~store() {
  {
    std::unique_lock lock(impl_->mutex);
    impl_->copies_done.wait(lock, [this] { return impl_->copies == 0; });
    impl_->stopping = true;
  }
  impl_->wake.notify_one();
  if (impl_->committer.joinable()) impl_->committer.join();
  {
    std::lock_guard lock(impl_->writer_mutex);
    impl_->writer_stopping = true;
  }
  impl_->writer_changed.notify_all();
  if (impl_->writer.joinable()) impl_->writer.join();
  impl_->close_cleanly();
}

status store::copy_to(int fd, bool compact) const {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return status(status::code::failed, "the store is closing");
    ++impl_->copies;
  }
  int rc;
  {
    std::shared_lock lock(impl_->map_lock);
    rc = mdb_env_copyfd2(impl_->env, fd, compact ? MDB_CP_COMPACT : 0);
  }
  bool copied = rc == 0;
  if (copied && ::fsync(fd) != 0) rc = errno;
  {
    std::lock_guard lock(impl_->mutex);
    --impl_->copies;
  }
  impl_->copies_done.notify_all();
  if (rc != 0)
    return status(status::code::io_error, std::string(copied ? "fsync of the copy: " : "mdb_env_copyfd2: ") +
                                              (copied ? std::strerror(rc) : mdb_strerror(rc)));
  return {};
}

void store::submit(batch b, completion done) {
  pending_batch p[] = {{std::move(b), std::move(done), {}, 0, {}}};
  impl_->enqueue(p);
}

void store::submit(batch first, completion first_done, batch second, completion second_done) {
  pending_batch p[] = {{std::move(first), std::move(first_done), {}, 0, {}}, {std::move(second), std::move(second_done), {}, 0, {}}};
  impl_->enqueue(p);
}

// Queues the batches under one lock, in order, so that the committer sees all or none of them.
void store::impl::enqueue(std::span<pending_batch> batches) {
  std::size_t bytes = 0;
  for (auto& p : batches) bytes += p.bytes = p.work.byte_size();
  queued_bytes.fetch_add(bytes, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex);
    for (auto& p : batches) waiting.push_back(std::move(p));
  }
  wake.notify_one();
}


status store::get(table t, std::string_view key, std::string& value) const {
  std::shared_lock lock(impl_->map_lock);
  read_txn r(impl_->env);
  if (r.rc != 0) return from_lmdb(r.rc, "cannot begin a read");
  MDB_val k = as_val(key), v;
  int rc = mdb_get(r.txn, impl_->dbi[static_cast<int>(t)], &k, &v);
  if (rc == 0) value.assign(as_view(v));
  return from_lmdb(rc, std::string("read from ") + table_name(t));
}

namespace {
// Visits the keys of `dbi` from `from` with `prefix` in read transaction `txn`.
status scan_in(MDB_txn* txn, MDB_dbi dbi, table t, std::string_view from, std::string_view prefix,
               const store::visitor& visit) {
  MDB_cursor* cursor = nullptr;
  int rc = mdb_cursor_open(txn, dbi, &cursor);
  if (rc != 0) return from_lmdb(rc, "cannot open a cursor");
  // Every key with the prefix sorts at or after the prefix itself, so a `from` below it starts
  // there; starting at `from` would stop at the first key before the prefix.
  std::string_view start = from < prefix ? prefix : from;
  MDB_val k = as_val(start), v;
  rc = mdb_cursor_get(cursor, &k, &v, start.empty() ? MDB_FIRST : MDB_SET_RANGE);
  while (rc == 0) {
    std::string_view key = as_view(k);
    if (key.substr(0, prefix.size()) != prefix) break;
    if (!visit(key, as_view(v))) break;
    rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(cursor);
  if (rc == MDB_NOTFOUND) rc = 0;
  return from_lmdb(rc, std::string("scan of ") + table_name(t));
}
}  // namespace

status store::scan(table t, std::string_view from, std::string_view prefix, const visitor& visit) const {
  std::shared_lock lock(impl_->map_lock);
  read_txn r(impl_->env);
  if (r.rc != 0) return from_lmdb(r.rc, "cannot begin a read");
  return scan_in(r.txn, impl_->dbi[static_cast<int>(t)], t, from, prefix, visit);
}

store::read_snapshot::~read_snapshot() {
  mdb_txn_abort(static_cast<MDB_txn*>(txn_));
  static_cast<map_readers*>(lock_)->unlock_shared();
}

status store::snapshot(std::unique_ptr<read_snapshot>& out) const {
  impl_->map_lock.lock_shared();  // held until the snapshot goes: the map cannot move under it
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(impl_->env, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) {
    impl_->map_lock.unlock_shared();
    return from_lmdb(rc, "cannot begin a read");
  }
  out.reset(new read_snapshot(txn, &impl_->map_lock));
  return {};
}

status store::scan(const read_snapshot& at, table t, std::string_view from, std::string_view prefix,
                   const visitor& visit) const {
  return scan_in(static_cast<MDB_txn*>(at.txn_), impl_->dbi[static_cast<int>(t)], t, from, prefix, visit);
}

status store::last_key(table t, std::string& key) const {
  std::shared_lock lock(impl_->map_lock);
  read_txn r(impl_->env);
  if (r.rc != 0) return from_lmdb(r.rc, "cannot begin a read");
  MDB_cursor* cursor = nullptr;
  int rc = mdb_cursor_open(r.txn, impl_->dbi[static_cast<int>(t)], &cursor);
  if (rc != 0) return from_lmdb(rc, "cannot open a cursor");
  MDB_val k, v;
  rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST);
  if (rc == 0) key.assign(as_view(k));
  mdb_cursor_close(cursor);
  return from_lmdb(rc, std::string("last key of ") + table_name(t));
}

void store::impl::observe_group(std::uint64_t batch_count) {
  std::size_t i = 0;
  while (i < std::size(kBatchBounds) && static_cast<double>(batch_count) > kBatchBounds[i]) ++i;
  batch_buckets[i].fetch_add(1, std::memory_order_relaxed);
  batch_sum.fetch_add(batch_count, std::memory_order_relaxed);
}

void store::impl::observe_fsync(std::chrono::steady_clock::duration d) {
  double seconds = std::chrono::duration<double>(d).count();
  std::size_t i = 0;
  while (i < std::size(kFsyncBounds) && seconds > kFsyncBounds[i]) ++i;
  fsync_buckets[i].fetch_add(1, std::memory_order_relaxed);
  fsync_nanoseconds.fetch_add(static_cast<std::uint64_t>(std::chrono::nanoseconds(d).count()),
                              std::memory_order_relaxed);
}

std::size_t store::queued_bytes() const { return impl_->queued_bytes.load(std::memory_order_relaxed); }

std::uint64_t store::stored_bytes_of(std::string_view sender) const {
  std::lock_guard lock(impl_->stored_mutex);
  auto it = impl_->stored_by_sender.find(std::string(sender));
  return it == impl_->stored_by_sender.end() || it->second < 0 ? 0 : static_cast<std::uint64_t>(it->second);
}

void store::add_stored_bytes(const std::vector<std::pair<std::string, std::uint64_t>>& by_sender) {
  std::lock_guard lock(impl_->stored_mutex);
  for (const auto& [sender, n] : by_sender) {
    std::int64_t& total = impl_->stored_by_sender[sender];
    total += static_cast<std::int64_t>(n);
    if (total == 0) impl_->stored_by_sender.erase(sender);
  }
}

bool store::stored_sender(table t, std::string_view value, std::string_view& sender, std::size_t& bytes) {
  if (t == table::entries || t == table::scheduled) {
    if (value.size() <= 4) return false;
    value.remove_prefix(4);  // the delivery count, then the message inline
  } else if (t != table::messages) {
    return false;
  }
  bytes = value.size();
  return peek_sender(value, sender);
}

commit_stats store::stats() const {
  const impl& m = *impl_;
  commit_stats s;
  s.commits = m.commits.load(std::memory_order_relaxed);
  s.batches = m.batches.load(std::memory_order_relaxed);
  s.writable = !m.failed.load(std::memory_order_relaxed);
  s.batches_per_commit_bounds.assign(std::begin(impl::kBatchBounds), std::end(impl::kBatchBounds));
  for (const auto& b : m.batch_buckets) s.batches_per_commit.push_back(b.load(std::memory_order_relaxed));
  s.batches_per_commit_sum = m.batch_sum.load(std::memory_order_relaxed);
  s.fsync_bounds_seconds.assign(std::begin(impl::kFsyncBounds), std::end(impl::kFsyncBounds));
  for (const auto& b : m.fsync_buckets) {
    s.fsync.push_back(b.load(std::memory_order_relaxed));
    s.fsync_count += s.fsync.back();
  }
  s.fsync_seconds_sum = static_cast<double>(m.fsync_nanoseconds.load(std::memory_order_relaxed)) / 1e9;
  // mdb_env_info and mdb_env_stat read the current meta page without a transaction: a value a
  // commit later may be stale, which is all a gauge needs.
  s.map_grows = m.map_grows.load(std::memory_order_relaxed);
  s.live_bytes = m.live_bytes.load(std::memory_order_relaxed);
  s.disk_free_bytes = m.disk_free.load(std::memory_order_relaxed);
  s.refusing_sends = !send_room().ok();
  MDB_envinfo info{};
  MDB_stat st{};
  std::shared_lock lock(m.map_lock);
  if (mdb_env_info(m.env, &info) == 0 && mdb_env_stat(m.env, &st) == 0) {
    s.map_size_bytes = info.me_mapsize;
    s.map_used_bytes = (static_cast<std::uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
  }
  std::error_code ec;
  auto size = std::filesystem::file_size(std::filesystem::path(m.options.path) / "data.mdb", ec);
  if (!ec) s.file_bytes = size;
  if (m.log) s.log_bytes = m.log->disk_bytes();
  s.log_size_bytes = m.options.log_size;
  s.log_used_bytes = m.log_used.load(std::memory_order_relaxed);
  return s;
}

status store::send_room(bool measure_now) const {
  const impl& m = *impl_;
  std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
  // Near the disk floor the room is measured every millisecond (and what is in flight counts,
  // below): a burst of SENDs within one 10 ms interval could otherwise take the disk past the
  // floor, to its last byte, where nothing (not even an ACK, whose pages need room too) can be
  // written.
  const std::uint64_t floor = m.options.min_free_disk;
  const bool near_floor = floor != 0 && m.disk_free.load(std::memory_order_relaxed) +
                                                m.reusable_bytes.load(std::memory_order_relaxed) <
                                            2 * floor + impl::kNearFloorBytes;
  const std::int64_t every = near_floor ? impl::kRoomCheckNearNs : impl::kRoomCheckNs;
  if (measure_now || now - m.room_checked_ns.load(std::memory_order_relaxed) >= every) {
    std::unique_lock lock(m.room_mutex, std::defer_lock);
    if (measure_now) {
      lock.lock();
    } else {
      (void)lock.try_lock();
    }
    if (lock.owns_lock()) {
      m.measure_room();
      m.room_checked_ns = now;
    }
  }
  auto mib = [](std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
  std::uint64_t live = m.live_bytes.load(std::memory_order_relaxed);
  if (m.options.max_size != 0 && live >= m.options.max_size)
    return {status::code::store_full, "store full: the store holds " + mib(live) + ", at its cap storage.max-size (" +
                                          mib(m.options.max_size) +
                                          "); consume messages or raise storage.max-size. Sends resume by themselves"};
  std::uint64_t room = m.disk_free.load(std::memory_order_relaxed) + m.reusable_bytes.load(std::memory_order_relaxed);
  // What is submitted and not yet written will take room too: twice its bytes (LMDB's pages are
  // written whole, and copied on write), so that the floor holds under a burst.
  room -= std::min(room, 2 * m.queued_bytes.load(std::memory_order_relaxed));
  if (m.options.min_free_disk != 0 && room < m.options.min_free_disk) {
    m.short_of_room.store(true, std::memory_order_relaxed);
    return {status::code::store_full, "store full: the disk holding " + m.options.path + " has " + mib(room) +
                                          " free for the store, below storage.min-free-disk (" +
                                          mib(m.options.min_free_disk) +
                                          "); free disk space or consume messages. Sends resume by themselves"};
  }
  return {};
}

bool store::writable() const { return !impl_->failed.load(std::memory_order_relaxed); }

}  // namespace escrow::storage
