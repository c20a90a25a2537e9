// The offline store checker (check.h): one read-only LMDB environment, one read transaction, one
// pass over each table, in an order that lets each pass look up what the earlier ones found.
//
// The conventions checked come from the code that writes the tables:
//  - put_message (schema.cpp): a message with one stored entry lives inline in that entry's value
//    (u32 delivery count, then the record); with several, it is stored once in `messages` and each
//    entry's value is the u32 delivery count alone. A message_refs record holds the count only
//    while it is above one: no record means exactly one reference.
//  - store.cpp's remove_entry / release: removing an entry without an inline message drops one
//    reference; the last one deletes the message. So every record of `messages` has as many
//    entries referencing it as its count says, and never none.
//  - the expiry index holds one record per stored entry whose message expires (from the inline
//    record, or from the shared one), keyed by that expiry time.
//  - prepared branch records (rm/record.h) carry the records of the messages they send inline:
//    they hold no reference in `messages` and are not counted there. Their sends' target entries
//    are written at commit; their consumed entries stay in `entries`, held, until then.
//  - next ids (broker::open): escrowd starts with next-message-id raised past the last key of
//    `messages` and past every message id in a branch record (a prepare does not write
//    next-message-id; its commit does), and next-queue-id raised past every queue record's id. A
//    missing or lower record is therefore recovered, and is not a problem; what escrowd cannot
//    recover is an id in use that it does not look at: a message id in an entry that holds its
//    message inline, at or above the next id it would hand out.
#include "escrow/storage/check.h"

#include <lmdb.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "escrow/storage/coding.h"
#include "escrow/storage/commit_log.h"
#include "escrow/storage/store.h"

namespace escrow::storage {

const char* problem_kind_name(problem_kind k) {
  switch (k) {
    case problem_kind::schema: return "schema";
    case problem_kind::undecodable: return "undecodable";
    case problem_kind::queue: return "queue";
    case problem_kind::reference: return "reference";
    case problem_kind::expiry: return "expiry";
    case problem_kind::branch: return "branch";
    case problem_kind::next_id: return "next-id";
  }
  return "unknown";
}

std::uint64_t check_report::total_found() const {
  std::uint64_t n = 0;
  for (auto f : found) n += f;
  return n;
}

namespace {

MDB_val as_val(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }
std::string_view as_view(const MDB_val& v) { return {static_cast<const char*>(v.mv_data), v.mv_size}; }

// What the checker keeps of one record of `messages` (they come in id order: a sorted vector).
struct message_info {
  std::uint64_t id = 0;
  std::uint64_t expires = 0;
  bool decoded = false;
  bool refs_known = true;          // false when its message_refs record does not decode
  bool has_refs_record = false;
  std::uint32_t expected_refs = 1;  // no message_refs record: one reference
  std::uint64_t seen_refs = 0;      // entries without an inline message that name it
};

class checker {
 public:
  explicit checker(const check_options& o) : options_(o) {}
  ~checker() {
    if (txn_) mdb_txn_abort(txn_);
    if (env_) mdb_env_close(env_);
  }
  checker(const checker&) = delete;
  checker& operator=(const checker&) = delete;

  check_report run() {
    if (!open()) {
      report_.outcome = check_report::result::cannot_open;
      return report_;
    }
    if (!check_schema()) {
      report_.outcome = check_report::result::cannot_open;
      return report_;
    }
    check_meta();
    check_queues();
    check_messages();
    check_message_refs();
    next_ids_before_branches();
    check_branches();
    check_entries();
    check_scheduled();
    check_expiries();
    check_decisions();
    check_duplicates();
    check_references();
    report_.outcome = report_.total_found() == 0 ? check_report::result::consistent
                                                 : check_report::result::inconsistent;
    return report_;
  }

 private:
  bool cannot_open(std::string why) {
    report_.open_error = std::move(why);
    return false;
  }

  bool open() {
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string& dir = options_.path;
    if (!fs::is_directory(dir, ec))
      return cannot_open(dir + " is not a directory (" + (ec ? ec.message() : "missing or not a directory") +
                         "); name escrowd's data directory (storage.data-dir, or --data-dir)");
    if (!fs::exists(fs::path(dir) / "data.mdb", ec))
      return cannot_open(dir + " holds no Escrow store: there is no data.mdb in it; name escrowd's data "
                         "directory (storage.data-dir, or --data-dir)");
    int rc = mdb_env_create(&env_);
    if (rc == 0) rc = mdb_env_set_maxdbs(env_, kTableCount + 2);
    // Read-only: no write transaction is possible. MDB_NOTLS: the reader slot belongs to the
    // transaction, not the thread. LMDB still registers the reader in lock.mdb (and creates
    // lock.mdb if it is missing), which a running escrowd shares; escrow.lock is not touched.
    if (rc == 0) rc = mdb_env_open(env_, dir.c_str(), MDB_RDONLY | MDB_NOTLS, 0600);
    if (rc != 0) {
      std::string hint = rc == EACCES ? " (run it as the user escrowd runs as: LMDB needs to write its reader "
                                        "table in lock.mdb, e.g. sudo -u escrow escrow check DIR)"
                                      : "";
      return cannot_open("cannot open the LMDB environment in " + dir + ": " + mdb_strerror(rc) + hint);
    }
    rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn_);
    if (rc == MDB_MAP_RESIZED) {
      // escrowd grew the map since the environment was opened: adopt its size and try again.
      txn_ = nullptr;
      rc = mdb_env_set_mapsize(env_, 0);
      if (rc == 0) rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn_);
    }
    if (rc != 0) {
      txn_ = nullptr;
      return cannot_open("cannot begin a read transaction in " + dir + ": " + mdb_strerror(rc));
    }
    for (int i = 0; i < kTableCount; ++i) {
      auto t = static_cast<table>(i);
      rc = mdb_dbi_open(txn_, table_name(t), 0, &dbi_[i]);
      if (rc == MDB_NOTFOUND && i >= kFirstTableOfVersion6) {
        absent_[i] = true;  // a store of an older version escrowd has not opened since: empty
        continue;
      }
      if (rc == MDB_NOTFOUND)
        return cannot_open("the LMDB environment in " + dir + " is not an Escrow store: it has no table '" +
                           table_name(t) + "' (escrowd creates every table when it first opens a store)");
      if (rc != 0)
        return cannot_open(std::string("cannot open table '") + table_name(t) + "' in " + dir + ": " + mdb_strerror(rc) +
                           " (not an Escrow store?)");
    }
    return true;
  }

  MDB_dbi dbi(table t) const { return dbi_[static_cast<int>(t)]; }

  // The value under `key`, or false when absent. Read errors are problems of the table.
  bool get(table t, std::string_view key, std::string_view& value) {
    if (absent_[static_cast<int>(t)]) return false;
    MDB_val k = as_val(key), v;
    int rc = mdb_get(txn_, dbi(t), &k, &v);
    if (rc == 0) {
      value = as_view(v);
      return true;
    }
    if (rc != MDB_NOTFOUND) problem(problem_kind::undecodable, t, key, std::string("cannot read it: ") + mdb_strerror(rc));
    return false;
  }
  bool has(table t, std::string_view key) {
    std::string_view ignored;
    return get(t, key, ignored);
  }

  // Visits every record of `t` in key order.
  template <typename F>
  void scan(table t, F&& visit) {
    if (absent_[static_cast<int>(t)]) return;
    MDB_cursor* cursor = nullptr;
    int rc = mdb_cursor_open(txn_, dbi(t), &cursor);
    MDB_val k, v;
    if (rc == 0) rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST);
    while (rc == 0) {
      visit(as_view(k), as_view(v));
      rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
    }
    if (cursor) mdb_cursor_close(cursor);
    if (rc != MDB_NOTFOUND)
      list(problem_kind::undecodable, std::string(table_name(t)) + ": the table cannot be read to its end: " +
                                          mdb_strerror(rc) + " (the LMDB file may be damaged)");
  }

  void problem(problem_kind k, table t, std::string_view key, const std::string& what) {
    list(k, std::string(table_name(t)) + " " + printable_key(key) + ": " + what);
  }
  void list(problem_kind k, std::string text) {
    auto i = static_cast<std::size_t>(k);
    ++report_.found[i];
    if (report_.listed[i] >= options_.max_listed_per_kind) return;
    ++report_.listed[i];
    report_.problems.push_back(std::move(text));
  }

  bool check_schema() {
    std::string_view v;
    if (!get(table::meta, kSchemaVersionKey, v)) {
      problem(problem_kind::schema, table::meta, kSchemaVersionKey,
              "missing: escrowd writes the schema version when it creates a store, and refuses to start a store "
              "that holds data without one");
      return true;  // the tables are Escrow's by name: check them as the current schema
    }
    if (v.size() != 4) {
      problem(problem_kind::schema, table::meta, kSchemaVersionKey,
              "the schema version is a u32 (4 bytes), this value is " + std::to_string(v.size()) + " bytes");
      return true;
    }
    get_u32(v, report_.schema_version);
    if (report_.schema_version < kOldestSchemaVersion || report_.schema_version > kSchemaVersion)
      return cannot_open("the store in " + options_.path + " has schema version " +
                         std::to_string(report_.schema_version) + " but this escrow understands version " +
                         std::to_string(kSchemaVersion) + "; check it with the escrow release that wrote it");
    return true;
  }

  void check_meta() {
    std::string_view v;
    if (get(table::meta, kNextMessageIdKey, v)) {
      if (v.size() == 8) {
        get_u64(v, stored_next_message_id_);
        has_next_message_id_ = true;
      } else {
        next_message_id_malformed_ = true;
        problem(problem_kind::undecodable, table::meta, kNextMessageIdKey,
                "a u64 (8 bytes), this value is " + std::to_string(v.size()) + " bytes; escrowd refuses to start");
      }
    }
    if (get(table::meta, kNextQueueIdKey, v)) {
      if (v.size() == 4) {
        get_u32(v, stored_next_queue_id_);
      } else {
        problem(problem_kind::undecodable, table::meta, kNextQueueIdKey,
                "a u32 (4 bytes), this value is " + std::to_string(v.size()) + " bytes; escrowd refuses to start");
      }
    }
    log_position position;
    if (get(table::meta, kLogPositionKey, v) && !log_position::decode(v, position))
      problem(problem_kind::undecodable, table::meta, kLogPositionKey,
              "the commit log position is 24 bytes (salt, lsn, end), this value is " + std::to_string(v.size()) +
                  " bytes; escrowd refuses to start");
  }

  void check_queues() {
    std::uint32_t next = std::max<std::uint32_t>(1, stored_next_queue_id_);
    scan(table::queues, [&](std::string_view k, std::string_view v) {
      queue_record r;
      if (!queue_record::decode(v, r)) {
        problem(problem_kind::undecodable, table::queues, k, "the queue record (u32 id, u8 kind, topic) does not decode");
        return;
      }
      bool is_sub = r.type == queue_record::kind::durable_subscription;
      ++(is_sub ? report_.counts.durable_subscriptions : report_.counts.queues);
      // The key forms broker::open accepts (docs/storage.md).
      bool key_fits = k.size() > 2 && k.substr(0, 2) == (is_sub ? "d/" : "q/") &&
                      (!is_sub || k.find('\0', 2) != std::string_view::npos);
      if (!key_fits)
        problem(problem_kind::undecodable, table::queues, k,
                is_sub ? "a durable subscription's key is d/CLIENT-ID, NUL, NAME" : "a queue's key is q/NAME");
      auto [it, added] = queues_.emplace(r.id, std::string(k));
      if (!added)
        problem(problem_kind::queue, table::queues, k,
                "its queue id " + std::to_string(r.id) + " is also the id of " + printable_key(it->second) +
                    ": the two queues would share their entries");
      if (r.id != UINT32_MAX) next = std::max(next, r.id + 1);
    });
    report_.counts.next_queue_id = next;
  }

  void check_messages() {
    scan(table::messages, [&](std::string_view k, std::string_view v) {
      ++report_.counts.messages;
      message_info m;
      if (!parse_message_key(k, m.id)) {
        problem(problem_kind::undecodable, table::messages, k, "a message key is a u64 message id (8 bytes)");
        return;
      }
      message_record r;
      m.decoded = message_record::decode(v, r);
      if (m.decoded) {
        m.expires = r.expires;
      } else {
        problem(problem_kind::undecodable, table::messages, k, "the message record does not decode");
      }
      messages_.push_back(m);  // 8-byte big-endian keys come in numeric order: stays sorted
    });
  }

  message_info* find_message(std::uint64_t id) {
    auto it = std::lower_bound(messages_.begin(), messages_.end(), id,
                               [](const message_info& m, std::uint64_t i) { return m.id < i; });
    return it != messages_.end() && it->id == id ? &*it : nullptr;
  }

  void check_message_refs() {
    scan(table::message_refs, [&](std::string_view k, std::string_view v) {
      ++report_.counts.message_refs;
      std::uint64_t id = 0;
      if (!parse_message_key(k, id)) {
        problem(problem_kind::undecodable, table::message_refs, k, "a message key is a u64 message id (8 bytes)");
        return;
      }
      message_info* m = find_message(id);
      if (!m) {
        problem(problem_kind::reference, table::message_refs, k,
                "a reference count for message " + std::to_string(id) + ", which is not in messages");
        return;
      }
      m->has_refs_record = true;
      std::uint32_t count = 0;
      std::string_view bytes = v;
      if (v.size() != 4 || !get_u32(bytes, count) || count < 2) {
        m->refs_known = false;
        problem(problem_kind::undecodable, table::message_refs, k,
                v.size() != 4 ? "a reference count is a u32 (4 bytes), this value is " + std::to_string(v.size()) + " bytes"
                              : "a reference count of " + std::to_string(count) +
                                    ": the record exists only while a message has two references or more");
        return;
      }
      m->expected_refs = count;
    });
  }

  // The next message id as broker::open computes it, before the branches raise it further.
  void next_ids_before_branches() {
    next_message_id_ = std::max<std::uint64_t>(1, stored_next_message_id_);
    if (!messages_.empty() && messages_.back().id != UINT64_MAX)
      next_message_id_ = std::max(next_message_id_, messages_.back().id + 1);
  }

  std::string queue_missing(std::uint32_t queue_id) {
    std::string what = "queue id " + std::to_string(queue_id) + ", which is the id of no record in queues";
    if (queue_id >= report_.counts.next_queue_id)
      what += " (and escrowd hands out queue ids from " + std::to_string(report_.counts.next_queue_id) +
              " on: a queue created later would inherit it)";
    return what;
  }

  void check_branches() {
    scan(table::branches, [&](std::string_view k, std::string_view v) {
      if (!options_.decode_branch) {
        ++report_.counts.prepared_branches;
        problem(problem_kind::branch, table::branches, k, "not checked: the checker was given no branch decoder");
        return;
      }
      branch_refs b;
      std::string wrong = options_.decode_branch(k, v, b);
      if (!wrong.empty()) {
        problem(problem_kind::branch, table::branches, k, wrong);
        return;
      }
      ++(b.prepared ? report_.counts.prepared_branches : report_.counts.heuristic_branches);
      for (auto id : b.sent_message_ids)
        if (id != UINT64_MAX) next_message_id_ = std::max(next_message_id_, id + 1);
      for (const auto& t : b.targets) {
        std::string key = t.encode();
        // A queue that existed and went away (a durable subscription ended after the branch was
        // prepared): its commit skips that target, so only an id never handed out is wrong.
        bool dropped = !queues_.count(t.queue_id) && t.queue_id < report_.counts.next_queue_id;
        if (dropped) continue;
        if (!queues_.count(t.queue_id)) {
          problem(problem_kind::branch, table::branches, k,
                  "branch " + b.name + ": its commit would write entry " + printable_key(key) + " into " +
                      queue_missing(t.queue_id));
        } else if (has(table::entries, key)) {
          problem(problem_kind::branch, table::branches, k,
                  "branch " + b.name + ": its commit would write entry " + printable_key(key) +
                      ", which is in entries already (message id " + std::to_string(t.message_id) + " used twice)");
        }
      }
      for (const auto& c : b.consumed) {
        std::string key = c.encode();
        // Ending a durable subscription removes its entries, the ones a branch consumed too: its
        // commit or rollback then finds nothing to do there.
        if (!queues_.count(c.queue_id) && c.queue_id < report_.counts.next_queue_id) continue;
        if (!queues_.count(c.queue_id)) {
          problem(problem_kind::branch, table::branches, k,
                  "branch " + b.name + ": it consumed entry " + printable_key(key) + " of " + queue_missing(c.queue_id));
        } else if (!has(table::entries, key)) {
          problem(problem_kind::branch, table::branches, k,
                  "branch " + b.name + ": it consumed entry " + printable_key(key) +
                      ", which is not in entries (a prepared branch's consumed entries stay stored until it is "
                      "decided)");
        }
      }
    });
    report_.counts.next_message_id = next_message_id_;
  }

  // Each commit decision of a coordinated transaction decodes (its gid is the key).
  void check_decisions() {
    scan(table::decisions, [&](std::string_view k, std::string_view v) {
      decision_record d;
      if (k.empty() || !decision_record::decode(v, d)) {
        problem(problem_kind::undecodable, table::decisions, k,
                "the record does not decode as a commit decision (database, owner, time)");
        return;
      }
      ++report_.counts.decisions;
    });
  }

  // Duplicate detection's two tables agree: each remembered id (duplicate_ids, address | id ->
  // sequence) has its order record (duplicate_order, address | inverted sequence -> id), and each
  // order record its id record. A lone record would be an id remembered without its place in the
  // eviction order (never forgotten), or a place that evicts nothing.
  void check_duplicates() {
    std::string last_address;
    scan(table::duplicate_ids, [&](std::string_view k, std::string_view v) {
      std::string_view address, id;
      std::uint64_t sequence = 0;
      if (!parse_duplicate_id_key(k, address, id) || !decode_duplicate_sequence(v, sequence)) {
        problem(problem_kind::undecodable, table::duplicate_ids, k,
                "a duplicate id record is string address, id -> u64 sequence (at least 1)");
        return;
      }
      ++report_.counts.duplicate_ids;
      if (address != last_address) ++report_.counts.duplicate_addresses;  // an address's keys are contiguous
      last_address = address;
      std::string order = duplicate_order_key(address, sequence);
      std::string_view twin;
      if (!get(table::duplicate_order, order, twin) || twin != id)
        problem(problem_kind::reference, table::duplicate_ids, k,
                "id " + printable_key(id) + " of " + printable_key(address) + " is number " + std::to_string(sequence) +
                    ", but duplicate_order " + printable_key(order) +
                    (twin.data() ? " names id " + printable_key(twin) : std::string(" is missing")) +
                    " (it would never be evicted)");
    });
    scan(table::duplicate_order, [&](std::string_view k, std::string_view v) {
      std::string_view address;
      std::uint64_t sequence = 0;
      if (!parse_duplicate_order_key(k, address, sequence) || v.empty()) {
        problem(problem_kind::undecodable, table::duplicate_order, k,
                "a duplicate order record is string address, u64 inverted sequence -> id (not empty)");
        return;
      }
      std::string ids = duplicate_id_key(address, v);
      std::string_view twin;
      std::uint64_t twin_sequence = 0;
      if (!get(table::duplicate_ids, ids, twin) || !decode_duplicate_sequence(twin, twin_sequence) ||
          twin_sequence != sequence)
        problem(problem_kind::reference, table::duplicate_order, k,
                "number " + std::to_string(sequence) + " of " + printable_key(address) + " is id " + printable_key(v) +
                    ", but duplicate_ids " + printable_key(ids) +
                    (twin.data() ? " holds another number" : std::string(" is missing")));
    });
  }

  // The expiry time of the message of the entry stored with `value` under `key`; false when it
  // cannot be known (reported elsewhere: a record that does not decode, a missing message).
  bool entry_expires(const entry_key& key, std::string_view value, std::uint64_t& expires) {
    if (value.size() > 4) {
      message_record r;
      if (!message_record::decode(value.substr(4), r)) return false;
      expires = r.expires;
      return true;
    }
    const message_info* m = find_message(key.message_id);
    if (!m || !m->decoded) return false;
    expires = m->expires;
    return true;
  }

  void check_entries() {
    scan(table::entries, [&](std::string_view k, std::string_view v) {
      ++report_.counts.entries;
      entry_key key;
      if (!entry_key::decode(k, key)) {
        problem(problem_kind::undecodable, table::entries, k,
                "an entry key is u32 queue id, u8 9-priority (0-9), u64 message id (13 bytes)");
        return;
      }
      if (v.size() < 4) {
        problem(problem_kind::undecodable, table::entries, k,
                "an entry's value starts with a u32 delivery count, this value is " + std::to_string(v.size()) + " bytes");
        return;
      }
      bool holds_message = v.size() > 4;
      bool expiry_known = false;  // unknown when the record it comes from does not decode
      std::uint64_t expires = 0;
      if (holds_message) {
        ++report_.counts.inline_entries;
        expiry_known = decode_inline_message(v, scratch_);
        expires = scratch_.expires;
        if (!expiry_known)
          problem(problem_kind::undecodable, table::entries, k, "the message stored inline in the entry does not decode");
      } else {
        expiry_known = entry_expires(key, v, expires);
      }
      if (!queues_.count(key.queue_id)) problem(problem_kind::queue, table::entries, k, "it belongs to " + queue_missing(key.queue_id));
      if (!holds_message) {
        if (message_info* m = find_message(key.message_id)) {
          ++m->seen_refs;
        } else {
          problem(problem_kind::reference, table::entries, k,
                  "its message " + std::to_string(key.message_id) +
                      " is neither stored inline in the entry nor in messages");
        }
      } else if (key.message_id >= next_message_id_ && !next_message_id_malformed_) {
        // An id in a `messages` key or a branch record is below next_message_id_ by construction.
        // (With a malformed next-message-id escrowd does not start: that is the problem to fix.)
        problem(problem_kind::next_id, table::entries, k,
                "its message id " + std::to_string(key.message_id) + " is not below " +
                    std::to_string(next_message_id_) + ", the next id escrowd would hand out (next-message-id " +
                    (has_next_message_id_ ? "holds " + std::to_string(stored_next_message_id_) : std::string("is missing")) +
                    ", raised past messages and prepared branches): a new message would take this id");
      }
      if (expiry_known && expires != 0 && !has(table::expiries, expiry_key(expires, key)))
        problem(problem_kind::expiry, table::entries, k,
                "its message expires at " + std::to_string(expires) +
                    " but the expiry index has no record for it (the reaper would never expire it)");
    });
  }

  // A scheduled message's record: like an entry's (a delivery count, the message inline or a
  // reference to it), of a queue that exists, keyed by the due time its message says.
  void check_scheduled() {
    scan(table::scheduled, [&](std::string_view k, std::string_view v) {
      ++report_.counts.scheduled;
      std::uint64_t due = 0;
      entry_key key;
      if (!parse_scheduled_key(k, due, key)) {
        problem(problem_kind::undecodable, table::scheduled, k,
                "a scheduled key is u32 queue id, u64 due, u8 9-priority (0-9), u64 message id (21 bytes)");
        return;
      }
      if (v.size() < 4) {
        problem(problem_kind::undecodable, table::scheduled, k,
                "a scheduled record's value starts with a u32 delivery count, this value is " +
                    std::to_string(v.size()) + " bytes");
        return;
      }
      if (!queues_.count(key.queue_id))
        problem(problem_kind::queue, table::scheduled, k, "it belongs to " + queue_missing(key.queue_id));
      if (std::string_view twin; get(table::entries, key.encode(), twin))
        problem(problem_kind::reference, table::scheduled, k,
                "message " + std::to_string(key.message_id) +
                    " is also an entry of its queue: it would be delivered twice");
      if (v.size() > 4 && key.message_id >= next_message_id_ && !next_message_id_malformed_)
        problem(problem_kind::next_id, table::scheduled, k,
                "its message id " + std::to_string(key.message_id) + " is not below " +
                    std::to_string(next_message_id_) + ", the next id escrowd would hand out: a new message would take it");
      std::optional<message_record> record;
      if (v.size() > 4) {
        if (decode_inline_message(v, scratch_)) record = scratch_;
        else problem(problem_kind::undecodable, table::scheduled, k, "the message stored inline in it does not decode");
      } else if (message_info* m = find_message(key.message_id)) {
        ++m->seen_refs;
        std::string_view value;
        message_record r;
        if (get(table::messages, message_key(key.message_id), value) && message_record::decode(value, r)) record = r;
      } else {
        problem(problem_kind::reference, table::scheduled, k,
                "its message " + std::to_string(key.message_id) + " is neither stored inline in it nor in messages");
      }
      if (record && (record->deliver_at == 0 || scheduled_due(record->deliver_at, record->expires) != due))
        problem(problem_kind::expiry, table::scheduled, k,
                "it is due at " + std::to_string(due) + " but its message " +
                    (record->deliver_at == 0 ? std::string("has no delivery time")
                                             : "comes due at " +
                                                   std::to_string(scheduled_due(record->deliver_at, record->expires))));
    });
  }

  void check_expiries() {
    scan(table::expiries, [&](std::string_view k, std::string_view v) {
      ++report_.counts.expiries;
      std::uint64_t expires = 0;
      entry_key key;
      if (!parse_expiry_key(k, expires, key)) {
        problem(problem_kind::undecodable, table::expiries, k,
                "an expiry key is u64 expires then a 13-byte entry key (21 bytes)");
        return;
      }
      if (!v.empty())
        problem(problem_kind::undecodable, table::expiries, k,
                "an expiry record's value is empty, this one is " + std::to_string(v.size()) + " bytes");
      std::string ek = key.encode();
      std::string_view entry;
      if (!get(table::entries, ek, entry)) {
        problem(problem_kind::expiry, table::expiries, k,
                "it points at entry " + printable_key(ek) + ", which is not in entries");
        return;
      }
      std::uint64_t actual = 0;
      if (entry.size() >= 4 && entry_expires(key, entry, actual) && actual != expires)
        problem(problem_kind::expiry, table::expiries, k,
                "entry " + printable_key(ek) + "'s message expires at " +
                    (actual == 0 ? std::string("0 (never)") : std::to_string(actual)) + ", not at " +
                    std::to_string(expires));
    });
  }

  void check_references() {
    for (const auto& m : messages_) {
      std::string key = message_key(m.id);
      if (m.seen_refs == 0) {
        problem(problem_kind::reference, table::messages, key,
                "message " + std::to_string(m.id) + " is referenced by no entry (it would never be deleted)");
      } else if (m.refs_known && m.seen_refs != m.expected_refs) {
        problem(problem_kind::reference, m.has_refs_record ? table::message_refs : table::messages, key,
                (m.has_refs_record ? "the reference count is " + std::to_string(m.expected_refs)
                                   : std::string("no message_refs record (one reference)")) +
                    " but " + std::to_string(m.seen_refs) + " entries reference message " + std::to_string(m.id) +
                    (m.seen_refs < m.expected_refs ? " (it would never be deleted)"
                                                   : " (it would be deleted while entries still need it)"));
      }
    }
  }

  const check_options& options_;
  check_report report_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_[kTableCount] = {};
  bool absent_[kTableCount] = {};

  std::uint64_t stored_next_message_id_ = 0;
  bool has_next_message_id_ = false;
  bool next_message_id_malformed_ = false;
  std::uint32_t stored_next_queue_id_ = 0;
  std::uint64_t next_message_id_ = 1;
  std::map<std::uint32_t, std::string> queues_;  // queue id -> its key in queues
  std::vector<message_info> messages_;           // sorted by id
  message_record scratch_;
};

}  // namespace

std::vector<std::string> check_report::unlisted() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kProblemKinds; ++i)
    if (found[i] > listed[i])
      out.push_back("... and " + std::to_string(found[i] - listed[i]) + " more " +
                    problem_kind_name(static_cast<problem_kind>(i)) + " problems");
  return out;
}

check_report check_store(const check_options& options) { return checker(options).run(); }

}  // namespace escrow::storage
