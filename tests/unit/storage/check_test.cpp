// The offline store checker (storage/check.h) with escrow's branch decoder (rm/record_check.h): a
// store built through the real storage::store, with the same helpers the broker writes with
// (put_message, erase_entry, set_delivery_count, rm::encode_record), passes; then each kind of
// inconsistency is made on purpose with a raw LMDB write after the store is closed, and the checker
// must report exactly that problem. Also: it reads a store that is open (escrow.lock held), never
// changes data.mdb, and refuses what is not an Escrow store. And check_as_opened (escrow check):
// a store whose process died with commits after the commit log's checkpoint is checked on a copy
// recovered as escrowd would recover it, the store itself left byte for byte as it was.
#include <doctest/doctest.h>
#include <lmdb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "escrow/rm/record.h"
#include "escrow/rm/record_check.h"
#include "escrow/storage/check.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/commit_log.h"
#include "escrow/storage/fault_injection.h"
#include "escrow/storage/lmdb_meta.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "escrow/xid.h"

using namespace escrow;
using namespace escrow::storage;

namespace {

using escrow::testing::temp_dir;

constexpr std::uint64_t kExpiresA = 1900000000000ull;  // message 2
constexpr std::uint64_t kExpiresB = 1950000000000ull;  // message 3 (shared)

std::string u32(std::uint32_t v) {
  std::string s;
  put_u32(s, v);
  return s;
}
std::string u64(std::uint64_t v) {
  std::string s;
  put_u64(s, v);
  return s;
}

message_record record(std::string destination, std::uint64_t expires = 0) {
  message_record r;
  r.destination = std::move(destination);
  r.expires = expires;
  r.timestamp = 1800000000000ull;
  r.headers = {{"content-type", "text/plain"}};
  r.body = "body";
  return r;
}

std::string inline_entry_value(const message_record& r, std::uint32_t delivery_count = 0) {
  return u32(delivery_count) + r.encode();
}

std::string queue_value(std::uint32_t id, queue_record::kind k, std::string topic = {}) {
  queue_record r;
  r.id = id;
  r.type = k;
  r.topic = std::move(topic);
  return r.encode();
}

std::string durable_key(std::string_view client, std::string_view name) {
  std::string k = "d/" + std::string(client);
  k.push_back('\0');
  return k + std::string(name);
}

const xid kPrepared(4242, "gtrid-prepared", "\x01");
const xid kHeuristic(4242, "gtrid-heuristic", "\x01");

// A prepared branch that sends message 6 to orders (stored) and to a non-durable subscription (not
// stored: load drops it, so the checker ignores it), and consumed entry {1, 4, 1} of orders.
rm::branch prepared_branch() {
  rm::branch b;
  b.state = rm::branch_state::prepared;
  b.created_ms = 1800000000000ull;
  auto m = std::make_shared<message>();
  m->id = 6;
  m->record = record("/queue/orders");
  b.work.sends.push_back({m, {{{1, 4, 6}, true}, {{77, 4, 6}, false}}});
  b.work.consumed.push_back({{1, 4, 1}, 1, true, false, nullptr});
  b.work.consumed.push_back({{77, 4, 5}, 0, false, false, nullptr});  // not stored: not checked
  return b;
}

class store_fixture {
 public:
  // The store every case starts from, consistent:
  //   queues   q/orders (id 1), durable subscriptions d/app\0a (id 2) and d/app\0b (id 3) on topic prices
  //   msg 1    orders, inline, delivery count raised to 2 (set_delivery_count keeps the message)
  //   msg 2    orders, inline, expires (one expiry record)
  //   msg 3    prices -> both subscriptions: shared in messages, refs 2, expires (two expiry records)
  //   msg 4    prices -> both, then acknowledged on one: shared, no refs record (one reference)
  //   msg 5    orders, acknowledged: gone
  //   msg 6    staged in the prepared branch (next-message-id is not written at prepare)
  //   msg 7    orders, inline, the newest stored message; next-message-id 8
  //   branches kPrepared (prepared_branch()) and kHeuristic (heuristically committed, no work)
  store_fixture() {
    auto s = open();
    batch b;
    b.put(table::queues, "q/orders", queue_value(1, queue_record::kind::queue));
    b.put(table::queues, durable_key("app", "a"), queue_value(2, queue_record::kind::durable_subscription, "prices"));
    b.put(table::queues, durable_key("app", "b"), queue_value(3, queue_record::kind::durable_subscription, "prices"));
    b.put(table::meta, kNextQueueIdKey, u32(4));
    apply(*s, std::move(b));
    for (std::uint64_t id = 1; id <= 5; ++id) {
      batch m;
      if (id == 1 || id == 5) put_message(m, id, record("/queue/orders"), {{1, 4, id}});
      if (id == 2) put_message(m, id, record("/queue/orders", kExpiresA), {{1, 4, id}});
      if (id == 3) put_message(m, id, record("/topic/prices", kExpiresB), {{2, 4, id}, {3, 4, id}});
      if (id == 4) put_message(m, id, record("/topic/prices"), {{2, 4, id}, {3, 4, id}});
      m.put(table::meta, kNextMessageIdKey, u64(id + 1));
      apply(*s, std::move(m));
    }
    batch acks;
    erase_entry(acks, {2, 4, 4});
    erase_entry(acks, {1, 4, 5});
    acks.set_delivery_count(entry_key{1, 4, 1}.encode(), 2);
    apply(*s, std::move(acks));
    batch prepare;
    prepare.put(table::branches, kPrepared.encode(), rm::encode_record(prepared_branch()));
    rm::branch heuristic;
    heuristic.state = rm::branch_state::heuristic_committed;
    prepare.put(table::branches, kHeuristic.encode(), rm::encode_record(heuristic));
    apply(*s, std::move(prepare));
    batch last;
    put_message(last, 7, record("/queue/orders"), {{1, 4, 7}});
    last.put(table::meta, kNextMessageIdKey, u64(8));
    apply(*s, std::move(last));
  }

  const std::string& path() const { return dir_.path(); }

  std::unique_ptr<store> open() {
    store_options options;
    options.path = dir_.path();
    options.map_size = 64ull << 20;
    std::unique_ptr<store> s;
    status st = store::open(options, s);
    INFO(st.message());
    REQUIRE(st.ok());
    return s;
  }

  static void apply(store& s, batch b) {
    auto done = std::make_shared<std::promise<status>>();
    auto f = done->get_future();
    s.submit(std::move(b), [done](status st) { done->set_value(std::move(st)); });
    status st = f.get();
    INFO(st.message());
    REQUIRE(st.ok());
  }

  // A raw LMDB write transaction on the closed store: how a disk, a copy or a bug would leave it.
  class raw_edit {
   public:
    explicit raw_edit(const std::string& path) {
      REQUIRE(mdb_env_create(&env_) == 0);
      REQUIRE(mdb_env_set_maxdbs(env_, kTableCount + 2) == 0);
      REQUIRE(mdb_env_set_mapsize(env_, 64ull << 20) == 0);
      REQUIRE(mdb_env_open(env_, path.c_str(), 0, 0644) == 0);
      REQUIRE(mdb_txn_begin(env_, nullptr, 0, &txn_) == 0);
      for (int i = 0; i < kTableCount; ++i)
        REQUIRE(mdb_dbi_open(txn_, table_name(static_cast<table>(i)), 0, &dbi_[i]) == 0);
    }
    ~raw_edit() {
      int rc = mdb_txn_commit(txn_);
      mdb_env_close(env_);
      CHECK(rc == 0);
    }
    raw_edit(const raw_edit&) = delete;
    raw_edit& operator=(const raw_edit&) = delete;
    void put(table t, std::string_view key, std::string_view value) {
      MDB_val k{key.size(), const_cast<char*>(key.data())}, v{value.size(), const_cast<char*>(value.data())};
      REQUIRE(mdb_put(txn_, dbi_[static_cast<int>(t)], &k, &v, 0) == 0);
    }
    void del(table t, std::string_view key) {
      MDB_val k{key.size(), const_cast<char*>(key.data())};
      REQUIRE(mdb_del(txn_, dbi_[static_cast<int>(t)], &k, nullptr) == 0);
    }
    void drop(table t) { REQUIRE(mdb_drop(txn_, dbi_[static_cast<int>(t)], 1) == 0); }  // the table itself

   private:
    MDB_env* env_ = nullptr;
    MDB_txn* txn_ = nullptr;
    MDB_dbi dbi_[kTableCount] = {};
  };

  check_report check(std::size_t max_listed = 20) const {
    check_options o;
    o.path = dir_.path();
    o.decode_branch = rm::check_branch_record;
    o.max_listed_per_kind = max_listed;
    return check_store(o);
  }

 private:
  temp_dir dir_;
};

std::string all(const check_report& r) {
  std::string out = r.open_error;
  for (const auto& p : r.problems) out += "\n  " + p;
  return out;
}

// The report holds exactly one problem, of kind `k`, whose text contains each of `parts`.
void require_one(const check_report& r, problem_kind k, std::vector<std::string> parts) {
  INFO(all(r));
  CHECK(r.outcome == check_report::result::inconsistent);
  REQUIRE(r.total_found() == 1);
  CHECK(r.found[static_cast<std::size_t>(k)] == 1);
  REQUIRE(r.problems.size() == 1);
  for (const auto& p : parts) {
    CAPTURE(p);
    CHECK(r.problems[0].find(p) != std::string::npos);
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child process opens the store in `path` with no checkpoint for a minute (`faults`: a fault plan
// of the test builds), stores messages 8.. 8 + n - 1 in orders, each durable before the next, and
// dies by SIGKILL: LMDB's latest n commits are after the commit log's checkpoint.
void add_then_die(const std::string& path, int n, std::string_view faults = {}) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    store_options o;
    o.path = path;
    o.map_size = 64ull << 20;
    o.checkpoint_interval_ms = 60000;
    std::string error;
    if (!faults.empty() && !fault_plan::parse(faults, o.faults, error)) _exit(4);
    std::unique_ptr<store> s;
    if (!store::open(o, s).ok()) _exit(2);
    for (int i = 0; i < n; ++i) {
      auto id = static_cast<std::uint64_t>(8 + i);
      batch m;
      put_message(m, id, record("/queue/orders"), {{1, 4, id}});
      m.put(table::meta, kNextMessageIdKey, u64(id + 1));
      std::promise<bool> done;
      s->submit(std::move(m), [&](status st) { done.set_value(st.ok()); });
      if (!done.get_future().get()) _exit(3);
    }
    raise(SIGKILL);
    _exit(1);
  }
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  REQUIRE(WIFSIGNALED(wstatus));
}

check_report check_as_escrowd_opens(const std::string& path, const std::string& scratch) {
  check_options o;
  o.path = path;
  o.decode_branch = rm::check_branch_record;
  o.scratch = scratch;
  return check_as_opened(o);
}

bool empty_dir(const std::string& path) { return std::filesystem::is_empty(path); }

}  // namespace

TEST_SUITE("storage/check") {
  TEST_CASE("a store written through storage::store is consistent, and the counts say what it holds") {
    store_fixture f;
    check_report r = f.check();
    INFO(all(r));
    REQUIRE(r.outcome == check_report::result::consistent);
    CHECK(r.problems.empty());
    CHECK(r.schema_version == kSchemaVersion);
    CHECK(r.counts.queues == 1);
    CHECK(r.counts.durable_subscriptions == 2);
    CHECK(r.counts.entries == 6);  // 1, 2, 7 in orders; 3 twice; 4 once
    CHECK(r.counts.inline_entries == 3);
    CHECK(r.counts.messages == 2);  // 3 and 4
    CHECK(r.counts.message_refs == 1);  // 3 only: 4 has one reference left
    CHECK(r.counts.prepared_branches == 1);
    CHECK(r.counts.heuristic_branches == 1);
    CHECK(r.counts.expiries == 3);
    CHECK(r.counts.next_message_id == 8);
    CHECK(r.counts.next_queue_id == 4);
  }

  TEST_CASE("the store may be checked while it is open, and the check changes nothing in data.mdb") {
    store_fixture f;
    std::string before;
    {
      // Holds escrow.lock, as a running escrowd does. (Two environments on one directory in one
      // process: LMDB's fcntl locks on lock.mdb go with the first close; nothing else opens it here.)
      auto s = f.open();
      before = file_bytes(f.path() + "/data.mdb");
      check_report r = f.check();
      INFO(all(r));
      CHECK(r.outcome == check_report::result::consistent);
      CHECK(file_bytes(f.path() + "/data.mdb") == before);
    }
    check_report r = f.check();
    CHECK(r.outcome == check_report::result::consistent);
    CHECK(file_bytes(f.path() + "/data.mdb") == before);
  }

  TEST_CASE("what is not an Escrow store of this schema cannot be checked") {
    SUBCASE("a missing directory") {
      check_options o;
      o.path = "/nonexistent/escrow-check-test";
      check_report r = check_store(o);
      CHECK(r.outcome == check_report::result::cannot_open);
      CHECK(r.open_error.find("is not a directory") != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(o.path));
    }
    SUBCASE("a directory without data.mdb") {
      temp_dir d;
      check_options o;
      o.path = d.path();
      check_report r = check_store(o);
      CHECK(r.outcome == check_report::result::cannot_open);
      CHECK(r.open_error.find("no data.mdb") != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(d.path() + "/data.mdb"));
    }
    SUBCASE("an LMDB environment without Escrow's tables") {
      temp_dir d;
      MDB_env* env = nullptr;
      REQUIRE(mdb_env_create(&env) == 0);
      REQUIRE(mdb_env_open(env, d.path().c_str(), 0, 0644) == 0);
      MDB_txn* txn = nullptr;
      MDB_dbi dbi;
      REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
      REQUIRE(mdb_dbi_open(txn, nullptr, 0, &dbi) == 0);
      MDB_val k{3, const_cast<char*>("key")}, v{5, const_cast<char*>("value")};
      REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
      REQUIRE(mdb_txn_commit(txn) == 0);
      mdb_env_close(env);
      check_options o;
      o.path = d.path();
      check_report r = check_store(o);
      CHECK(r.outcome == check_report::result::cannot_open);
      CHECK(r.open_error.find("not an Escrow store") != std::string::npos);
    }
    SUBCASE("a newer schema version") {
      store_fixture f;
      { store_fixture::raw_edit(f.path()).put(table::meta, kSchemaVersionKey, u32(kSchemaVersion + 1)); }
      check_report r = f.check();
      CHECK(r.outcome == check_report::result::cannot_open);
      CHECK(r.open_error.find("schema version " + std::to_string(kSchemaVersion + 1)) != std::string::npos);
    }
  }

  TEST_CASE("commit decisions: counted when they decode, reported when they do not") {
    store_fixture f;
    {
      store_fixture::raw_edit e(f.path());
      e.put(table::decisions, "escrow_0011_22_1", decision_record{"shop", "alice", 5}.encode());
    }
    check_report good = f.check();
    CHECK(good.outcome == check_report::result::consistent);
    CHECK(good.counts.decisions == 1);
    { store_fixture::raw_edit(f.path()).put(table::decisions, "escrow_0011_22_2", "\x04shop"); }
    require_one(f.check(), problem_kind::undecodable, {"decisions 'escrow_0011_22_2'", "commit decision"});
  }

  TEST_CASE("a store of schema version 5, without the tables version 6 added, checks as consistent") {
    store_fixture f;
    {
      store_fixture::raw_edit e(f.path());
      for (int i = kFirstTableOfVersion6; i < kTableCount; ++i) e.drop(static_cast<table>(i));
      e.put(table::meta, kSchemaVersionKey, u32(5));
    }
    check_report r = f.check();
    CHECK(r.outcome == check_report::result::consistent);
    CHECK(r.schema_version == 5);
    CHECK(r.counts.decisions == 0);
  }

  TEST_CASE("1: a missing or malformed schema version record is reported") {
    store_fixture f;
    SUBCASE("missing") {
      { store_fixture::raw_edit(f.path()).del(table::meta, kSchemaVersionKey); }
      require_one(f.check(), problem_kind::schema, {"meta 'schema-version'", "missing"});
    }
    SUBCASE("not a u32") {
      { store_fixture::raw_edit(f.path()).put(table::meta, kSchemaVersionKey, std::string("\x00\x02", 2)); }
      require_one(f.check(), problem_kind::schema, {"meta 'schema-version'", "2 bytes"});
    }
  }

  TEST_CASE("2: a record that does not decode is reported with its table and key") {
    store_fixture f;
    SUBCASE("a queue record") {
      { store_fixture::raw_edit(f.path()).put(table::queues, "q/broken", "xy"); }
      require_one(f.check(), problem_kind::undecodable, {"queues 'q/broken'", "does not decode"});
    }
    SUBCASE("a queue key of the wrong form") {
      { store_fixture::raw_edit(f.path()).put(table::queues, "orders", queue_value(9, queue_record::kind::queue)); }
      require_one(f.check(), problem_kind::undecodable, {"queues 'orders'", "q/NAME"});
    }
    SUBCASE("a shared message record") {
      { store_fixture::raw_edit(f.path()).put(table::messages, message_key(3), "garbage"); }
      require_one(f.check(), problem_kind::undecodable, {"messages 0x0000000000000003", "does not decode"});
    }
    SUBCASE("a message stored inline in an entry") {
      { store_fixture::raw_edit(f.path()).put(table::entries, entry_key{1, 4, 7}.encode(), u32(0) + "garbage"); }
      require_one(f.check(), problem_kind::undecodable, {"entries " + printable_key(entry_key{1, 4, 7}.encode()), "inline"});
    }
    SUBCASE("an entry value shorter than its delivery count") {
      { store_fixture::raw_edit(f.path()).put(table::entries, entry_key{1, 4, 7}.encode(), "ab"); }
      require_one(f.check(), problem_kind::undecodable, {"delivery count", "2 bytes"});
    }
    SUBCASE("an entry key") {
      { store_fixture::raw_edit(f.path()).put(table::entries, "short", u32(0)); }
      require_one(f.check(), problem_kind::undecodable, {"entries 'short'", "13 bytes"});
    }
    SUBCASE("a reference count below 2") {
      { store_fixture::raw_edit(f.path()).put(table::message_refs, message_key(3), u32(1)); }
      require_one(f.check(), problem_kind::undecodable, {"message_refs 0x0000000000000003", "a reference count of 1"});
    }
    SUBCASE("an expiry key") {
      { store_fixture::raw_edit(f.path()).put(table::expiries, "nonsense", ""); }
      require_one(f.check(), problem_kind::undecodable, {"expiries 'nonsense'", "21 bytes"});
    }
    SUBCASE("next-message-id") {
      { store_fixture::raw_edit(f.path()).put(table::meta, kNextMessageIdKey, u32(8)); }
      require_one(f.check(), problem_kind::undecodable, {"meta 'next-message-id'", "u64"});
    }
  }

  TEST_CASE("3: an entry for a queue that does not exist, and two queues with one id") {
    store_fixture f;
    SUBCASE("an entry whose queue id names no queue") {
      { store_fixture::raw_edit(f.path()).put(table::entries, entry_key{9, 4, 5}.encode(), inline_entry_value(record("/queue/x"))); }
      require_one(f.check(), problem_kind::queue,
                  {"entries " + printable_key(entry_key{9, 4, 5}.encode()), "queue id 9", "no record in queues",
                   "a queue created later would inherit it"});
    }
    SUBCASE("two queue records with one id") {
      { store_fixture::raw_edit(f.path()).put(table::queues, "q/other", queue_value(1, queue_record::kind::queue)); }
      require_one(f.check(), problem_kind::queue, {"queues 'q/other'", "queue id 1 is also the id of 'q/orders'"});
    }
    SUBCASE("more than the listed number: the rest are counted") {
      {
        store_fixture::raw_edit e(f.path());
        for (std::uint32_t q = 100; q < 125; ++q) e.put(table::entries, entry_key{q, 4, 5}.encode(), inline_entry_value(record("/queue/x")));
      }
      check_report r = f.check();
      CHECK(r.found[static_cast<std::size_t>(problem_kind::queue)] == 25);
      CHECK(r.problems.size() == 20);
      REQUIRE(r.unlisted().size() == 1);
      CHECK(r.unlisted()[0] == "... and 5 more queue problems");
    }
  }

  TEST_CASE("4: reference counts equal the entries that reference a message") {
    store_fixture f;
    SUBCASE("a wrong message_refs count") {
      { store_fixture::raw_edit(f.path()).put(table::message_refs, message_key(3), u32(3)); }
      require_one(f.check(), problem_kind::reference,
                  {"message_refs 0x0000000000000003", "reference count is 3 but 2 entries reference message 3"});
    }
    SUBCASE("a second reference with no message_refs record") {
      {
        store_fixture::raw_edit e(f.path());
        e.put(table::entries, entry_key{2, 4, 4}.encode(), u32(0));
      }
      require_one(f.check(), problem_kind::reference,
                  {"messages 0x0000000000000004", "no message_refs record (one reference) but 2 entries"});
    }
    SUBCASE("an entry whose message is neither inline nor in messages") {
      { store_fixture::raw_edit(f.path()).del(table::messages, message_key(4)); }
      require_one(f.check(), problem_kind::reference,
                  {"entries " + printable_key(entry_key{3, 4, 4}.encode()), "neither stored inline", "nor in messages"});
    }
    SUBCASE("a message that no entry references") {
      { store_fixture::raw_edit(f.path()).put(table::messages, message_key(5), record("/queue/orders").encode()); }
      require_one(f.check(), problem_kind::reference, {"messages 0x0000000000000005", "referenced by no entry"});
    }
    SUBCASE("a reference count for a message that is not stored") {
      { store_fixture::raw_edit(f.path()).put(table::message_refs, message_key(5), u32(2)); }
      require_one(f.check(), problem_kind::reference, {"message_refs 0x0000000000000005", "not in messages"});
    }
  }

  TEST_CASE("5: the expiry index matches the entries") {
    store_fixture f;
    SUBCASE("a missing expiry record of an inline message") {
      { store_fixture::raw_edit(f.path()).del(table::expiries, expiry_key(kExpiresA, {1, 4, 2})); }
      require_one(f.check(), problem_kind::expiry,
                  {"entries " + printable_key(entry_key{1, 4, 2}.encode()), "expires at " + std::to_string(kExpiresA),
                   "no record"});
    }
    SUBCASE("a missing expiry record of a shared message") {
      { store_fixture::raw_edit(f.path()).del(table::expiries, expiry_key(kExpiresB, {3, 4, 3})); }
      require_one(f.check(), problem_kind::expiry, {"entries " + printable_key(entry_key{3, 4, 3}.encode()), "no record"});
    }
    SUBCASE("an expiry record for an entry that is gone") {
      { store_fixture::raw_edit(f.path()).put(table::expiries, expiry_key(kExpiresA, {1, 4, 5}), ""); }
      require_one(f.check(), problem_kind::expiry, {"expiries 0x", "not in entries"});
    }
    SUBCASE("an expiry record for an entry whose message never expires") {
      { store_fixture::raw_edit(f.path()).put(table::expiries, expiry_key(kExpiresA, {1, 4, 7}), ""); }
      require_one(f.check(), problem_kind::expiry, {"expires at 0 (never), not at " + std::to_string(kExpiresA)});
    }
  }

  TEST_CASE("6: prepared branch records decode and name queues and entries that exist") {
    store_fixture f;
    SUBCASE("a garbage record") {
      { store_fixture::raw_edit(f.path()).put(table::branches, kPrepared.encode(), "garbage"); }
      require_one(f.check(), problem_kind::branch, {"branches 0x", "of xid " + kPrepared.to_string() + " does not decode"});
    }
    SUBCASE("a record with bytes after its end") {
      { store_fixture::raw_edit(f.path()).put(table::branches, kPrepared.encode(), rm::encode_record(prepared_branch()) + "x"); }
      require_one(f.check(), problem_kind::branch, {"does not decode"});
    }
    SUBCASE("a key that is not an xid") {
      {
        store_fixture::raw_edit e(f.path());
        e.del(table::branches, kPrepared.encode());
        e.put(table::branches, "xid?", rm::encode_record(prepared_branch()));
      }
      require_one(f.check(), problem_kind::branch, {"branches 'xid?'", "not a branch key"});
    }
    SUBCASE("a send to a queue that does not exist") {
      rm::branch b = prepared_branch();
      b.work.sends[0].targets[0].key.queue_id = 50;
      { store_fixture::raw_edit(f.path()).put(table::branches, kPrepared.encode(), rm::encode_record(b)); }
      require_one(f.check(), problem_kind::branch, {"branch " + kPrepared.to_string(), "its commit would write", "queue id 50"});
    }
    SUBCASE("a send whose entry is stored already") {
      rm::branch b = prepared_branch();
      b.work.sends[0].targets[0].key.message_id = 7;
      { store_fixture::raw_edit(f.path()).put(table::branches, kPrepared.encode(), rm::encode_record(b)); }
      require_one(f.check(), problem_kind::branch, {"in entries already", "message id 7 used twice"});
    }
    SUBCASE("a consumed entry that is gone") {
      { store_fixture::raw_edit(f.path()).del(table::entries, entry_key{1, 4, 1}.encode()); }
      require_one(f.check(), problem_kind::branch,
                  {"it consumed entry " + printable_key(entry_key{1, 4, 1}.encode()), "not in entries"});
    }
    SUBCASE("a consumed entry of a queue that does not exist") {
      rm::branch b = prepared_branch();
      b.work.consumed[0].key.queue_id = 3000;
      { store_fixture::raw_edit(f.path()).put(table::branches, kPrepared.encode(), rm::encode_record(b)); }
      require_one(f.check(), problem_kind::branch, {"it consumed entry", "queue id 3000"});
    }
  }

  TEST_CASE("7: no id in use at or above the next id escrowd would hand out") {
    store_fixture f;
    SUBCASE("next-message-id below an inline entry's message id") {
      { store_fixture::raw_edit(f.path()).put(table::meta, kNextMessageIdKey, u64(3)); }
      check_report r = f.check();
      // Raised past messages (4) and the prepared branch's send (6), not past entries: 7.
      CHECK(r.counts.next_message_id == 7);
      require_one(r, problem_kind::next_id,
                  {"entries " + printable_key(entry_key{1, 4, 7}.encode()), "message id 7 is not below 7", "holds 3"});
    }
    SUBCASE("next-message-id missing while an inline entry needs it") {
      { store_fixture::raw_edit(f.path()).del(table::meta, kNextMessageIdKey); }
      require_one(f.check(), problem_kind::next_id, {"message id 7", "is missing"});
    }
    SUBCASE("a low or missing record that escrowd recovers from is no problem") {
      {
        store_fixture::raw_edit e(f.path());
        e.del(table::entries, entry_key{1, 4, 7}.encode());  // the newest inline message
        e.del(table::meta, kNextMessageIdKey);
        e.put(table::meta, kNextQueueIdKey, u32(1));
      }
      check_report r = f.check();
      INFO(all(r));
      CHECK(r.outcome == check_report::result::consistent);
      CHECK(r.counts.next_message_id == 7);  // past the branch's message 6
      CHECK(r.counts.next_queue_id == 4);    // past every queue record
    }
  }

  TEST_CASE("8: each remembered duplicate id has its order record and each order record its id") {
    store_fixture f;
    {
      // Written as the broker writes them (put_duplicate_id), the oldest of orders evicted by erasing both.
      auto s = f.open();
      batch b;
      for (std::uint64_t seq = 1; seq <= 4; ++seq) put_duplicate_id(b, "/queue/orders", "o-" + std::to_string(seq), seq);
      put_duplicate_id(b, "/topic/orders", "o-1", 1);  // another address: the same id is another record
      b.erase(table::duplicate_order, duplicate_order_key("/queue/orders", 1));
      b.erase(table::duplicate_ids, duplicate_id_key("/queue/orders", "o-1"));
      store_fixture::apply(*s, std::move(b));
    }
    SUBCASE("consistent, and counted") {
      check_report r = f.check();
      INFO(all(r));
      CHECK(r.outcome == check_report::result::consistent);
      CHECK(r.counts.duplicate_ids == 4);
      CHECK(r.counts.duplicate_addresses == 2);
    }
    SUBCASE("an id without its order record") {
      { store_fixture::raw_edit(f.path()).del(table::duplicate_order, duplicate_order_key("/queue/orders", 3)); }
      require_one(f.check(), problem_kind::reference,
                  {"duplicate_ids " + printable_key(duplicate_id_key("/queue/orders", "o-3")), "'o-3'", "number 3",
                   "is missing", "never be evicted"});
    }
    SUBCASE("an order record without its id") {
      { store_fixture::raw_edit(f.path()).del(table::duplicate_ids, duplicate_id_key("/queue/orders", "o-2")); }
      require_one(f.check(), problem_kind::reference,
                  {"duplicate_order " + printable_key(duplicate_order_key("/queue/orders", 2)), "number 2", "'o-2'",
                   "is missing"});
    }
    SUBCASE("an id whose number is another's place") {
      {
        store_fixture::raw_edit e(f.path());
        e.put(table::duplicate_ids, duplicate_id_key("/queue/orders", "o-4"), encode_duplicate_sequence(3));
      }
      check_report r = f.check();
      INFO(all(r));
      // o-4 says 3, whose place names o-3; place 4 names o-4, which says 3.
      CHECK(r.found[static_cast<std::size_t>(problem_kind::reference)] == 2);
      CHECK(r.total_found() == 2);
    }
    SUBCASE("records that do not decode") {
      {
        store_fixture::raw_edit e(f.path());
        e.put(table::duplicate_ids, duplicate_id_key("/queue/orders", "o-9"), "short");
        e.put(table::duplicate_order, "nonsense", "o-9");
      }
      check_report r = f.check();
      INFO(all(r));
      CHECK(r.found[static_cast<std::size_t>(problem_kind::undecodable)] == 2);
      CHECK(r.total_found() == 2);
      CHECK(all(r).find("duplicate_order 'nonsense'") != std::string::npos);
    }
  }
}

TEST_SUITE("storage/check as escrowd opens it") {
  TEST_CASE("a store not closed cleanly is checked on a recovered copy; the store is left as it was") {
    store_fixture f;
    add_then_die(f.path(), 5);
    const std::string data = file_bytes(f.path() + "/data.mdb"), log = file_bytes(f.path() + "/log");
    temp_dir scratch;
    check_report r = check_as_escrowd_opens(f.path(), scratch.path());
    INFO(all(r));
    REQUIRE(r.outcome == check_report::result::consistent);
    CHECK(r.recovery.found == recovery_report::state::recovered);
    CHECK(r.recovery.latest_commit == r.recovery.checkpoint + 5);
    CHECK(r.recovery.set_aside == 5);
    CHECK(r.recovery.replayed == 5);
    CHECK(r.counts.entries == 6 + 5);
    CHECK(r.counts.next_message_id == 13);
    // Nothing of the copy is left, and neither file of the store changed.
    CHECK(empty_dir(scratch.path()));
    CHECK(file_bytes(f.path() + "/data.mdb") == data);
    CHECK(file_bytes(f.path() + "/log") == log);
    // What escrowd then opens holds what the check counted.
    auto s = f.open();
    std::string ignored;
    for (std::uint64_t id = 8; id < 13; ++id) CHECK(s->get(table::entries, entry_key{1, 4, id}.encode(), ignored).ok());
  }

  TEST_CASE("torn commits after the checkpoint, which recovery sets aside, are not what is checked") {
    store_fixture f;
    add_then_die(f.path(), 3);
    // What a power cut can leave of the unsynced commits: the latest meta page's main tree pointing
    // at a page that holds nothing of it (commit_log_test.cpp does the same to the store).
    lmdb_metas metas;
    REQUIRE(read_lmdb_metas(f.path() + "/data.mdb", metas).ok());
    {
      std::fstream file(f.path() + "/data.mdb", std::ios::in | std::ios::out | std::ios::binary);
      std::uint64_t root_at = static_cast<std::uint64_t>(metas.latest_page) * metas.page_size + 16 + 24 + 48 + 40;
      file.seekp(static_cast<std::streamoff>(root_at));
      std::uint64_t bogus = 3;
      file.write(reinterpret_cast<const char*>(&bogus), sizeof bogus);
    }
    const std::string data = file_bytes(f.path() + "/data.mdb");
    CHECK(f.check().outcome != check_report::result::consistent);  // LMDB as the crash left it
    temp_dir scratch;
    check_report r = check_as_escrowd_opens(f.path(), scratch.path());
    INFO(all(r));
    CHECK(r.outcome == check_report::result::consistent);
    CHECK(r.recovery.found == recovery_report::state::recovered);
    CHECK(r.recovery.replayed == 3);
    CHECK(r.counts.entries == 6 + 3);
    CHECK(file_bytes(f.path() + "/data.mdb") == data);
    CHECK(empty_dir(scratch.path()));
  }

  TEST_CASE("a store closed cleanly is checked as it is, and one open in escrowd live") {
    store_fixture f;
    temp_dir scratch;
    check_report r = check_as_escrowd_opens(f.path(), scratch.path());
    CHECK(r.outcome == check_report::result::consistent);
    CHECK(r.recovery.found == recovery_report::state::as_is);
    {
      auto s = f.open();  // holds escrow.lock, as escrowd does
      r = check_as_escrowd_opens(f.path(), scratch.path());
      CHECK(r.outcome == check_report::result::consistent);
      CHECK(r.recovery.found == recovery_report::state::in_use);
    }
    CHECK(empty_dir(scratch.path()));
  }

  TEST_CASE("a start that died before its replay was committed leaves records to replay: a copy replays them") {
    if (!fault_injection_compiled()) return;
    store_fixture f;
    add_then_die(f.path(), 4);
    // The next start sets LMDB back to the checkpoint and dies applying the first record.
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      store_options o;
      o.path = f.path();
      o.map_size = 64ull << 20;
      std::string error;
      if (!fault_plan::parse("replay:1:kill", o.faults, error)) _exit(4);
      std::unique_ptr<store> s;
      (void)store::open(o, s);
      _exit(1);
    }
    int wstatus = 0;
    REQUIRE(waitpid(pid, &wstatus, 0) == pid);
    REQUIRE(WIFSIGNALED(wstatus));
    temp_dir scratch;
    check_report r = check_as_escrowd_opens(f.path(), scratch.path());
    INFO(all(r));
    CHECK(r.outcome == check_report::result::consistent);
    CHECK(r.recovery.found == recovery_report::state::recovered);
    CHECK(r.recovery.set_aside == 0);
    CHECK(r.recovery.latest_commit == r.recovery.checkpoint);
    CHECK(r.recovery.replayed == 4);
    CHECK(r.counts.entries == 6 + 4);
  }

  TEST_CASE("what escrowd's recovery refuses, the check reports, naming the store and not the copy") {
    store_fixture f;
    add_then_die(f.path(), 2);
    {
      // A log whose checkpoint is later than data.mdb's latest commit: the disk lost writes.
      std::unique_ptr<commit_log> log;
      REQUIRE(commit_log::open(f.path(), log).ok());
      commit_log::control c = log->current();
      REQUIRE(log->set_checkpoint(c.checkpoint + 100, c.checkpoint_meta).ok());
    }
    temp_dir scratch;
    check_report r = check_as_escrowd_opens(f.path(), scratch.path());
    INFO(r.open_error);
    CHECK(r.outcome == check_report::result::unrecoverable);
    CHECK(r.open_error.find(f.path() + "/data.mdb holds LMDB commit") != std::string::npos);
    CHECK(r.open_error.find(scratch.path()) == std::string::npos);
    CHECK(empty_dir(scratch.path()));
  }

  TEST_CASE("the copy is not made inside the data directory") {
    store_fixture f;
    add_then_die(f.path(), 1);
    check_report r = check_as_escrowd_opens(f.path(), f.path());
    CHECK(r.outcome == check_report::result::cannot_open);
    CHECK(r.open_error.find("--scratch") != std::string::npos);
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(f.path())) ++files;
    CHECK(files == 4);  // data.mdb, lock.mdb, escrow.lock, log
  }
}
