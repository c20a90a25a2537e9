// The decision log (decision_log.h). Lines are appended with one write() each; a line torn by a
// crash (no trailing newline) was never synced, so no decision rests on it: it is ignored.
#include "decision_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace escrow::tm {
namespace {

[[noreturn]] void io_failure(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

decision_log::decision_log(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) io_failure("cannot open the decision log", path_);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    throw std::runtime_error("the decision log " + path_ + " is locked: another escrow-tm uses it");
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::pread(fd_, buffer, sizeof buffer, static_cast<off_t>(text.size()));
    if (n < 0) io_failure("cannot read the decision log", path_);
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  std::string_view rest = text;
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    if (nl == std::string_view::npos) break;  // torn last line: never synced
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    if (line.starts_with("commit ")) committed_.emplace(line.substr(7));
  }
}

decision_log::~decision_log() {
  if (fd_ >= 0) ::close(fd_);
}

void decision_log::append(const std::string& line, bool sync) {
  std::lock_guard lock(mutex_);
  std::string_view rest = line;
  while (!rest.empty()) {
    ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_failure("cannot append to the decision log", path_);
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  // The commit record must be on disk before any resource is told to commit: after a crash,
  // recovery commits exactly the transactions it finds here and rolls back every other one.
  if (sync && ::fdatasync(fd_) != 0) io_failure("cannot fdatasync the decision log", path_);
}

void decision_log::append_commit(const std::string& xid) { append("commit " + xid + "\n", true); }

void decision_log::append_done(const std::string& xid) { append("done " + xid + "\n", false); }

void decision_log::truncate() {
  std::lock_guard lock(mutex_);
  if (::ftruncate(fd_, 0) != 0) io_failure("cannot truncate the decision log", path_);
  if (::fdatasync(fd_) != 0) io_failure("cannot fdatasync the decision log", path_);
  committed_.clear();
}

}  // namespace escrow::tm
