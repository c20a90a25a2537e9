// One PostgreSQL database escrowd coordinates transactions with ([[coordinator.postgresql]],
// docs/exactly-once.md): a few libpq connections, each on a thread of its own, that run the
// coordinator's statements (is a gid prepared, COMMIT PREPARED, ROLLBACK PREPARED, list the
// prepared gids with a prefix) off the core strand and the committer, with a statement timeout,
// reconnecting with backoff.
//
// Each request's answer is handed to `done` on one of those threads; the caller posts it to its
// own strand. A request made while no connection can be had is answered at once as unreachable.
// Thread safety: every public function may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace escrow::broker::coordinator {

struct pg_answer {
  enum class outcome {
    ok,           // the statement ran
    unreachable,  // no connection (PostgreSQL down, restarting, or the network), or it broke meanwhile
    failed,       // PostgreSQL ran it and refused: `error` has its message, `sqlstate` its code
  };
  outcome result = outcome::ok;
  std::string error;     // what went wrong, PostgreSQL's own text where it gave one
  std::string sqlstate;  // failed: the SQLSTATE (42704: no such prepared transaction)
  std::vector<std::string> rows;  // the first column of each row, for queries
  bool retried = false;  // the first attempt's connection broke: this is the second attempt's answer
  bool ok() const { return result == outcome::ok; }
  // A COMMIT PREPARED or ROLLBACK PREPARED of a gid PostgreSQL does not have (done already).
  bool no_such_gid() const { return result == outcome::failed && sqlstate == "42704"; }
};

struct pg_options {
  std::string name;      // the database's name in escrowd's configuration
  std::string conninfo;  // libpq's
  unsigned connections = 4;
  std::chrono::milliseconds statement_timeout{5000};
};

class pg_database {
 public:
  using done_fn = std::function<void(pg_answer)>;

  explicit pg_database(pg_options options);
  ~pg_database();  // stop()
  pg_database(const pg_database&) = delete;
  pg_database& operator=(const pg_database&) = delete;

  // "" when libpq can parse `conninfo`, else its error (for the configuration check at start).
  static std::string conninfo_problem(const std::string& conninfo);

  const std::string& name() const { return options_.name; }

  // ok with one row "t" when `gid` is prepared in this database (the one the conninfo names), no
  // row when it is not.
  void is_prepared(const std::string& gid, done_fn done);
  void commit_prepared(const std::string& gid, done_fn done);
  void rollback_prepared(const std::string& gid, done_fn done);
  // The gids prepared in this database that start with `prefix`.
  void list_prepared(const std::string& prefix, done_fn done);

  // Requests waiting at most; a ROLLBACK PREPARED beyond it is answered unreachable at once (the
  // next recovery pass rolls the gid back). The others are bounded by coordinator.max-transactions.
  static constexpr std::size_t kMaxWaiting = 10000;

  // Cancels what runs, answers what waits as unreachable, joins the threads. Idempotent.
  void stop();

 private:
  struct request {
    enum class kind { is_prepared, commit, rollback, list } what;
    std::string gid;  // or the prefix
    done_fn done;
  };
  struct worker;
  void enqueue(request r);
  void run(worker& w);

  pg_options options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<request> waiting_;
  bool stopping_ = false;
  std::atomic<std::int64_t> connected_once_{0};  // the last time one of the connections connected
  std::vector<std::unique_ptr<worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace escrow::broker::coordinator
