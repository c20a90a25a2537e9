// Crash test of the store: a writer process is killed with SIGKILL at a random moment while it
// commits batches, then the store is reopened and checked. Every round uses the same data
// directory, so each round also recovers what earlier recoveries left behind.
//
//   storage_crash [--rounds N] [--seed S] [--keep] [--faults]   the harness (what `meson test` runs)
//   storage_crash --writer DIR START_BATCH [PLAN CHECKPOINT_MS]  the writer, started by the harness
//
// With --faults every round also refuses writes and slows the disk through the fault-injection
// seam (fault_injection.h), at random: commits refused (a full disk, a full map, a failed page
// write), checkpoints' syncs of data.mdb stalled so that the log's small ring (16 MiB) wraps
// while one waits, and a random checkpoint interval. The writer reports a refused batch as
// "refused <i>"; a refused batch must not be in the store, and the others still commit in order.
//
// The content of batch i is a pure function of i, so the harness recomputes what each batch wrote
// and erased. The writer numbers and submits batches in one order under a lock and reports on its
// stdout, with single write(2) calls, "sub <i>" before submitting batch i and "done <i>" once its
// completion said ok (that is, once it is durable). After the kill the harness checks:
//   - every batch reported done is present in full;
//   - every batch is present in full (its puts in two tables and its erases) or absent entirely;
//   - the batches of a round that survived are a prefix of those submitted (commit order);
//   - nothing else is in the store.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <semaphore>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "escrow/storage/batch.h"
#include "escrow/storage/coding.h"
#include "escrow/storage/schema.h"
#include "escrow/storage/store.h"

using namespace escrow::storage;

namespace {

// ---- The content of batch i ---------------------------------------------------------------

// Batch i erases some keys of batch i - kEraseDistance, which was submitted before it.
constexpr std::uint64_t kEraseDistance = 50;
constexpr int kMaxKeys = 20;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::uint64_t hash3(std::uint64_t i, std::uint64_t j, std::uint64_t salt) {
  return mix(mix(i) ^ mix(j * 0x100000001b3ull + salt));
}

int key_count(std::uint64_t i) { return 1 + static_cast<int>(hash3(i, 0, 1) % kMaxKeys); }

std::string entry_name(std::uint64_t i, int j) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "b%012llu/k%02d", static_cast<unsigned long long>(i), j);
  return buf;
}

bool parse_entry_name(std::string_view key, std::uint64_t& i, int& j) {
  if (key.size() != 17 || key[0] != 'b' || key.substr(13, 2) != "/k") return false;
  i = 0;
  for (char c : key.substr(1, 12)) {
    if (c < '0' || c > '9') return false;
    i = i * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (key[15] < '0' || key[15] > '9' || key[16] < '0' || key[16] > '9') return false;
  j = (key[15] - '0') * 10 + (key[16] - '0');
  return true;
}

// One key in thirty (one batch in three) holds a value of 3 to 12 KiB, on overflow pages.
std::size_t value_size(std::uint64_t i, int j) {
  std::uint64_t r = hash3(i, static_cast<std::uint64_t>(j), 2);
  return r % 30 == 0 ? 3000 + (r >> 8) % 9000 : 16 + (r >> 8) % 120;
}

char value_byte(std::uint64_t seed, std::size_t k) {
  return static_cast<char>(seed + k * 131 + (k >> 8));
}

// 8 bytes batch number, 1 byte key number, then a pattern seeded by both.
std::string make_value(std::uint64_t i, int j) {
  std::string v;
  put_u64(v, i);
  v.push_back(static_cast<char>(j));
  const std::size_t size = value_size(i, j);
  const std::uint64_t seed = hash3(i, static_cast<std::uint64_t>(j), 3);
  v.reserve(size);
  for (std::size_t k = v.size(); k < size; ++k) v.push_back(value_byte(seed, k));
  return v;
}

// `full` compares every byte; otherwise the size, the head and the tail.
bool value_matches(std::uint64_t i, int j, std::string_view v, bool full) {
  if (v.size() != value_size(i, j)) return false;
  std::string_view head = v;
  std::uint64_t got_i = 0;
  if (!get_u64(head, got_i) || got_i != i || static_cast<unsigned char>(head[0]) != j) return false;
  const std::uint64_t seed = hash3(i, static_cast<std::uint64_t>(j), 3);
  if (!full) return v.back() == value_byte(seed, v.size() - 1);
  for (std::size_t k = 9; k < v.size(); ++k)
    if (v[k] != value_byte(seed, k)) return false;
  return true;
}

bool erases_older(std::uint64_t i) { return i >= kEraseDistance && hash3(i, 0, 4) % 8 != 0; }

// Whether batch `eraser` erases key j of batch eraser - kEraseDistance. Key 0 is never erased.
bool erases_key(std::uint64_t eraser, int j) {
  return erases_older(eraser) && j >= 1 && j < key_count(eraser - kEraseDistance) &&
         hash3(eraser, static_cast<std::uint64_t>(j), 5) % 8 != 0;
}

std::string marker_value(std::uint64_t i) {
  std::string v;
  put_u64(v, i);
  put_u32(v, static_cast<std::uint32_t>(key_count(i)));
  return v;
}

// Puts a marker in `messages` and the keys in `entries`, so a batch spans two tables.
batch make_batch(std::uint64_t i) {
  batch b;
  b.put(table::messages, message_key(i), marker_value(i));
  for (int j = 0; j < key_count(i); ++j) b.put(table::entries, entry_name(i, j), make_value(i, j));
  if (erases_older(i)) {
    const std::uint64_t old = i - kEraseDistance;
    for (int j = 1; j < key_count(old); ++j)
      if (erases_key(i, j)) b.erase(table::entries, entry_name(old, j));
  }
  return b;
}

// ---- The writer -------------------------------------------------------------------------------

int report_fd = STDOUT_FILENO;  // the writer's report to the harness

void write_line(const std::string& line) {
  // One write(2) of less than PIPE_BUF bytes: atomic, so lines from threads never interleave.
  ssize_t n = ::write(report_fd, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) _exit(3);
}

int run_writer(const std::string& dir, std::uint64_t start, const std::string& plan, int checkpoint_ms) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The report goes to the harness's pipe alone; whatever else writes to stdout (the store's log
  // lines) goes to stderr.
  report_fd = ::dup(STDOUT_FILENO);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  store_options options;
  options.path = dir;
  options.map_size = 2ull << 30;
  if (!plan.empty()) {
    std::string error;
    if (!fault_plan::parse(plan, options.faults, error)) {
      std::fprintf(stderr, "storage_crash writer: %s\n", error.c_str());
      return 2;
    }
    options.log_size = 16ull << 20;  // the smallest ring: it wraps within a round
    options.checkpoint_interval_ms = static_cast<std::uint32_t>(checkpoint_ms);
    options.min_free_disk = 0;
  }
  std::unique_ptr<store> s;
  if (status st = store::open(options, s); !st.ok()) {
    std::fprintf(stderr, "storage_crash writer: open failed: %s\n", st.message().c_str());
    return 2;
  }

  constexpr int kThreads = 4;
  constexpr int kInFlightPerThread = 8;
  std::mutex submit_mutex;
  std::uint64_t next = start;
  std::vector<std::unique_ptr<std::counting_semaphore<kInFlightPerThread>>> slots;
  for (int t = 0; t < kThreads; ++t)
    slots.push_back(std::make_unique<std::counting_semaphore<kInFlightPerThread>>(kInFlightPerThread));

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto& slot = *slots[t];
      for (;;) {
        slot.acquire();
        // Numbering and submitting under one lock makes submission order batch-number order.
        std::lock_guard lock(submit_mutex);
        const std::uint64_t i = next++;
        batch b = make_batch(i);
        write_line("sub " + std::to_string(i) + "\n");
        s->submit(std::move(b), [i, &slot](status st) {
          if (st.ok()) {
            write_line("done " + std::to_string(i) + "\n");
          } else if (st.which() == status::code::store_full || st.which() == status::code::io_error) {
            write_line("refused " + std::to_string(i) + "\n");  // a write the seam refused: not stored
          } else {
            write_line("fail " + std::to_string(i) + " " + st.message().substr(0, 200) + "\n");
          }
          slot.release();
        });
      }
    });
  }
  for (auto& th : threads) th.join();  // never: the harness kills this process
  return 0;
}

// ---- The harness ------------------------------------------------------------------------------

struct round_report {
  std::uint64_t first_sub = 0, last_sub = 0;  // valid when any_sub
  bool any_sub = false;
  std::vector<std::uint64_t> done;
  std::set<std::uint64_t> refused;
  std::vector<std::string> failures;  // "fail" lines and protocol errors
};

class harness {
 public:
  harness(std::string dir, std::string self) : dir_(std::move(dir)), self_(std::move(self)) {}

  // Runs one round: start the writer, kill it after `delay_ms`, check the store.
  bool run_round(int round, int delay_ms, const std::string& plan = {}, int checkpoint_ms = 0) {
    round_report report;
    int exit_status = 0;
    if (!run_writer_process(delay_ms, plan, checkpoint_ms, report, exit_status)) return false;
    if (!WIFSIGNALED(exit_status) || WTERMSIG(exit_status) != SIGKILL) {
      return fail(round, "the writer ended by itself (status " + std::to_string(exit_status) +
                             ") instead of being killed; see its stderr above");
    }
    if (!report.failures.empty()) return fail(round, report.failures.front());

    const std::uint64_t round_start = next_batch_;
    if (report.any_sub) {
      if (report.first_sub != round_start)
        return fail(round, "the first batch submitted was " + std::to_string(report.first_sub) +
                               ", expected " + std::to_string(round_start));
      next_batch_ = report.last_sub + 1;
    }
    applied_.resize(next_batch_, false);
    submitted_ += next_batch_ - round_start;
    refused_.insert(report.refused.begin(), report.refused.end());
    refused_count_ += report.refused.size();
    if (!verify(round, round_start, report.done, false)) return false;
    return true;
  }

  bool final_check(int rounds) { return verify(rounds, next_batch_, {}, true); }

  std::uint64_t submitted() const { return submitted_; }
  std::uint64_t confirmed() const { return confirmed_; }
  std::uint64_t applied_unconfirmed() const { return applied_unconfirmed_; }
  std::uint64_t applied_count() const {
    std::uint64_t n = 0;
    for (bool a : applied_) n += a;
    return n;
  }
  std::uint64_t live_keys() const { return live_keys_; }
  std::uint64_t refused() const { return refused_count_; }

 private:
  bool fail(int round, const std::string& what) {
    std::fprintf(stderr, "storage-crash: round %d: VIOLATION: %s\n", round, what.c_str());
    return false;
  }

  bool run_writer_process(int delay_ms, const std::string& plan, int checkpoint_ms, round_report& report,
                          int& exit_status) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("storage-crash: pipe2");
      return false;
    }
    const std::string start = std::to_string(next_batch_), interval = std::to_string(checkpoint_ms);
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("storage-crash: fork");
      return false;
    }
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);  // the duplicate does not inherit O_CLOEXEC
      const char* argv[] = {self_.c_str(), "--writer", dir_.c_str(), start.c_str(),
                            plan.empty() ? nullptr : plan.c_str(), interval.c_str(), nullptr};
      execv(self_.c_str(), const_cast<char* const*>(argv));
      _exit(127);
    }
    close(fds[1]);

    std::string pending;
    auto consume = [&](const char* data, std::size_t n) {
      pending.append(data, n);
      std::size_t pos;
      while ((pos = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, pos);
        pending.erase(0, pos + 1);
        parse_line(line, report);
      }
    };

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    char buf[65536];
    bool eof = false;
    while (!eof) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fds[0], POLLIN, 0};
      int r = poll(&p, 1, static_cast<int>(left.count()) + 1);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) consume(buf, static_cast<std::size_t>(n));
      else if (n == 0) eof = true;
    }
    kill(pid, SIGKILL);
    // Lines written before the kill are still in the pipe; read them to the end.
    for (;;) {
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) consume(buf, static_cast<std::size_t>(n));
      else if (n == 0 || errno != EINTR) break;
    }
    close(fds[0]);
    while (waitpid(pid, &exit_status, 0) < 0 && errno == EINTR) {
    }
    if (!pending.empty()) report.failures.push_back("the writer left a partial line: '" + pending + "'");
    return true;
  }

  void parse_line(const std::string& line, round_report& report) {
    auto number = [](std::string_view s, std::uint64_t& out) {
      if (s.empty()) return false;
      out = 0;
      for (char c : s) {
        if (c < '0' || c > '9') return false;
        out = out * 10 + static_cast<std::uint64_t>(c - '0');
      }
      return true;
    };
    std::uint64_t i = 0;
    std::string_view l = line;
    if (l.starts_with("sub ") && number(l.substr(4), i)) {
      if (report.any_sub && i != report.last_sub + 1)
        report.failures.push_back("batch " + std::to_string(i) + " was submitted after " +
                                  std::to_string(report.last_sub) + ": the writer skipped a number");
      if (!report.any_sub) report.first_sub = i;
      report.any_sub = true;
      report.last_sub = i;
    } else if (l.starts_with("done ") && number(l.substr(5), i)) {
      if (!report.any_sub || i < report.first_sub || i > report.last_sub)
        report.failures.push_back("batch " + std::to_string(i) + " was reported done but never submitted");
      else if (!report.done.empty() && i <= report.done.back())
        report.failures.push_back("completion of batch " + std::to_string(i) + " came after that of " +
                                  std::to_string(report.done.back()) + ": out of submission order");
      report.done.push_back(i);
    } else if (l.starts_with("refused ") && number(l.substr(8), i)) {
      report.refused.insert(i);
    } else {
      report.failures.push_back("the writer reported: " + line);
    }
  }

  // Whether key j of batch i must be in the store now.
  bool entry_expected(std::uint64_t i, int j) const {
    if (i >= applied_.size() || !applied_[i] || j >= key_count(i)) return false;
    const std::uint64_t eraser = i + kEraseDistance;
    return !(eraser < applied_.size() && applied_[eraser] && erases_key(eraser, j));
  }

  // Checks the whole store against the model. Batches from round_start on were written in this
  // round: the store decides whether they were applied, and the checks below decide whether that
  // is consistent.
  bool verify(int round, std::uint64_t round_start, const std::vector<std::uint64_t>& done, bool full) {
    std::unique_ptr<store> s;
    store_options options;
    options.path = dir_;
    options.map_size = 2ull << 30;
    if (status st = store::open(options, s); !st.ok())
      return fail(round, "the store does not open after the crash: " + st.message());

    // 1. The marker of each batch says whether it was applied.
    for (std::uint64_t i = round_start; i < next_batch_; ++i) {
      std::string v;
      status st = s->get(table::messages, message_key(i), v);
      if (st.ok()) {
        if (v != marker_value(i)) return fail(round, "the marker of batch " + std::to_string(i) + " is corrupt");
        applied_[i] = true;
      } else if (st.which() != status::code::not_found) {
        return fail(round, "reading the marker of batch " + std::to_string(i) + ": " + st.message());
      }
    }
    // 2. Commits follow submission order, so the batches that survived are a prefix (of those
    // not refused: a refused batch is never stored).
    std::uint64_t previous = UINT64_MAX;  // the last batch before i that was not refused
    for (std::uint64_t i = round_start; i < next_batch_; ++i) {
      if (refused_.count(i)) {
        if (applied_[i]) return fail(round, "batch " + std::to_string(i) + " was refused, yet it is in the store");
        continue;
      }
      if (applied_[i] && previous != UINT64_MAX && !applied_[previous])
        return fail(round, "batch " + std::to_string(i) + " survived but batch " + std::to_string(previous) +
                               ", submitted before it, did not");
      previous = i;
    }
    // 3. Every batch reported durable survived.
    for (std::uint64_t i : done) {
      if (!applied_[i])
        return fail(round, "batch " + std::to_string(i) + " was reported durable but is not in the store");
      ++confirmed_;
    }
    {
      std::set<std::uint64_t> done_set(done.begin(), done.end());
      for (std::uint64_t i = round_start; i < next_batch_; ++i)
        if (applied_[i] && !done_set.count(i)) ++applied_unconfirmed_;
    }

    // 4. The markers table holds exactly the applied batches.
    std::uint64_t expected_markers = applied_count(), markers = 0;
    std::string problem;
    status st = s->scan(table::messages, "", "", [&](std::string_view k, std::string_view v) {
      std::uint64_t i = 0;
      if (!parse_message_key(k, i) || i >= next_batch_ || !applied_[i]) {
        problem = "an unexpected marker is in the store";
        return false;
      }
      if (v != marker_value(i)) {
        problem = "the marker of batch " + std::to_string(i) + " is corrupt";
        return false;
      }
      ++markers;
      return true;
    });
    if (!st.ok()) return fail(round, "scan of the markers failed: " + st.message());
    if (!problem.empty()) return fail(round, problem);
    if (markers != expected_markers)
      return fail(round, std::to_string(markers) + " markers, expected " + std::to_string(expected_markers));

    // 5. The entries hold exactly the keys of applied batches minus what applied batches erased,
    // with the right values: no batch is half applied, no erase happened without its batch.
    std::uint64_t expected_keys = 0;
    for (std::uint64_t i = 0; i < next_batch_; ++i)
      if (applied_[i])
        for (int j = 0; j < key_count(i); ++j) expected_keys += entry_expected(i, j);
    std::uint64_t keys = 0;
    // Values written or erased this round get a byte-for-byte check; older ones were checked then.
    const std::uint64_t full_from = round_start > kEraseDistance ? round_start - kEraseDistance : 0;
    st = s->scan(table::entries, "", "", [&](std::string_view k, std::string_view v) {
      std::uint64_t i = 0;
      int j = 0;
      if (!parse_entry_name(k, i, j)) {
        problem = "an unexpected key '" + std::string(k) + "' is in the entries";
        return false;
      }
      if (!entry_expected(i, j)) {
        if (i < next_batch_ && applied_[i] && j < key_count(i))
          problem = "key " + std::string(k) + " should have been erased by batch " +
                    std::to_string(i + kEraseDistance) + ", which is in the store";
        else
          problem = "key " + std::string(k) + " is in the store, but its batch is not";
        return false;
      }
      if (!value_matches(i, j, v, full || i >= full_from)) {
        problem = "the value of " + std::string(k) + " is wrong (" + std::to_string(v.size()) + " bytes)";
        return false;
      }
      ++keys;
      return true;
    });
    if (!st.ok()) return fail(round, "scan of the entries failed: " + st.message());
    if (!problem.empty()) return fail(round, problem);
    if (keys != expected_keys) {
      // Find the first missing key for a precise message.
      for (std::uint64_t i = 0; i < next_batch_; ++i)
        for (int j = 0; j < key_count(i); ++j) {
          std::string v;
          if (entry_expected(i, j) && !s->get(table::entries, entry_name(i, j), v).ok()) {
            const bool erase_expected = i + kEraseDistance < next_batch_ && erases_key(i + kEraseDistance, j);
            return fail(round, "key " + entry_name(i, j) + " of applied batch " + std::to_string(i) +
                                   " is missing" +
                                   (erase_expected ? " (batch " + std::to_string(i + kEraseDistance) +
                                                         " would erase it, but that batch is not in the store)"
                                                   : ""));
          }
        }
      return fail(round, std::to_string(keys) + " keys in the entries, expected " + std::to_string(expected_keys));
    }
    live_keys_ = keys;
    return true;
  }

  std::string dir_;
  std::string self_;
  std::uint64_t next_batch_ = 0;
  std::vector<bool> applied_;
  std::uint64_t submitted_ = 0;
  std::uint64_t confirmed_ = 0;
  std::uint64_t applied_unconfirmed_ = 0;
  std::uint64_t live_keys_ = 0;
  std::set<std::uint64_t> refused_;
  std::uint64_t refused_count_ = 0;
};

std::uint64_t directory_bytes(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) == 0) total += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

int usage() {
  std::fprintf(stderr,
               "usage: storage_crash [--rounds N] [--seed S] [--keep] [--faults]\n"
               "       storage_crash --writer DIR START_BATCH [PLAN CHECKPOINT_MS]\n");
  return 2;
}

// A round's random faults: one to three commits refused (the same way each), and from some
// checkpoint on every sync of data.mdb stalled, so that the ring goes round while it waits.
std::string random_plan(std::mt19937_64& rng, int& checkpoint_ms) {
  static const char* const refusals[] = {"enospc", "map_full", "eio"};
  const char* refusal = refusals[rng() % 3];
  std::string plan;
  std::uint64_t k = 1 + rng() % 8;
  for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n, k += 1 + rng() % 40)
    plan += "commit:" + std::to_string(k) + ":" + refusal + ",";
  plan += "data_sync:" + std::to_string(1 + rng() % 4) + "+:stall";
  static const int intervals[] = {1, 20, 500};
  checkpoint_ms = intervals[rng() % 3];
  return plan;
}

int run_harness(int rounds, std::uint64_t seed, bool keep, bool faults) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::perror("storage-crash: readlink /proc/self/exe");
    return 2;
  }
  self[n] = '\0';
  std::string dir = "/tmp/escrow-storage-crash-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("storage-crash: mkdtemp");
    return 2;
  }
  std::printf("storage-crash: seed %llu, %d rounds, data in %s (rerun with --seed %llu)\n",
              static_cast<unsigned long long>(seed), rounds, dir.c_str(), static_cast<unsigned long long>(seed));
  std::fflush(stdout);

  const auto started = std::chrono::steady_clock::now();
  std::mt19937_64 rng(seed);
  harness h(dir, self);
  bool ok = true;
  for (int round = 0; round < rounds && ok; ++round) {
    if (!faults) {
      ok = h.run_round(round, 5 + static_cast<int>(rng() % 296));
      continue;
    }
    int checkpoint_ms = 0;
    std::string plan = random_plan(rng, checkpoint_ms);
    // Long enough for the ring to wrap behind a stalled checkpoint.
    ok = h.run_round(round, 200 + static_cast<int>(rng() % 1800), plan, checkpoint_ms);
    if (!ok) std::fprintf(stderr, "storage-crash: the round's faults: %s, checkpoint every %d ms\n", plan.c_str(), checkpoint_ms);
  }
  if (ok) ok = h.final_check(rounds);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::uint64_t disk = directory_bytes(dir);

  if (!ok) {
    std::fprintf(stderr, "storage-crash: FAILED with seed %llu; the data is kept in %s\n",
                 static_cast<unsigned long long>(seed), dir.c_str());
    return 1;
  }
  std::printf("storage-crash: %d rounds%s, %llu batches submitted, %llu confirmed, all present, %llu refused, "
              "none stored, none partial (%llu in the store, %llu of them applied but killed before confirmation; "
              "%llu live keys, %.1f MiB on disk, %.1f s)\n",
              rounds, faults ? " with faults" : "", static_cast<unsigned long long>(h.submitted()),
              static_cast<unsigned long long>(h.confirmed()), static_cast<unsigned long long>(h.refused()),
              static_cast<unsigned long long>(h.applied_count()),
              static_cast<unsigned long long>(h.applied_unconfirmed()), static_cast<unsigned long long>(h.live_keys()),
              static_cast<double>(disk) / (1 << 20), seconds);
  if (!keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--writer") {
    if (args.size() != 3 && args.size() != 5) return usage();
    return run_writer(args[1], std::strtoull(args[2].c_str(), nullptr, 10), args.size() == 5 ? args[3] : "",
                      args.size() == 5 ? std::atoi(args[4].c_str()) : 0);
  }
  int rounds = 60;
  std::uint64_t seed = std::random_device{}();
  bool keep = false, faults = false;
  for (std::size_t k = 0; k < args.size(); ++k) {
    if (args[k] == "--rounds" && k + 1 < args.size()) {
      rounds = std::atoi(args[++k].c_str());
      if (rounds <= 0) return usage();
    } else if (args[k] == "--seed" && k + 1 < args.size()) {
      seed = std::strtoull(args[++k].c_str(), nullptr, 10);
    } else if (args[k] == "--keep") {
      keep = true;
    } else if (args[k] == "--faults") {
      faults = true;
    } else {
      return usage();
    }
  }
  return run_harness(rounds, seed, keep, faults);
}
