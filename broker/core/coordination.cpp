// Coordinated PostgreSQL transactions (docs/exactly-once.md): a STOMP local transaction begun with
// `coordinate:postgresql/NAME` gets a gid; the client's SQL ends with PREPARE TRANSACTION 'gid';
// at COMMIT the broker checks the gid is prepared, commits the transaction's sends and acks in one
// batch that also records the decision (the decision is that commit record), runs COMMIT PREPARED,
// and answers. Everything else rolls both sides back. Recovery needs nobody: every pass lists the
// database's prepared gids of this broker, commits the decided ones and rolls back the rest that
// no live transaction holds (presumed abort).
//
// The PostgreSQL statements run on the coordinator's own threads (broker/coordinator); their
// answers come back here, to the core strand, by post.
#include <spdlog/spdlog.h>

#include <csignal>
#include <set>

#include "core.h"
#include "core_timers.h"
#include "escrow/broker/security/names.h"
#include "escrow/common/hex.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/fault_injection.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"
#include "escrow/xa.h"

namespace escrow::broker {
namespace {

using coordinator::pg_answer;
constexpr std::string_view kPostgresPrefix = "postgresql/";

std::string hex64(std::uint64_t v) {
  std::string bytes;
  storage::put_u64(bytes, v);
  std::string out;
  hex::append(out, bytes.data(), bytes.size());
  return out;
}

// ESCROW_FAULTS' decided and db_committed points (test builds only): SIGKILL there.
storage::fault_plan& coordination_faults() {
  static storage::fault_plan plan = [] {
    storage::fault_plan p;
#ifdef ESCROW_FAULT_INJECTION
    std::string error;
    if (const char* spec = std::getenv("ESCROW_FAULTS"); spec && *spec) (void)storage::fault_plan::parse(spec, p, error);
#endif
    return p;
  }();
  return plan;
}
void fault_point(storage::fault_plan::point p) {
#ifdef ESCROW_FAULT_INJECTION
  if (coordination_faults().next(p) == storage::fault_plan::fault::kill) raise(SIGKILL);
#else
  (void)p;
#endif
}

// At most one warning per database and kind every 30 s: a database down for an hour logs 120 lines.
bool warn_now(const std::string& key) {
  static std::map<std::string, std::chrono::steady_clock::time_point> last;
  auto now = std::chrono::steady_clock::now();
  auto& t = last[key];
  if (t != std::chrono::steady_clock::time_point{} && now - t < std::chrono::seconds(30)) return false;
  t = now;
  return true;
}

}  // namespace

storage::status broker::impl::load_coordination() {
  std::string id_bytes;
  if (storage::status s = store.get(storage::table::meta, storage::kStoreIdKey, id_bytes); !s.ok()) {
    if (s.which() != storage::status::code::not_found) return s;
  }
  std::uint64_t store_id = 0;
  std::string_view id_view = id_bytes;
  if (!id_bytes.empty() && !storage::get_u64(id_view, store_id))
    return storage::corrupt_record(storage::table::meta, storage::kStoreIdKey, "the store id is a u64 (8 bytes)");
  coordination.prefix = "escrow_" + hex64(store_id) + "_";
  coordination.incarnation = hex64(random());
  storage::status bad;
  storage::status s = store.scan(storage::table::decisions, "", "", [&](std::string_view k, std::string_view v) {
    storage::decision_record d;
    if (!storage::decision_record::decode(v, d)) {
      bad = storage::corrupt_record(storage::table::decisions, k, "not a commit decision (database, owner, time)");
      return false;
    }
    coordination.decisions.emplace(std::string(k), coordination_part::decision{std::move(d), 0, false});
    return true;
  });
  if (!s.ok()) return s;
  if (!bad.ok()) return bad;
  for (const auto& d : config.coordinated_databases) {
    if (std::string problem = coordinator::pg_database::conninfo_problem(d.conninfo); !problem.empty())
      return {storage::status::code::failed, d.where + ".conninfo: libpq cannot read it: " + problem};
    coordinator::pg_options o;
    o.name = d.name;
    o.conninfo = d.conninfo;
    o.connections = config.coordinator_connections;
    o.statement_timeout = std::chrono::milliseconds(config.coordinator_statement_timeout_ms);
    coordination.databases[d.name].pg = std::make_unique<coordinator::pg_database>(std::move(o));
  }
  for (const auto& [gid, d] : coordination.decisions)
    if (!coordination.databases.count(d.record.database))
      spdlog::error("coordinator: pg-gid {} was committed here but its database '{}' is no longer configured: "
                    "add its [[coordinator.postgresql]] table again so that escrowd can run COMMIT PREPARED there",
                    gid, loggable(d.record.database));
  if (!coordination.databases.empty() || !coordination.decisions.empty())
    spdlog::info("coordinator: {} database(s), {} decision(s) to finish; this broker's gids start with {}",
                 coordination.databases.size(), coordination.decisions.size(), coordination.prefix);
  return {};
}

void broker::impl::stop_coordination() {
  for (auto& [name, d] : coordination.databases)
    if (d.pg) d.pg->stop();
}

void broker::impl::begin_coordinated(const connection_ptr& c, const frame& f, const std::string& name) {
  std::string_view spec = f.get("coordinate");
  if (spec.substr(0, kPostgresPrefix.size()) != kPostgresPrefix)
    return error(*c, "BEGIN refused: invalid coordinate header '" + loggable(spec) +
                         "': use postgresql/NAME, NAME a database of escrowd's [[coordinator.postgresql]] tables", &f);
  std::string database(spec.substr(kPostgresPrefix.size()));
  auto db = coordination.databases.find(database);
  if (db == coordination.databases.end()) {
    std::string known;
    for (const auto& [n, d] : coordination.databases) known += (known.empty() ? "" : ", ") + n;
    return error(*c, "BEGIN refused: database '" + loggable(database) + "' is not configured (" +
                         (known.empty() ? std::string("escrowd has no [[coordinator.postgresql]] table")
                                        : "the configured ones: " + known) + ")", &f);
  }
  const std::string* receipt_id = f.find("receipt");
  if (!receipt_id)
    return error(*c, "BEGIN with a coordinate header needs a receipt header: its RECEIPT carries the pg-gid to "
                     "PREPARE TRANSACTION under", &f);
  if (coordination.in_flight() >= config.max_coordinated_transactions)
    return error(*c, "BEGIN refused: " + std::to_string(coordination.in_flight()) +
                         " coordinated transactions are in flight (coordinator.max-transactions); end some, or try "
                         "again once the databases have caught up", &f);
  if (!may_start_branch(*c, &f)) return;
  std::string gid = coordination.prefix + coordination.incarnation + "_" + std::to_string(++coordination.counter);
  rm::branch_ptr b = transactions.rm.begin_local(c->id, c->info.user);
  b->coordinated_gid = gid;
  c->transactions.emplace(name, b);
  coordination.live.emplace(gid, coordination_part::live_transaction{database, c->info.user, c->id, now_ms(), false});
  write(*c, frame{"RECEIPT", {{"receipt-id", *receipt_id}, {"pg-gid", gid}}, {}});
}

void broker::impl::end_coordinated(const rm::branch& b) {
  if (b.coordinated_gid.empty()) return;
  auto it = coordination.live.find(b.coordinated_gid);
  if (it == coordination.live.end()) return;  // decided: the commit's path finishes it
  if (it->second.in_doubt) return;            // the restart decides it
  std::string gid = it->first, database = it->second.database;
  coordination.live.erase(it);
  ++coordination.rolled_back;
  auto db = coordination.databases.find(database);
  if (db == coordination.databases.end()) return;
  db->second.pg->rollback_prepared(gid, [this, gid, database](pg_answer a) {
    if (a.ok() || a.no_such_gid()) return;  // rolled back, or never prepared
    post([gid, database, a = std::move(a)] {
      if (warn_now("rollback " + database))
        spdlog::warn("coordinator: ROLLBACK PREPARED '{}' in database '{}' failed ({}); the next recovery pass "
                     "rolls it back",
                     gid, database, a.error);
    });
  });
}

void broker::impl::commit_coordinated(const connection_ptr& c, const rm::branch_ptr& b,
                                      std::optional<std::string> receipt_id, const std::string& name) {
  const std::string gid = b->coordinated_gid;
  auto live = coordination.live.find(gid);
  std::string database = live != coordination.live.end() ? live->second.database : std::string();
  auto db = coordination.databases.find(database);
  frame request{"COMMIT", {}, {}};
  if (receipt_id) request.add("receipt", *receipt_id);
  // Refused before anything is decided: both sides roll back (end_coordinated, from the rollback).
  auto refuse = [this, c, b, request, name](const std::string& why) {
    if (transactions.rm.branches().count(rm::branch_id{b->owner, b->id}))
      carry_out(transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, rm::caller{b->owner}), [](int) {});
    error(*c, "COMMIT of transaction '" + name + "' refused: " + why +
                  "; nothing of it took effect here, and its database side is rolled back (now, or by the next "
                  "recovery pass)", &request);
  };
  if (live == coordination.live.end() || db == coordination.databases.end())
    return refuse("its coordinated database is gone");
  if (!receipt_id)
    return refuse("a COMMIT of a coordinated transaction needs a receipt header: its RECEIPT says whether the "
                  "database committed");
  live->second.committing = true;
  b->busy = true;  // no timeout rolls it back under the check
  db->second.pg->is_prepared(gid, [this, c, b, gid, database, refuse, receipt_id, request](pg_answer checked) mutable {
    post([this, c, b, gid, database, refuse = std::move(refuse), receipt_id, request,
          checked = std::move(checked)]() mutable {
      b->busy = false;
      if (!checked.ok()) {
        refuse("database '" + database + "' cannot say whether pg-gid '" + gid + "' is prepared (" + checked.error + ")");
        return flush();
      }
      if (checked.rows.empty()) {
        ++coordination.refused_unprepared;
        refuse("pg-gid '" + gid + "' is not prepared in database '" + database +
               "' (end the SQL transaction with PREPARE TRANSACTION '" + gid + "' before the COMMIT)");
        return flush();
      }
      // The decision goes in the batch that commits the transaction: its commit record is the decision.
      storage::decision_record record{database, b->owner, now_ms()};
      storage::batch decision;
      decision.put(storage::table::decisions, gid, record.encode());
      auto r = transactions.rm.call(rm::xa_verb::commit, 0, b->id, TMONEPHASE, rm::caller{b->owner});
      carry_out(
          std::move(r),
          [this, c, b, gid, refuse = std::move(refuse), record, receipt_id, request](int code) {
            if (code != XA_OK && !store.writable()) {
              // The store failed in a way that leaves the write's outcome unknown (a failed sync:
              // the batch, decision included, may be on disk after a restart). Neither side is
              // rolled back: the gid stays in doubt, out of reach of the passes, and the restart
              // decides from what the store holds (a decision: commit; none: presumed abort).
              if (auto l = coordination.live.find(gid); l != coordination.live.end()) l->second.in_doubt = true;
              if (transactions.rm.branches().count(rm::branch_id{b->owner, b->id}))
                carry_out(transactions.rm.call(rm::xa_verb::rollback, 0, b->id, TMNOFLAGS, rm::caller{b->owner}),
                          [](int) {});
              spdlog::error("coordinator: the commit of pg-gid {} may or may not be on disk (the store failed); it "
                            "stays prepared in its database until escrowd restarts and decides from the store",
                            gid);
              return error(*c, "COMMIT of transaction outcome unknown: the store failed while writing it (see "
                               "escrowd's log); escrowd decides both sides from the store when it restarts",
                           &request);
            }
            if (code != XA_OK)
              return refuse(!b->refusal.empty() ? b->refusal
                                                : std::string(xa_result_name(code)) +
                                                      (code == XAER_RMFAIL ? " (the store refused the write)"
                                                                           : " (the transaction cannot commit)"));
            coordination.live.erase(gid);
            coordination.decisions[gid] = coordination_part::decision{record, ++coordination.decision_seq, false};
            fault_point(storage::fault_plan::point::decided);
            finish_decision(gid, [this, c, gid, record, receipt_id](const pg_answer& a) {
              if (a.ok()) fault_point(storage::fault_plan::point::db_committed);
              frame r{"RECEIPT", {}, {}};
              if (receipt_id) r.add("receipt-id", *receipt_id);
              r.add("pg-gid", gid);
              if (a.ok()) {
                ++coordination.committed;
                r.add("database", "committed");
              } else if (a.no_such_gid() && a.retried) {
                // The first COMMIT PREPARED lost its connection after PostgreSQL committed it.
                ++coordination.committed;
                r.add("database", "committed");
              } else if (a.no_such_gid()) {
                // Prepared at the check, gone at COMMIT PREPARED: another session of the database
                // decided it meanwhile. The broker's side is committed.
                r.add("database", "unknown");
                r.add("message", "pg-gid '" + gid + "' was no longer prepared in database '" + record.database +
                                     "' when escrowd committed it: another session committed or rolled it back");
              } else {
                ++coordination.answered_pending;
                r.add("database", "pending");
                r.add("message", "committed here; COMMIT PREPARED in database '" + record.database +
                                     "' is not done yet (" + a.error + "): escrowd finishes it when it can");
              }
              if (receipt_id) write(*c, r);
            });
          },
          std::move(decision));
      flush();
    });
  });
}

void broker::impl::finish_decision(const std::string& gid, std::function<void(const pg_answer&)> then) {
  auto it = coordination.decisions.find(gid);
  if (it == coordination.decisions.end() || it->second.finishing) return;
  auto db = coordination.databases.find(it->second.record.database);
  if (db == coordination.databases.end()) {
    pg_answer a;
    a.result = pg_answer::outcome::unreachable;
    a.error = "database '" + it->second.record.database + "' is not configured";
    if (then) then(a);
    return;
  }
  it->second.finishing = true;
  db->second.pg->commit_prepared(gid, [this, gid, then = std::move(then)](pg_answer a) mutable {
    post([this, gid, then = std::move(then), a = std::move(a)] {
      auto it = coordination.decisions.find(gid);
      if (it != coordination.decisions.end()) {
        it->second.finishing = false;
        if (a.ok() || a.no_such_gid()) {
          coordination.decisions.erase(it);
          storage::batch forget;
          forget.erase(storage::table::decisions, gid);
          // Nobody waits for it: it goes with the next write that happens anyway, as an
          // acknowledgement without a receipt does. A decision left stored (a crash before, a
          // refused write) is concluded again by the next pass.
          defer_ack(std::move(forget), [gid](const storage::status& s) {
            if (!s.ok()) spdlog::warn("coordinator: the finished decision of pg-gid {} stays stored: {}", gid, s.message());
          });
        } else if (!then && warn_now("commit " + it->second.record.database)) {
          spdlog::warn("coordinator: COMMIT PREPARED '{}' in database '{}' is not done yet ({}); escrowd tries again "
                       "every coordinator.recovery-interval-ms",
                       gid, it->second.record.database, a.error);
        }
      }
      if (then) then(a);
      flush();
    });
  });
}

void broker::impl::coordination_pass() {
  if (coordination.databases.empty()) return;
  for (auto& [name, d] : coordination.databases) {
    if (d.pass_running) continue;
    d.pass_running = true;
    std::uint64_t seq = coordination.decision_seq;
    d.pg->list_prepared(coordination.prefix, [this, name, seq](pg_answer a) {
      post([this, name, seq, a = std::move(a)]() mutable {
        recover_database(name, seq, std::move(a));
        flush();
      });
    });
  }
  timers->coordination.expires_after(std::chrono::milliseconds(config.coordinator_recovery_interval_ms));
  timers->coordination.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) coordination_pass();
  });
}

void broker::impl::recover_database(const std::string& name, std::uint64_t listed_seq, pg_answer listed) {
  auto db = coordination.databases.find(name);
  if (db == coordination.databases.end()) return;
  db->second.pass_running = false;
  if (!listed.ok()) {
    if (warn_now("list " + name))
      spdlog::warn("coordinator: cannot list the prepared transactions of database '{}': {}", name, listed.error);
    return;
  }
  std::set<std::string> prepared(listed.rows.begin(), listed.rows.end());
  for (const auto& gid : prepared) {
    if (coordination.decisions.count(gid)) {
      finish_decision(gid, [this](const pg_answer& a) {
        if (a.ok()) ++coordination.recovered_commits;
      });
    } else if (!coordination.live.count(gid)) {
      // Neither decided nor live: its transaction was rolled back here, or before a restart.
      db->second.pg->rollback_prepared(gid, [this, gid, name](pg_answer a) {
        post([this, gid, name, a = std::move(a)] {
          if (a.ok()) {
            ++coordination.recovered_rollbacks;
            spdlog::info("coordinator: rolled back pg-gid {} in database '{}': no decision for it (presumed abort)",
                         gid, name);
          } else if (!a.no_such_gid() && warn_now("rollback " + name)) {
            spdlog::warn("coordinator: ROLLBACK PREPARED '{}' in database '{}' failed: {}", gid, name, a.error);
          }
        });
      });
    }
  }
  // A decision made before the list was read whose gid is not in it: the database committed it
  // (an answer that was lost, or a commit before a restart). Forgotten.
  storage::batch forget;
  for (auto it = coordination.decisions.begin(); it != coordination.decisions.end();) {
    const auto& d = it->second;
    if (d.record.database == name && d.seq <= listed_seq && !d.finishing && !prepared.count(it->first)) {
      forget.erase(storage::table::decisions, it->first);
      it = coordination.decisions.erase(it);
    } else {
      ++it;
    }
  }
  if (!forget.empty())
    submit(std::move(forget), [](const storage::status& s) {
      if (!s.ok()) spdlog::warn("coordinator: finished decisions stay stored: {}", s.message());
    });
}

}  // namespace escrow::broker
