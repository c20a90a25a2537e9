// `escrow backup`: a hot copy of the LMDB environment (mdb_env_copy2, optionally compacted) into a
// directory on the broker's machine, made on a thread of its own while the broker keeps serving.
// The copy is one consistent read snapshot: every batch committed before it began, nothing after.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <system_error>

#include "admin_json.h"
#include "core.h"
#include "escrow/storage/store.h"

namespace escrow::broker {

void broker::impl::admin_backup(const frame& f, admin_done done) {
  namespace fs = std::filesystem;
  std::string path(f.get("path"));
  bool compact = f.get("compact") == "true";
  if (path.empty() || !fs::path(path).is_absolute())
    return done({"invalid", "backup needs an absolute path header (a directory on the broker's machine), got '" +
                                path + "'", {}});
  if (backup_running) return done({"refused", "a backup is already running; try again when it has finished", {}});
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return done({"refused", "cannot create " + path + ": " + ec.message(), {}});
  if (fs::exists(fs::path(path) / "data.mdb", ec))
    return done({"refused", path + " already holds a data.mdb: name an empty directory", {}});
  if (backup_worker.joinable()) backup_worker.join();  // the last one, finished
  backup_running = true;
  spdlog::info("backup to {} started{}", path, compact ? " (compacting)" : "");
  backup_worker = std::thread([this, path, compact, done = std::move(done)]() mutable {
    auto started_at = std::chrono::steady_clock::now();
    storage::status s = store.copy_to(path, compact);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at).count();
    std::error_code size_error;
    auto bytes = fs::file_size(fs::path(path) / "data.mdb", size_error);
    post([this, s, path, compact, seconds, bytes, done = std::move(done)] {
      backup_running = false;
      if (!s.ok()) {
        spdlog::error("backup to {} failed: {}", path, s.message());
        done({"refused", "backup to " + path + " failed: " + s.message(), {}});
      } else {
        spdlog::info("backup to {} done: {} bytes in {:.3f} s", path, bytes, seconds);
        json_writer j;
        j.begin_object()
            .field("path", path)
            .field("compact", compact)
            .field("bytes", static_cast<std::uint64_t>(bytes))
            .field("seconds", seconds)
            .end_object();
        done({"ok", {}, j.str()});
      }
      flush();
    });
  });
}

}  // namespace escrow::broker
