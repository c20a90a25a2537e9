// PostgreSQL through libpq (pg_participant.h).
#include "pg_participant.h"

#include <cstring>

namespace escrow::tm {
namespace {

// SQLSTATEs that mean "the server is not there right now": connection exceptions (class 08),
// the server shutting down or starting up (57P01..57P03).
bool transient(const char* state) {
  return state && (std::strncmp(state, "08", 2) == 0 || std::strncmp(state, "57P", 3) == 0);
}

}  // namespace

pg_participant::pg_participant(std::string conninfo) : conninfo_(std::move(conninfo)) {}

pg_participant::~pg_participant() {
  if (conn_) PQfinish(conn_);
}

void pg_participant::reopen() {
  if (conn_ && PQstatus(conn_) == CONNECTION_OK) return;
  if (conn_) PQfinish(conn_);
  conn_ = PQconnectdb(conninfo_.c_str());
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string why = PQerrorMessage(conn_);
    PQfinish(conn_);
    conn_ = nullptr;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    throw unavailable("cannot connect to PostgreSQL (" + conninfo_ + "): " + why);
  }
  // NOTICEs (e.g. "relation already exists, skipping") are not the manager's business.
  PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
}

pg_participant::result pg_participant::run(const std::string& sql, const std::vector<std::string>& params,
                                            const char* tolerated) {
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) throw unavailable("PostgreSQL connection lost: reopen it");
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  result r(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                        nullptr, 0),
           PQclear);
  ExecStatusType status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return r;
  const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  if (tolerated && state && std::strcmp(state, tolerated) == 0) return result(nullptr, PQclear);
  std::string why = PQerrorMessage(conn_);
  while (!why.empty() && why.back() == '\n') why.pop_back();
  std::string what = "PostgreSQL: " + sql.substr(0, 80) + ": " + (state ? std::string(state) + " " : "") + why;
  if (PQstatus(conn_) != CONNECTION_OK || transient(state) || !r) throw unavailable(what);
  if (state && std::strcmp(state, "23505") == 0) throw duplicate_key(what);
  throw failed(what);
}

void pg_participant::begin() { run("BEGIN"); }

void pg_participant::execute(const std::string& sql, const std::vector<std::string>& params) { run(sql, params); }

std::string pg_participant::gid_literal(const xid& x) {
  std::string gid = x.to_string();
  char* quoted = PQescapeLiteral(conn_, gid.c_str(), gid.size());
  if (!quoted) throw failed("PostgreSQL: cannot quote gid " + gid);
  std::string out = quoted;
  PQfreemem(quoted);
  return out;
}

vote pg_participant::prepare(const xid& x) {
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) throw unavailable("PostgreSQL connection lost before PREPARE");
  result r = run("PREPARE TRANSACTION " + gid_literal(x));
  // A transaction that had failed is rolled back by PREPARE TRANSACTION, which then says so.
  if (std::strcmp(PQcmdStatus(r.get()), "ROLLBACK") == 0) return vote::rolled_back;
  return vote::prepared;
}

void pg_participant::commit(const xid& x, bool one_phase) {
  if (one_phase) {
    result r = run("COMMIT");
    if (std::strcmp(PQcmdStatus(r.get()), "ROLLBACK") == 0)
      throw failed("PostgreSQL rolled back " + x.to_string() + " at COMMIT");
    return;
  }
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) throw unavailable("PostgreSQL connection lost before COMMIT PREPARED");
  // 42704 (undefined_object): no such prepared transaction: an earlier attempt committed it.
  run("COMMIT PREPARED " + gid_literal(x), {}, "42704");
}

void pg_participant::rollback(const xid& x) {
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
    // The server ends an unprepared transaction with its connection; a prepared one waits.
    reopen();
  } else if (PQtransactionStatus(conn_) != PQTRANS_IDLE) {
    run("ROLLBACK");
  }
  // The PREPARE may have happened even if its answer was lost.
  run("ROLLBACK PREPARED " + gid_literal(x), {}, "42704");
}

std::vector<xid> pg_participant::recover(long format_id, const std::string& prefix) {
  result r = run("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()");
  std::vector<xid> out;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    auto x = xid::parse(PQgetvalue(r.get(), i, 0));
    if (x && x->format_id() == format_id && x->gtrid().starts_with(prefix)) out.push_back(*x);
  }
  return out;
}

}  // namespace escrow::tm
