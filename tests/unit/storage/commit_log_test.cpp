// The commit log (commit_log.h) and the store's recovery through it (docs/storage.md, "The commit
// log"): records read back in order; a record cut short or with a bad checksum ends the log; a
// log that wrapped; generations; control blocks; and the store reopened after a process that
// died without closing it (its last LMDB commit set aside and the log replayed), after a torn
// last commit, and after a death during replay.
#include <doctest/doctest.h>
#include <lmdb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "small_store.h"
#include "escrow/storage/batch.h"
#include "escrow/storage/commit_log.h"
#include "escrow/storage/lmdb_meta.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

using namespace escrow::storage;
using escrow::testing::open_or_fail;
using escrow::testing::small_store;
using escrow::testing::temp_dir;

namespace {

constexpr std::uint64_t kRing = 16ull << 20;  // the smallest ring the log makes

std::string meta_of(int txnid) { return std::string(kLmdbMetaBytes, static_cast<char>(txnid)); }

std::unique_ptr<commit_log> new_log(const std::string& dir) {
  std::unique_ptr<commit_log> log;
  REQUIRE(commit_log::open(dir, log).ok());
  REQUIRE(log->start_generation(7, meta_of(7), 42, 5, kRing).ok());
  return log;
}

log_position append(commit_log& log, const std::string& payload) {
  log_slot slot;
  bool behind = true;
  REQUIRE(log.reserve(payload.size(), slot, behind).ok());
  REQUIRE_FALSE(behind);
  REQUIRE(log.append(slot, payload) == 0);
  return slot.at;
}

std::vector<std::string> read_all(const std::string& dir, log_position from = {}) {
  std::unique_ptr<commit_log> log;
  status s = commit_log::open(dir, log);
  INFO(s.message());
  REQUIRE(s.ok());
  std::vector<std::string> out;
  REQUIRE(log->replay(from, [&](const log_position&, std::string_view payload) {
                out.emplace_back(payload);
                return status{};
              }).ok());
  return out;
}

std::string payload_of(int i, std::size_t size = 100) { return std::string(size, static_cast<char>('a' + i % 26)); }

void flip_byte(const std::string& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x55);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

batch message_batch(int i) {
  batch b;
  b.put(table::messages, message_key(static_cast<std::uint64_t>(i)), payload_of(i, 300 + i));
  return b;
}

std::map<std::string, std::string> messages(const store& s) {
  std::map<std::string, std::string> out;
  REQUIRE(s.scan(table::messages, "", "", [&](std::string_view k, std::string_view v) {
                 out.emplace(k, v);
                 return true;
               }).ok());
  return out;
}

// Runs `body` in a child process that dies with SIGKILL (the body kills it with its store open:
// no destructor runs, the store is not closed). Returns once the child is gone.
template <typename F>
void in_child_that_dies(F body) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    body();
    raise(SIGKILL);
    _exit(1);
  }
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  REQUIRE(WIFSIGNALED(wstatus));
}

// A store that takes no checkpoint by itself while a test runs (the interval is 10 minutes, and
// these tests write far less than a quarter of the ring): what a child stores is after the log's
// checkpoint when it dies, so the next open sets it aside and replays it, however slow the machine.
// (With the default 500 ms, a slow run could checkpoint every commit first: nothing to replay.)
store_options unhurried(const std::string& dir) {
  store_options o = small_store(dir);
  o.checkpoint_interval_ms = 600000;
  return o;
}

// The child stores batches 0..n-1, each reported durable before the next, and dies.
void store_then_die(const std::string& dir, int n) {
  in_child_that_dies([&] {
    std::unique_ptr<store> s;
    if (!store::open(unhurried(dir), s).ok()) _exit(2);
    for (int i = 0; i < n; ++i) {
      std::promise<bool> done;
      s->submit(message_batch(i), [&](status st) { done.set_value(st.ok()); });
      if (!done.get_future().get()) _exit(3);
    }
    raise(SIGKILL);
  });
}

std::map<std::string, std::string> expected(int n) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < n; ++i) out.emplace(message_key(static_cast<std::uint64_t>(i)), payload_of(i, 300 + i));
  return out;
}

std::uint64_t latest_txnid(const std::string& dir) {
  lmdb_metas metas;
  REQUIRE(read_lmdb_metas(dir + "/data.mdb", metas).ok());
  return metas.latest_txnid;
}

}  // namespace

TEST_SUITE("storage/commit_log") {
  TEST_CASE("records read back in order, and from a position on") {
    temp_dir dir;
    auto log = new_log(dir.path());
    std::vector<log_position> at;
    for (int i = 0; i < 5; ++i) at.push_back(append(*log, payload_of(i)));
    log.reset();
    auto all = read_all(dir.path());
    REQUIRE(all.size() == 5);
    for (int i = 0; i < 5; ++i) CHECK(all[static_cast<std::size_t>(i)] == payload_of(i));
    auto after_two = read_all(dir.path(), at[1]);
    REQUIRE(after_two.size() == 3);
    CHECK(after_two[0] == payload_of(2));
    CHECK(at[4].lsn == 5);
  }

  TEST_CASE("a record cut short ends the log, and so does one with a bad checksum") {
    temp_dir dir;
    auto log = new_log(dir.path());
    std::vector<log_position> at;
    for (int i = 0; i < 3; ++i) at.push_back(append(*log, payload_of(i, 1000)));
    log.reset();
    std::string file = dir.path() + "/log";
    SUBCASE("cut short") {
      // The third record's last 10 bytes never reached the disk (zeros where they were).
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(8192 + at[2].end - 10));
      f.write(std::string(10, '\0').data(), 10);
      f.close();
      CHECK(read_all(dir.path()).size() == 2);
    }
    SUBCASE("bad checksum in the middle: the log ends before it") {
      flip_byte(file, 8192 + at[0].end + 40);
      auto all = read_all(dir.path());
      REQUIRE(all.size() == 1);
      CHECK(all[0] == payload_of(0, 1000));
    }
    SUBCASE("the next record of an older generation is not read") {
      std::unique_ptr<commit_log> again;
      REQUIRE(commit_log::open(dir.path(), again).ok());
      REQUIRE(again->start_generation(9, meta_of(9), 42, 5, kRing).ok());
      append(*again, payload_of(20, 1000));  // overwrites the first record only
      again.reset();
      auto all = read_all(dir.path());
      REQUIRE(all.size() == 1);
      CHECK(all[0] == payload_of(20, 1000));
    }
  }

  TEST_CASE("a log that wrapped reads on from the ring's start") {
    temp_dir dir;
    auto log = new_log(dir.path());
    const std::size_t size = 3u << 20;  // at most a quarter of the ring
    CHECK(log->max_payload() >= size);
    std::vector<log_position> at;
    for (int i = 0; i < 13; ++i) {  // about two laps, a checkpoint after every record
      at.push_back(append(*log, payload_of(i, size)));
      log->keep_from(at.back().end);
    }
    CHECK(at.back().end > 2 * kRing);
    log.reset();
    auto tail = read_all(dir.path(), at[9]);
    REQUIRE(tail.size() == 3);
    for (int k = 0; k < 3; ++k) CHECK(tail[static_cast<std::size_t>(k)] == payload_of(10 + k, size));
    CHECK(std::filesystem::file_size(dir.path() + "/log") <= 8192 + kRing);
  }

  TEST_CASE("a cancelled place leaves no gap: the next record takes its lsn") {
    temp_dir dir;
    auto log = new_log(dir.path());
    append(*log, payload_of(0));
    log_slot cancelled;
    bool behind = false;
    REQUIRE(log->reserve(100, cancelled, behind).ok());
    log->cancel(cancelled);
    log_position next = append(*log, payload_of(1));
    CHECK(next.lsn == cancelled.at.lsn);
    log.reset();
    CHECK(read_all(dir.path()) == std::vector<std::string>{payload_of(0), payload_of(1)});
  }

  TEST_CASE("a record larger than a quarter of the ring has no place in it") {
    temp_dir dir;
    auto log = new_log(dir.path());
    CHECK(log->max_payload() < kRing / 4);
  }

  TEST_CASE("a record that would overwrite one after the checkpoint waits for a checkpoint") {
    temp_dir dir;
    auto log = new_log(dir.path());
    const std::size_t size = 3u << 20;
    int written = 0;
    for (;; ++written) {
      log_slot slot;
      bool behind = false;
      REQUIRE(log->reserve(size, slot, behind).ok());
      if (behind) break;
      REQUIRE(log->append(slot, payload_of(written, size)) == 0);
      REQUIRE(written < 10);
    }
    CHECK(written == 5);  // one lap of the 16 MiB ring, no checkpoint since the first record
    log->keep_from(log->since_checkpoint());  // a checkpoint of everything written
    log_slot slot;
    bool behind = true;
    REQUIRE(log->reserve(size, slot, behind).ok());
    CHECK_FALSE(behind);
  }

  TEST_CASE("control blocks: the newer valid one counts; another format version is refused") {
    temp_dir dir;
    {
      auto log = new_log(dir.path());
      REQUIRE(log->set_checkpoint(11, meta_of(11)).ok());  // sequence 2, in slot 1
    }
    std::unique_ptr<commit_log> log;
    REQUIRE(commit_log::open(dir.path(), log).ok());
    CHECK(log->current().checkpoint == 11);
    CHECK(log->current().checkpoint_meta == meta_of(11));
    log.reset();
    flip_byte(dir.path() + "/log", 4096 + 20);  // slot 1 no longer checks out: slot 0 is current
    REQUIRE(commit_log::open(dir.path(), log).ok());
    CHECK(log->current().checkpoint == 7);
    log.reset();
    std::fstream f(dir.path() + "/log", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.write("\0\0\0\x09", 4);  // version 9 in slot 0
    f.close();
    status s = commit_log::open(dir.path(), log);
    CHECK(s.which() == status::code::bad_schema);
    CHECK(s.message().find("format version 9") != std::string::npos);
  }

  TEST_CASE("the meta pages read as LMDB reads them") {
    temp_dir dir;
    {
      auto s = open_or_fail(small_store(dir.path()));
      for (int i = 0; i < 3; ++i) {
        std::promise<status> p;
        s->submit(message_batch(i), [&](status st) { p.set_value(std::move(st)); });
        REQUIRE(p.get_future().get().ok());
      }
    }
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == 0);
    REQUIRE(mdb_env_set_maxdbs(env, 16) == 0);
    REQUIRE(mdb_env_open(env, dir.path().c_str(), MDB_RDONLY, 0600) == 0);
    MDB_envinfo info{};
    REQUIRE(mdb_env_info(env, &info) == 0);
    mdb_env_close(env);
    lmdb_metas metas;
    REQUIRE(read_lmdb_metas(dir.path() + "/data.mdb", metas).ok());
    CHECK(metas.latest_txnid == info.me_last_txnid);
    CHECK(metas.other_txnid + 1 == metas.latest_txnid);
  }
}

TEST_SUITE("storage/recovery") {
  TEST_CASE("a store whose process died keeps every batch reported stored") {
    temp_dir dir;
    store_then_die(dir.path(), 20);
    auto s = open_or_fail(small_store(dir.path()));
    CHECK(messages(*s) == expected(20));
    s.reset();
    // Closed cleanly this time: the next open has nothing to set aside.
    std::uint64_t before = latest_txnid(dir.path());
    s = open_or_fail(small_store(dir.path()));
    CHECK(latest_txnid(dir.path()) == before);
    CHECK(messages(*s) == expected(20));
  }

  TEST_CASE("a torn last commit (its meta page on disk, its pages not) is set aside and replayed") {
    temp_dir dir;
    store_then_die(dir.path(), 10);
    // What a power cut can leave of an unsynced commit: point the latest meta page's main tree at
    // a page that holds nothing of it. LMDB alone would read garbage; the store must not.
    lmdb_metas metas;
    REQUIRE(read_lmdb_metas(dir.path() + "/data.mdb", metas).ok());
    {
      std::fstream f(dir.path() + "/data.mdb", std::ios::in | std::ios::out | std::ios::binary);
      // The page header (16 bytes), magic, version, address and map size (24), the free list's
      // MDB_db (48), then the main tree's MDB_db, whose root is its last field (at 40).
      std::uint64_t root_at = static_cast<std::uint64_t>(metas.latest_page) * metas.page_size + 16 + 24 + 48 + 40;
      f.seekp(static_cast<std::streamoff>(root_at));
      std::uint64_t bogus = 3;
      f.write(reinterpret_cast<const char*>(&bogus), sizeof bogus);
    }
    auto s = open_or_fail(small_store(dir.path()));
    CHECK(messages(*s) == expected(10));
  }

  TEST_CASE("a death during replay: the next start replays again, once") {
    if (!fault_injection_compiled()) return;
    temp_dir dir;
    store_then_die(dir.path(), 8);
    in_child_that_dies([&] {
      std::unique_ptr<store> s;
      (void)store::open(small_store(dir.path(), "replay:1:kill"), s);
    });
    auto s = open_or_fail(small_store(dir.path()));
    CHECK(messages(*s) == expected(8));
  }

  TEST_CASE("replay is idempotent: records LMDB holds are not applied twice") {
    temp_dir dir;
    // Batch i stores message i with 3 references and drops one reference of message i - 2. A
    // record applied twice would drop two: its counts would differ from this model.
    auto refs = [](std::uint32_t n) {
      std::string v;
      for (int shift = 24; shift >= 0; shift -= 8) v.push_back(static_cast<char>((n >> shift) & 0xff));
      return v;
    };
    in_child_that_dies([&] {
      std::unique_ptr<store> s;
      if (!store::open(unhurried(dir.path()), s).ok()) _exit(2);
      for (int i = 0; i < 6; ++i) {
        batch b = message_batch(i);
        b.put(table::message_refs, message_key(static_cast<std::uint64_t>(i)), refs(3));
        if (i >= 2) b.release_message(message_key(static_cast<std::uint64_t>(i - 2)));
        std::promise<bool> done;
        s->submit(std::move(b), [&](status st) { done.set_value(st.ok()); });
        if (!done.get_future().get()) _exit(3);
      }
      raise(SIGKILL);
    });
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      auto s = open_or_fail(small_store(dir.path()));
      CHECK(messages(*s) == expected(6));
      for (int i = 0; i < 6; ++i) {
        CAPTURE(i);
        std::string v;
        REQUIRE(s->get(table::message_refs, message_key(static_cast<std::uint64_t>(i)), v).ok());
        CHECK(v == refs(i < 4 ? 2 : 3));
      }
    }
  }

  TEST_CASE("a new data.mdb beside an old log: nothing of the log is replayed into it") {
    temp_dir dir;
    store_then_die(dir.path(), 5);
    std::filesystem::remove(dir.path() + "/data.mdb");
    std::filesystem::remove(dir.path() + "/lock.mdb");
    auto s = open_or_fail(small_store(dir.path()));
    CHECK(messages(*s).empty());
  }

  TEST_CASE("another store's data.mdb copied over the live file is not replayed into") {
    temp_dir dir, other;
    {
      auto b = open_or_fail(small_store(other.path()));
      std::promise<status> p;
      batch only;
      only.put(table::messages, message_key(999), "other");
      b->submit(std::move(only), [&](status st) { p.set_value(std::move(st)); });
      REQUIRE(p.get_future().get().ok());
    }
    store_then_die(dir.path(), 20);
    std::filesystem::copy_file(other.path() + "/data.mdb", dir.path() + "/data.mdb",
                               std::filesystem::copy_options::overwrite_existing);  // same inode
    // Either the copy opens as it is (nothing replayed into it), or, when it had already been set
    // back to the log's checkpoint, escrowd refuses and says why; never a mix of the two stores.
    std::unique_ptr<store> s;
    status st = store::open(small_store(dir.path()), s);
    if (!st.ok()) {
      CHECK((st.message().find("not the store its commit log belongs to") != std::string::npos ||
             st.message().find("older than commit") != std::string::npos));
      return;
    }
    auto m = messages(*s);
    REQUIRE(m.size() == 1);
    CHECK(m.begin()->second == "other");
  }

  TEST_CASE("a data.mdb older than its log's checkpoint is refused, naming both files") {
    // Only a disk that lost writes it reported done, or an older copy written over the live file
    // (the same inode), makes one. It once opened with a warning and the log discarded: empty.
    temp_dir dir;
    auto store_batches = [&](int from, int to) {
      auto s = open_or_fail(small_store(dir.path()));
      for (int i = from; i < to; ++i) {
        std::promise<status> p;
        s->submit(message_batch(i), [&](status st) { p.set_value(std::move(st)); });
        REQUIRE(p.get_future().get().ok());
      }
    };  // each closes cleanly: a checkpoint of its last commit
    store_batches(0, 1);
    std::filesystem::copy_file(dir.path() + "/data.mdb", dir.path() + "/old.mdb");
    store_batches(1, 6);
    std::filesystem::copy_file(dir.path() + "/old.mdb", dir.path() + "/data.mdb",
                               std::filesystem::copy_options::overwrite_existing);  // same inode
    std::unique_ptr<store> s;
    status st = store::open(small_store(dir.path()), s);
    CHECK(st.which() == status::code::corrupt);
    CHECK(st.message().find(dir.path() + "/data.mdb holds LMDB commit") != std::string::npos);
    CHECK(st.message().find(dir.path() + "/log") != std::string::npos);
    CHECK(st.message().find("restore the last backup") != std::string::npos);
  }

  TEST_CASE("recovery waits for no one: another process with the store open is named and refused") {
    temp_dir dir;
    store_then_die(dir.path(), 3);
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    pid_t reader = fork();
    REQUIRE(reader >= 0);
    if (reader == 0) {  // an escrow check, say: LMDB open read-only, holding lock.mdb
      MDB_env* env = nullptr;
      mdb_env_create(&env);
      mdb_env_set_maxdbs(env, 16);
      if (mdb_env_open(env, dir.path().c_str(), MDB_RDONLY, 0600) != 0) _exit(2);
      if (write(ready[1], "x", 1) != 1) _exit(3);
      pause();
      _exit(0);
    }
    char c = 0;
    REQUIRE(read(ready[0], &c, 1) == 1);
    std::unique_ptr<store> s;
    status st = store::open(small_store(dir.path()), s);
    CHECK(st.which() == status::code::io_error);
    CHECK(st.message().find("another process has the store") != std::string::npos);
    kill(reader, SIGKILL);
    waitpid(reader, nullptr, 0);
    close(ready[0]);
    close(ready[1]);
    s = open_or_fail(small_store(dir.path()));
    CHECK(messages(*s) == expected(3));
  }

  TEST_CASE("after a failed checkpoint no checkpoint is recorded again, and nothing stored is lost") {
    if (!fault_injection_compiled()) return;
    temp_dir dir;
    std::uint64_t checkpoint_at_open = 0;
    int stored = 0;
    {
      store_options o = small_store(dir.path(), "data_sync:2:eio");
      o.checkpoint_interval_ms = 1;
      auto s = open_or_fail(o);
      std::unique_ptr<commit_log> log;
      REQUIRE(commit_log::open(dir.path(), log).ok());
      checkpoint_at_open = log->current().checkpoint;
      for (int i = 0; i < 200; ++i) {
        std::promise<status> p;
        s->submit(message_batch(i), [&](status st) { p.set_value(std::move(st)); });
        if (!p.get_future().get().ok()) break;
        ++stored;  // 200 groups take far longer than the 1 ms between checkpoints
      }
      REQUIRE(stored < 200);  // the failure stopped the store
      CHECK_FALSE(s->writable());
    }
    std::unique_ptr<commit_log> log;
    REQUIRE(commit_log::open(dir.path(), log).ok());
    std::uint64_t recorded = log->current().checkpoint;
    log.reset();
    auto s = open_or_fail(small_store(dir.path()));
    auto m = messages(*s);
    for (int i = 0; i < stored; ++i) CHECK(m.count(message_key(static_cast<std::uint64_t>(i))) == 1);
    // The first checkpoint (data_sync 1) may be recorded; none after the failed second one.
    CHECK(recorded >= checkpoint_at_open);
    CHECK(recorded <= checkpoint_at_open + static_cast<std::uint64_t>(stored));
  }
}
