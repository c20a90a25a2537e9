// The commit log: the file `log` in the data directory, a ring of records in front of LMDB. The
// committer appends each group's batches to it as one record and syncs it once; that sync is what
// makes the group durable. LMDB is synced now and then, off the critical path: a checkpoint
// records the LMDB commit that is then durable (and its meta page), and the records before it may
// be overwritten. At start the records after the checkpoint are applied to LMDB again (replay).
// Layout, generations and failure modes: docs/storage.md, "The commit log".
//
//   bytes 0..4095     control block slot 0     } the valid one with the higher sequence number
//   bytes 4096..8191  control block slot 1     } is current; each is written whole and synced
//   bytes 8192..      the ring (`capacity` bytes): records at virtual offsets, physical offset
//                     8192 + (v mod capacity); a record never straddles the end of the ring
//
//   record: u32 magic | u32 crc32 (of everything after it, payload included) | u32 payload length
//           | u16 kind (1 group, 2 wrap: go on at the ring's start) | u16 0 | u64 salt | u64 lsn
//           | payload
//
// A record belongs to the log only if it follows the one before it: the generation's salt, the
// next sequence number (lsn) and a good checksum. The first record that does not (cut short by a
// crash, a bad checksum, an older record of the ring) ends the log. Threads: the store's committer
// (or its opening code) reserves places; its log writer writes and syncs records in the order they
// were reserved (write and sync touch nothing else); its data syncer calls set_checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "escrow/storage/status.h"

namespace escrow::storage {

// The on-disk version of the log, checked at open like the schema version.
inline constexpr std::uint32_t kLogFormatVersion = 1;

// A place in the log: LMDB stores the position of the last record it holds (meta "log-position"),
// in the same LMDB transaction as that record's batches.
struct log_position {
  std::uint64_t salt = 0;  // the generation it belongs to
  std::uint64_t lsn = 0;   // the record's sequence number
  std::uint64_t end = 0;   // the virtual offset just after the record
  std::string encode() const;
  static bool decode(std::string_view bytes, log_position& out);
};

// A record's reserved place: its position, where the ring's head was before it, and where a wrap
// record goes when it starts the next lap.
struct log_slot {
  log_position at;
  std::uint64_t head_before = 0;
  std::uint64_t wrap_at = UINT64_MAX;
};

class commit_log {
 public:
  // What the current control block holds.
  struct control {
    std::uint64_t sequence = 0;    // of the control block itself
    std::uint64_t salt = 0;        // the generation: random, new at every start
    std::uint64_t checkpoint = 0;  // the LMDB commit durable in data.mdb: what start-up goes back to
    std::string checkpoint_meta;   // that commit's meta page, as LMDB wrote it (lmdb_meta.h)
    std::uint64_t data_file = 0;   // the inode of the data.mdb this log belongs to
    std::uint64_t store_id = 0;    // and that store's id (meta "store-id")
    std::uint64_t first_lsn = 1;   // the generation's first record
    std::uint64_t capacity = 0;    // bytes of the ring
  };

  // Opens `dir`/log, creating nothing. found() is false when there is no log file (a new store,
  // or one written before the log existed); a log of another format version, or whose control
  // blocks are both unreadable, is an error naming the file and what to do.
  static status open(const std::string& dir, std::unique_ptr<commit_log>& out);
  ~commit_log();
  commit_log(const commit_log&) = delete;
  commit_log& operator=(const commit_log&) = delete;

  bool found() const { return found_; }
  control current() const;

  // Calls `visit` with each record of the current generation after `from` (from its first record
  // when `from` is of another generation), in order, until the log ends; a visit that fails stops
  // the replay with its status.
  using record_visitor = std::function<status(const log_position& at, std::string_view payload)>;
  status replay(const log_position& from, const record_visitor& visit) const;

  // Starts a new, empty generation (a new salt) of a ring of `capacity` bytes, creating the file
  // if needed and allocating all of the ring's blocks (store_full when the disk cannot hold them),
  // with LMDB's commit `checkpoint` (meta page `meta`) durable. Synced before it returns; the
  // file's directory entry is the caller's to sync.
  status start_generation(std::uint64_t checkpoint, std::string_view meta, std::uint64_t data_file,
                          std::uint64_t store_id, std::uint64_t capacity);
  // Records that LMDB's commit `checkpoint` (meta page `meta`) is durable in data.mdb; the
  // generation goes on. Synced before it returns. The only call another thread may make meanwhile.
  status set_checkpoint(std::uint64_t checkpoint, std::string_view meta);
  // Records after virtual offset `v` are needed (the checkpoint's LMDB commit holds those before).
  void keep_from(std::uint64_t v) { keep_from_ = v; }
  // Bytes the file takes on disk (its allocated blocks).
  std::uint64_t disk_bytes() const;
  // Bytes of records written after the checkpoint's.
  std::uint64_t since_checkpoint() const { return head_ - keep_from_; }

  // The largest payload a record may carry: a quarter of the ring, so that the records a restart
  // may need (the last two) are never overwritten by the next one.
  std::size_t max_payload() const;
  // Reserves the next record's place, of `payload_size` bytes (its lsn and end), growing the file
  // when the ring is not yet all written. store_full when the file cannot grow; nothing reserved.
  // `behind` (nothing reserved) when the record would overwrite one the checkpoint still needs:
  // checkpoint first, then reserve again. A place must be written, or cancelled before the next
  // is reserved: the log ends at the first lsn missing.
  status reserve(std::size_t payload_size, log_slot& slot, bool& behind);
  void cancel(const log_slot& slot);
  // Writes the record into its place (not synced); then sync() makes every record written so far
  // durable (fdatasync). 0 or an errno. append: both.
  int write(const log_slot& slot, std::string_view payload) const;
  int sync() const;
  int append(const log_slot& slot, std::string_view payload) const;

 private:
  commit_log() = default;
  status write_control(const control& next);  // with control_mutex_ held
  status allocate(std::uint64_t capacity);     // every block of a ring of `capacity` bytes
  std::string path_;
  int fd_ = -1;          // records: written and synced by the log writer
  int control_fd_ = -1;  // the same file opened again for the control blocks, so that a failed
                         // write-back is reported to each (Linux reports it once per open file)
  bool found_ = false;
  mutable std::mutex control_mutex_;  // control_ and control_slot_ (set_checkpoint's thread)
  control control_;
  int control_slot_ = 0;         // the slot holding control_
  std::uint64_t salt_ = 0;       // of the generation being written (the committer's copy)
  std::uint64_t capacity_ = 0;
  std::uint64_t keep_from_ = 0;  // virtual offset: records after it are needed
  std::uint64_t head_ = 0;       // virtual offset of the next record
  std::uint64_t next_lsn_ = 1;
  std::uint64_t file_ring_ = 0;  // bytes of the ring the file holds (it grows up to capacity)
};

}  // namespace escrow::storage
