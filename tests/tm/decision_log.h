// The test transaction manager's durable decision log: one text line per record, "commit XID"
// (written and fdatasync'd before the commit phase starts: the decision point of two-phase commit)
// and "done XID" (the commit phase finished; not synced, a lost "done" only costs a redundant
// commit at recovery). A transaction without a "commit" record is presumed aborted.
//
// The file is locked (flock) for the life of the object: two managers on one log is a mistake.
// Thread safety: append_commit() and append_done() may be called from several threads.
#pragma once

#include <mutex>
#include <set>
#include <string>

namespace escrow::tm {

class decision_log {
 public:
  // Opens (creating) the log at `path` and reads it. Throws std::runtime_error (cannot open,
  // locked by another manager).
  explicit decision_log(std::string path);
  ~decision_log();
  decision_log(const decision_log&) = delete;
  decision_log& operator=(const decision_log&) = delete;

  // The xids (text form) with a "commit" record, as read at open.
  const std::set<std::string>& committed() const { return committed_; }

  // Appends "commit XID" and fdatasyncs: returns once the decision is durable. Throws on I/O error.
  void append_commit(const std::string& xid);
  // Appends "done XID" (no sync).
  void append_done(const std::string& xid);
  // After recovery resolved every logged transaction: empties the log (durably).
  void truncate();

  const std::string& path() const { return path_; }

 private:
  void append(const std::string& line, bool sync);

  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;  // guards appends to fd_
  std::set<std::string> committed_;
};

}  // namespace escrow::tm
