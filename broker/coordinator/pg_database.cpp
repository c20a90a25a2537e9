// The coordinator's PostgreSQL connections (pg_database.h): one blocking libpq connection per
// worker thread, so that a slow or absent database holds up only these threads.
#include "escrow/broker/coordinator/pg_database.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace escrow::broker::coordinator {
namespace {

using clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
constexpr std::size_t kMaxChecksAtOnce = 256;  // gids one is-prepared query asks about

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

struct pg_database::worker {
  std::mutex mutex;           // conn and cancel, against stop()'s cancel
  PGconn* conn = nullptr;
  PGcancel* cancel = nullptr;
  std::chrono::milliseconds backoff{0};
  clock::time_point next_attempt{};
  std::string last_error;

  void close() {
    std::lock_guard lock(mutex);
    if (cancel) PQfreeCancel(cancel);
    if (conn) PQfinish(conn);
    cancel = nullptr;
    conn = nullptr;
  }
  ~worker() { close(); }
};

std::string pg_database::conninfo_problem(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &error);
  std::string problem;
  if (!parsed) problem = error ? trimmed(error) : "libpq cannot parse it (out of memory?)";
  if (parsed) PQconninfoFree(parsed);
  if (error) PQfreemem(error);
  return problem;
}

pg_database::pg_database(pg_options options) : options_(std::move(options)) {
  unsigned n = std::max(1u, options_.connections);
  for (unsigned i = 0; i < n; ++i) workers_.push_back(std::make_unique<worker>());
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, w = workers_[i].get()] { run(*w); });
}

pg_database::~pg_database() { stop(); }

void pg_database::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) {
    std::lock_guard lock(w->mutex);
    char error[256];
    if (w->cancel) PQcancel(w->cancel, error, sizeof error);
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void pg_database::enqueue(request r) {
  bool stopping = false;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
    if (!stopping_ && (waiting_.size() < kMaxWaiting || r.what != request::kind::rollback)) {
      waiting_.push_back(std::move(r));
      r.done = nullptr;
    }
  }
  if (r.done) {
    pg_answer a;
    a.result = pg_answer::outcome::unreachable;
    a.error = stopping ? "escrowd is stopping" : "too many statements waiting for database '" + options_.name + "'";
    r.done(std::move(a));
    return;
  }
  wake_.notify_one();
}

void pg_database::is_prepared(const std::string& gid, done_fn done) {
  enqueue({request::kind::is_prepared, gid, std::move(done)});
}
void pg_database::commit_prepared(const std::string& gid, done_fn done) {
  enqueue({request::kind::commit, gid, std::move(done)});
}
void pg_database::rollback_prepared(const std::string& gid, done_fn done) {
  enqueue({request::kind::rollback, gid, std::move(done)});
}
void pg_database::list_prepared(const std::string& prefix, done_fn done) {
  enqueue({request::kind::list, prefix, std::move(done)});
}

namespace {

// Connects `conn` when it is not, at most once per backoff; false (with `why`) when there is none.
// `connected_once`: when another connection to the database last connected (steady clock, ns). A
// connection waiting out its backoff tries at once when another has connected since its failure:
// the database is back, and a request must not be refused for this thread's old failure.
bool connected(PGconn*& conn, PGcancel*& cancel, std::mutex& m, std::chrono::milliseconds& backoff,
               clock::time_point& next_attempt, std::string& last_error, const pg_options& o, std::string& why,
               std::atomic<std::int64_t>& connected_once) {
  if (conn && PQstatus(conn) == CONNECTION_OK) return true;
  auto failed_at = next_attempt - backoff;
  bool others_connected =
      connected_once.load() > std::chrono::duration_cast<std::chrono::nanoseconds>(failed_at.time_since_epoch()).count();
  if (clock::now() < next_attempt && !others_connected) {
    why = "no connection to database '" + o.name + "' (" + last_error + "); escrowd tries again shortly";
    return false;
  }
  {
    std::lock_guard lock(m);
    if (cancel) PQfreeCancel(cancel);
    if (conn) PQfinish(conn);
    cancel = nullptr;
    conn = nullptr;
  }
  // Escrow's defaults come first: the conninfo (dbname, expanded) overrides any of them. A dead
  // network ends a statement by tcp_user_timeout, a stopped server by the keepalives.
  std::string timeout_s = std::to_string(std::max<long long>(1, o.statement_timeout.count() / 1000));
  std::string user_timeout = std::to_string(o.statement_timeout.count() + 1000);
  const char* keys[] = {"connect_timeout", "application_name", "keepalives", "keepalives_idle", "keepalives_interval",
                        "keepalives_count", "tcp_user_timeout", "dbname", nullptr};
  const char* values[] = {timeout_s.c_str(), "escrowd coordinator", "1", "5", "2", "3", user_timeout.c_str(),
                          o.conninfo.c_str(), nullptr};
  PGconn* fresh = PQconnectdbParams(keys, values, 1);
  // A failed attempt: the next one waits out a doubled backoff.
  auto failed = [&](const std::string& what) {
    last_error = fresh ? trimmed(PQerrorMessage(fresh)) : "out of memory";
    if (fresh) PQfinish(fresh);
    backoff = std::min(kMaxBackoff, backoff.count() == 0 ? kFirstBackoff : backoff * 2);
    next_attempt = clock::now() + backoff;
    why = what + " database '" + o.name + "': " + last_error;
    return false;
  };
  if (!fresh || PQstatus(fresh) != CONNECTION_OK) return failed("cannot connect to");
  std::string set = "SET statement_timeout = " + std::to_string(o.statement_timeout.count());
  PGresult* r = PQexec(fresh, set.c_str());
  bool set_ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
  if (r) PQclear(r);
  if (!set_ok) return failed("cannot set statement_timeout on");
  // The two queries, planned once per connection.
  for (auto [name, sql] : {std::pair{"escrow_prepared", "SELECT gid FROM pg_prepared_xacts WHERE database = "
                                                        "current_database() AND gid = ANY($1::text[])"},
                           std::pair{"escrow_list", "SELECT gid FROM pg_prepared_xacts WHERE database = "
                                                    "current_database() AND starts_with(gid, $1)"}}) {
    PGresult* p = PQprepare(fresh, name, sql, 1, nullptr);
    bool prepared = p && PQresultStatus(p) == PGRES_COMMAND_OK;
    if (p) PQclear(p);
    if (!prepared) return failed("cannot prepare escrowd's queries on");
  }
  if (backoff.count() != 0) spdlog::info("coordinator: connected to database '{}' again", o.name);
  backoff = std::chrono::milliseconds(0);
  connected_once.store(std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count());
  std::lock_guard lock(m);
  conn = fresh;
  cancel = PQgetCancel(conn);
  return true;
}

}  // namespace

// A text[] literal of `items`: {"a","b"}, each quoted, backslash and quote escaped.
static std::string text_array(const std::vector<std::string>& items) {
  std::string out = "{";
  for (const auto& item : items) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char ch : item) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  return out + "}";
}

void pg_database::run(worker& w) {
  for (;;) {
    request r;
    std::vector<request> more;  // is_prepared requests answered by the same query as r
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      if (stopping_) {
        std::deque<request> rest;
        rest.swap(waiting_);
        lock.unlock();
        for (auto& left : rest) {
          pg_answer a;
          a.result = pg_answer::outcome::unreachable;
          a.error = "escrowd is stopping";
          left.done(std::move(a));
        }
        return;
      }
      r = std::move(waiting_.front());
      waiting_.pop_front();
      // The checks waiting now are answered together: one query, one round trip.
      if (r.what == request::kind::is_prepared)
        for (auto it = waiting_.begin(); it != waiting_.end() && more.size() < kMaxChecksAtOnce;) {
          if (it->what != request::kind::is_prepared) {
            ++it;
            continue;
          }
          more.push_back(std::move(*it));
          it = waiting_.erase(it);
        }
    }
    pg_answer a;
    // A connection PostgreSQL dropped (a restart) shows only when a statement fails on it: then
    // the statement runs once more on a new one. Each is safe to repeat: a query reads, and a
    // COMMIT or ROLLBACK PREPARED that happened answers "no such gid" the second time.
    for (int attempt = 0; attempt < 2; ++attempt) {
      a = pg_answer{};
      a.retried = attempt > 0;
      std::string why;
      bool was_connected = w.conn && PQstatus(w.conn) == CONNECTION_OK;
      if (!connected(w.conn, w.cancel, w.mutex, w.backoff, w.next_attempt, w.last_error, options_, why,
                     connected_once_)) {
        a.result = pg_answer::outcome::unreachable;
        a.error = why;
        break;
      }
      PGresult* res = nullptr;
      if (r.what == request::kind::is_prepared) {
        std::vector<std::string> gids{r.gid};
        for (const auto& m : more) gids.push_back(m.gid);
        std::string array = text_array(gids);
        const char* params[] = {array.c_str()};
        res = PQexecPrepared(w.conn, "escrow_prepared", 1, params, nullptr, nullptr, 0);
      } else if (r.what == request::kind::list) {
        const char* params[] = {r.gid.c_str()};
        res = PQexecPrepared(w.conn, "escrow_list", 1, params, nullptr, nullptr, 0);
      } else {
        char* literal = PQescapeLiteral(w.conn, r.gid.c_str(), r.gid.size());
        std::string sql = std::string(r.what == request::kind::commit ? "COMMIT PREPARED " : "ROLLBACK PREPARED ") +
                          (literal ? literal : "''");
        if (literal) PQfreemem(literal);
        res = PQexec(w.conn, sql.c_str());
      }
      ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
      if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        for (int i = 0; i < PQntuples(res); ++i) a.rows.emplace_back(PQgetvalue(res, i, 0));
      } else {
        const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
        a.sqlstate = state ? state : "";
        a.error = trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(w.conn));
        if (a.error.empty()) a.error = trimmed(PQerrorMessage(w.conn));
        // A broken connection, or a statement PostgreSQL cancelled at statement_timeout: its outcome
        // is not known (a COMMIT PREPARED may have happened), so nothing is concluded from it.
        bool broken = PQstatus(w.conn) != CONNECTION_OK;
        if (broken || a.sqlstate == "57014" || a.sqlstate.rfind("08", 0) == 0 || a.sqlstate.rfind("57P", 0) == 0) {
          a.result = pg_answer::outcome::unreachable;
          a.error = "database '" + options_.name + "' did not answer: " + a.error;
          if (broken) w.close();
        } else {
          a.result = pg_answer::outcome::failed;
        }
      }
      if (res) PQclear(res);
      bool retry = was_connected && !w.conn && attempt == 0;  // it broke under this statement
      {
        std::lock_guard lock(mutex_);
        if (stopping_) retry = false;
      }
      if (!retry) break;
      w.next_attempt = clock::time_point{};
    }
    if (r.what == request::kind::is_prepared) {
      // Each check gets its own answer: one row "t" when its gid was among the rows.
      std::vector<std::string> found = std::move(a.rows);
      auto answer_for = [&](const request& q) {
        pg_answer one = a;
        if (a.ok() && std::find(found.begin(), found.end(), q.gid) != found.end()) one.rows = {"t"};
        return one;
      };
      for (auto& m : more) m.done(answer_for(m));
      r.done(answer_for(r));
      continue;
    }
    r.done(std::move(a));
  }
}

}  // namespace escrow::broker::coordinator
