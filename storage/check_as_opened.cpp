// check_as_opened (check.h): what `escrow check` checks. A store a running escrowd holds is
// checked live; a store that was not closed cleanly is recovered first, as escrowd's start would
// recover it (store.cpp, recover_before_open and replay_log: LMDB set back to the commit log's
// checkpoint, then the log's records after it applied again), but on a copy: checking LMDB as a
// crash left it would check exactly the commits recovery sets aside, and report problems that
// escrowd never opens. The original data.mdb and log are only read.
//
// Deciding reads data.mdb's two meta pages and the log's control block, not LMDB: an `escrow
// check` with LMDB open on the original would make escrowd's recovery refuse to start
// (alone_on_lock_file). Only when no recovery is due to set LMDB back is LMDB opened (read-only),
// to see whether the log still holds records after the position LMDB holds.
#include <fcntl.h>
#include <lmdb.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "escrow/storage/check.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/commit_log.h"
#include "escrow/storage/lmdb_meta.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

namespace escrow::storage {
namespace {

namespace fs = std::filesystem;

// escrow.lock, held shared from the decision until the copy is made: escrowd takes it exclusive
// (store.cpp, lock_directory), so while it is held here no escrowd can start and change data.mdb
// or log under the copy (one that tries refuses the directory as in use), and if escrowd holds
// it, the store is open in escrowd. Opened read-only and never created: nothing is written.
class directory_lock {
 public:
  enum class result { taken, held_by_escrowd, no_lock_file, cannot_tell };
  ~directory_lock() { release(); }
  result take(const std::string& dir) {
    fd_ = ::open((dir + "/escrow.lock").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return errno == ENOENT ? result::no_lock_file : result::cannot_tell;
    if (::flock(fd_, LOCK_SH | LOCK_NB) == 0) return result::taken;
    int e = errno;
    release();
    return e == EWOULDBLOCK ? result::held_by_escrowd : result::cannot_tell;
  }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The position of the last log record LMDB holds, and the store's id, read through a read-only
// environment. False when they cannot be read (the checker then says why).
bool read_log_position(const std::string& dir, bool& has_position, log_position& position, std::uint64_t& store_id) {
  MDB_env* env = nullptr;
  if (mdb_env_create(&env) != 0) return false;
  bool ok = false;
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  if (mdb_env_set_maxdbs(env, kTableCount + 2) == 0 && mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOTLS, 0600) == 0 &&
      mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn) == 0 && mdb_dbi_open(txn, table_name(table::meta), 0, &dbi) == 0) {
    MDB_val key{kLogPositionKey.size(), const_cast<char*>(kLogPositionKey.data())}, value;
    int rc = mdb_get(txn, dbi, &key, &value);
    has_position = rc == 0 && log_position::decode({static_cast<const char*>(value.mv_data), value.mv_size}, position);
    key = MDB_val{kStoreIdKey.size(), const_cast<char*>(kStoreIdKey.data())};
    std::string_view id;
    if (mdb_get(txn, dbi, &key, &value) == 0) id = {static_cast<const char*>(value.mv_data), value.mv_size};
    store_id = 0;
    ok = id.empty() || get_u64(id, store_id);
  }
  if (txn) mdb_txn_abort(txn);
  mdb_env_close(env);
  return ok;
}

// Copies `from` to the new file `to` (0600), leaving the holes of a sparse file holes: only the
// data extents are copied (SEEK_DATA, SEEK_HOLE), with copy_file_range where the file systems
// allow it (a reflink on some), else read and write. 0 or an errno.
int copy_sparse(const std::string& from, const std::string& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    int e = errno;
    ::close(in);
    return e;
  }
  int rc = 0;
  struct stat st {};
  if (::fstat(in, &st) != 0) rc = errno;
  const off_t size = st.st_size;
  bool kernel_copy = true;
  std::vector<char> buffer;
  // Copies [at, end) of `in` to the same place in `out`.
  auto copy_range = [&](off_t at, off_t end) {
    while (rc == 0 && at < end) {
      if (kernel_copy) {
        off_t src = at, dst = at;
        ssize_t n = ::copy_file_range(in, &src, out, &dst, static_cast<std::size_t>(end - at), 0);
        if (n > 0) {
          at += n;
          continue;
        }
        if (n == 0) return;  // the file shrank meanwhile; the lock says it cannot
        if (errno == EINTR) continue;
        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EPERM) {
          rc = errno;
          return;
        }
        kernel_copy = false;
      }
      buffer.resize(1 << 20);
      std::size_t want = static_cast<std::size_t>(std::min<off_t>(end - at, static_cast<off_t>(buffer.size())));
      ssize_t n = ::pread(in, buffer.data(), want, at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        rc = n < 0 ? errno : 0;
        return;
      }
      for (ssize_t done = 0; done < n;) {
        ssize_t w = ::pwrite(out, buffer.data() + done, static_cast<std::size_t>(n - done), at + done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          rc = errno;
          return;
        }
        done += w;
      }
      at += n;
    }
  };
  for (off_t at = 0; rc == 0 && at < size;) {
    off_t data = ::lseek(in, at, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole from here to the end
      copy_range(at, size);      // no SEEK_DATA here: everything
      break;
    }
    off_t hole = ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) hole = size;
    copy_range(data, std::min(hole, size));
    at = hole;
  }
  if (rc == 0 && ::ftruncate(out, size) != 0) rc = errno;  // a hole at the end
  ::close(in);
  if (::close(out) != 0 && rc == 0) rc = errno;
  return rc;
}

// The temporary directory of the copy, removed with what is in it.
class scratch_dir {
 public:
  ~scratch_dir() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  // A new directory (0700: it holds every message of the store) under `parent`. "" when it fails.
  std::string make(const std::string& parent, std::string& error) {
    std::string pattern = (fs::path(parent) / "escrow-check-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      error = "cannot make a directory for the recovered copy in " + parent + ": " + std::strerror(errno) +
              "; name one with room for a copy of the store with --scratch DIR";
      return {};
    }
    path_ = pattern;
    return path_;
  }

 private:
  std::string path_;
};

// What the store logs (spdlog's default logger) while the copy is recovered, kept instead of
// printed; the default logger is put back at scope end.
class log_capture {
 public:
  log_capture() : previous_(spdlog::default_logger()), sink_(std::make_shared<sink>()) {
    auto logger = std::make_shared<spdlog::logger>("escrow-check", sink_);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(std::move(logger));
  }
  ~log_capture() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> lines() const { return sink_->taken(); }

 private:
  class sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::vector<std::string> taken() {
      std::lock_guard lock(mutex_);
      return lines_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& m) override {
      auto level = spdlog::level::to_string_view(m.level);
      lines_.push_back(std::string(level.data(), level.size()) + ": " + std::string(m.payload.data(), m.payload.size()));
    }
    void flush_() override {}

   private:
    std::vector<std::string> lines_;
  };
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<sink> sink_;
};

// `text` with every occurrence of the copy's path named as the original's.
std::string as_original(std::string text, const std::string& copy, const std::string& original) {
  for (std::size_t at = 0; (at = text.find(copy, at)) != std::string::npos; at += original.size())
    text.replace(at, copy.size(), original);
  return text;
}

check_report cannot_recover(check_report r, std::string why) {
  r.outcome = check_report::result::cannot_open;
  r.open_error = std::move(why);
  return r;
}

// Copies the store (the lock held), releases the lock, recovers the copy with storage::store and
// checks it.
check_report recover_and_check(const check_options& options, directory_lock& lock, recovery_report recovery,
                               std::uint64_t data_file) {
  const std::string& dir = options.path;
  check_report r;
  r.recovery = recovery;
  std::string parent = options.scratch;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp && *tmp ? tmp : "/tmp";
  }
  std::error_code ec;
  fs::path store_dir = fs::canonical(dir, ec), scratch = fs::weakly_canonical(parent, ec);
  if (!store_dir.empty() && !scratch.empty()) {
    if (std::mismatch(scratch.begin(), scratch.end(), store_dir.begin(), store_dir.end()).second == store_dir.end())
      return cannot_recover(std::move(r), "the store in " + dir + " was not closed cleanly and is checked on a "
                                          "recovered copy, which cannot be made in " + parent +
                                          ", inside the data directory: name another with --scratch DIR");
  }
  scratch_dir copy_holder;
  std::string error;
  std::string copy = copy_holder.make(parent, error);
  if (copy.empty()) return cannot_recover(std::move(r), error);
  for (const char* file : {"data.mdb", "log"}) {
    if (int rc = copy_sparse(dir + "/" + file, copy + "/" + file); rc != 0)
      return cannot_recover(std::move(r), "the store in " + dir + " was not closed cleanly and is checked on a "
                                          "recovered copy, but " + dir + "/" + file + " cannot be copied to " + copy +
                                          ": " + std::strerror(rc) +
                                          (rc == ENOSPC || rc == EDQUOT ? "; name a directory with room for a copy "
                                                                          "of the store with --scratch DIR" : ""));
  }
  lock.release();

  store_options so;
  so.path = copy;
  so.log_data_file = data_file;  // the copied log names the original data.mdb
  so.min_free_disk = 0;
  so.log_size = 16ull << 20;  // the smallest ring: the copy's log is not written after recovery
  status opened;
  {
    log_capture capture;
    std::unique_ptr<store> s;
    opened = store::open(so, s);
    s.reset();  // closed: the committer and its threads are gone before the logger is put back
    for (auto& line : capture.lines()) {
      r.recovery.log.push_back(as_original(line, copy, dir));
      std::size_t at = line.find("replayed ");
      std::size_t end = at == std::string::npos ? at : line.find(" commits", at);
      if (end != std::string::npos) {
        try {
          r.recovery.replayed = std::stoll(line.substr(at + 9, end - at - 9));
        } catch (const std::exception&) {
        }
      }
    }
  }
  if (!opened.ok()) {
    std::string why = as_original(opened.message(), copy, dir);
    switch (opened.which()) {
      case status::code::corrupt:
      case status::code::failed:
        r.outcome = check_report::result::unrecoverable;
        r.open_error = std::move(why);
        return r;
      default:
        return cannot_recover(std::move(r), "the store in " + dir + " was not closed cleanly and is checked on a "
                                            "recovered copy (in " + parent + "), whose recovery failed: " + why);
    }
  }
  if (r.recovery.replayed < 0) r.recovery.replayed = 0;  // nothing logged: nothing replayed
  check_options on_copy = options;
  on_copy.path = copy;
  check_report checked = check_store(on_copy);
  checked.open_error = as_original(checked.open_error, copy, dir);
  for (auto& p : checked.problems) p = as_original(p, copy, dir);
  checked.recovery = std::move(r.recovery);
  return checked;
}

check_report as_found(const check_options& options, recovery_report::state found) {
  check_report r = check_store(options);
  r.recovery.found = found;
  return r;
}

}  // namespace

check_report check_as_opened(const check_options& options) {
  const std::string& dir = options.path;
  std::error_code ec;
  const std::string data_file = dir + "/data.mdb";
  if (!fs::is_directory(dir, ec) || !fs::exists(data_file, ec)) return check_store(options);  // it says why

  directory_lock lock;
  switch (lock.take(dir)) {
    case directory_lock::result::held_by_escrowd: return as_found(options, recovery_report::state::in_use);
    case directory_lock::result::cannot_tell: return as_found(options, recovery_report::state::unknown);
    case directory_lock::result::taken:
    case directory_lock::result::no_lock_file: break;
  }
  lmdb_metas metas;
  struct stat st {};
  if (!read_lmdb_metas(data_file, metas).ok() || ::stat(data_file.c_str(), &st) != 0) {
    lock.release();
    return as_found(options, recovery_report::state::unknown);  // not an LMDB file: the checker says so
  }
  std::unique_ptr<commit_log> log;
  if (status s = commit_log::open(dir, log); !s.ok()) {
    // escrowd refuses to start on it too, with this message.
    check_report r;
    r.outcome = s.which() == status::code::corrupt ? check_report::result::unrecoverable
                                                  : check_report::result::cannot_open;
    r.open_error = s.message();
    return r;
  }
  // No log, or one of another data.mdb: escrowd starts a new log and opens LMDB as it is.
  const auto data_file_id = static_cast<std::uint64_t>(st.st_ino);
  if (!log->found() || log->current().data_file != data_file_id) {
    log.reset();
    lock.release();
    return as_found(options, recovery_report::state::as_is);
  }
  const commit_log::control control = log->current();
  recovery_report recovery;
  recovery.found = recovery_report::state::recovered;
  recovery.latest_commit = metas.latest_txnid;
  recovery.checkpoint = control.checkpoint;
  recovery.set_aside = metas.latest_txnid > control.checkpoint ? metas.latest_txnid - control.checkpoint : 0;
  // LMDB at the checkpoint: nothing to set back, so LMDB may be opened here. A start that died
  // after setting LMDB back and before its replay was committed leaves records after the position
  // LMDB holds: the next start replays them. (Another store's log is not replayed.)
  bool recover = metas.latest_txnid != control.checkpoint;
  if (!recover) {
    bool has_position = false;
    log_position position;
    std::uint64_t store_id = 0;
    std::uint64_t records = 0;
    if (read_log_position(dir, has_position, position, store_id) && store_id == control.store_id &&
        log->replay(has_position ? position : log_position{}, [&](const log_position&, std::string_view) {
              ++records;
              return status{};
            }).ok())
      recover = records > 0;
  }
  log.reset();
  if (!recover) {
    lock.release();
    return as_found(options, recovery_report::state::as_is);
  }
  return recover_and_check(options, lock, recovery, data_file_id);
}

}  // namespace escrow::storage
