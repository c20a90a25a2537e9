// `escrow backup`: a hot copy of the LMDB environment (mdb_env_copyfd2, optionally compacted) into a
// directory on the broker's machine, made on a thread of its own while the broker keeps serving.
// The copy is one consistent read snapshot: every batch committed before it began, nothing after.
//
// Where it may write (docs/security.md, "Backups"): only into a directory under [storage]
// backup-root, never over a file. The requested path is resolved (`..` and symbolic links) and must
// lie strictly inside the resolved root; then the directories are walked (and the missing ones made,
// 0700) one at a time from the root with openat(O_NOFOLLOW), so that a symbolic link planted or
// swapped in meanwhile is refused rather than followed, and data.mdb is created there with
// O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600: an existing file (or a link to one) is never written.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "admin_commands.h"
#include "escrow/broker/security/names.h"
#include "escrow/storage/store.h"
#include "json.h"

namespace escrow::broker {
namespace {

namespace fs = std::filesystem;

struct fd_closer {
  int fd = -1;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

// Where the copy goes, checked and opened: the directory (kept open so that data.mdb and the
// directory sync happen in the directory that was checked) and the new data.mdb in it.
struct backup_target {
  std::string dir;  // resolved, for the messages and the answer
  fd_closer dir_fd;
  fd_closer file_fd;
};

// "" when `target` is open; otherwise why the backup is refused.
std::string open_target(const std::string& root_setting, const std::string& path, backup_target& target) {
  std::error_code ec;
  fs::path root = fs::canonical(fs::absolute(root_setting, ec), ec);
  if (ec || !fs::is_directory(root, ec))
    return "the backup root " + root_setting +
           " (storage.backup-root) is not an existing directory: create it, owned by the user escrowd runs as, "
           "mode 0700";
  // Symbolic links in the part that exists are resolved, `..` everywhere.
  fs::path wanted = fs::weakly_canonical(fs::path(path), ec);
  if (ec) return "cannot resolve " + path + ": " + ec.message();
  if (!wanted.has_filename()) wanted = wanted.parent_path();  // "DIR/"
  fs::path relative = wanted.lexically_relative(root);
  std::string resolves = wanted.string() == path ? "" : " (it resolves to " + wanted.string() + ")";
  if (relative == ".")
    return path + resolves + " is the backup root itself: name a directory under it, e.g. " +
           (root / "2026-11-30").string();
  if (relative.empty() || *relative.begin() == "..")
    return path + resolves + " is not inside the backup root " + root.string() +
           " (storage.backup-root): escrowd writes backups only into directories under it, e.g. " +
           (root / "2026-11-30").string();
  target.dir = wanted.string();

  int dir = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return "cannot open the backup root " + root.string() + ": " + std::strerror(errno);
  target.dir_fd.fd = dir;
  fs::path walked = root;
  for (const auto& part : relative) {
    if (part.empty() || part == ".") continue;
    walked /= part;
    if (::mkdirat(target.dir_fd.fd, part.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot create " + walked.string() + ": " + std::strerror(errno);
    int next = ::openat(target.dir_fd.fd, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      if (errno == ELOOP || errno == ENOTDIR)
        return walked.string() + " is a symbolic link or not a directory: backups are written only into real "
               "directories under the backup root";
      return "cannot open " + walked.string() + ": " + std::strerror(errno);
    }
    ::close(target.dir_fd.fd);
    target.dir_fd.fd = next;
  }
  int file = ::openat(target.dir_fd.fd, "data.mdb", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (file < 0) {
    if (errno == EEXIST) return target.dir + " already holds a data.mdb: name an empty directory";
    return "cannot create " + target.dir + "/data.mdb: " + std::strerror(errno);
  }
  target.file_fd.fd = file;
  return "";
}

}  // namespace

void admin_backup(admin_core& core, const frame& f, admin_done done) {
  std::string path(f.get("path"));
  bool compact = f.get("compact") == "true";
  if (path.empty() || !fs::path(path).is_absolute())
    return done({"invalid", "backup needs an absolute path header (a directory on the broker's machine), got '" +
                                path + "'", {}});
  if (core.config().backup_root.empty())
    return done({"refused",
                 "backups are off: escrowd writes them only under [storage] backup-root, which is not set; set it "
                 "to a directory for backups (e.g. backup-root = \"/var/backups/escrow\") and reload escrowd "
                 "(docs/operations.md)",
                 {}});
  if (core.backup_running())
    return done({"refused", "a backup is already running; try again when it has finished", {}});
  // The file system work runs on the backup thread too: resolving a path may block (a network mount).
  core.run_backup([&store = core.store(), root = core.config().backup_root, path, compact,
                   done = std::move(done)]() mutable -> std::function<void()> {
    auto started_at = std::chrono::steady_clock::now();
    backup_target target;
    std::string refused = open_target(root, path, target);
    storage::status s;
    std::uint64_t bytes = 0;
    if (refused.empty()) {
      spdlog::info("backup to {} started{}", loggable(target.dir), compact ? " (compacting)" : "");
      s = store.copy_to(target.file_fd.fd, compact);
      struct stat st {};
      if (s.ok() && ::fstat(target.file_fd.fd, &st) == 0) bytes = static_cast<std::uint64_t>(st.st_size);
      // The copy's data.mdb is durable only with its directory entry; a failed copy leaves nothing.
      if (s.ok() && ::fsync(target.dir_fd.fd) != 0)
        s = storage::status(storage::status::code::io_error,
                            std::string("fsync of the directory: ") + std::strerror(errno));
      if (!s.ok()) ::unlinkat(target.dir_fd.fd, "data.mdb", 0);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at).count();
    // On the core strand, once the backup thread is done.
    return [s, refused, dir = target.dir, path, compact, seconds, bytes, done = std::move(done)] {
      if (!refused.empty()) {
        spdlog::warn("backup to {} refused: {}", loggable(path), loggable(refused));
        done({"refused", refused, {}});
      } else if (!s.ok()) {
        spdlog::error("backup to {} failed: {}", loggable(dir), loggable(s.message()));
        done({"refused", "backup to " + dir + " failed: " + s.message(), {}});
      } else {
        spdlog::info("backup to {} done: {} bytes in {:.3f} s", loggable(dir), bytes, seconds);
        done({"ok", {}, to_json(json::object{{"path", dir}, {"compact", compact}, {"bytes", bytes},
                                             {"seconds", json_seconds(seconds)}})});
      }
    };
  });
}

}  // namespace escrow::broker
