// The memory watermark (see memory_alarm.h).
#include "memory_alarm.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

namespace escrow::broker {
namespace {

constexpr auto kPeriod = std::chrono::milliseconds(100);
constexpr auto kTrimEvery = std::chrono::seconds(1);

std::uint64_t default_watermark() {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0) return UINT64_MAX;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(size) / 10 * 4;
}

}  // namespace

std::uint64_t resident_memory_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  // Size, resident, resident and file-backed (LMDB's map, the commit log): what is left is the
  // heap and the stacks, RssAnon, what the broker's own objects take.
  unsigned long long size = 0, resident = 0, shared = 0;
  int n = std::fscanf(f, "%llu %llu %llu", &size, &resident, &shared);
  std::fclose(f);
  if (n != 3 || shared > resident) return 0;
  return (resident - shared) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

memory_alarm::memory_alarm(boost::asio::io_context& io, std::uint64_t watermark)
    : timer_(io), watermark_(watermark ? watermark : default_watermark()) {}

void memory_alarm::start() {
  spdlog::info("limits.memory-high-watermark: {} bytes of resident memory", watermark_);
  measure();
}

void memory_alarm::measure() {
  std::uint64_t resident = resident_memory_bytes();
  auto now = std::chrono::steady_clock::now();
  if (resident > watermark_ && set() && now - last_trim_ >= kTrimEvery) {
    // What was freed meanwhile goes back, so that the measure can fall; at most once a second,
    // for a trim walks the heap on an I/O thread.
    last_trim_ = now;
    malloc_trim(0);
    resident = resident_memory_bytes();
  }
  bool over = resident > watermark_;
  if (over != set()) {
    set_.store(over, std::memory_order_relaxed);
    if (over)
      spdlog::warn("memory alarm set: resident memory {} bytes is above limits.memory-high-watermark ({}); "
                   "connections that send are not read until it is below (consumers go on)",
                   resident, watermark_);
    else
      spdlog::info("memory alarm cleared: resident memory {} bytes, limits.memory-high-watermark {}", resident,
                   watermark_);
  }
  timer_.expires_after(kPeriod);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) measure();
  });
}

}  // namespace escrow::broker
