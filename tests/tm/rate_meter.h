// What escrow-tm's RESULT line reports (scripts/bench, BENCH_ONLY=exactly-once): committed
// transactions per second, measured the same way for the two-phase and the coordinated workload
// by watching their `committed` counter from outside (workload.cpp is not touched). The window
// runs from the first commit seen to the last one, so neither the workers' connecting nor the
// idle wait before they exit counts; a poll every millisecond.
//
// Thread safety: one object, used by the thread that made it; it runs one polling thread.
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace escrow::tm {

class rate_meter {
 public:
  explicit rate_meter(const std::atomic<long>& counter) : counter_(counter), thread_([this] { poll(); }) {}
  ~rate_meter() { stop(); }
  rate_meter(const rate_meter&) = delete;
  rate_meter& operator=(const rate_meter&) = delete;

  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }

  // REQUIRES: stop() was called.
  double seconds() const { return std::chrono::duration<double>(last_at_ - first_at_).count(); }
  double per_second() const { return seconds() > 0 ? (last_ - first_) / seconds() : 0.0; }

  // This process's CPU time so far (user + system), in seconds.
  static double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return s(u.ru_utime) + s(u.ru_stime);
  }

 private:
  using clock_type = std::chrono::steady_clock;

  void poll() {
    for (;;) {
      bool last_round = stopping_;
      long n = counter_.load();
      auto now = clock_type::now();
      if (n > 0 && first_ == 0) {
        first_ = n;
        first_at_ = now;
      }
      if (n != last_) {
        last_ = n;
        last_at_ = now;
      }
      if (last_round) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  const std::atomic<long>& counter_;
  std::atomic<bool> stopping_{false};
  long first_ = 0, last_ = 0;
  clock_type::time_point first_at_{}, last_at_{};
  std::thread thread_;  // last: starts once the fields above are ready
};

}  // namespace escrow::tm
