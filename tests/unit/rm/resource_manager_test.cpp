// The resource manager driven as the broker drives it, without a broker: XA calls from numbered
// connections, the storage write of each reply "completed" with finish() (status{} is a durable
// write; a store is opened only where durability itself is tested, for load()), recover scans,
// operator heuristics, dropped connections, timeouts and local transactions.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "escrow/rm/record.h"
#include "escrow/rm/resource_manager.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "escrow/xa.h"
#include "../temp_dir.h"

using namespace escrow;
using namespace escrow::rm;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t c1 = 1, c2 = 2, c3 = 3, c4 = 4;

xid make_xid(int n) { return xid(0x1234, "global-" + std::to_string(n), "branch"); }

bool is_rollback_code(int code) { return code >= XA_RBBASE && code <= XA_RBEND; }

storage::status failed_write() { return {storage::status::code::io_error, "disk on fire (test)"}; }

storage::message_ptr make_message(std::uint64_t id) {
  auto m = std::make_shared<storage::message>();
  m->id = id;
  m->record.destination = "/queue/q" + std::to_string(id);
  m->record.body = "body " + std::to_string(id);
  return m;
}

// One send to `targets` queues (all stored) and one stored consumed entry: enough for every
// write path (messages, entries, refs, releases) to have something to do.
void add_work(branch& b, std::uint64_t message_id, std::uint32_t targets = 1) {
  staged_send s{make_message(message_id), {}};
  for (std::uint32_t q = 0; q < targets; ++q) s.targets.push_back({{10 + q, 4, message_id}, true});
  b.work.sends.push_back(std::move(s));
  b.work.consumed.push_back({{20, 4, message_id + 1000}, 2, true, false, nullptr});
}

// A call whose reply needs no write, or whose write the test pretends succeeded.
resource_manager::reply call(resource_manager& rm, xa_verb verb, std::uint64_t conn, const xid& x,
                             long flags = TMNOFLAGS) {
  return rm.call(verb, conn, x, flags);
}

// A call carried through to the end: when the reply wrote something (the branch is busy until
// finish), the write is finished as durable. Returns the final code.
int complete(resource_manager& rm, xa_verb verb, std::uint64_t conn, const xid& x, long flags = TMNOFLAGS) {
  auto r = rm.call(verb, conn, x, flags);
  if (r.target && r.target->busy) return rm.finish(r, storage::status{});
  return r.code;
}

int complete(resource_manager& rm, resource_manager::reply& r) {
  REQUIRE(r.target);
  REQUIRE(r.target->busy);
  return rm.finish(r, storage::status{});
}

branch_ptr find(const resource_manager& rm, const xid& x, const std::string& owner = {}) {
  auto it = rm.branches().find(branch_id{owner, x});
  return it == rm.branches().end() ? nullptr : it->second;
}

branch_state state_of(const resource_manager& rm, const xid& x) {
  auto b = find(rm, x);
  return b ? b->state : branch_state::none;
}

// start, some work, end: an idle branch ready for prepare.
branch_ptr idle_branch(resource_manager& rm, std::uint64_t conn, const xid& x, std::uint64_t message_id) {
  REQUIRE(complete(rm, xa_verb::start, conn, x) == XA_OK);
  auto b = rm.associated_branch(conn);
  REQUIRE(b);
  add_work(*b, message_id);
  REQUIRE(complete(rm, xa_verb::end, conn, x, TMSUCCESS) == XA_OK);
  REQUIRE(b->state == branch_state::idle);
  return b;
}

branch_ptr prepared_branch(resource_manager& rm, std::uint64_t conn, const xid& x, std::uint64_t message_id) {
  auto b = idle_branch(rm, conn, x, message_id);
  REQUIRE(complete(rm, xa_verb::prepare, conn, x) == XA_OK);
  REQUIRE(b->state == branch_state::prepared);
  return b;
}

struct op_record {
  storage::batch::op op;
  storage::table table;
  std::string key;
  std::string value;
};

std::vector<op_record> ops(const storage::batch& b) {
  std::vector<op_record> out;
  bool ok = storage::batch::decode(b.rep(), [&](storage::batch::op op, storage::table t, std::string_view k,
                                                std::string_view v) {
    out.push_back({op, t, std::string(k), std::string(v)});
  });
  REQUIRE(ok);
  return out;
}

const op_record* find_op(const std::vector<op_record>& all, storage::batch::op op, storage::table t,
                         const std::string& key) {
  for (const auto& o : all)
    if (o.op == op && o.table == t && o.key == key) return &o;
  return nullptr;
}

bool touches_branches(const std::vector<op_record>& all) {
  for (const auto& o : all)
    if (o.table == storage::table::branches) return true;
  return false;
}

// What a test can compare before and after a call that must change nothing.
std::map<branch_id, std::pair<branch_state, std::set<std::uint64_t>>> snapshot(const resource_manager& rm) {
  std::map<branch_id, std::pair<branch_state, std::set<std::uint64_t>>> out;
  for (const auto& [id, b] : rm.branches()) {
    auto who = b->associated;
    who.insert(b->suspended.begin(), b->suspended.end());
    out[id] = {b->state, who};
  }
  return out;
}

std::unique_ptr<storage::store> open_store(const std::string& path) {
  storage::store_options options;
  options.path = path;
  options.map_size = 64ull << 20;
  std::unique_ptr<storage::store> s;
  storage::status st = storage::store::open(options, s);
  INFO(st.message());
  REQUIRE(st.ok());
  return s;
}

// Submits a reply's write to a real store, waits for it to be durable, then finishes the reply.
int submit_and_finish(resource_manager& rm, storage::store& store, resource_manager::reply& r) {
  auto done = std::make_shared<std::promise<storage::status>>();
  auto f = done->get_future();
  store.submit(r.write, [done](storage::status st) { done->set_value(std::move(st)); });
  storage::status st = f.get();
  INFO(st.message());
  REQUIRE(st.ok());
  return rm.finish(r, st);
}

bool stored(const storage::store& s, storage::table t, const std::string& key) {
  std::string value;
  return s.get(t, key, value).ok();
}

}  // namespace

TEST_SUITE("rm/resource_manager") {
  TEST_CASE("two-phase: start, end, prepare, commit") {
    resource_manager rm(1h);
    xid x = make_xid(1);

    auto r = call(rm, xa_verb::start, c1, x);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::create);
    CHECK(r.write.empty());  // nothing durable happens at start
    auto b = rm.associated_branch(c1);
    REQUIRE(b);
    CHECK(b == r.target);
    CHECK(b->id == x);
    CHECK(b->state == branch_state::active);
    add_work(*b, 7, 2);

    CHECK(complete(rm, xa_verb::end, c1, x, TMSUCCESS) == XA_OK);
    CHECK(b->state == branch_state::idle);
    CHECK(rm.associated_branch(c1) == nullptr);

    // Prepare writes the branch's whole work under its xid; XA_OK only once that is durable.
    r = call(rm, xa_verb::prepare, c2, x);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::prepare);
    auto written = ops(r.write);
    auto* record = find_op(written, storage::batch::op::put, storage::table::branches, x.encode());
    REQUIRE(record);
    branch decoded;
    REQUIRE(decode_record(record->value, decoded));
    CHECK(decoded.state == branch_state::prepared);
    CHECK(decoded.work.sends.size() == 1);
    CHECK(decoded.work.consumed.size() == 1);
    CHECK(b->state == branch_state::idle);  // not prepared until the write is durable
    CHECK(complete(rm, r) == XA_OK);
    CHECK(b->state == branch_state::prepared);
    CHECK(b->busy == false);

    // Commit from yet another connection (recovery may come from anywhere).
    r = call(rm, xa_verb::commit, c3, x);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::commit_prepared);
    REQUIRE(r.work.sends.size() == 1);
    CHECK(r.work.sends[0].msg->id == 7);
    CHECK(r.work.consumed.size() == 1);
    written = ops(r.write);
    // The sends become stored entries on both queues, the message is written once with a
    // reference count of two, the consumed entry goes, and the prepared record is deleted.
    CHECK(find_op(written, storage::batch::op::put, storage::table::entries, storage::entry_key{10, 4, 7}.encode()));
    CHECK(find_op(written, storage::batch::op::put, storage::table::entries, storage::entry_key{11, 4, 7}.encode()));
    CHECK(find_op(written, storage::batch::op::put, storage::table::messages, storage::message_key(7)));
    CHECK(find_op(written, storage::batch::op::put, storage::table::message_refs, storage::message_key(7)));
    // remove_entry: the entry goes, and its message with it (inline, or its last reference).
    CHECK(find_op(written, storage::batch::op::remove_entry, storage::table::entries,
                  storage::entry_key{20, 4, 1007}.encode()));
    CHECK(find_op(written, storage::batch::op::erase, storage::table::branches, x.encode()));
    CHECK(find(rm, x) != nullptr);  // still there until durable
    CHECK(complete(rm, r) == XA_OK);
    CHECK(find(rm, x) == nullptr);

    // Gone: the manager's retry of the commit hears XAER_NOTA.
    CHECK(complete(rm, xa_verb::commit, c3, x) == XAER_NOTA);
  }

  TEST_CASE("one-phase commit writes no prepared record") {
    resource_manager rm(1h);
    xid x = make_xid(2);
    auto b = idle_branch(rm, c1, x, 9);
    auto r = call(rm, xa_verb::commit, c1, x, TMONEPHASE);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::commit_one_phase);
    auto written = ops(r.write);
    CHECK(find_op(written, storage::batch::op::put, storage::table::entries, storage::entry_key{10, 4, 9}.encode()));
    CHECK_FALSE(touches_branches(written));
    CHECK(r.work.sends.size() == 1);
    CHECK(complete(rm, r) == XA_OK);
    CHECK(find(rm, x) == nullptr);
  }

  TEST_CASE("one-phase commit of a prepared branch is refused") {
    resource_manager rm(1h);
    xid x = make_xid(3);
    prepared_branch(rm, c1, x, 3);
    CHECK(complete(rm, xa_verb::commit, c1, x, TMONEPHASE) == XAER_PROTO);
    CHECK(state_of(rm, x) == branch_state::prepared);
  }

  TEST_CASE("read-only: a branch that did nothing answers XA_RDONLY and is forgotten") {
    resource_manager rm(1h);
    xid x = make_xid(4);
    REQUIRE(complete(rm, xa_verb::start, c1, x) == XA_OK);
    REQUIRE(complete(rm, xa_verb::end, c1, x, TMSUCCESS) == XA_OK);
    auto r = call(rm, xa_verb::prepare, c1, x);
    CHECK(r.code == XA_RDONLY);
    CHECK(r.act == action::read_only);
    CHECK(r.write.empty());  // nothing to make durable
    CHECK(find(rm, x) == nullptr);
    // The manager sends no commit; if it did, the branch is unknown.
    CHECK(complete(rm, xa_verb::commit, c1, x) == XAER_NOTA);
    // And the xid may be used again.
    CHECK(complete(rm, xa_verb::start, c1, x) == XA_OK);
  }

  TEST_CASE("join across two connections: idle only when both have ended") {
    resource_manager rm(1h);
    xid x = make_xid(5);
    REQUIRE(complete(rm, xa_verb::start, c1, x) == XA_OK);
    // A second start without TMJOIN is a duplicate.
    CHECK(complete(rm, xa_verb::start, c2, x) == XAER_DUPID);
    auto r = call(rm, xa_verb::start, c2, x, TMJOIN);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::join);
    auto b = find(rm, x);
    REQUIRE(b);
    CHECK(rm.associated_branch(c1) == b);
    CHECK(rm.associated_branch(c2) == b);
    add_work(*rm.associated_branch(c2), 50);

    CHECK(complete(rm, xa_verb::end, c1, x, TMSUCCESS) == XA_OK);
    CHECK(b->state == branch_state::active);  // c2 is still working in it
    CHECK(rm.associated_branch(c1) == nullptr);
    CHECK(complete(rm, xa_verb::prepare, c3, x) == XAER_PROTO);
    CHECK(complete(rm, xa_verb::end, c2, x, TMSUCCESS) == XA_OK);
    CHECK(b->state == branch_state::idle);

    // A connection may join an idle branch again (a later request of the same transaction).
    CHECK(complete(rm, xa_verb::start, c3, x, TMJOIN) == XA_OK);
    CHECK(b->state == branch_state::active);
    CHECK(complete(rm, xa_verb::end, c3, x, TMSUCCESS) == XA_OK);
    CHECK(complete(rm, xa_verb::prepare, c3, x) == XA_OK);
    CHECK(b->state == branch_state::prepared);
    // A prepared branch cannot be joined.
    CHECK(complete(rm, xa_verb::start, c1, x, TMJOIN) == XAER_PROTO);
  }

  TEST_CASE("suspend and resume") {
    resource_manager rm(1h);
    xid x = make_xid(6);
    REQUIRE(complete(rm, xa_verb::start, c1, x) == XA_OK);
    auto b = find(rm, x);
    auto r = call(rm, xa_verb::end, c1, x, TMSUSPEND);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::suspend);
    CHECK(rm.associated_branch(c1) == nullptr);  // its frames no longer belong to the branch
    CHECK(b->state == branch_state::active);      // but the branch is not finished
    CHECK(b->suspended.count(c1) == 1);
    // Not idle: it cannot be prepared, and only the suspending connection may resume it.
    CHECK(complete(rm, xa_verb::prepare, c2, x) == XAER_PROTO);
    CHECK(complete(rm, xa_verb::start, c2, x, TMRESUME) == XAER_PROTO);
    // Suspending twice is a protocol error.
    CHECK(complete(rm, xa_verb::end, c1, x, TMSUSPEND) == XAER_PROTO);

    r = call(rm, xa_verb::start, c1, x, TMRESUME);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::resume);
    CHECK(rm.associated_branch(c1) == b);
    CHECK(b->suspended.empty());

    // Suspend again, then end the suspended association directly (T2 -> T0).
    CHECK(complete(rm, xa_verb::end, c1, x, TMSUSPEND) == XA_OK);
    CHECK(complete(rm, xa_verb::end, c1, x, TMSUCCESS) == XA_OK);
    CHECK(b->state == branch_state::idle);
    CHECK(b->suspended.empty());
    CHECK(complete(rm, xa_verb::start, c1, x, TMRESUME) == XAER_PROTO);
  }

  TEST_CASE("end TMFAIL, then prepare answers XA_RB* and rolls back") {
    resource_manager rm(1h);
    xid x = make_xid(7);
    REQUIRE(complete(rm, xa_verb::start, c1, x) == XA_OK);
    add_work(*rm.associated_branch(c1), 70);
    int ended = complete(rm, xa_verb::end, c1, x, TMFAIL);
    CHECK((ended == XA_OK || is_rollback_code(ended)));
    CHECK(state_of(rm, x) == branch_state::rollback_only);
    CHECK(rm.associated_branch(c1) == nullptr);

    auto r = call(rm, xa_verb::prepare, c1, x);
    CHECK(is_rollback_code(r.code));
    CHECK(r.act == action::roll_back);
    // The consumed entry goes back to its queue, one delivery more.
    auto written = ops(r.write);
    auto* back = find_op(written, storage::batch::op::set_delivery_count, storage::table::entries,
                         storage::entry_key{20, 4, 1070}.encode());
    REQUIRE(back);
    CHECK(storage::decode_delivery_count(back->value) == 3);
    CHECK(r.work.consumed.size() == 1);
    CHECK(is_rollback_code(complete(rm, r)));
    CHECK(find(rm, x) == nullptr);
    CHECK(complete(rm, xa_verb::rollback, c1, x) == XAER_NOTA);
  }

  TEST_CASE("a failed write answers XAER_RMFAIL and gives the work back") {
    resource_manager rm(1h);
    xid x = make_xid(8);
    auto b = idle_branch(rm, c1, x, 80);

    // prepare fails: still idle, not busy, the manager may try again.
    auto r = call(rm, xa_verb::prepare, c1, x);
    REQUIRE(r.code == XA_OK);
    CHECK(rm.finish(r, failed_write()) == XAER_RMFAIL);
    CHECK(b->state == branch_state::idle);
    CHECK_FALSE(b->busy);
    CHECK(b->work.sends.size() == 1);

    // one-phase commit fails: the work, moved into the reply, comes back.
    r = call(rm, xa_verb::commit, c1, x, TMONEPHASE);
    REQUIRE(r.code == XA_OK);
    CHECK(b->work.empty());  // the reply holds it while the write is in flight
    CHECK(rm.finish(r, failed_write()) == XAER_RMFAIL);
    CHECK(b->state == branch_state::idle);
    REQUIRE(b->work.sends.size() == 1);
    CHECK(b->work.sends[0].msg->id == 80);
    CHECK(b->work.consumed.size() == 1);
    CHECK(find(rm, x) == b);

    // prepared, then a failed commit: still prepared, with its work, and listed by recover.
    REQUIRE(complete(rm, xa_verb::prepare, c1, x) == XA_OK);
    r = call(rm, xa_verb::commit, c1, x);
    REQUIRE(r.code == XA_OK);
    CHECK(rm.finish(r, failed_write()) == XAER_RMFAIL);
    CHECK(b->state == branch_state::prepared);
    CHECK(b->work.sends.size() == 1);
    std::vector<xid> listed;
    CHECK(rm.recover(c1, 10, TMSTARTRSCAN | TMENDRSCAN, listed) == 1);

    // A failed rollback likewise.
    r = call(rm, xa_verb::rollback, c1, x);
    REQUIRE(r.code == XA_OK);
    CHECK(rm.finish(r, failed_write()) == XAER_RMFAIL);
    CHECK(b->state == branch_state::prepared);
    CHECK(b->work.consumed.size() == 1);

    // The retry succeeds.
    CHECK(complete(rm, xa_verb::commit, c1, x) == XA_OK);
    CHECK(find(rm, x) == nullptr);
  }

  TEST_CASE("a branch with a write in flight answers XAER_PROTO") {
    resource_manager rm(1h);
    xid x = make_xid(9);
    idle_branch(rm, c1, x, 90);
    auto r = call(rm, xa_verb::prepare, c1, x);
    REQUIRE(r.code == XA_OK);
    auto before = snapshot(rm);
    for (auto verb : {xa_verb::prepare, xa_verb::commit, xa_verb::rollback, xa_verb::forget})
      CHECK(call(rm, verb, c2, x).code == XAER_PROTO);
    CHECK(call(rm, xa_verb::commit, c2, x, TMONEPHASE).code == XAER_PROTO);
    CHECK(call(rm, xa_verb::start, c2, x, TMJOIN).code == XAER_PROTO);
    CHECK(rm.heuristic(x, true).code == XAER_PROTO);
    CHECK(snapshot(rm) == before);
    CHECK(complete(rm, r) == XA_OK);
    CHECK(state_of(rm, x) == branch_state::prepared);
  }

  TEST_CASE("recover scans in pages") {
    resource_manager rm(1h);
    std::set<xid> prepared;
    for (int i = 0; i < 5; ++i) {
      prepared.insert(make_xid(100 + i));
      prepared_branch(rm, c1, make_xid(100 + i), 100 + static_cast<std::uint64_t>(i));
    }
    // Not listed: an idle branch, an active one and a local transaction.
    idle_branch(rm, c2, make_xid(200), 200);
    REQUIRE(complete(rm, xa_verb::start, c3, make_xid(201)) == XA_OK);
    rm.begin_local(c4);
    REQUIRE(rm.branches().size() == 8);

    std::vector<xid> out;
    CHECK(rm.recover(c1, 2, TMSTARTRSCAN, out) == 2);
    CHECK(out.size() == 2);
    CHECK(rm.recover(c1, 2, TMNOFLAGS, out) == 2);
    CHECK(rm.recover(c1, 2, TMNOFLAGS, out) == 1);  // fewer than count: the scan is done
    CHECK(rm.recover(c1, 2, TMNOFLAGS, out) == 0);
    CHECK(rm.recover(c1, 2, TMENDRSCAN, out) == 0);
    CHECK(std::set<xid>(out.begin(), out.end()) == prepared);
    CHECK(out.size() == 5);  // each once
    // The scan is closed: continuing it is a protocol error.
    CHECK(rm.recover(c1, 2, TMNOFLAGS, out) == XAER_PROTO);

    // Ending a scan in the middle.
    out.clear();
    CHECK(rm.recover(c1, 3, TMSTARTRSCAN, out) == 3);
    CHECK(rm.recover(c1, 1, TMENDRSCAN, out) == 1);
    CHECK(rm.recover(c1, 1, TMNOFLAGS, out) == XAER_PROTO);

    // Scans belong to their connection.
    out.clear();
    CHECK(rm.recover(c2, 4, TMSTARTRSCAN, out) == 4);
    CHECK(rm.recover(c3, 4, TMNOFLAGS, out) == XAER_PROTO);
    CHECK(rm.recover(c2, 4, TMNOFLAGS | TMENDRSCAN, out) == 1);
  }

  TEST_CASE("recover: one-call scan, closing without a scan, bad arguments") {
    resource_manager rm(1h);
    std::vector<xid> out;
    // TMNOFLAGS without an open scan.
    CHECK(rm.recover(c1, 10, TMNOFLAGS, out) == XAER_PROTO);
    // Nothing prepared: a scan finds nothing.
    CHECK(rm.recover(c1, 10, TMSTARTRSCAN | TMENDRSCAN, out) == 0);
    for (int i = 0; i < 3; ++i) prepared_branch(rm, c1, make_xid(300 + i), 300 + static_cast<std::uint64_t>(i));
    CHECK(rm.recover(c1, 10, TMSTARTRSCAN | TMENDRSCAN, out) == 3);
    CHECK(out.size() == 3);
    // Both flags closed the scan.
    CHECK(rm.recover(c1, 10, TMNOFLAGS, out) == XAER_PROTO);
    // count 0 with TMENDRSCAN alone only closes (managers do this); no scan needs to be open.
    CHECK(rm.recover(c1, 0, TMENDRSCAN, out) == 0);
    CHECK(rm.recover(c1, 0, TMSTARTRSCAN, out) == 0);
    CHECK(rm.recover(c1, 0, TMENDRSCAN, out) == 0);
    CHECK(out.size() == 3);
    // Flags that are no scan flags, and a negative count.
    CHECK(rm.recover(c1, 10, TMJOIN, out) == XAER_INVAL);
    CHECK(rm.recover(c1, 10, TMSTARTRSCAN | TMONEPHASE, out) == XAER_INVAL);
    CHECK(rm.recover(c1, -1, TMSTARTRSCAN, out) == XAER_INVAL);
    CHECK(out.size() == 3);
  }

  TEST_CASE("heuristic commit, then the manager's commit and rollback answer XA_HEURCOM until forget") {
    resource_manager rm(1h);
    xid x = make_xid(10);
    prepared_branch(rm, c1, x, 110);
    auto r = rm.heuristic(x, true);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::heuristic_commit);
    auto written = ops(r.write);
    // The work is applied (the send becomes an entry) and the outcome is recorded under the xid.
    CHECK(find_op(written, storage::batch::op::put, storage::table::entries, storage::entry_key{10, 4, 110}.encode()));
    auto* record = find_op(written, storage::batch::op::put, storage::table::branches, x.encode());
    REQUIRE(record);
    branch decoded;
    REQUIRE(decode_record(record->value, decoded));
    CHECK(decoded.state == branch_state::heuristic_committed);
    CHECK(decoded.work.empty());  // applied already: it must not be applied twice
    CHECK(r.work.sends.size() == 1);
    CHECK(complete(rm, r) == XA_OK);
    CHECK(state_of(rm, x) == branch_state::heuristic_committed);

    // Listed by recover: the manager must learn about it.
    std::vector<xid> out;
    CHECK(rm.recover(c2, 10, TMSTARTRSCAN | TMENDRSCAN, out) == 1);
    CHECK(out == std::vector<xid>{x});

    CHECK(complete(rm, xa_verb::commit, c2, x) == XA_HEURCOM);
    CHECK(complete(rm, xa_verb::rollback, c2, x) == XA_HEURCOM);
    CHECK(complete(rm, xa_verb::prepare, c2, x) == XAER_PROTO);
    CHECK(state_of(rm, x) == branch_state::heuristic_committed);  // still there

    r = call(rm, xa_verb::forget, c2, x);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::forget);
    CHECK(find_op(ops(r.write), storage::batch::op::erase, storage::table::branches, x.encode()));
    CHECK(complete(rm, r) == XA_OK);
    CHECK(find(rm, x) == nullptr);
    CHECK(complete(rm, xa_verb::forget, c2, x) == XAER_NOTA);
    CHECK(complete(rm, xa_verb::commit, c2, x) == XAER_NOTA);
  }

  TEST_CASE("heuristic rollback, then commit and rollback answer XA_HEURRB until forget") {
    resource_manager rm(1h);
    xid x = make_xid(11);
    prepared_branch(rm, c1, x, 111);
    auto r = rm.heuristic(x, false);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::heuristic_rollback);
    auto written = ops(r.write);
    // The consumed entry returns to its queue; nothing of the send is written.
    CHECK(find_op(written, storage::batch::op::set_delivery_count, storage::table::entries,
                  storage::entry_key{20, 4, 1111}.encode()));
    CHECK_FALSE(find_op(written, storage::batch::op::put, storage::table::entries, storage::entry_key{10, 4, 111}.encode()));
    CHECK(complete(rm, r) == XA_OK);
    CHECK(state_of(rm, x) == branch_state::heuristic_rolled_back);
    CHECK(complete(rm, xa_verb::commit, c1, x) == XA_HEURRB);
    CHECK(complete(rm, xa_verb::rollback, c1, x) == XA_HEURRB);
    // A second heuristic decision is refused: the branch is no longer prepared.
    CHECK(rm.heuristic(x, true).code == XAER_PROTO);
    CHECK(complete(rm, xa_verb::forget, c1, x) == XA_OK);
    CHECK(find(rm, x) == nullptr);
  }

  TEST_CASE("a failed heuristic write leaves the branch prepared with its work") {
    resource_manager rm(1h);
    xid x = make_xid(12);
    auto b = prepared_branch(rm, c1, x, 112);
    auto r = rm.heuristic(x, true);
    REQUIRE(r.code == XA_OK);
    CHECK(rm.finish(r, failed_write()) == XAER_RMFAIL);
    CHECK(b->state == branch_state::prepared);
    CHECK(b->work.sends.size() == 1);
    CHECK_FALSE(b->busy);
  }

  TEST_CASE("heuristic of a branch that is not prepared, or unknown") {
    resource_manager rm(1h);
    xid idle = make_xid(13), active = make_xid(14);
    idle_branch(rm, c1, idle, 113);
    REQUIRE(complete(rm, xa_verb::start, c2, active) == XA_OK);
    auto r = rm.heuristic(idle, true);
    CHECK(r.code == XAER_PROTO);
    CHECK(r.write.empty());
    CHECK(rm.heuristic(active, false).code == XAER_PROTO);
    CHECK(rm.heuristic(make_xid(15), true).code == XAER_NOTA);
    CHECK(state_of(rm, idle) == branch_state::idle);
    CHECK(state_of(rm, active) == branch_state::active);
    CHECK_FALSE(find(rm, idle)->busy);
  }

  TEST_CASE("a dropped connection marks its associated branch rollback-only, nothing else") {
    resource_manager rm(1h);
    xid active = make_xid(20), idle = make_xid(21), prepared = make_xid(22), suspended = make_xid(23),
        joined = make_xid(24);
    // c1 worked in `idle` and `prepared` and ended them, and is now associated with `active`.
    idle_branch(rm, c1, idle, 121);
    prepared_branch(rm, c1, prepared, 122);
    REQUIRE(complete(rm, xa_verb::start, c1, active) == XA_OK);
    REQUIRE(complete(rm, xa_verb::start, c2, suspended) == XA_OK);
    REQUIRE(complete(rm, xa_verb::end, c2, suspended, TMSUSPEND) == XA_OK);
    REQUIRE(complete(rm, xa_verb::start, c3, joined) == XA_OK);
    REQUIRE(complete(rm, xa_verb::start, c4, joined, TMJOIN) == XA_OK);
    std::vector<xid> scan;
    REQUIRE(rm.recover(c1, 0, TMSTARTRSCAN, scan) == 0);

    rm.connection_closed(c1);
    CHECK(state_of(rm, active) == branch_state::rollback_only);
    CHECK(rm.associated_branch(c1) == nullptr);
    CHECK(find(rm, active)->associated.empty());
    CHECK(state_of(rm, idle) == branch_state::idle);
    CHECK(state_of(rm, prepared) == branch_state::prepared);
    // Its recover scan went with it.
    CHECK(rm.recover(c1, 10, TMNOFLAGS, scan) == XAER_PROTO);
    // Untouched: the other connections' branches.
    CHECK(state_of(rm, suspended) == branch_state::active);
    CHECK(state_of(rm, joined) == branch_state::active);

    // A suspended association counts as associated.
    rm.connection_closed(c2);
    CHECK(state_of(rm, suspended) == branch_state::rollback_only);
    CHECK(find(rm, suspended)->suspended.empty());

    // One of two joined connections drops: the branch is rollback-only, the other is told so at
    // its end, and the manager's rollback completes it.
    rm.connection_closed(c3);
    CHECK(state_of(rm, joined) == branch_state::rollback_only);
    CHECK(rm.associated_branch(c4) == find(rm, joined));
    CHECK(is_rollback_code(complete(rm, xa_verb::end, c4, joined, TMSUCCESS)));
    CHECK(rm.associated_branch(c4) == nullptr);
    CHECK(complete(rm, xa_verb::commit, c4, joined) == XAER_PROTO);  // never prepared
    CHECK(is_rollback_code(complete(rm, xa_verb::prepare, c4, joined)));
    CHECK(find(rm, joined) == nullptr);

    // The manager may still finish the idle and prepared branches from a new connection.
    CHECK(complete(rm, xa_verb::commit, c3, prepared) == XA_OK);
    CHECK(complete(rm, xa_verb::commit, c3, idle, TMONEPHASE) == XA_OK);
    int rolled = complete(rm, xa_verb::rollback, c3, active);
    CHECK((rolled == XA_OK || is_rollback_code(rolled)));
    CHECK(rm.branches().size() == 1);  // only `suspended` is left
  }

  TEST_CASE("expire rolls back active and idle branches past their deadline") {
    resource_manager rm(1ms);
    xid active = make_xid(30), idle = make_xid(31), prepared = make_xid(32), failed = make_xid(33);
    REQUIRE(complete(rm, xa_verb::start, c1, active) == XA_OK);
    add_work(*rm.associated_branch(c1), 130);
    idle_branch(rm, c2, idle, 131);
    prepared_branch(rm, c2, prepared, 132);
    REQUIRE(complete(rm, xa_verb::start, c3, failed) == XA_OK);
    REQUIRE(complete(rm, xa_verb::end, c3, failed, TMFAIL) >= 0);
    auto local = rm.begin_local(c4);
    add_work(*local, 134);
    auto later = std::chrono::steady_clock::now() + 1h;

    auto replies = rm.expire(later);
    std::set<xid> expired;
    for (auto& r : replies) {
      REQUIRE(r.target);
      CHECK(r.code == XA_RBTIMEOUT);
      CHECK(r.act == action::time_out);
      expired.insert(r.target->id);
    }
    CHECK(expired == std::set<xid>{active, idle, failed});
    // The rollback returns consumed entries; a timed-out branch has no prepared record.
    for (auto& r : replies) {
      auto written = ops(r.write);
      CHECK_FALSE(touches_branches(written));
      if (r.target->id == active)
        CHECK(find_op(written, storage::batch::op::set_delivery_count, storage::table::entries,
                      storage::entry_key{20, 4, 1130}.encode()));
    }
    // A second pass while the writes are in flight does not roll them back twice.
    CHECK(rm.expire(later).empty());
    for (auto& r : replies) CHECK(complete(rm, r) == XA_RBTIMEOUT);
    CHECK(state_of(rm, active) == branch_state::rolled_back);
    CHECK(state_of(rm, idle) == branch_state::rolled_back);
    CHECK(state_of(rm, prepared) == branch_state::prepared);
    CHECK(find(rm, local->id) == local);

    // The manager's next calls hear XA_RBTIMEOUT.
    auto r = call(rm, xa_verb::end, c1, active, TMSUCCESS);
    CHECK(r.code == XA_RBTIMEOUT);
    CHECK(rm.associated_branch(c1) == nullptr);
    CHECK(complete(rm, xa_verb::rollback, c1, active) == XA_RBTIMEOUT);
    CHECK(find(rm, active) == nullptr);  // told once, then forgotten
    CHECK(complete(rm, xa_verb::prepare, c2, idle) == XA_RBTIMEOUT);
    CHECK(find(rm, idle) == nullptr);
    // A two-phase commit of a branch that was never prepared is a protocol error, not XA_RB*.
    CHECK(complete(rm, xa_verb::commit, c3, failed) == XAER_PROTO);
    CHECK(state_of(rm, failed) == branch_state::rolled_back);

    // Nobody asked about `failed` for another timeout: it is dropped.
    CHECK(rm.expire(later + 1h).empty());
    CHECK(find(rm, failed) == nullptr);
    CHECK(complete(rm, xa_verb::commit, c3, failed, TMONEPHASE) == XAER_NOTA);
    CHECK(state_of(rm, prepared) == branch_state::prepared);
    CHECK(find(rm, local->id) == local);
  }

  TEST_CASE("expire leaves branches inside their deadline alone") {
    resource_manager rm(1h);
    xid x = make_xid(34);
    REQUIRE(complete(rm, xa_verb::start, c1, x) == XA_OK);
    CHECK(rm.expire(std::chrono::steady_clock::now()).empty());
    CHECK(state_of(rm, x) == branch_state::active);
    CHECK(rm.expire(std::chrono::steady_clock::now() + 2h).size() == 1);
  }

  TEST_CASE("rollback and forget of an unknown xid answer XAER_NOTA and touch nothing") {
    resource_manager rm(1h);
    REQUIRE(complete(rm, xa_verb::start, c1, make_xid(40)) == XA_OK);
    idle_branch(rm, c2, make_xid(41), 141);
    prepared_branch(rm, c2, make_xid(42), 142);
    prepared_branch(rm, c2, make_xid(43), 143);
    REQUIRE(complete(rm, xa_verb::start, c3, make_xid(44)) == XA_OK);
    REQUIRE(complete(rm, xa_verb::end, c3, make_xid(44), TMSUSPEND) == XA_OK);
    REQUIRE(rm.heuristic(make_xid(43), false).code == XA_OK);  // left in flight on purpose
    auto before = snapshot(rm);
    auto associated = rm.associated_branch(c1);

    xid unknown = make_xid(99);
    for (auto conn : {c1, c2, c3, c4}) {
      auto r = call(rm, xa_verb::rollback, conn, unknown);
      CHECK(r.code == XAER_NOTA);
      CHECK(r.write.empty());
      CHECK(r.target == nullptr);
      CHECK(call(rm, xa_verb::forget, conn, unknown).code == XAER_NOTA);
      CHECK(call(rm, xa_verb::commit, conn, unknown).code == XAER_NOTA);
      CHECK(call(rm, xa_verb::prepare, conn, unknown).code == XAER_NOTA);
      CHECK(call(rm, xa_verb::end, conn, unknown, TMSUCCESS).code == XAER_NOTA);
      CHECK(call(rm, xa_verb::start, conn, unknown, TMJOIN).code == XAER_NOTA);
      CHECK(call(rm, xa_verb::start, conn, unknown, TMRESUME).code == XAER_NOTA);
    }
    CHECK(snapshot(rm) == before);
    CHECK(rm.associated_branch(c1) == associated);
    CHECK(find(rm, unknown) == nullptr);
  }

  TEST_CASE("local transactions: idle, never associated, never listed, committed in one phase") {
    resource_manager rm(1h);
    auto a = rm.begin_local(c1);
    auto b = rm.begin_local(c1);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->id != b->id);
    CHECK(a->id.format_id() == kLocalFormatId);
    CHECK(a->local);
    CHECK(a->state == branch_state::idle);
    CHECK(rm.associated_branch(c1) == nullptr);
    CHECK(find(rm, a->id) == a);
    add_work(*a, 150);

    std::vector<xid> out;
    CHECK(rm.recover(c1, 10, TMSTARTRSCAN | TMENDRSCAN, out) == 0);

    auto r = call(rm, xa_verb::commit, c1, a->id, TMONEPHASE);
    CHECK(r.code == XA_OK);
    CHECK(r.act == action::commit_one_phase);
    CHECK_FALSE(touches_branches(ops(r.write)));
    CHECK(complete(rm, r) == XA_OK);
    CHECK(find(rm, a->id) == nullptr);
    // ABORT: a rollback.
    CHECK(complete(rm, xa_verb::rollback, c1, b->id) == XA_OK);
    CHECK(rm.branches().empty());
  }

  TEST_CASE("a local transaction open past its timeout is rolled back by expire, and then gone") {
    resource_manager rm(1h, 10min);
    auto a = rm.begin_local(c1, "alice");
    add_work(*a, 190);
    auto now = std::chrono::steady_clock::now();
    CHECK(rm.expire(now + 9min).empty());
    auto expired = rm.expire(now + 11min);
    REQUIRE(expired.size() == 1);
    auto& r = expired.front();
    CHECK(r.target == a);
    CHECK(r.act == action::roll_back);
    CHECK(r.code == XA_RBTIMEOUT);
    CHECK_FALSE(r.work.empty());  // the consumed entries go back to their queues
    CHECK(rm.expire(now + 12min).empty());  // busy meanwhile: not twice
    CHECK(rm.finish(r, storage::status{}) == XA_RBTIMEOUT);
    CHECK(rm.branches().empty());
    CHECK(rm.count("alice", {branch_state::idle}) == 0);
  }

  TEST_CASE("a branch the broker marks rollback-only answers XA_RB* and rolls back, local or XA") {
    // Queue limits (broker/core/address_limits.cpp): a SEND to a full queue makes its transaction
    // rollback-only.
    resource_manager rm(1h, 10min);
    auto local = rm.begin_local(c1);
    add_work(*local, 300);
    rm.mark_rollback_only(*local);
    CHECK(local->state == branch_state::rollback_only);
    auto r = call(rm, xa_verb::commit, c1, local->id, TMONEPHASE);
    CHECK(r.code == XA_RBROLLBACK);
    CHECK(r.act == action::roll_back);
    CHECK_FALSE(r.work.empty());  // what it consumed goes back
    CHECK(complete(rm, r) == XA_RBROLLBACK);
    CHECK(find(rm, local->id) == nullptr);
    // A rollback-only local transaction still times out.
    auto late = rm.begin_local(c1);
    rm.mark_rollback_only(*late);
    auto expired = rm.expire(std::chrono::steady_clock::now() + 11min);
    REQUIRE(expired.size() == 1);
    CHECK(expired.front().target == late);
    CHECK(rm.finish(expired.front(), storage::status{}) == XA_RBTIMEOUT);

    xid x = make_xid(301);
    REQUIRE(complete(rm, xa_verb::start, c2, x) == XA_OK);
    add_work(*rm.associated_branch(c2), 302);
    rm.mark_rollback_only(*rm.associated_branch(c2));
    CHECK(state_of(rm, x) == branch_state::rollback_only);
    CHECK(complete(rm, xa_verb::end, c2, x, TMSUCCESS) == XA_RBROLLBACK);
    r = call(rm, xa_verb::prepare, c2, x);
    CHECK(is_rollback_code(r.code));
    CHECK(complete(rm, r) == XA_RBROLLBACK);
    CHECK(find(rm, x) == nullptr);
    // A prepared branch is past it: unchanged.
    auto p = prepared_branch(rm, c3, make_xid(303), 303);
    rm.mark_rollback_only(*p);
    CHECK(p->state == branch_state::prepared);
  }

  TEST_CASE("rewrite builds a prepare's record or a one-phase commit's write from the work as it is now") {
    resource_manager rm(1h);
    xid x = make_xid(310);
    auto b = idle_branch(rm, c1, x, 310);
    add_work(*b, 311);
    auto r = call(rm, xa_verb::prepare, c1, x);
    REQUIRE(r.act == action::prepare);
    b->work.sends.pop_back();  // a full DROP queue took no copy of it
    rm.rewrite(r);
    branch decoded;
    auto all = ops(r.write);
    REQUIRE(all.size() == 1);
    REQUIRE(decode_record(all.front().value, decoded));
    CHECK(decoded.work.sends.size() == b->work.sends.size());
    CHECK(complete(rm, r) == XA_OK);

    xid y = make_xid(312);
    auto c = idle_branch(rm, c2, y, 312);
    r = call(rm, xa_verb::commit, c2, y, TMONEPHASE);
    REQUIRE(r.act == action::commit_one_phase);
    std::string entry = storage::entry_key{10, 4, 312}.encode();
    CHECK(find_op(ops(r.write), storage::batch::op::put, storage::table::entries, entry) != nullptr);
    r.work.sends.front().targets.clear();
    rm.rewrite(r);
    CHECK(find_op(ops(r.write), storage::batch::op::put, storage::table::entries, entry) == nullptr);
    CHECK(complete(rm, r) == XA_OK);
  }

  TEST_CASE("count follows each user's branches through their states") {
    resource_manager rm(1h);
    const caller alice{"alice"};
    xid x = make_xid(91), y = make_xid(92);
    auto open = [&] { return rm.count("alice", {branch_state::active, branch_state::idle, branch_state::rollback_only}); };
    REQUIRE(rm.call(xa_verb::start, c1, x, TMNOFLAGS, alice).code == XA_OK);
    auto local = rm.begin_local(c2, "alice");
    CHECK(open() == 2);
    CHECK(rm.count("bob", {branch_state::active, branch_state::idle}) == 0);
    add_work(*rm.associated_branch(c1), 191);
    REQUIRE(rm.call(xa_verb::end, c1, x, TMSUCCESS, alice).code == XA_OK);
    auto r = rm.call(xa_verb::prepare, c1, x, TMNOFLAGS, alice);
    REQUIRE(rm.finish(r, storage::status{}) == XA_OK);
    CHECK(open() == 1);
    CHECK(rm.count("alice", {branch_state::prepared}) == 1);
    REQUIRE(rm.call(xa_verb::start, c3, y, TMNOFLAGS, alice).code == XA_OK);
    rm.connection_closed(c3);  // active -> rollback-only: still open
    CHECK(open() == 2);
    r = rm.call(xa_verb::commit, c1, x, TMNOFLAGS, alice);
    REQUIRE(rm.finish(r, storage::status{}) == XA_OK);
    CHECK(rm.count("alice", {branch_state::prepared}) == 0);
    r = rm.call(xa_verb::rollback, c2, local->id, TMNOFLAGS, caller{"alice"});
    REQUIRE(rm.finish(r, storage::status{}) == XA_OK);
    r = rm.call(xa_verb::rollback, c1, y, TMNOFLAGS, alice);
    REQUIRE(rm.finish(r, storage::status{}) == XA_OK);
    CHECK(open() == 0);
  }

  TEST_CASE("load rebuilds prepared branches and heuristic outcomes from the store") {
    testing::temp_dir dir;
    xid prepared = make_xid(60), committed = make_xid(61), rolled_back = make_xid(62), done = make_xid(63);
    {
      auto store = open_store(dir.path());
      resource_manager rm(1h);
      const xid all[] = {prepared, committed, rolled_back, done};
      for (std::uint64_t i = 0; i < 4; ++i) {
        idle_branch(rm, c1, all[i], 160 + i);
        auto r = call(rm, xa_verb::prepare, c1, all[i]);
        REQUIRE(r.code == XA_OK);
        REQUIRE(submit_and_finish(rm, *store, r) == XA_OK);
      }
      auto r = rm.heuristic(committed, true);
      REQUIRE(submit_and_finish(rm, *store, r) == XA_OK);
      r = rm.heuristic(rolled_back, false);
      REQUIRE(submit_and_finish(rm, *store, r) == XA_OK);
      r = call(rm, xa_verb::commit, c1, done);  // committed: its record is gone
      REQUIRE(submit_and_finish(rm, *store, r) == XA_OK);
      CHECK(stored(*store, storage::table::entries, storage::entry_key{10, 4, 161}.encode()));  // heuristic commit
      CHECK(stored(*store, storage::table::entries, storage::entry_key{10, 4, 163}.encode()));  // commit
      CHECK_FALSE(stored(*store, storage::table::entries, storage::entry_key{10, 4, 160}.encode()));  // prepared
    }

    auto store = open_store(dir.path());
    resource_manager rm(1h);
    storage::status st = rm.load(*store);
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(rm.branches().size() == 3);
    auto p = find(rm, prepared);
    REQUIRE(p);
    CHECK(p->id == prepared);
    CHECK(p->state == branch_state::prepared);
    REQUIRE(p->work.sends.size() == 1);
    CHECK(p->work.sends[0].msg->id == 160);
    CHECK(p->work.sends[0].msg->record.body == "body 160");
    REQUIRE(p->work.sends[0].targets.size() == 1);
    CHECK(p->work.sends[0].targets[0].key == storage::entry_key{10, 4, 160});
    CHECK(p->work.sends[0].targets[0].stored);
    REQUIRE(p->work.consumed.size() == 1);
    CHECK(p->work.consumed[0].key == storage::entry_key{20, 4, 1160});
    CHECK(p->work.consumed[0].delivery_count == 2);
    CHECK(state_of(rm, committed) == branch_state::heuristic_committed);
    CHECK(state_of(rm, rolled_back) == branch_state::heuristic_rolled_back);
    CHECK(find(rm, done) == nullptr);
    CHECK(rm.max_staged_message_id() == 160);
    // Nobody is associated with a rebuilt branch, and a prepared one never times out.
    CHECK(p->associated.empty());
    CHECK(rm.expire(std::chrono::steady_clock::now() + 24h).empty());

    std::vector<xid> out;
    CHECK(rm.recover(c2, 10, TMSTARTRSCAN | TMENDRSCAN, out) == 3);

    // The manager finishes recovery on the rebuilt state.
    CHECK(complete(rm, xa_verb::commit, c2, committed) == XA_HEURCOM);
    CHECK(complete(rm, xa_verb::rollback, c2, rolled_back) == XA_HEURRB);
    auto r = call(rm, xa_verb::commit, c2, prepared);
    REQUIRE(r.code == XA_OK);
    CHECK(submit_and_finish(rm, *store, r) == XA_OK);
    CHECK(stored(*store, storage::table::entries, storage::entry_key{10, 4, 160}.encode()));
    CHECK_FALSE(stored(*store, storage::table::branches, prepared.encode()));
    r = call(rm, xa_verb::forget, c2, committed);
    REQUIRE(r.code == XA_OK);
    CHECK(submit_and_finish(rm, *store, r) == XA_OK);
    CHECK_FALSE(stored(*store, storage::table::branches, committed.encode()));
    CHECK(stored(*store, storage::table::branches, rolled_back.encode()));
  }

  TEST_CASE("a branch exists only for its owner: to another user its xid is unknown") {
    resource_manager rm(1h);
    const caller alice{"alice"}, bob{"bob"}, admin{"ops", true};
    xid x = make_xid(80);
    auto owned = [&](xa_verb v, std::uint64_t conn, const caller& who, long flags = TMNOFLAGS) {
      auto r = rm.call(v, conn, x, flags, who);
      if (r.target && r.target->busy) return rm.finish(r, storage::status{});
      return r.code;
    };
    REQUIRE(owned(xa_verb::start, c1, alice) == XA_OK);
    REQUIRE(find(rm, x, "alice"));
    add_work(*find(rm, x, "alice"), 180);
    auto before = snapshot(rm);
    // Joining, resuming, ending, preparing, committing, rolling back, forgetting: all as for an
    // xid that does not exist, and nothing changes.
    CHECK(owned(xa_verb::start, c2, bob, TMJOIN) == XAER_NOTA);
    CHECK(owned(xa_verb::start, c2, bob, TMRESUME) == XAER_NOTA);
    CHECK(owned(xa_verb::end, c2, bob, TMSUCCESS) == XAER_NOTA);
    CHECK(owned(xa_verb::end, c2, bob, TMFAIL) == XAER_NOTA);
    CHECK(owned(xa_verb::prepare, c2, bob) == XAER_NOTA);
    CHECK(owned(xa_verb::commit, c2, bob, TMONEPHASE) == XAER_NOTA);
    CHECK(owned(xa_verb::rollback, c2, bob) == XAER_NOTA);
    CHECK(owned(xa_verb::forget, c2, bob) == XAER_NOTA);
    // An admin may not touch a branch that is not prepared either.
    CHECK(owned(xa_verb::rollback, c2, admin) == XAER_NOTA);
    CHECK(owned(xa_verb::commit, c2, admin, TMONEPHASE) == XAER_NOTA);
    CHECK(snapshot(rm) == before);

    // Bob's start of the same xid makes a branch of his own, which alice cannot reach either.
    REQUIRE(owned(xa_verb::start, c2, bob) == XA_OK);
    REQUIRE(find(rm, x, "bob"));
    CHECK(find(rm, x, "bob") != find(rm, x, "alice"));
    REQUIRE(owned(xa_verb::end, c2, bob, TMSUCCESS) == XA_OK);
    CHECK(owned(xa_verb::prepare, c1, alice) == XAER_PROTO);  // hers is still active (she is associated)
    REQUIRE(owned(xa_verb::end, c1, alice, TMSUCCESS) == XA_OK);
    REQUIRE(owned(xa_verb::prepare, c1, alice) == XA_OK);
    CHECK(find(rm, x, "alice")->state == branch_state::prepared);
    CHECK(find(rm, x, "bob")->state == branch_state::idle);

    // Recovery: each user sees their own prepared xids, an admin every user's.
    std::vector<xid> out;
    CHECK(rm.recover(c2, 10, TMSTARTRSCAN | TMENDRSCAN, out, bob) == 0);
    CHECK(rm.recover(c1, 10, TMSTARTRSCAN | TMENDRSCAN, out, alice) == 1);
    out.clear();
    CHECK(rm.recover(c3, 10, TMSTARTRSCAN | TMENDRSCAN, out, admin) == 1);
    CHECK(out == std::vector<xid>{x});

    // An admin commits alice's prepared branch (bob's idle one is not a candidate).
    auto r = rm.call(xa_verb::commit, c3, x, TMNOFLAGS, admin);
    REQUIRE(r.code == XA_OK);
    CHECK(r.target == find(rm, x, "alice"));
    REQUIRE_FALSE(r.write.empty());
    CHECK(find_op(ops(r.write), storage::batch::op::erase, storage::table::branches, branch_key("alice", x)));
    CHECK(rm.finish(r, storage::status{}) == XA_OK);
    CHECK_FALSE(find(rm, x, "alice"));
    CHECK(find(rm, x, "bob"));
  }

  TEST_CASE("an admin's xid that names prepared branches of two users answers XAER_RMERR") {
    resource_manager rm(1h);
    const caller alice{"alice"}, bob{"bob"}, admin{"ops", true};
    xid x = make_xid(81);
    for (const caller* who : {&alice, &bob}) {
      std::uint64_t conn = who == &alice ? c1 : c2;
      REQUIRE(rm.call(xa_verb::start, conn, x, TMNOFLAGS, *who).code == XA_OK);
      add_work(*rm.associated_branch(conn), who == &alice ? 181 : 182);
      REQUIRE(rm.call(xa_verb::end, conn, x, TMSUCCESS, *who).code == XA_OK);
      auto r = rm.call(xa_verb::prepare, conn, x, TMNOFLAGS, *who);
      REQUIRE(rm.finish(r, storage::status{}) == XA_OK);
    }
    auto before = snapshot(rm);
    auto r = rm.call(xa_verb::commit, c3, x, TMNOFLAGS, admin);
    CHECK(r.code == XAER_RMERR);
    CHECK(r.problem.find("2 users") != std::string::npos);
    CHECK(r.write.empty());
    CHECK(snapshot(rm) == before);
    std::vector<xid> out;
    CHECK(rm.recover(c3, 10, TMSTARTRSCAN | TMENDRSCAN, out, admin) == 1);  // the xid once
    CHECK(rm.find_all(x).size() == 2);
    // The operator names the owner.
    auto h = rm.heuristic(x, false, "bob");
    REQUIRE(h.code == XA_OK);
    CHECK(h.target == find(rm, x, "bob"));
  }

  TEST_CASE("branch keys: an owner's key cannot be read as an xid, and both forms round-trip") {
    xid x = make_xid(82);
    std::string owner;
    xid back;
    REQUIRE(decode_branch_key(branch_key("", x), owner, back));
    CHECK(owner.empty());
    CHECK(back == x);
    CHECK(branch_key("", x) == x.encode());  // stores from before owners read as they were
    REQUIRE(decode_branch_key(branch_key("alice", x), owner, back));
    CHECK(owner == "alice");
    CHECK(back == x);
    CHECK_FALSE(xid::decode(branch_key("alice", x)));
    const std::string owned(5, '\0');
    CHECK_FALSE(decode_branch_key(owned + std::string(1, '\0') + x.encode(), owner, back));  // empty owner
    CHECK_FALSE(decode_branch_key(owned + std::string("\x05") + "ali", owner, back));       // cut short
    // Owner-less keys of any formatID read as they are, even those whose first byte is 'u' or 0.
    for (std::int64_t format : {std::int64_t{-184549376}, std::int64_t{-2147483647} - 1, std::int64_t{-2}}) {
      xid odd(format, "g", "b");
      CAPTURE(format);
      REQUIRE(decode_branch_key(branch_key("", odd), owner, back));
      CHECK(owner.empty());
      CHECK(back == odd);
      REQUIRE(decode_branch_key(branch_key("alice", odd), owner, back));
      CHECK(owner == "alice");
      CHECK(back == odd);
    }
  }

  TEST_CASE("load gives a rebuilt branch its owner") {
    testing::temp_dir dir;
    xid x = make_xid(83);
    {
      auto store = open_store(dir.path());
      resource_manager rm(1h);
      const caller alice{"alice"};
      REQUIRE(rm.call(xa_verb::start, c1, x, TMNOFLAGS, alice).code == XA_OK);
      add_work(*rm.associated_branch(c1), 183);
      REQUIRE(rm.call(xa_verb::end, c1, x, TMSUCCESS, alice).code == XA_OK);
      auto r = rm.call(xa_verb::prepare, c1, x, TMNOFLAGS, alice);
      REQUIRE(submit_and_finish(rm, *store, r) == XA_OK);
      CHECK(stored(*store, storage::table::branches, branch_key("alice", x)));
    }
    auto store = open_store(dir.path());
    resource_manager rm(1h);
    REQUIRE(rm.load(*store).ok());
    auto b = find(rm, x, "alice");
    REQUIRE(b);
    CHECK(b->owner == "alice");
    CHECK(b->state == branch_state::prepared);
    CHECK_FALSE(find(rm, x));
    CHECK(rm.call(xa_verb::commit, c2, x, TMNOFLAGS, caller{"bob"}).code == XAER_NOTA);
    auto r = rm.call(xa_verb::commit, c2, x, TMNOFLAGS, caller{"alice"});
    CHECK(r.code == XA_OK);
    CHECK(submit_and_finish(rm, *store, r) == XA_OK);
    CHECK_FALSE(stored(*store, storage::table::branches, branch_key("alice", x)));
  }

  TEST_CASE("load refuses an unreadable record") {
    testing::temp_dir dir;
    {
      auto store = open_store(dir.path());
      storage::batch b;
      b.put(storage::table::branches, make_xid(70).encode(), "not a record");
      auto done = std::make_shared<std::promise<storage::status>>();
      auto f = done->get_future();
      store->submit(std::move(b), [done](storage::status st) { done->set_value(std::move(st)); });
      REQUIRE(f.get().ok());
    }
    auto store = open_store(dir.path());
    resource_manager rm(1h);
    storage::status st = rm.load(*store);
    CHECK_FALSE(st.ok());
    CHECK(st.which() == storage::status::code::corrupt);
    // The message names the table, the key (hex: an xid key is binary), the xid and what to do.
    CHECK(st.message().find("branches table") != std::string::npos);
    CHECK(st.message().find(storage::printable_key(make_xid(70).encode())) != std::string::npos);
    CHECK(st.message().find(make_xid(70).to_string()) != std::string::npos);
    CHECK(st.message().find("restore the data directory from a backup") != std::string::npos);
  }

  TEST_CASE("load refuses a key that is not an xid") {
    testing::temp_dir dir;
    {
      auto store = open_store(dir.path());
      storage::batch b;
      b.put(storage::table::branches, std::string("\x80\0\0\0", 4), "x");  // too short for an xid
      auto done = std::make_shared<std::promise<storage::status>>();
      auto f = done->get_future();
      store->submit(std::move(b), [done](storage::status st) { done->set_value(std::move(st)); });
      REQUIRE(f.get().ok());
    }
    auto store = open_store(dir.path());
    resource_manager rm(1h);
    storage::status st = rm.load(*store);
    CHECK(st.which() == storage::status::code::corrupt);
    CHECK(st.message().find("key 0x80000000: the key is not a branch key") != std::string::npos);
  }
}
