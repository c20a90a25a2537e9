// The offline store checker behind `escrow check DATA-DIR` (docs/operations.md): opens a data
// directory's LMDB environment read-only, without escrowd's escrow.lock, so it works on a stopped
// store and on one escrowd is serving, and reads every table in ONE read transaction (a consistent
// snapshot). It never writes to the store. It verifies what the tables must agree on (schema.h):
// the schema version, that every record decodes, entries against queues, reference counts against
// entries, the expiry index against entries, prepared branch records, the next ids, and the two
// tables of duplicate detection against each other. It reports
// each inconsistency with its table, its key (printable_key) and what is wrong.
//
// check_as_opened (escrow check) checks what escrowd would open: a store that was not closed
// cleanly is recovered first, as escrowd's start recovers it, but on a copy (the original is never
// written); a store a running escrowd holds is checked live.
//
// Branch records are rm/'s format, and storage must not use rm: the caller passes a decoder
// (rm/record_check.h has the one escrow uses) that turns a record into what the rest of the store
// must agree with (branch_refs).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/storage/schema.h"

namespace escrow::storage {

// What a record of the `branches` table means to the other tables, as its decoder reads it.
struct branch_refs {
  std::string name;      // the xid as text, for the report
  bool prepared = true;  // false: heuristically completed (a record with no work)
  // Ids of the messages the branch sends. Their records are inline in the branch record: they
  // hold no reference in `messages`, but escrowd must not hand their ids out again.
  std::vector<std::uint64_t> sent_message_ids;
  std::vector<entry_key> targets;   // stored entries the branch's commit writes (not there yet)
  std::vector<entry_key> consumed;  // stored entries the branch consumed (held, still there)
};
// Decodes one record of `branches` into `out`. Returns "" when it decodes whole, else what is wrong.
using branch_decoder = std::function<std::string(std::string_view key, std::string_view value, branch_refs& out)>;

struct check_options {
  std::string path;                // the data directory (holding data.mdb)
  branch_decoder decode_branch;    // null: branch records are counted, not checked (a problem)
  std::size_t max_listed_per_kind = 20;  // problems listed per kind; the rest are only counted
  // check_as_opened: where the temporary directory holding a recovered copy is made ("": $TMPDIR,
  // else /tmp). It is removed afterwards.
  std::string scratch;
};

// The kinds of inconsistency, one per check.
enum class problem_kind : std::uint8_t {
  schema,      // the schema version record is missing or malformed
  undecodable, // a record or a key that does not decode
  queue,       // an entry for a queue that does not exist, two queues with one id
  reference,   // message_refs against the entries that reference a message; duplicate_ids against duplicate_order
  expiry,      // the expiry index against the entries; a scheduled record's due time against its message
  branch,      // a prepared branch record against the queues and entries
  next_id,     // an id in use at or above the next id escrowd would hand out
};
inline constexpr std::size_t kProblemKinds = 7;
const char* problem_kind_name(problem_kind k);  // "schema", "undecodable", ...

struct check_counts {
  std::uint64_t queues = 0;                  // queue records of kind queue
  std::uint64_t durable_subscriptions = 0;   // queue records of kind durable subscription
  std::uint64_t entries = 0;
  std::uint64_t inline_entries = 0;          // entries holding their message inline
  std::uint64_t messages = 0;                // records of `messages` (shared by several entries)
  std::uint64_t message_refs = 0;
  std::uint64_t prepared_branches = 0;
  std::uint64_t heuristic_branches = 0;
  std::uint64_t expiries = 0;
  std::uint64_t scheduled = 0;  // scheduled messages not yet due (records of `scheduled`)
  std::uint64_t decisions = 0;  // commit decisions of coordinated transactions not known done in their database
  std::uint64_t duplicate_ids = 0;        // _AMQ_DUPL_ID values remembered (records of duplicate_ids)
  std::uint64_t duplicate_addresses = 0;  // addresses they are remembered for
  std::uint64_t next_message_id = 0;  // the id escrowd would hand out next (after its own recovery)
  std::uint32_t next_queue_id = 0;    // likewise for queues
};

// How check_as_opened found the store, and what it did before checking it.
struct recovery_report {
  enum class state {
    as_is,      // not in use, nothing to recover (or a commit log escrowd would not replay): checked as on disk
    in_use,     // escrow.lock is held: a running escrowd has it open (and recovered it): checked live
    recovered,  // not closed cleanly: a copy was recovered as escrowd's start would, and the copy checked
    unknown,    // escrow.lock or data.mdb's meta pages cannot be read: checked as on disk (check_store says why)
  };
  state found = state::as_is;
  // recovered: LMDB's latest commit on disk and the one the commit log's checkpoint names. When
  // the latest is later, recovery sets aside the commits after the checkpoint (set_aside of them).
  std::uint64_t latest_commit = 0;
  std::uint64_t checkpoint = 0;
  std::uint64_t set_aside = 0;
  std::int64_t replayed = -1;  // recovered: commit log records replayed into the copy (-1: not known)
  std::vector<std::string> log;  // recovered: what the store logged while recovering the copy
};

struct check_report {
  // unrecoverable: the store was not closed cleanly and escrowd's recovery fails on it (escrowd
  // would not start); open_error says why. Nothing else was checked.
  enum class result { consistent, inconsistent, cannot_open, unrecoverable };
  result outcome = result::consistent;
  std::string open_error;  // cannot_open: why, and what to do
  std::uint32_t schema_version = 0;
  check_counts counts;
  // "TABLE KEY: what is wrong", at most max_listed_per_kind of each kind, in the order found.
  std::vector<std::string> problems;
  std::array<std::uint64_t, kProblemKinds> found{};   // every problem found, listed or not, by kind
  std::array<std::uint64_t, kProblemKinds> listed{};  // how many of them are in `problems`
  std::uint64_t total_found() const;
  // Kinds with more problems than were listed: "... and 12 more reference problems".
  std::vector<std::string> unlisted() const;
  recovery_report recovery;  // check_as_opened only
};

// Checks the store in `options.path`. Never writes to it (LMDB registers the reader in lock.mdb).
check_report check_store(const check_options& options);

// What `escrow check` runs: checks the store escrowd would open from `options.path`, never writing
// to it. escrow.lock held by a running escrowd: check_store on it, live. Otherwise, while holding
// escrow.lock shared (an escrowd starting meanwhile refuses the directory): when LMDB's latest
// commit is not the commit log's checkpoint, or LMDB is at the checkpoint but the log holds
// records after the position LMDB holds (a start that died while recovering), data.mdb and log
// are copied (sparse) into a new directory under options.scratch, the lock released, the copy
// opened with storage::store (which recovers it: the checkpoint restored, the log replayed) and
// closed, and check_store run on it; the directory is removed. Otherwise check_store on it as is.
check_report check_as_opened(const check_options& options);

}  // namespace escrow::storage
